"""The results of the demonstrations (``attnmt explore``): per demonstration a frozen dataclass of
its numbers, and its text, the question, an aligned table of the numbers and a conclusion computed
from them (``attnmt.explore.demos`` computes the numbers, ``attnmt.explore.figures`` draws them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnmt.runtime.tables import format_table

__all__ = ["CLOSE_ENOUGH", "AverageResult", "CopyResult", "DerivationCheck", "MultiheadResult",
           "NoiseStatistics", "NoisyResult", "average_report", "copy_report", "multihead_report", "noisy_report"]

# "The output equals the target" below this distance (used by the conclusions and the figures).
CLOSE_ENOUGH = 1e-3


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


def copy_conclusion(result: CopyResult) -> str:
    decreasing = bool(np.all(np.diff(result.error) < 0))
    trend = "falls at every step" if decreasing else "does not fall at every step"
    reached = _first_below(CLOSE_ENOUGH, result.error, result.logit_scales)
    if reached is None:
        return (
            f"The error {trend} but stays above {CLOSE_ENOUGH:g} up to c/√d = "
            f"{_scale(result.logit_scales[-1])} ({_number(result.error[-1])}): the query does not "
            f"yet lead the other keys by enough to copy v_{result.target}."
        )
    index = int(np.flatnonzero(result.logit_scales == reached)[0])
    return (
        f"The error {trend} as c grows, from {_number(result.error[0])} at c/√d = "
        f"{_scale(result.logit_scales[0])} to below {CLOSE_ENOUGH:g} from c/√d = {_scale(reached)} "
        f"(α_{result.target} = {result.weight_on_target[index]:.6f}): a query along k_{result.target} "
        f"copies v_{result.target} once its logit leads every other key by a few units "
        f"(lead = {_number(result.logit_gap[index])} there)."
    )


def copy_report(result: CopyResult) -> str:
    """The question, the table and the conclusion of the copy demo, as ``attnmt explore`` prints them."""
    heading = (
        f"copy: can one query make the output equal to one value v_{result.target}?\n"
        f"  {result.num_keys} random unit keys in d = {result.dim}, query q = c·k_{result.target}; "
        f"largest cosine of another key with k_{result.target}: {result.max_other_cosine:.3f}"
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
            result.scales, result.logit_scales, result.logit_gap, result.weight_on_target, result.error
        )
    ]
    table = format_table(
        ["c", "c/√d", "logit lead", f"α_{result.target}", f"‖a − v_{result.target}‖"], rows
    )
    return f"{heading}\n{table}\n=> {copy_conclusion(result)}"


def average_conclusion(result: AverageResult) -> str:
    a, b = result.pair
    imbalance = float(np.max(np.abs(result.weight_a - result.weight_b)))
    reached = _first_below(CLOSE_ENOUGH, result.error, result.logit_scales)
    balance = (
        f"The keys are orthogonal, so α_{a} = α_{b} at every c (largest difference "
        f"{imbalance:.1e}) and only the {result.num_keys - 2} other keys pull the output away"
    )
    if reached is None:
        return (
            f"{balance}; up to c/√d = {_scale(result.logit_scales[-1])} they still hold "
            f"{_number(result.weight_others[-1])} of the weight and the error is "
            f"{_number(result.error[-1])}."
        )
    index = int(np.flatnonzero(result.logit_scales == reached)[0])
    return (
        f"{balance}; from c/√d = {_scale(reached)} they hold "
        f"{_number(result.weight_others[index])} of the weight and a is within {CLOSE_ENOUGH:g} "
        f"of (v_{a} + v_{b})/2 (error {_number(result.error[index])})."
    )


def average_report(result: AverageResult) -> str:
    """The question, the table and the conclusion of the average demo, as ``attnmt explore`` prints them."""
    a, b = result.pair
    heading = (
        f"average: can one query make the output the average of two values?\n"
        f"  {result.num_keys} orthonormal keys in d = {result.dim}, query q = c·(k_{a} + k_{b}), "
        f"target (v_{a} + v_{b})/2"
    )
    rows = [
        [_scale(c), _scale(logit), f"{wa:.6f}", f"{wb:.6f}", _number(rest), _number(err)]
        for c, logit, wa, wb, rest, err in zip(
            result.scales,
            result.logit_scales,
            result.weight_a,
            result.weight_b,
            result.weight_others,
            result.error,
        )
    ]
    table = format_table(
        ["c", "c/√d", f"α_{a}", f"α_{b}", "others", f"‖a − (v_{a}+v_{b})/2‖"], rows
    )
    return f"{heading}\n{table}\n=> {average_conclusion(result)}"


def noisy_conclusion(result: NoisyResult) -> str:
    std = result.single.std_weight_a
    grows = bool(np.all(np.diff(std) > 0))
    trend = "grows with every step of β" if grows else "does not grow at every step of β"
    return (
        f"With c/√d = {_scale(result.logit_scale)} the spread of α_{result.pair[0]} {trend}, from "
        f"{std[0]:.3f} at β = {_scale(result.betas[0])} to {std[-1]:.3f} at β = "
        f"{_scale(result.betas[-1])}, where {100 * result.single.fraction_near_endpoint[-1]:.0f}% "
        f"of the outputs land nearer v_{result.pair[0]} or v_{result.pair[1]} than their average: "
        f"the large c that made the average exact multiplies the noise "
        f"λ_{result.pair[0]} − λ_{result.pair[1]} by c/√d in the log of α_{result.pair[0]}/α_{result.pair[1]}."
    )


def noisy_derivation_report(result: NoisyResult) -> str:
    a, b = result.pair
    check = result.derivation
    rows = [
        [
            f"{la:.4f}",
            f"{lb:.4f}",
            f"{da:.4f}",
            f"{result.scale * la:.4f}",
            f"{db:.4f}",
            f"{result.scale * lb:.4f}",
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
        f"β = {_scale(check.beta)}, c = {_scale(result.scale)}:\n{table}"
    )


def noisy_report(result: NoisyResult) -> str:
    """The question, the table and the conclusion of the noisy demo, as ``attnmt explore`` prints them."""
    a, b = result.pair
    heading = (
        f"noisy: does the average survive keys of random length?\n"
        f"  {result.num_keys} keys k_i = λ_i·μ_i (μ orthonormal, d = {result.dim}), "
        f"λ_i ~ N(1, β²) with β the standard deviation; q = c·(μ_{a} + μ_{b}), "
        f"c = {_scale(result.scale)} (c/√d = {_scale(result.logit_scale)}); "
        f"{result.samples} resamplings of λ per β; ‖v_{a} − v_{b}‖/2 = {result.half_gap:.3f}"
    )
    stats = result.single
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
            result.betas,
            result.log_ratio_std,
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
    return f"{heading}\n{table}\n{noisy_derivation_report(result)}\n=> {noisy_conclusion(result)}"


def multihead_conclusion(result: MultiheadResult) -> str:
    worst = len(result.betas) - 1
    single_std = result.single.std_weight_a[worst]
    multi_std = result.two_heads.std_weight_a[worst]
    if multi_std > 0:
        factor = f"{single_std / multi_std:.1f}× smaller"
    else:
        factor = "no spread at all" if single_std > 0 else "neither head set swings"
    smaller_everywhere = bool(
        np.all(result.two_heads.std_weight_a[1:] < result.single.std_weight_a[1:])
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
        f"Two heads keep the spread of α_{result.pair[0]} smaller {where}: at β = "
        f"{_scale(result.betas[worst])} its std is {multi_std:.3f} against {single_std:.3f} "
        f"({factor}) and {100 * result.two_heads.fraction_near_endpoint[worst]:.1f}% "
        f"of outputs land near an endpoint against "
        f"{100 * result.single.fraction_near_endpoint[worst]:.1f}%{why}."
    )


def multihead_report(result: MultiheadResult) -> str:
    """The question, the table and the conclusion of the multihead demo, as ``attnmt explore`` prints them."""
    a, b = result.pair
    heading = (
        f"multihead: do two heads average the noisy keys reliably?\n"
        f"  same keys and {result.samples} resamplings as 'noisy'; one head q = c·(μ_{a} + μ_{b}) "
        f"against two heads q₁ = c·μ_{a}, q₂ = c·μ_{b}, a = (a₁ + a₂)/2, "
        f"c = {_scale(result.scale)} (c/√d = {_scale(result.logit_scale)})"
    )
    one, two = result.single, result.two_heads
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
        for i, beta in enumerate(result.betas)
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
    return f"{heading}\n{table}\n=> {multihead_conclusion(result)}"


# ----------------------------------------------------------------------------------------------
# The results


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
        return copy_conclusion(self)

    def report(self) -> str:
        return copy_report(self)


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
        return average_conclusion(self)

    def report(self) -> str:
        return average_report(self)


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
        return noisy_conclusion(self)

    def derivation_report(self) -> str:
        return noisy_derivation_report(self)

    def report(self) -> str:
        return noisy_report(self)


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
        return multihead_conclusion(self)

    def report(self) -> str:
        return multihead_report(self)
