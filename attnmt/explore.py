"""Numeric demonstrations of what single-query scaled dot-product attention can compute.

Four questions about one query q: [d] attending over m keys k_i: [d] with values v_i: [d_v], in
the scaled dot-product attention of Vaswani et al. (2017):

    α_i = exp(q·k_i / √d) / Σ_j exp(q·k_j / √d)        a = Σ_i α_i v_i

- **copy**: a query along one key, q = c·k_j, makes a → v_j as c grows.
- **average**: with orthonormal keys, q = c·(k_a + k_b) makes a → (v_a + v_b)/2.
- **noisy**: with keys k_i = λ_i·μ_i, λ_i ~ N(1, β²) (β is the *standard deviation*), the same query
  q = c·(μ_a + μ_b) gives q·k_a = c·λ_a and q·k_b = c·λ_b, so
  α_a / α_b = exp(c·(λ_a − λ_b) / √d): the large c that made the average exact now magnifies
  the noise, and the output swings toward v_a or v_b from one resampling to the next.
- **multihead**: two heads, q₁ = c·μ_a and q₂ = c·μ_b, output a = (a₁ + a₂)/2. Each head picks
  one key whatever λ is, so the swing almost disappears.

Each ``*_demo`` function returns a frozen dataclass with the numbers and a ``report()`` (question,
aligned table, a conclusion computed from the numbers); each ``plot_*`` writes one PNG. Everything
is float64 NumPy and the attention itself is :mod:`attnmt.attention.reference`.

Scales are given as c (the length multiplier of the query) but the defaults are chosen in units of
√d, because c/√d is the attention logit of the favoured key: it is what the softmax sees.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnmt.attention.reference import scaled_dot_product_attention
from attnmt.runtime.atomic_files import atomic_writer
from attnmt.runtime.tables import format_table

__all__ = [
    "DEFAULT_BETAS",
    "DEFAULT_LOGIT_SCALES",
    "DEFAULT_NOISY_LOGIT_SCALE",
    "AverageResult",
    "CopyResult",
    "DerivationCheck",
    "MultiheadResult",
    "NoiseStatistics",
    "NoisyResult",
    "average_demo",
    "copy_demo",
    "multihead_demo",
    "noisy_demo",
    "plot_average",
    "plot_copy",
    "plot_multihead",
    "plot_noisy",
]

# Values of c/√d, the logit of the favoured key(s); the scales actually used are these times √d.
DEFAULT_LOGIT_SCALES: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
# Standard deviations β of the key multipliers λ_i ~ N(1, β²).
DEFAULT_BETAS: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1, 0.2, 0.5)
# c/√d of the noisy demos: large enough that at β = 0 the average is exact to ~1e-6.
DEFAULT_NOISY_LOGIT_SCALE = 16.0
# "The output equals the target" below this distance (used by the conclusions).
CLOSE_ENOUGH = 1e-3


# ----------------------------------------------------------------------------------------------
# Building blocks


def _check_sizes(num_keys: int, dim: int, *, orthogonal: bool) -> None:
    if num_keys < 2:
        raise ValueError(f"num_keys must be >= 2 (the demos need two keys to choose between), got {num_keys}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if orthogonal and dim < num_keys:
        raise ValueError(
            f"orthogonal keys need dim >= num_keys, got dim={dim} and num_keys={num_keys}"
        )


def _scales_or_default(scales: Sequence[float] | None, dim: int) -> np.ndarray:
    if scales is None:
        return np.asarray(DEFAULT_LOGIT_SCALES, dtype=np.float64) * math.sqrt(dim)
    values = np.asarray(scales, dtype=np.float64)
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"scales must be a non-empty 1-D sequence of finite numbers, got {values!r}")
    return values


def _random_unit_vectors(rng: np.random.Generator, count: int, dim: int) -> np.ndarray:
    """count directions drawn uniformly on the unit sphere: [count, dim]."""
    vectors = rng.standard_normal((count, dim))
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def _orthonormal_vectors(rng: np.random.Generator, count: int, dim: int) -> np.ndarray:
    """count random orthonormal rows (a slice of a random rotation): [count, dim]."""
    basis, _ = np.linalg.qr(rng.standard_normal((dim, count)))
    return basis.T.copy()


def _values(rng: np.random.Generator, count: int, dim: int) -> np.ndarray:
    """Gaussian values v_i ~ N(0, I): [count, dim]; distinct with probability one."""
    return rng.standard_normal((count, dim))


def _number(value: float) -> str:
    """Compact number for tables: fixed for ordinary magnitudes, scientific for tiny ones."""
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4f}"
    return f"{value:.2e}"


def _scale(value: float) -> str:
    return f"{value:g}"


def _first_below(threshold: float, values: np.ndarray, scales: np.ndarray) -> float | None:
    """The first scale from which every later value stays below threshold, or None."""
    below = values < threshold
    for index in range(len(values)):
        if below[index:].all():
            return float(scales[index])
    return None


# ----------------------------------------------------------------------------------------------
# Copying: can one query put (almost) all its weight on one value?


@dataclass(frozen=True)
class CopyResult:
    """Attention with q = c·k_j over random unit keys, one row per scale c.

    scales: [S] the c values; weight_on_target: [S] α_j; error: [S] ‖a − v_j‖;
    weights: [S, m] the whole attention distribution; max_other_cosine: max_{i≠j} cos(k_i, k_j).
    """

    num_keys: int
    dim: int
    target: int
    scales: np.ndarray
    weight_on_target: np.ndarray
    error: np.ndarray
    weights: np.ndarray
    max_other_cosine: float

    @property
    def logit_scales(self) -> np.ndarray:
        """c/√d: the logit of the target key (the keys have unit length)."""
        return self.scales / math.sqrt(self.dim)

    @property
    def logit_gap(self) -> np.ndarray:
        """[S] how far the target's logit leads the best other key: c·(1 − max cos)/√d."""
        return self.logit_scales * (1.0 - self.max_other_cosine)

    def conclusion(self) -> str:
        decreasing = bool(np.all(np.diff(self.error) < 0))
        trend = "falls at every step" if decreasing else "does not fall at every step"
        reached = _first_below(CLOSE_ENOUGH, self.error, self.logit_scales)
        if reached is None:
            return (
                f"The error {trend} but stays above {CLOSE_ENOUGH:g} up to c/√d = "
                f"{_scale(self.logit_scales[-1])} ({_number(self.error[-1])}): the query does not "
                f"yet lead the other keys by enough to copy v_{self.target}."
            )
        index = int(np.flatnonzero(self.logit_scales == reached)[0])
        return (
            f"The error {trend} as c grows, from {_number(self.error[0])} at c/√d = "
            f"{_scale(self.logit_scales[0])} to below {CLOSE_ENOUGH:g} from c/√d = {_scale(reached)} "
            f"(α_{self.target} = {self.weight_on_target[index]:.6f}): a query along k_{self.target} "
            f"copies v_{self.target} once its logit leads every other key by a few units "
            f"(lead = {_number(self.logit_gap[index])} there)."
        )

    def report(self) -> str:
        heading = (
            f"copy: can one query make the output equal to one value v_{self.target}?\n"
            f"  {self.num_keys} random unit keys in d = {self.dim}, query q = c·k_{self.target}; "
            f"largest cosine of another key with k_{self.target}: {self.max_other_cosine:.3f}"
        )
        rows = [
            [
                _scale(c),
                _scale(logit),
                _number(gap),
                f"{weight:.6f}",
                _number(err),
            ]
            for c, logit, gap, weight, err in zip(
                self.scales, self.logit_scales, self.logit_gap, self.weight_on_target, self.error
            )
        ]
        table = format_table(
            ["c", "c/√d", "logit lead", f"α_{self.target}", f"‖a − v_{self.target}‖"], rows
        )
        return f"{heading}\n{table}\n=> {self.conclusion()}"


