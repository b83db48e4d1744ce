"""Is an attribution faithful to what the model computes? Comprehensiveness and sufficiency of
source words, after DeYoung et al. (2020, "ERASER"), for a translator's output token by token.

The translator force-decodes its own output y (``BaseTranslator.force_decode``). For output
token t, an attribution (attention, saliency, any method of the registry) ranks the source words
by their score for t, the sum over each word's pieces (the rule of ``attnmt.data.pieces``; the
source's "</s>" is never a candidate and never removed). With r_k(t) its k highest words and
m(x) = log p(y_t | y_<t, x)::

    comprehensiveness_k(t) = m(x) − m(x \\ r_k(t))        removing the top words should hurt
    sufficiency_k(t)       = m(x) − m(r_k(t))            keeping only them should be enough

A word is removed by replacing its pieces with the unknown piece, the one definition of removal
shared with the ``erasure`` attribution (``attnmt.attribution``). k runs over two sets of
bins: k = 1, 2, 3 words, and 10, 20, 30 and 50% of the source words (⌈p · W⌉, at least one, W the
sentence's words); each bin's k is at most W. The area over the perturbation curve (AOPC) is the
mean over a set's bins; a sentence's figure is the mean over its output tokens. Higher
comprehensiveness and lower sufficiency mean a more faithful ranking.

A contrastive explanation (``foils``: a foil y′_t at some positions t) is measured the same way on
the contrast, m(x) = log p(y_t | y_<t, x) − log p(y′_t | y_<t, x), over the positions that have a
foil: erasing the top-ranked words should shrink the contrast.

The baseline every method must beat is a random ranking: ``random_orders`` orders drawn for every
output token (seeded), each scored as a method is, and the mean taken.

Cost: every distinct set of removed words is one source row of a batched forced decode (the sets
of all methods and of the random orders together), so a sentence of T output tokens costs at most
T · 7 · 2 · (methods + random orders) rows, and fewer where sets repeat.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnmt.attribution.forced import NO_FOIL, erased_rows
from attnmt.data.pieces import Span, group_pieces, is_special_token

__all__ = ["BINS", "Faithfulness", "RANDOM", "bin_sizes", "faithfulness", "source_words", "translation_faithfulness",
           "word_scores"]

#: the bins of the two AOPC curves: a number of words, or a share of the source words
BINS: tuple[tuple[str, float], ...] = (("1", 1), ("2", 2), ("3", 3), ("10%", 0.1), ("20%", 0.2), ("30%", 0.3),
                                       ("50%", 0.5))
WORD_BINS = ("1", "2", "3")
SHARE_BINS = ("10%", "20%", "30%", "50%")
#: the name under which the random baseline is reported
RANDOM = "random"


def bin_sizes(words: int) -> dict[str, int]:
    """k of each bin for a source of ``words`` words (module docstring)."""
    sizes = {}
    for label, value in BINS:
        k = int(value) if value >= 1 else max(1, math.ceil(value * words))
        sizes[label] = min(words, k)
    return sizes


def source_words(src_pieces: Sequence[str], groups: Sequence[tuple[str, int, int]]) -> list[Span]:
    """The spans of the candidate words: every word of ``groups`` (``group_pieces``) but the
    special tokens such as "</s>"."""
    return [(start, stop) for _, start, stop in groups
            if not (stop - start == 1 and is_special_token(src_pieces[start]))]


def word_scores(scores: np.ndarray, words: Sequence[Span]) -> np.ndarray:
    """Piece scores [T, S] -> word scores [T, W] (each word the sum of its pieces' columns)."""
    return np.stack([scores[:, start:stop].sum(axis=1) for start, stop in words], axis=1) if words else \
        np.zeros((scores.shape[0], 0))


@dataclass
class Faithfulness:
    """One method on one sentence (or averaged over sentences): the mean over output tokens of
    each bin's comprehensiveness and sufficiency, and the two AOPCs of each."""

    comprehensiveness: dict[str, float] = field(default_factory=dict)
    sufficiency: dict[str, float] = field(default_factory=dict)

    @property
    def comprehensiveness_aopc(self) -> dict[str, float]:
        """AOPC over k = 1, 2, 3 words ("words") and over 10–50% of them ("share")."""
        return _aopc(self.comprehensiveness)

    @property
    def sufficiency_aopc(self) -> dict[str, float]:
        return _aopc(self.sufficiency)

    def to_dict(self) -> dict[str, Any]:
        return {"comprehensiveness": self.comprehensiveness, "sufficiency": self.sufficiency,
                "comprehensiveness_aopc": self.comprehensiveness_aopc, "sufficiency_aopc": self.sufficiency_aopc}

    @staticmethod
    def mean(items: Sequence[Faithfulness]) -> Faithfulness:
        """The mean of several sentences' figures, bin by bin."""
        if not items:
            return Faithfulness()
        return Faithfulness({label: float(np.mean([item.comprehensiveness[label] for item in items]))
                             for label in items[0].comprehensiveness},
                            {label: float(np.mean([item.sufficiency[label] for item in items]))
                             for label in items[0].sufficiency})


def _aopc(values: Mapping[str, float]) -> dict[str, float]:
    return {"words": float(np.mean([values[label] for label in WORD_BINS])),
            "share": float(np.mean([values[label] for label in SHARE_BINS]))}


def _ranking(row: np.ndarray) -> list[int]:
    """Word indices, highest score first (ties: the earlier word first)."""
    return sorted(range(len(row)), key=lambda j: (-row[j], j))


def faithfulness(  # noqa: PLR0913 (the pair, its words, the attributions and the baseline's settings)
    translator: Any,
    source: Sequence[int],
    output: Sequence[int],
    words: Sequence[Span],
    attributions: Mapping[str, np.ndarray],
    *,
    random_orders: int = 3,
    seed: int = 0,
    foils: Sequence[int] | None = None,
) -> dict[str, Faithfulness]:
    """Comprehensiveness and sufficiency of each attribution [T, S] over one pair's source pieces
    (``source`` and ``output`` complete rows of ids, ``words`` the candidate words' spans), and of
    ``RANDOM`` (module docstring). ``translator`` is any ``BaseTranslator``. ``foils``: the pair's
    row of foils (``NO_FOIL`` where none) to measure on the contrast. A sentence without a
    candidate word, or without a foil, gets an empty result."""
    steps = list(range(len(output))) if foils is None else [t for t, foil in enumerate(foils) if foil != NO_FOIL]
    if not words or not steps:
        return {}
    T, W = len(output), len(words)
    sizes = bin_sizes(W)
    rankings: dict[str, list[list[int]]] = {}
    for method, scores in attributions.items():
        if scores.shape != (T, len(source)):
            raise ValueError(f"faithfulness: {method} scores are {scores.shape}, expected {(T, len(source))}")
        if not np.isfinite(scores).all():
            raise ValueError(f"faithfulness: {method} scores are not finite")
        per_word = word_scores(scores, words)
        rankings[method] = [_ranking(per_word[t]) for t in range(T)]
    generator = np.random.default_rng(seed)
    random_rankings = [[list(generator.permutation(W)) for _ in range(T)] for _ in range(random_orders)]

    # Every distinct set of removed pieces is one row; each (method, t, bin) points at two rows.
    rows: dict[frozenset[int], int] = {frozenset(): 0}

    def row_of(removed_words: Sequence[int]) -> int:
        key = frozenset(p for j in removed_words for p in range(*words[j]))
        return rows.setdefault(key, len(rows))

    def plan(ranking: list[list[int]]) -> dict[str, list[tuple[int, int]]]:
        return {label: [(row_of(ranking[t][:k]), row_of(ranking[t][k:])) for t in range(T)]
                for label, k in sizes.items()}

    plans = {method: plan(ranking) for method, ranking in rankings.items()}
    random_plans = [plan(ranking) for ranking in random_rankings]
    # one source row per distinct set, in the order of their row numbers
    variants = erased_rows(source, [sorted(removed) for removed in rows], translator.unk_id)
    log_probs = np.zeros((len(variants), T))
    if foils is None:
        for index, reading in translator.force_decode(variants, [list(output)] * len(variants), log_probs=True):
            log_probs[index] = reading.log_probs
    else:  # a position without a foil reads its own token: a contrast of 0, and it is not scored
        foil_row = [token if foil == NO_FOIL else foil for foil, token in zip(foils, output)]
        for index, reading in translator.force_decode(variants, [list(output)] * len(variants), log_probs=True,
                                                      foils=[foil_row] * len(variants)):
            log_probs[index] = reading.log_probs.astype(np.float64) - reading.foil_log_probs

    def scored(method_plan: dict[str, list[tuple[int, int]]]) -> Faithfulness:
        whole = log_probs[0]
        comprehensiveness, sufficiency = {}, {}
        for label, pairs in method_plan.items():
            comprehensiveness[label] = float(np.mean([whole[t] - log_probs[pairs[t][0], t] for t in steps]))
            sufficiency[label] = float(np.mean([whole[t] - log_probs[pairs[t][1], t] for t in steps]))
        return Faithfulness(comprehensiveness, sufficiency)

    result = {method: scored(method_plan) for method, method_plan in plans.items()}
    result[RANDOM] = Faithfulness.mean([scored(method_plan) for method_plan in random_plans])
    return result


def translation_faithfulness(translator: Any, translation: Any, attributions: Mapping[str, np.ndarray], *,
                             random_orders: int = 3, seed: int = 0,
                             foils: Sequence[int] | None = None) -> dict[str, Faithfulness]:
    """``faithfulness`` of one ``Translation`` of ``translator``: its pieces' ids as the translator
    numbers them, its candidate words from its source pieces (``source_words``)."""
    sources, outputs = translator.piece_ids([translation])
    words = source_words(translation.src_pieces, group_pieces(translation.src_pieces))
    return faithfulness(translator, sources[0], outputs[0], words, attributions, random_orders=random_orders,
                        seed=seed, foils=foils)
