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
is float64 NumPy and the attention itself is :mod:`attnmt.attention.reference`. The package keeps
them apart: ``demos.py`` computes, ``results.py`` holds each result with its text, ``figures.py`` draws.

Scales are given as c (the length multiplier of the query) but the defaults are chosen in units of
√d, because c/√d is the attention logit of the favoured key: it is what the softmax sees.
"""

from attnmt.explore.demos import (
    DEFAULT_BETAS,
    DEFAULT_LOGIT_SCALES,
    DEFAULT_NOISY_LOGIT_SCALE,
    average_demo,
    copy_demo,
    multihead_demo,
    noisy_demo,
)
from attnmt.explore.figures import plot_average, plot_copy, plot_multihead, plot_noisy
from attnmt.explore.results import (
    AverageResult,
    CopyResult,
    DerivationCheck,
    MultiheadResult,
    NoiseStatistics,
    NoisyResult,
)

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