def copy_demo(
    num_keys: int = 8,
    dim: int = 64,
    scales: Sequence[float] | None = None,
    target: int = 0,
    seed: int = 0,
) -> CopyResult:
    """Copy one value: q = c·k_target over ``num_keys`` random unit keys in R^dim.

    The logit of key i is c·cos(k_i, k_target)/√d, so the target leads every other key by
    c·(1 − cos)/√d and its weight tends to 1 as c grows. ``scales`` are the c values (default
    √d × DEFAULT_LOGIT_SCALES).
    """
    _check_sizes(num_keys, dim, orthogonal=False)
    if not 0 <= target < num_keys:
        raise ValueError(f"target must be in [0, {num_keys}), got {target}")
    chosen = _scales_or_default(scales, dim)
    rng = np.random.default_rng(seed)
    keys = _random_unit_vectors(rng, num_keys, dim)  # [m, d]
    values = _values(rng, num_keys, dim)  # [m, d_v]

    queries = chosen[:, None] * keys[target][None, :]  # [S, d]: one query row per scale
    outputs, weights = scaled_dot_product_attention(queries, keys, values)  # [S, d_v], [S, m]
    error = np.linalg.norm(outputs - values[target], axis=-1)

    cosines = np.delete(keys @ keys[target], target)
    return CopyResult(
        num_keys=num_keys,
        dim=dim,
        target=target,
        scales=chosen,
        weight_on_target=weights[:, target],
        error=error,
        weights=weights,
        max_other_cosine=float(cosines.max()),
    )


