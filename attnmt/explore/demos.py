"""The computations of the demonstrations (``attnmt.explore``): keys, values and queries in float64
NumPy and the attention of :mod:`attnmt.attention.reference`. Each returns one of the frozen results
of ``attnmt.explore.results`` (its numbers and text); ``attnmt.explore.figures`` draws them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnmt.attention.reference import scaled_dot_product_attention
from attnmt.explore.results import (
    AverageResult,
    CopyResult,
    DerivationCheck,
    MultiheadResult,
    NoiseStatistics,
    NoisyResult,
)

__all__ = ["DEFAULT_BETAS", "DEFAULT_LOGIT_SCALES", "DEFAULT_NOISY_LOGIT_SCALE", "average_demo", "copy_demo",
           "multihead_demo", "noisy_demo"]

# Values of c/√d, the logit of the favoured key(s); the scales actually used are these times √d.
DEFAULT_LOGIT_SCALES: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
# Standard deviations β of the key multipliers λ_i ~ N(1, β²).
DEFAULT_BETAS: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1, 0.2, 0.5)
# c/√d of the noisy demos: large enough that at β = 0 the average is exact to ~1e-6.
DEFAULT_NOISY_LOGIT_SCALE = 16.0


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


# ----------------------------------------------------------------------------------------------
# Copying: can one query put (almost) all its weight on one value?


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


def _one_head_fields(run: _NoisyRun, num_keys: int, dim: int, samples: int) -> dict[str, Any]:
    """The fields the noisy and multihead results share: the setting and the one head's statistics."""
    a, b = run.pair
    return {
        "num_keys": num_keys, "dim": dim, "pair": run.pair, "scale": run.scale, "samples": samples,
        "betas": run.betas, "half_gap": float(np.linalg.norm(run.values[a] - run.values[b]) / 2),
        "single": _noise_statistics(run.single_weights[..., a], run.single_outputs, run.values[a], run.values[b]),
    }


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
    return NoisyResult(**_one_head_fields(run, num_keys, dim, samples), derivation=_derivation_check(run))


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
    # The weight the averaged output puts on v_a: the mean of the two heads' weights on a.
    two_head_weight_a = run.two_head_weights[..., a].mean(axis=-1)
    two_heads = _noise_statistics(two_head_weight_a, run.two_head_outputs, run.values[a], run.values[b])
    return MultiheadResult(**_one_head_fields(run, num_keys, dim, samples), two_heads=two_heads)
