"""Subword regularisation: a new segmentation of every training sentence in every epoch (Kudo, 2018).

A unigram sentencepiece model gives each segmentation x of a sentence a log-probability
log P(x). Instead of always training on the best one, each epoch draws, for every sentence and
each side on its own, one of its ``nbest`` best segmentations with probability::

    Q(x) = P(x)^α / Σ_{x' in the n best} P(x')^α

(Kudo's "l-best" sampling). α = 0 draws uniformly from the n best; a large α nearly always draws
the best. The n best of every sentence are computed once, before the first step (a few seconds
for Multi30k), and kept as flat int32 arrays; an epoch's draw is a function of (seed, epoch)
only, so a resumed run draws the same segmentations as one that never stopped, on every rank.

Validation, test sets and translation always use the best segmentation (``Tokenizer.encode``):
sampling is for training only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnmt.data.tokenizer import Tokenizer

__all__ = ["NBestSegmentations", "SegmentationSampler"]

# Mixed into the seed: the draws are independent of anything else seeded with training.seed.
_STREAM = 0x5EB0


class NBestSegmentations:
    """The ``nbest`` best segmentations of each of N sentences and their log-probabilities.

    ``ids[offsets[k]:offsets[k + 1]]`` is candidate k; the candidates of sentence i are
    ``first[i]`` to ``first[i + 1] - 1``, best first, with ``scores[k] = log P(candidate k)``.
    """

    def __init__(self, tokenizer: Tokenizer, texts: Sequence[str], nbest: int, max_length: int | None = None):
        """Candidates longer than ``max_length`` pieces are left out, except the best one, which
        is always kept (the caller has already dropped the pairs whose best is too long)."""
        pieces: list[np.ndarray] = []
        scores: list[float] = []
        first = [0]
        for text in texts:
            kept = 0
            for rank, (score, ids) in enumerate(tokenizer.nbest_with_scores(text, nbest)):
                if rank > 0 and max_length is not None and len(ids) > max_length:
                    continue
                pieces.append(np.asarray(ids, dtype=np.int32))
                scores.append(score)
                kept += 1
            if kept == 0:  # sentencepiece found no segmentation (an empty text): the plain encoding
                pieces.append(np.asarray(tokenizer.encode(text), dtype=np.int32))
                scores.append(0.0)
                kept = 1
            first.append(first[-1] + kept)
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        self.scores = np.asarray(scores, dtype=np.float64)
        self.first = np.asarray(first, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.first) - 1

    def candidates(self, sentence: int) -> list[list[int]]:
        """Every kept segmentation of ``sentence``, best first."""
        return [self.ids[self.offsets[k]:self.offsets[k + 1]].tolist()
                for k in range(self.first[sentence], self.first[sentence + 1])]

    def draw(self, alpha: float, rng: np.random.Generator) -> list[list[int]]:
        """One segmentation of every sentence, candidate k with probability ∝ exp(α · scores[k])."""
        counts = np.diff(self.first)
        # Gumbel-max over each sentence's candidates: argmax_k (α·score_k + G_k), G_k ~ Gumbel(0, 1).
        keys = alpha * self.scores + rng.gumbel(size=len(self.scores))
        sentence_of = np.repeat(np.arange(len(counts)), counts)
        order = np.lexsort((-keys, sentence_of))  # by sentence, then the largest key first
        chosen = order[self.first[:-1]]
        return [self.ids[self.offsets[k]:self.offsets[k + 1]].tolist() for k in chosen]


class SegmentationSampler:
    """The training pairs' segmentations of one epoch: ``(src_ids, tgt_ids) = sampler.epoch(e)``."""

    def __init__(self, src: NBestSegmentations, tgt: NBestSegmentations, alpha: float, seed: int):
        if len(src) != len(tgt):
            raise ValueError(f"SegmentationSampler: {len(src)} source sentences but {len(tgt)} target sentences")
        self.src, self.tgt, self.alpha, self.seed = src, tgt, float(alpha), int(seed)

    @classmethod
    def for_pairs(  # noqa: PLR0913 (the data section's sampling settings, each a keyword)
        cls, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, src_texts: Sequence[str],
        tgt_texts: Sequence[str], *, nbest: int, alpha: float, seed: int, max_length: int | None = None,
    ) -> SegmentationSampler:
        return cls(NBestSegmentations(src_tokenizer, src_texts, nbest, max_length),
                   NBestSegmentations(tgt_tokenizer, tgt_texts, nbest, max_length), alpha, seed)

    def epoch(self, epoch: int) -> tuple[list[list[int]], list[list[int]]]:
        """The segmentations of 0-based ``epoch``: the same for the same (seed, epoch), always."""
        rng = np.random.default_rng([_STREAM, self.seed, epoch])
        return self.src.draw(self.alpha, rng), self.tgt.draw(self.alpha, rng)