# ----------------------------------------------------------------------------------------------
# Averaging: can one query put half its weight on each of two values?


@dataclass(frozen=True)
class AverageResult:
    """Attention with q = c·(k_a + k_b) over orthonormal keys, one row per scale c.

    scales: [S] the c values; weight_a, weight_b: [S] α_a and α_b; weight_others: [S] the total
    weight on the remaining m − 2 keys; error: [S] ‖a − (v_a + v_b)/2‖.
    """

    num_keys: int
    dim: int
    pair: tuple[int, int]
    scales: np.ndarray
    weight_a: np.ndarray
    weight_b: np.ndarray
    weight_others: np.ndarray
    error: np.ndarray

    @property
    def logit_scales(self) -> np.ndarray:
        """c/√d: the logit of k_a and of k_b (every other key has logit 0)."""
        return self.scales / math.sqrt(self.dim)

    def conclusion(self) -> str:
        a, b = self.pair
        imbalance = float(np.max(np.abs(self.weight_a - self.weight_b)))
        reached = _first_below(CLOSE_ENOUGH, self.error, self.logit_scales)
        balance = (
            f"The keys are orthogonal, so α_{a} = α_{b} at every c (largest difference "
            f"{imbalance:.1e}) and only the {self.num_keys - 2} other keys pull the output away"
        )
        if reached is None:
            return (
                f"{balance}; up to c/√d = {_scale(self.logit_scales[-1])} they still hold "
                f"{_number(self.weight_others[-1])} of the weight and the error is "
                f"{_number(self.error[-1])}."
            )
        index = int(np.flatnonzero(self.logit_scales == reached)[0])
        return (
            f"{balance}; from c/√d = {_scale(reached)} they hold "
            f"{_number(self.weight_others[index])} of the weight and a is within {CLOSE_ENOUGH:g} "
            f"of (v_{a} + v_{b})/2 (error {_number(self.error[index])})."
        )

    def report(self) -> str:
        a, b = self.pair
        heading = (
            f"average: can one query make the output the average of two values?\n"
            f"  {self.num_keys} orthonormal keys in d = {self.dim}, query q = c·(k_{a} + k_{b}), "
            f"target (v_{a} + v_{b})/2"
        )
        rows = [
            [_scale(c), _scale(logit), f"{wa:.6f}", f"{wb:.6f}", _number(rest), _number(err)]
            for c, logit, wa, wb, rest, err in zip(
                self.scales,
                self.logit_scales,
                self.weight_a,
                self.weight_b,
                self.weight_others,
                self.error,
            )
        ]
        table = format_table(
            ["c", "c/√d", f"α_{a}", f"α_{b}", "others", f"‖a − (v_{a}+v_{b})/2‖"], rows
        )
        return f"{heading}\n{table}\n=> {self.conclusion()}"


def average_demo(
    num_keys: int = 8,
    dim: int = 64,
    scales: Sequence[float] | None = None,
    pair: tuple[int, int] = (0, 1),
    seed: int = 0,
) -> AverageResult:
    """Average two values: q = c·(k_a + k_b) over orthonormal keys (needs dim >= num_keys).

    q·k_a = q·k_b = c and q·k_i = 0 otherwise, so α_a = α_b = e^{c/√d} / (2e^{c/√d} + m − 2)
    → 1/2 and a → (v_a + v_b)/2. ``scales`` are the c values (default √d × DEFAULT_LOGIT_SCALES).
    """
    _check_sizes(num_keys, dim, orthogonal=True)
    a, b = pair
    if a == b or not (0 <= a < num_keys and 0 <= b < num_keys):
        raise ValueError(f"pair must be two different key indices in [0, {num_keys}), got {pair}")
    chosen = _scales_or_default(scales, dim)
    rng = np.random.default_rng(seed)
    keys = _orthonormal_vectors(rng, num_keys, dim)  # [m, d]
    values = _values(rng, num_keys, dim)  # [m, d_v]

    queries = chosen[:, None] * (keys[a] + keys[b])[None, :]  # [S, d]
    outputs, weights = scaled_dot_product_attention(queries, keys, values)  # [S, d_v], [S, m]
    midpoint = (values[a] + values[b]) / 2
    return AverageResult(
        num_keys=num_keys,
        dim=dim,
        pair=(a, b),
        scales=chosen,
        weight_a=weights[:, a],
        weight_b=weights[:, b],
        weight_others=1.0 - weights[:, a] - weights[:, b],
        error=np.linalg.norm(outputs - midpoint, axis=-1),
    )


# ----------------------------------------------------------------------------------------------
# Noisy keys: how far one head's average swings, and what two heads fix


