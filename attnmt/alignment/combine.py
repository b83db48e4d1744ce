"""Several sources of alignment weights made to agree: a weighted geometric mean.

Given K weight functions (a translator in one direction, a translator in the other direction with
its weights transposed, vector attention, …), each giving ``W_k: [T, S]`` for a pair, the
combined score of target word j and source word i is

    C[j, i] = Π_k max(W_k[j, i], floor) ^ λ_k        λ_k ≥ 0, Σ_k λ_k = 1

computed in the log domain, ``exp(Σ_k λ_k log max(W_k, floor))``. A geometric mean is an
agreement: a pair scores high only if every source gives it weight, so one confident source
cannot outvote the others (the arithmetic mean lets it). It is the soft form of intersecting
the links of two directional aligners (alignment by agreement, Liang et al., 2006). The rows of
C are not renormalised: C is a score matrix for the link extractors of ``attnmt.alignment.links``
(argmax along rows and columns, grow-diag, itermax, matching), all of which compare scores and
need no distribution. ``floor`` keeps a zero weight finite (it still makes that pair lose).

:class:`CombinedAligner` is itself a weight function for :func:`attnmt.alignment.align_corpus`;
its :meth:`~CombinedAligner.precompute` forwards to the parts that batch their work (translators).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from attnmt.errors import ConfigError

__all__ = ["DEFAULT_FLOOR", "CombinedAligner", "check_same_languages", "combine_weights", "translator_vector_shares"]

#: smallest weight taken into the logarithm: a zero weight counts as 1e-9, not as -inf
DEFAULT_FLOOR = 1e-9

WeightFunction = Callable[[Sequence[str], Sequence[str]], np.ndarray]


def _checked_shares(shares: Sequence[float], count: int) -> np.ndarray:
    """``shares`` as float64 after checking there is one per part, each >= 0, summing to 1."""
    values = np.asarray(shares, dtype=np.float64).reshape(-1)
    if values.size != count:
        raise ValueError(f"combine: {count} weight matrices but {values.size} shares")
    if count == 0:
        raise ValueError("combine: nothing to combine (no weight matrices)")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(f"combine: shares must be finite and >= 0, got {values.tolist()}")
    if not math.isclose(float(values.sum()), 1.0, rel_tol=0, abs_tol=1e-9):
        raise ValueError(f"combine: shares must sum to 1, got {values.tolist()} (sum {values.sum():.6g})")
    return values


def translator_vector_shares(translators: int, vector_share: float | None) -> list[float]:
    """Shares for ``translators`` translators followed by vector attention (None: no vectors).

    Vector attention gets ``vector_share`` (all of it when there is no translator), the translators
    split the rest equally: ``translator_vector_shares(2, 0.7) == [0.15, 0.15, 0.7]``.
    """
    if vector_share is None:
        return [1.0 / translators] * translators
    if translators == 0:
        return [1.0]
    return [(1.0 - vector_share) / translators] * translators + [vector_share]


def check_same_languages(vector_languages: tuple[str | None, str | None],
                         translators: Sequence[tuple[tuple[str | None, str | None], str]], vectors: str) -> None:
    """ConfigError when a translator aligns other languages (or the same ones the other way round)
    than the vectors ``vectors`` hold: their weights cannot be combined. ``translators`` gives each
    translator's (source, target) languages and its name; an unknown language (None) is not checked."""
    for languages, name in translators:
        if None in languages or None in vector_languages:
            continue
        if tuple(languages) != tuple(vector_languages):
            raise ConfigError(
                f"--model {name} aligns {languages[0]} → {languages[1]}, but --vectors {vectors} holds "
                f"{vector_languages[0]} → {vector_languages[1]}: their weights cannot be combined; use vectors of "
                "the run's languages, or --src-lang to choose the run's direction"
            )


def combine_weights(
    matrices: Sequence[np.ndarray],
    shares: Sequence[float],
    floor: float = DEFAULT_FLOOR,
) -> np.ndarray:
    """``C = Π_k max(W_k, floor)^λ_k``: ``matrices`` all ``[T, S]``, ``shares`` λ_k >= 0 summing to 1.

    Returns float64 ``[T, S]``. A part with share 0 does not change the result. ValueError for
    matrices of different shapes, NaN weights or shares that are negative or do not sum to 1.
    """
    values = _checked_shares(shares, len(matrices))
    if not (math.isfinite(floor) and floor > 0):
        raise ValueError(f"combine: floor must be a positive number, got {floor}")
    arrays = [np.asarray(matrix, dtype=np.float64) for matrix in matrices]
    shape = arrays[0].shape
    for number, array in enumerate(arrays, start=1):
        if array.ndim != 2 or array.shape != shape:
            raise ValueError(
                f"combine: weight matrix {number} has shape {array.shape}, matrix 1 has {shape} (all must be [T, S])"
            )
        if np.isnan(array).any():
            raise ValueError(f"combine: weight matrix {number} contains NaN")
    log_score = np.zeros(shape)
    for share, array in zip(values, arrays):
        if share > 0:
            log_score += share * np.log(np.maximum(array, floor))
    return np.exp(log_score)


@dataclass
class CombinedAligner:
    """The geometric mean of several weight functions, as one weight function.

        aligner = CombinedAligner([forward, reverse, vectors], [0.25, 0.25, 0.5])
        links = align_corpus(aligner, src_sentences, tgt_sentences, "intersect")

    parts    weight functions ``(src_tokens, tgt_tokens) -> [len(tgt), len(src)]``, all in the
             alignment's orientation (a reversed translator transposes its own weights)
    shares   λ_k per part, >= 0, summing to 1
    names    one label per part, for :meth:`describe` (default "part 1", "part 2", …)
    floor    see :func:`combine_weights`
    """

    parts: Sequence[WeightFunction]
    shares: Sequence[float]
    names: Sequence[str] | None = None
    floor: float = DEFAULT_FLOOR

    def __post_init__(self) -> None:
        self.parts = list(self.parts)
        self.shares = [float(share) for share in _checked_shares(self.shares, len(self.parts))]
        if self.names is None:
            self.names = [f"part {number}" for number in range(1, len(self.parts) + 1)]
        elif len(self.names) != len(self.parts):
            raise ValueError(f"CombinedAligner: {len(self.parts)} parts but {len(self.names)} names")

    @property
    def part_names(self) -> Sequence[str]:
        """The parts' names (given, or "part 1", "part 2", ...)."""
        return self.names if self.names is not None else [f"part {k}" for k in range(1, len(self.parts) + 1)]

    def describe(self) -> str:
        """One line, e.g. ``geometric mean of en→fr translator (0.25), fr→en translator (0.25), vectors (0.5)``."""
        terms = ", ".join(f"{name} ({share:.3g})" for name, share in zip(self.part_names, self.shares))
        return f"geometric mean of {terms}"

    def precompute(self, src_sentences, tgt_sentences, progress: bool = False) -> None:
        """Let every part that batches its work (``precompute``) do it now for these pairs."""
        for part in self.parts:
            if hasattr(part, "precompute"):
                part.precompute(src_sentences, tgt_sentences, progress=progress)

    def __call__(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> np.ndarray:
        matrices = [np.asarray(part(src_tokens, tgt_tokens)) for part in self.parts]
        expected = (len(tgt_tokens), len(src_tokens))
        for name, matrix in zip(self.part_names, matrices):
            if matrix.shape != expected:
                raise ValueError(f"CombinedAligner: {name} returned shape {matrix.shape}, expected {list(expected)}")
        return combine_weights(matrices, self.shares, self.floor)
