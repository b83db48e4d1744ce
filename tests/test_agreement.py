"""Agreement of attention and saliency (attnmt.evaluation.agreement): the row measures against
scipy's Spearman, the rows that cannot count, and ``attnmt compare --saliency`` adding the columns."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from scipy.stats import spearmanr

import attnmt.evaluation.agreement
from attnmt.cli import main as cli_main
from attnmt.evaluation.agreement import row_agreement

# the fixtures make a tiny comparison of this module's own (4 runs of 4 steps)
from test_compare import MECHANISMS, STEPS, config_path, finished  # noqa: F401


def test_rank_correlation_is_spearmans_and_top1_compares_the_largest():
    rng = np.random.default_rng(0)
    attention, saliency = rng.random((6, 5)), rng.normal(size=(6, 5))
    saliency[0] = attention[0] * 3 - 1  # the same order
    saliency[1] = -attention[1]  # the reverse order
    saliency[2, :2] = saliency[2, 2]  # ties: average ranks
    correlations, same_top, rows = row_agreement(attention, saliency)
    assert rows == 6 and len(correlations) == 6
    np.testing.assert_allclose(correlations, [spearmanr(a, g).statistic for a, g in zip(attention, saliency)])
    assert correlations[0] == pytest.approx(1.0) and correlations[1] == pytest.approx(-1.0)
    assert same_top == [bool(np.argmax(a) == np.argmax(g)) for a, g in zip(attention, saliency)]


def test_rows_without_a_ranking_do_not_count():
    uniform = np.full((3, 4), 0.25)  # a mean mechanism's attention
    assert row_agreement(uniform, np.arange(12.0).reshape(3, 4)) == ([], [], 3)
    assert row_agreement(np.ones((2, 1)), np.ones((2, 1))) == ([], [], 2)  # one source word: nothing to rank
    attention = np.array([[0.1, 0.9], [0.5, 0.5]])
    correlations, same_top, rows = row_agreement(attention, np.array([[1.0, 2.0], [3.0, 1.0]]))
    assert correlations == [pytest.approx(1.0)] and same_top == [True] and rows == 2
    with pytest.raises(ValueError, match="must be the same"):
        row_agreement(np.ones((2, 3)), np.ones((3, 2)))


def test_compare_adds_the_agreement_of_each_run_and_reuses_it(finished, config_path, tmp_path, capsys,  # noqa: F811
                                                              monkeypatch):
    out = tmp_path / "results"
    shutil.copytree(finished[0], out)
    arguments = ["compare", "--config", str(config_path), "--attention", *MECHANISMS, "--runs", "2", "--out",
                 str(out), "--max-steps", str(STEPS), "--no-progress", "--saliency", "gradient"]
    assert cli_main(arguments) == 0
    printed = capsys.readouterr().out
    assert "attention-saliency rank correlation (mean ± std)" in printed and "top-1 agreement (mean ± std)" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["saliency"]["method"] == "gradient"
    for run in summary["runs"]:
        report = json.loads((out / "runs" / f"{run['mechanism']}-seed{run['seed']}" /
                             "agreement-made_up-gradient.json").read_text())
        assert report["step"] == run["step"] and report["words"] > 0
        # (mean attention is uniform over pieces, so over words it ranks them by their number of pieces)
        assert 0 < report["counted"] <= report["words"]
        assert -1 <= run["rank_correlation"] <= 1 and 0 <= run["top1"] <= 1
        assert (run["rank_correlation"], run["top1"]) == (report["rank_correlation"], report["top1"])
    statistics = summary["statistics"]["dot"]["rank_correlation"]
    values = [run["rank_correlation"] for run in summary["runs"] if run["mechanism"] == "dot"]
    assert statistics["mean"] == pytest.approx(float(np.mean(values)))
    assert "rank_correlation_mean" in (out / "summary.csv").read_text().splitlines()[0]

    def not_again(*args, **kwargs):
        raise AssertionError("the agreement was computed again")

    monkeypatch.setattr(attnmt.evaluation.agreement, "corpus_agreement", not_again)
    assert cli_main(arguments) == 0  # every run's agreement is read back from its folder
    assert json.loads((out / "summary.json").read_text())["runs"] == summary["runs"]


def test_a_mechanism_without_any_ranking_shows_a_dash_not_nan(tmp_path):
    """A run whose attention ranks nothing (none) has no agreement: a dash in the table, null in JSON."""
    from pathlib import Path

    from attnmt.models.saliency import SaliencyOptions
    from attnmt.training.comparison import Comparison, RunOutcome

    comparison = Comparison(out=tmp_path, config="c.yaml", mechanisms=["none"], runs=2, split="test", beam=1,
                            limits={}, set_options=[], saliency=SaliencyOptions("gradient"))
    comparison.outcomes = [RunOutcome("none", seed, Path("r"), "reused", 40.0, 2.0, 15.0, 400, 0.0)
                           for seed in (1, 2)]
    table = comparison.summary_table()
    assert "nan" not in table and table.splitlines()[-1].count("–") >= 4
    assert comparison.to_dict()["runs"][0]["rank_correlation"] is None
    assert comparison.to_dict()["statistics"]["none"]["top1"]["mean"] is None