@dataclass(frozen=True)
class NoiseStatistics:
    """How far the output swings over resamplings of λ, one entry per β.

    weight_a: [B, N] α_a of every resampling (for the two-head output, the mean of the two heads'
    weights on a); mean_weight_a, std_weight_a: [B]; mean_distance: [B] mean ‖a − (v_a + v_b)/2‖;
    fraction_near_endpoint: [B] share of resamplings whose output is nearer v_a or v_b than the
    midpoint (v_a + v_b)/2.
    """

    weight_a: np.ndarray
    mean_weight_a: np.ndarray
    std_weight_a: np.ndarray
    mean_distance: np.ndarray
    fraction_near_endpoint: np.ndarray


@dataclass(frozen=True)
class DerivationCheck:
    """The noisy-keys derivation checked on a few resamplings at one β (arrays of shape [n]).

    The measured dot products and weight ratios must equal the formulas
    q·k_a = c·λ_a, q·k_b = c·λ_b and α_a/α_b = exp(c·(λ_a − λ_b)/√d).
    """

    beta: float
    lambda_a: np.ndarray
    lambda_b: np.ndarray
    dot_a: np.ndarray
    dot_b: np.ndarray
    ratio_measured: np.ndarray
    ratio_formula: np.ndarray


@dataclass(frozen=True)
class NoisyResult:
    """Single-head attention with q = c·(μ_a + μ_b) over keys λ_i·μ_i, λ_i ~ N(1, β²)."""

    num_keys: int
    dim: int
    pair: tuple[int, int]
    scale: float
    samples: int
    betas: np.ndarray
    half_gap: float  # ‖v_a − v_b‖/2: the distance from the midpoint to either endpoint
    single: NoiseStatistics
    derivation: DerivationCheck

    @property
    def logit_scale(self) -> float:
        return self.scale / math.sqrt(self.dim)

    @property
    def log_ratio_std(self) -> np.ndarray:
        """[B] predicted std of log(α_a/α_b) = c·(λ_a − λ_b)/√d, i.e. c·√2·β/√d."""
        return self.logit_scale * math.sqrt(2.0) * self.betas

    def conclusion(self) -> str:
        std = self.single.std_weight_a
        grows = bool(np.all(np.diff(std) > 0))
        trend = "grows with every step of β" if grows else "does not grow at every step of β"
        return (
            f"With c/√d = {_scale(self.logit_scale)} the spread of α_{self.pair[0]} {trend}, from "
            f"{std[0]:.3f} at β = {_scale(self.betas[0])} to {std[-1]:.3f} at β = "
            f"{_scale(self.betas[-1])}, where {100 * self.single.fraction_near_endpoint[-1]:.0f}% "
            f"of the outputs land nearer v_{self.pair[0]} or v_{self.pair[1]} than their average: "
            f"the large c that made the average exact multiplies the noise "
            f"λ_{self.pair[0]} − λ_{self.pair[1]} by c/√d in the log of α_{self.pair[0]}/α_{self.pair[1]}."
        )

    def derivation_report(self) -> str:
        a, b = self.pair
        check = self.derivation
        rows = [
            [
                f"{la:.4f}",
                f"{lb:.4f}",
                f"{da:.4f}",
                f"{self.scale * la:.4f}",
                f"{db:.4f}",
                f"{self.scale * lb:.4f}",
                _number(measured),
                _number(formula),
            ]
            for la, lb, da, db, measured, formula in zip(
                check.lambda_a,
                check.lambda_b,
                check.dot_a,
                check.dot_b,
                check.ratio_measured,
                check.ratio_formula,
            )
        ]
        table = format_table(
            [
                f"λ_{a}",
                f"λ_{b}",
                f"q·k_{a}",
                f"c·λ_{a}",
                f"q·k_{b}",
                f"c·λ_{b}",
                f"α_{a}/α_{b}",
                f"exp(c(λ_{a}−λ_{b})/√d)",
            ],
            rows,
        )
        return (
            f"  derivation: q·k_{a} = c·λ_{a}·(μ_{a}·μ_{a}) = c·λ_{a}, q·k_{b} = c·λ_{b}, so "
            f"α_{a}/α_{b} = exp(c(λ_{a}−λ_{b})/√d); measured on {len(rows)} resamplings at "
            f"β = {_scale(check.beta)}, c = {_scale(self.scale)}:\n{table}"
        )

    def report(self) -> str:
        a, b = self.pair
        heading = (
            f"noisy: does the average survive keys of random length?\n"
            f"  {self.num_keys} keys k_i = λ_i·μ_i (μ orthonormal, d = {self.dim}), "
            f"λ_i ~ N(1, β²) with β the standard deviation; q = c·(μ_{a} + μ_{b}), "
            f"c = {_scale(self.scale)} (c/√d = {_scale(self.logit_scale)}); "
            f"{self.samples} resamplings of λ per β; ‖v_{a} − v_{b}‖/2 = {self.half_gap:.3f}"
        )
        stats = self.single
        rows = [
            [
                _scale(beta),
                f"{sd_log:.3f}",
                f"{mean:.4f}",
                _number(std),
                _number(dist),
                f"{100 * far:.1f}%",
            ]
            for beta, sd_log, mean, std, dist, far in zip(
                self.betas,
                self.log_ratio_std,
                stats.mean_weight_a,
                stats.std_weight_a,
                stats.mean_distance,
                stats.fraction_near_endpoint,
            )
        ]
        table = format_table(
            [
                "β",
                f"sd log(α_{a}/α_{b})",
                f"mean α_{a}",
                f"std α_{a}",
                f"mean ‖a − (v_{a}+v_{b})/2‖",
                "near an endpoint",
            ],
            rows,
        )
        return f"{heading}\n{table}\n{self.derivation_report()}\n=> {self.conclusion()}"


