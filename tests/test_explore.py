"""The numeric claims of `attnmt explore` (what one attention head can compute), checked on the
numbers `attnmt explore` prints."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from attnmt import explore
from attnmt.cli import main

DATA = Path(__file__).resolve().parent / "data"

# A float64 rounding error (a figure in scientific notation below 1e-11) depends on the CPU's kernels:
# 2.19e-13 where the report was written, 2.14e-13 on an AMD EPYC. Such figures compare as "below 1e-11".
ROUNDING_ERROR = re.compile(r"\d\.\d+e-\d+")


def _rounding_errors_as_bounds(text: str) -> str:
    return ROUNDING_ERROR.sub(lambda m: "<1e-11" if float(m.group(0)) < 1e-11 else m.group(0), text)


@pytest.fixture(scope="module")
def multihead():
    """Defaults of the CLI: 8 keys, d = 64, 1000 resamplings, β from 0 to 0.5, c/√d = 16."""
    return explore.multihead_demo(seed=0)


# ---------------------------------------------------------------------------------------------
# Copying


def test_copy_error_falls_with_scale_and_reaches_the_value():
    result = explore.copy_demo(seed=0)
    assert np.all(np.diff(result.error) < 0), result.error
    assert result.error[-1] < 1e-3
    assert result.weight_on_target[-1] > 1 - 1e-9
    # At the smallest scale the query barely prefers its key: far from a copy.
    assert result.error[0] > 1.0
    np.testing.assert_allclose(result.weights.sum(axis=1), 1.0)


def test_copy_logit_lead_is_scale_times_cosine_gap():
    result = explore.copy_demo(num_keys=5, dim=16, scales=[1.0, 10.0], seed=3)
    # With unit keys the logits are c·cos(k_i, k_j)/√d, so the leader's weight is bounded below
    # by the lead over the best other key: α_j >= 1 / (1 + (m − 1)·exp(−lead)).
    bound = 1 / (1 + (result.num_keys - 1) * np.exp(-result.logit_gap))
    assert np.all(result.weight_on_target >= bound - 1e-12)
    np.testing.assert_allclose(result.logit_scales, np.array([1.0, 10.0]) / 4)


# ---------------------------------------------------------------------------------------------
# Averaging two values


def test_average_reaches_the_midpoint_with_equal_weights():
    result = explore.average_demo(seed=0)
    np.testing.assert_allclose(result.weight_a, result.weight_b, rtol=0, atol=1e-12)
    assert np.all(np.diff(result.error) < 0)
    assert result.error[-1] < 1e-3
    # Orthonormal keys: q·k_a = q·k_b = c and 0 elsewhere, so α_a = e^t / (2e^t + m − 2), t = c/√d.
    t = result.logit_scales
    expected = np.exp(t) / (2 * np.exp(t) + result.num_keys - 2)
    np.testing.assert_allclose(result.weight_a, expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Noisy keys, one head


def test_noisy_single_head_swing_grows_with_beta_and_is_large(multihead):
    noisy = explore.noisy_demo(seed=0)
    stats = noisy.single
    assert list(noisy.betas) == [0.0, 0.01, 0.05, 0.1, 0.2, 0.5]
    assert np.all(np.diff(stats.std_weight_a) > 0), stats.std_weight_a
    assert np.all(np.diff(stats.mean_distance) > 0), stats.mean_distance
    # β = 0 is the average demo: exact average, no swing.
    assert stats.std_weight_a[0] < 1e-12 and stats.mean_distance[0] < 1e-3
    assert stats.fraction_near_endpoint[0] == 0
    # β = 0.5: the single head usually lands near one of the two values.
    assert stats.std_weight_a[-1] > 0.3
    assert stats.fraction_near_endpoint[-1] > 0.5
    assert stats.weight_a.shape == (6, 1000)


def test_noisy_beta_is_a_standard_deviation():
    # For small noise α_a ≈ sigmoid(x) ≈ 1/2 + x/4 with x = c(λ_a − λ_b)/√d of std c·√2·β/√d.
    # Reading β as a variance instead would make the spread √β/β = 10× larger at β = 0.01.
    noisy = explore.noisy_demo(betas=[0.01], samples=4000, seed=1)
    predicted = noisy.log_ratio_std[0] / 4
    assert noisy.single.std_weight_a[0] == pytest.approx(predicted, rel=0.1)


def test_noisy_derivation_matches_the_formulas():
    noisy = explore.noisy_demo(samples=50, seed=2)
    check = noisy.derivation
    c = noisy.scale
    np.testing.assert_allclose(check.dot_a, c * check.lambda_a, rtol=1e-12)
    np.testing.assert_allclose(check.dot_b, c * check.lambda_b, rtol=1e-12)
    np.testing.assert_allclose(check.ratio_measured, check.ratio_formula, rtol=1e-9)
    assert check.beta == 0.1
    assert not np.allclose(check.lambda_a, 1.0)  # the check is made on noisy keys


# ---------------------------------------------------------------------------------------------
# Noisy keys, two heads


def test_two_heads_swing_much_less_than_one(multihead):
    one, two = multihead.single, multihead.two_heads
    noisy_betas = multihead.betas > 0
    assert np.all(two.std_weight_a[noisy_betas] < 0.25 * one.std_weight_a[noisy_betas])
    assert np.all(two.mean_distance[noisy_betas] < 0.25 * one.mean_distance[noisy_betas])
    assert two.fraction_near_endpoint[-1] < 0.1 < one.fraction_near_endpoint[-1]
    # Up to β = 0.2 each head still picks its own key almost surely: the average is exact.
    assert np.all(two.mean_distance[multihead.betas <= 0.2] < 1e-2)
    np.testing.assert_allclose(two.mean_weight_a[0], 0.5, atol=1e-6)


def test_multihead_single_head_numbers_are_the_noisy_demo(multihead):
    noisy = explore.noisy_demo(seed=0)
    np.testing.assert_array_equal(noisy.single.weight_a, multihead.single.weight_a)
    np.testing.assert_array_equal(noisy.single.mean_distance, multihead.single.mean_distance)


# ---------------------------------------------------------------------------------------------
# Determinism, arguments, reports


def test_same_seed_same_numbers_other_seed_other_numbers():
    first = explore.noisy_demo(samples=100, seed=7)
    again = explore.noisy_demo(samples=100, seed=7)
    other = explore.noisy_demo(samples=100, seed=8)
    np.testing.assert_array_equal(first.single.weight_a, again.single.weight_a)
    assert not np.array_equal(first.single.weight_a, other.single.weight_a)
    np.testing.assert_array_equal(explore.copy_demo(seed=7).error, explore.copy_demo(seed=7).error)
    assert first.report() == again.report()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: explore.copy_demo(num_keys=1), "num_keys"),
        (lambda: explore.copy_demo(target=8), "target"),
        (lambda: explore.average_demo(num_keys=8, dim=4), "dim >= num_keys"),
        (lambda: explore.average_demo(pair=(2, 2)), "pair"),
        (lambda: explore.noisy_demo(betas=[-0.1]), "betas"),
        (lambda: explore.multihead_demo(samples=1), "samples"),
        (lambda: explore.copy_demo(scales=[]), "scales"),
    ],
)
def test_bad_library_arguments_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_conclusions_follow_the_numbers():
    # With scales too small to copy, the conclusion must say so instead of claiming success.
    weak = explore.copy_demo(scales=[0.1, 0.2], seed=0)
    assert "stays above" in weak.conclusion()
    strong = explore.copy_demo(seed=0)
    assert "below 0.001 from c/√d = 16" in strong.conclusion()


@pytest.mark.slow
def test_cli_runs_every_demo_and_writes_the_pngs(tmp_path, capsys):
    plot_dir = tmp_path / "plots"
    assert main(["explore", "all", "--plot", str(plot_dir), "--samples", "300"]) == 0
    out = capsys.readouterr().out
    for heading in ("copy: can", "average: can", "noisy: does", "multihead: do"):
        assert heading in out
    assert out.count("\n=> ") == 4
    assert "derivation: q·k_0 = c·λ_0" in out
    for name in ("copy", "average", "noisy", "multihead"):
        png = plot_dir / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(png) in out
    assert not [p for p in plot_dir.iterdir() if p.name.startswith(".")]  # no temporary files left


@pytest.mark.slow
def test_cli_single_demo_reports_replaced_plot(tmp_path, capsys):
    (tmp_path / "copy.png").write_bytes(b"old")
    assert main(["explore", "copy", "--plot", str(tmp_path), "--keys", "4", "--dim", "8"]) == 0
    out = capsys.readouterr().out
    assert "copy: can" in out and "average: can" not in out
    assert f"{tmp_path / 'copy.png'} (replaced)" in out
    assert (tmp_path / "copy.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_rejects_an_unknown_demo(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["explore", "median"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'median'" in capsys.readouterr().err


def test_cli_reports_impossible_sizes_without_traceback(capsys):
    assert main(["explore", "average", "--keys", "8", "--dim", "4"]) == 2
    err = capsys.readouterr().err
    assert "--dim 4 is smaller than --keys 8" in err and "Traceback" not in err
    # Copying does not need orthogonal keys, so the same sizes are fine there.
    assert main(["explore", "copy", "--keys", "8", "--dim", "4"]) == 0
    assert math.isfinite(explore.copy_demo(num_keys=8, dim=4).error[-1])


def test_the_report_of_every_demo_is_what_it_was(attnmt_cli):
    """`attnmt explore all` prints, byte for byte, what it printed before explore became a package
    (tests/data/explore_all_seed0.txt, written by the single module it was), but for float64
    rounding errors, which need only stay rounding errors on another CPU."""
    done = attnmt_cli("explore", "all")
    assert done.returncode == 0
    expected = (DATA / "explore_all_seed0.txt").read_text(encoding="utf-8")
    assert _rounding_errors_as_bounds(done.stdout) == _rounding_errors_as_bounds(expected)
    assert ROUNDING_ERROR.search(expected) and "<1e-11" in _rounding_errors_as_bounds(expected)