@dataclass(frozen=True)
class MultiheadResult:
    """The noisy keys of the noisy demo seen by one head and by two heads (same resamplings of λ).

    single: q = c·(μ_a + μ_b); two_heads: q₁ = c·μ_a, q₂ = c·μ_b, a = (a₁ + a₂)/2.
    """

    num_keys: int
    dim: int
    pair: tuple[int, int]
    scale: float
    samples: int
    betas: np.ndarray
    half_gap: float
    single: NoiseStatistics
    two_heads: NoiseStatistics

    @property
    def logit_scale(self) -> float:
        return self.scale / math.sqrt(self.dim)

    def conclusion(self) -> str:
        worst = len(self.betas) - 1
        single_std = self.single.std_weight_a[worst]
        multi_std = self.two_heads.std_weight_a[worst]
        if multi_std > 0:
            factor = f"{single_std / multi_std:.1f}× smaller"
        else:
            factor = "no spread at all" if single_std > 0 else "neither head set swings"
        smaller_everywhere = bool(
            np.all(self.two_heads.std_weight_a[1:] < self.single.std_weight_a[1:])
        )
        where = "at every β > 0" if smaller_everywhere else "not at every β"
        # The explanation only fits when the heads really did steady the output.
        helped = smaller_everywhere and multi_std < 0.5 * single_std
        why = (
            ": each head has one key to itself, so λ changes how sharply it attends, not which "
            "key it picks"
            if helped
            else ""
        )
        return (
            f"Two heads keep the spread of α_{self.pair[0]} smaller {where}: at β = "
            f"{_scale(self.betas[worst])} its std is {multi_std:.3f} against {single_std:.3f} "
            f"({factor}) and {100 * self.two_heads.fraction_near_endpoint[worst]:.1f}% "
            f"of outputs land near an endpoint against "
            f"{100 * self.single.fraction_near_endpoint[worst]:.1f}%{why}."
        )

    def report(self) -> str:
        a, b = self.pair
        heading = (
            f"multihead: do two heads average the noisy keys reliably?\n"
            f"  same keys and {self.samples} resamplings as 'noisy'; one head q = c·(μ_{a} + μ_{b}) "
            f"against two heads q₁ = c·μ_{a}, q₂ = c·μ_{b}, a = (a₁ + a₂)/2, "
            f"c = {_scale(self.scale)} (c/√d = {_scale(self.logit_scale)})"
        )
        one, two = self.single, self.two_heads
        rows = [
            [
                _scale(beta),
                _number(one.std_weight_a[i]),
                _number(two.std_weight_a[i]),
                _number(one.mean_distance[i]),
                _number(two.mean_distance[i]),
                f"{100 * one.fraction_near_endpoint[i]:.1f}%",
                f"{100 * two.fraction_near_endpoint[i]:.1f}%",
            ]
            for i, beta in enumerate(self.betas)
        ]
        table = format_table(
            [
                "β",
                f"std α_{a} 1 head",
                "2 heads",
                "mean dist 1 head",
                "2 heads",
                "near endpoint 1 head",
                "2 heads",
            ],
            rows,
        )
        return f"{heading}\n{table}\n=> {self.conclusion()}"


def _noise_statistics(
    weights_a: np.ndarray, outputs: np.ndarray, value_a: np.ndarray, value_b: np.ndarray
) -> NoiseStatistics:
    """weights_a: [B, N], outputs: [B, N, d_v] -> NoiseStatistics."""
    midpoint = (value_a + value_b) / 2
    to_midpoint = np.linalg.norm(outputs - midpoint, axis=-1)
    to_nearest_endpoint = np.minimum(
        np.linalg.norm(outputs - value_a, axis=-1), np.linalg.norm(outputs - value_b, axis=-1)
    )
    return NoiseStatistics(
        weight_a=weights_a,
        mean_weight_a=weights_a.mean(axis=-1),
        std_weight_a=weights_a.std(axis=-1),
        mean_distance=to_midpoint.mean(axis=-1),
        fraction_near_endpoint=(to_nearest_endpoint < to_midpoint).mean(axis=-1),
    )


@dataclass(frozen=True)
class _NoisyRun:
    """Everything the noisy and multihead demos share (internal)."""

    scale: float
    betas: np.ndarray
    pair: tuple[int, int]
    directions: np.ndarray  # μ: [m, d]
    values: np.ndarray  # [m, d_v]
    multipliers: np.ndarray  # λ: [B, N, m]
    single_outputs: np.ndarray  # [B, N, d_v]
    single_weights: np.ndarray  # [B, N, m]
    two_head_outputs: np.ndarray  # [B, N, d_v]
    two_head_weights: np.ndarray  # [B, N, 2, m]


def _run_noisy(
    num_keys: int,
    dim: int,
    betas: Sequence[float] | None,
    scale: float | None,
    samples: int,
    pair: tuple[int, int],
    seed: int,
    *,
    two_heads: bool,
) -> _NoisyRun:
    _check_sizes(num_keys, dim, orthogonal=True)
    a, b = pair
    if a == b or not (0 <= a < num_keys and 0 <= b < num_keys):
        raise ValueError(f"pair must be two different key indices in [0, {num_keys}), got {pair}")
    if samples < 2:
        raise ValueError(f"samples must be >= 2 to measure a spread, got {samples}")
    spreads = np.asarray(DEFAULT_BETAS if betas is None else betas, dtype=np.float64)
    if spreads.ndim != 1 or spreads.size == 0 or np.any(spreads < 0) or not np.all(np.isfinite(spreads)):
        raise ValueError(f"betas must be a non-empty 1-D sequence of numbers >= 0, got {spreads!r}")
    scale = DEFAULT_NOISY_LOGIT_SCALE * math.sqrt(dim) if scale is None else float(scale)

    rng = np.random.default_rng(seed)
    directions = _orthonormal_vectors(rng, num_keys, dim)  # μ: [m, d]
    values = _values(rng, num_keys, dim)  # [m, d_v]
    # One set of standard normals for every β (common random numbers): the rows of the table
    # differ only by β, so the trend is not blurred by fresh sampling noise in each row.
    noise = rng.standard_normal((samples, num_keys))  # [N, m]
    multipliers = 1.0 + spreads[:, None, None] * noise[None]  # λ: [B, N, m]
    keys = multipliers[..., None] * directions  # k_i = λ_i·μ_i: [B, N, m, d]

    # The query and the values are the same in every resampling: they broadcast over [B, N].
    single_query = scale * (directions[a] + directions[b])[None, :]  # [1, d]
    single_outputs, single_weights = scaled_dot_product_attention(single_query, keys, values)

    if two_heads:
        # Two heads over the same keys and values, one query row each; a = (a₁ + a₂)/2.
        head_queries = scale * directions[[a, b]]  # [2, d]
        head_outputs, head_weights = scaled_dot_product_attention(head_queries, keys, values)
        two_head_outputs = head_outputs.mean(axis=-2)
    else:
        two_head_outputs = head_weights = np.empty(0)

    return _NoisyRun(
        scale=scale,
        betas=spreads,
        pair=(a, b),
        directions=directions,
        values=values,
        multipliers=multipliers,
        single_outputs=single_outputs[..., 0, :],
        single_weights=single_weights[..., 0, :],
        two_head_outputs=two_head_outputs,
        two_head_weights=head_weights,
    )


def _derivation_check(run: _NoisyRun, count: int = 3) -> DerivationCheck:
    """Check q·k_a = c·λ_a and α_a/α_b = exp(c(λ_a − λ_b)/√d) on the first resamplings."""
    a, b = run.pair
    nonzero = np.flatnonzero(run.betas > 0)
    # A middle β shows noise without extreme ratios; 0.1 when it is in the list.
    candidates = nonzero if nonzero.size else np.arange(run.betas.size)
    index = int(candidates[np.argmin(np.abs(run.betas[candidates] - 0.1))])
    dim = run.directions.shape[-1]
    lambdas = run.multipliers[index, :count]  # [n, m]
    query = run.scale * (run.directions[a] + run.directions[b])
    keys = lambdas[..., None] * run.directions  # [n, m, d]
    weights = run.single_weights[index, :count]  # [n, m]
    return DerivationCheck(
        beta=float(run.betas[index]),
        lambda_a=lambdas[:, a],
        lambda_b=lambdas[:, b],
        dot_a=keys[:, a] @ query,
        dot_b=keys[:, b] @ query,
        ratio_measured=weights[:, a] / weights[:, b],
        ratio_formula=np.exp(run.scale * (lambdas[:, a] - lambdas[:, b]) / math.sqrt(dim)),
    )


def noisy_demo(
    num_keys: int = 8,
    dim: int = 64,
    betas: Sequence[float] | None = None,
    scale: float | None = None,
    samples: int = 1000,
    pair: tuple[int, int] = (0, 1),
    seed: int = 0,
) -> NoisyResult:
    """One head over noisy keys k_i = λ_i·μ_i, λ_i ~ N(1, β²) (β = standard deviation).

    The query is the average demo's, q = c·(μ_a + μ_b), so q·k_a = c·λ_a, q·k_b = c·λ_b and
    α_a/α_b = exp(c·(λ_a − λ_b)/√d). μ and the values are fixed; λ is resampled ``samples``
    times per β. ``scale`` is c (default DEFAULT_NOISY_LOGIT_SCALE·√d).
    """
    run = _run_noisy(num_keys, dim, betas, scale, samples, pair, seed, two_heads=False)
    a, b = run.pair
    single = _noise_statistics(run.single_weights[..., a], run.single_outputs, run.values[a], run.values[b])
    return NoisyResult(
        num_keys=num_keys,
        dim=dim,
        pair=run.pair,
        scale=run.scale,
        samples=samples,
        betas=run.betas,
        half_gap=float(np.linalg.norm(run.values[a] - run.values[b]) / 2),
        single=single,
        derivation=_derivation_check(run),
    )


def multihead_demo(
    num_keys: int = 8,
    dim: int = 64,
    betas: Sequence[float] | None = None,
    scale: float | None = None,
    samples: int = 1000,
    pair: tuple[int, int] = (0, 1),
    seed: int = 0,
) -> MultiheadResult:
    """Two heads, q₁ = c·μ_a and q₂ = c·μ_b, a = (a₁ + a₂)/2, against one head, on noisy keys.

    Uses the same keys, values and resamplings of λ as :func:`noisy_demo` with the same
    arguments, so the single-head statistics are identical to it.
    """
    run = _run_noisy(num_keys, dim, betas, scale, samples, pair, seed, two_heads=True)
    a, b = run.pair
    single = _noise_statistics(run.single_weights[..., a], run.single_outputs, run.values[a], run.values[b])
    # The weight the averaged output puts on v_a: the mean of the two heads' weights on a.
    two_head_weight_a = run.two_head_weights[..., a].mean(axis=-1)
    two_heads = _noise_statistics(two_head_weight_a, run.two_head_outputs, run.values[a], run.values[b])
    return MultiheadResult(
        num_keys=num_keys,
        dim=dim,
        pair=run.pair,
        scale=run.scale,
        samples=samples,
        betas=run.betas,
        half_gap=float(np.linalg.norm(run.values[a] - run.values[b]) / 2),
        single=single,
        two_heads=two_heads,
    )


# ----------------------------------------------------------------------------------------------
# Plots (matplotlib's object API with the Agg canvas: no pyplot state, no display needed)


def _new_figure(columns: int, title: str):
    figure = Figure(figsize=(4.6 * columns, 3.8), layout="constrained")
    axes = figure.subplots(1, columns, squeeze=False)[0]
    figure.suptitle(title)
    return figure, axes


def _save_png(figure, path: str | os.PathLike) -> Path:
    """Write the figure to path atomically (``attnmt.runtime.atomic_files``)."""
    FigureCanvasAgg(figure)
    with atomic_writer(path) as stream:
        figure.savefig(stream, format="png", dpi=110)
    return Path(path)


def plot_copy(result: CopyResult, path: str | os.PathLike) -> Path:
    """Error ‖a − v_j‖ and weight α_j against c/√d. Returns the path written."""
    j = result.target
    figure, (error_axis, weight_axis) = _new_figure(2, f"copy: q = c·k_{j} makes a → v_{j}")
    x = result.logit_scales
    error_axis.loglog(x, np.maximum(result.error, 1e-300), "o-")
    error_axis.axhline(CLOSE_ENOUGH, color="grey", linestyle=":", label=f"{CLOSE_ENOUGH:g}")
    error_axis.set(xlabel="c/√d", ylabel=f"‖a − v_{j}‖", title="distance to the copied value")
    error_axis.legend()
    weight_axis.semilogx(x, result.weight_on_target, "o-", label=f"α_{j}")
    others = np.delete(result.weights, j, axis=1)
    weight_axis.semilogx(x, others.max(axis=1), "s--", label="largest other α")
    weight_axis.set(xlabel="c/√d", ylabel="attention weight", ylim=(-0.02, 1.02), title="weights")
    weight_axis.legend()
    return _save_png(figure, path)


def plot_average(result: AverageResult, path: str | os.PathLike) -> Path:
    """Error ‖a − (v_a + v_b)/2‖ and the weights α_a, α_b, others against c/√d."""
    a, b = result.pair
    figure, (error_axis, weight_axis) = _new_figure(
        2, f"average: q = c·(k_{a} + k_{b}) makes a → (v_{a} + v_{b})/2"
    )
    x = result.logit_scales
    error_axis.loglog(x, np.maximum(result.error, 1e-300), "o-")
    error_axis.axhline(CLOSE_ENOUGH, color="grey", linestyle=":", label=f"{CLOSE_ENOUGH:g}")
    error_axis.set(xlabel="c/√d", ylabel=f"‖a − (v_{a}+v_{b})/2‖", title="distance to the average")
    error_axis.legend()
    weight_axis.semilogx(x, result.weight_a, "o-", label=f"α_{a}")
    weight_axis.semilogx(x, result.weight_b, "x--", label=f"α_{b}")
    weight_axis.semilogx(x, result.weight_others, "s-", label=f"{result.num_keys - 2} others together")
    weight_axis.axhline(0.5, color="grey", linestyle=":")
    weight_axis.set(xlabel="c/√d", ylabel="attention weight", ylim=(-0.02, 1.02), title="weights")
    weight_axis.legend()
    return _save_png(figure, path)


def _weight_histograms(axis, statistics: NoiseStatistics, betas: np.ndarray, label: str) -> None:
    bins = np.linspace(0.0, 1.0, 41)
    for beta, weights in zip(betas, statistics.weight_a):
        axis.hist(weights, bins=bins, histtype="step", linewidth=1.4, label=f"β = {beta:g}")
    # Headroom above the tallest bar keeps the legend off the spikes at 0, 0.5 and 1.
    axis.set(xlabel=label, ylabel="resamplings", yscale="log", ylim=(0.7, 30 * statistics.weight_a.shape[-1]))
    axis.legend(fontsize="small", ncols=3, loc="upper center")


def plot_noisy(result: NoisyResult, path: str | os.PathLike) -> Path:
    """Histogram of α_a per β, and std α_a / share near an endpoint against β (one head)."""
    a, b = result.pair
    figure, (histogram_axis, spread_axis) = _new_figure(
        2, f"noisy keys, one head, q = c·(μ_{a} + μ_{b}), c/√d = {result.logit_scale:g}"
    )
    _weight_histograms(histogram_axis, result.single, result.betas, f"α_{a} over resamplings")
    histogram_axis.set_title(f"where α_{a} lands (0.5 = the average)")
    spread_axis.plot(result.betas, result.single.std_weight_a, "o-", label=f"std of α_{a}")
    spread_axis.plot(
        result.betas, result.single.fraction_near_endpoint, "s--", label=f"share nearer v_{a} or v_{b}"
    )
    spread_axis.set(xlabel="β (std of λ)", ylim=(-0.02, 1.02), title="swing of the output")
    spread_axis.legend()
    return _save_png(figure, path)


def plot_multihead(result: MultiheadResult, path: str | os.PathLike) -> Path:
    """One head against two heads: std α_a, mean distance, and α_a histograms at the largest β."""
    a, b = result.pair
    figure, (spread_axis, distance_axis, histogram_axis) = _new_figure(
        3, f"noisy keys: one head q = c·(μ_{a} + μ_{b}) vs two heads q₁ = c·μ_{a}, q₂ = c·μ_{b}"
    )
    for statistics, style, label in ((result.single, "o-", "1 head"), (result.two_heads, "s-", "2 heads")):
        spread_axis.plot(result.betas, statistics.std_weight_a, style, label=label)
        distance_axis.plot(result.betas, statistics.mean_distance, style, label=label)
    spread_axis.set(xlabel="β (std of λ)", ylabel=f"std of α_{a}", title=f"swing of α_{a}")
    spread_axis.legend()
    distance_axis.axhline(result.half_gap, color="grey", linestyle=":", label=f"‖v_{a} − v_{b}‖/2")
    distance_axis.set(
        xlabel="β (std of λ)", ylabel=f"mean ‖a − (v_{a}+v_{b})/2‖", title="distance to the average"
    )
    distance_axis.legend()
    bins = np.linspace(0.0, 1.0, 41)
    worst = len(result.betas) - 1
    histogram_axis.hist(result.single.weight_a[worst], bins=bins, alpha=0.6, label="1 head")
    histogram_axis.hist(result.two_heads.weight_a[worst], bins=bins, alpha=0.6, label="2 heads")
    histogram_axis.set(
        xlabel=f"α_{a} over resamplings", ylabel="resamplings", yscale="log",
        title=f"β = {result.betas[worst]:g}",
    )
    histogram_axis.legend()
    return _save_png(figure, path)
