"""Alignment error rate, and reading a gold standard in either format.

With predicted links A, sure links S and possible links P (Och & Ney, 2003), summed over the
whole corpus (micro-average: every link counts once, long sentences weigh more):

    precision = |A ∩ P| / |A|        recall = |A ∩ S| / |S|
    AER       = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)
    F1        = 2 · precision · recall / (precision + recall)

P must contain S (a sure link is also possible); when a caller's P lacks some sure links they are
added to it (P := P ∪ S), which is what every published AER assumes. Empty cases never divide by
zero: with no prediction (|A| = 0) precision is 1 (no wrong link was made); with no sure gold link
(|S| = 0) recall is 1 (nothing was missed); AER is 0 when |A| + |S| = 0; F1 is 0 when precision
and recall are both 0.

How sure is a corpus AER? ``bootstrap_aers`` redraws the sentences of the test set with
replacement (Koehn, 2004, for BLEU) and recomputes the corpus AER of each redraw from the summed
counts; ``aer_interval`` gives the central ``level`` share of those values, a percentile interval.
``paired_bootstrap`` scores two aligners on the same redraws, for whether one beats the other.

The file formats (NAACL, Pharaoh) and their readers live in ``attnmt.data.link_files``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from attnmt.data.link_files import (
    GoldAlignment,
    Links,
    read_naacl_alignments,
    read_pharaoh_alignments,
)
from attnmt.runtime.choices import GOLD_FORMATS

__all__ = ["GOLD_FORMATS", "aer_interval", "alignment_error_rate", "bootstrap_aers", "paired_bootstrap", "read_gold"]
#: sentence indices held at once while redrawing (a block of redraws at a time): bounds the memory
REDRAW_BLOCK = 4_000_000


def _sentence_counts(
    predicted: Sequence[Links],
    sure: Sequence[Links],
    possible: Sequence[Links] | None = None,
    caller: str = "alignment_error_rate",
) -> np.ndarray:
    """``[N, 4]`` int64, one row per sentence: |A|, |S|, |A ∩ S|, |A ∩ P| (with P := P ∪ S).

    ``possible`` defaults to ``sure``. Raises ValueError (naming ``caller``) when the lists differ
    in length. Summed over rows, they give every corpus figure of the module doc.
    """
    if possible is None:
        possible = sure
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(
            f"{caller}: {len(predicted)} predicted, {len(sure)} sure and {len(possible)} "
            "possible sentences; they must be the same number"
        )
    rows = []
    for links, sure_links, possible_links in zip(predicted, sure, possible):
        links, sure_links = set(links), set(sure_links)
        possible_links = set(possible_links) | sure_links
        rows.append((len(links), len(sure_links), len(links & sure_links), len(links & possible_links)))
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), 4)


def alignment_error_rate(
    predicted: Sequence[Links],
    sure: Sequence[Links],
    possible: Sequence[Links] | None = None,
) -> dict[str, float]:
    """Corpus AER, precision, recall and F1 (see module doc); one set of ``(i, j)`` per sentence.

    ``possible`` defaults to ``sure``; sure links missing from it are added. Returns
    ``{"aer", "precision", "recall", "f1"}``. Raises ValueError when the lists differ in length.
    """
    n_predicted, n_sure, hits_sure, hits_possible = (int(total) for total in
                                                     _sentence_counts(predicted, sure, possible).sum(axis=0))
    precision = hits_possible / n_predicted if n_predicted else 1.0
    recall = hits_sure / n_sure if n_sure else 1.0
    total = n_predicted + n_sure
    aer = 1.0 - (hits_sure + hits_possible) / total if total else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"aer": aer, "precision": precision, "recall": recall, "f1": f1}


def _redraws(sentences: int, samples: int, seed: int) -> Iterator[np.ndarray]:
    """Blocks ``[k, sentences]`` of sentence indices drawn with replacement, ``samples`` rows in all.

    Together they are the rows of ``numpy.random.default_rng(seed).integers(0, sentences,
    (samples, sentences))`` (the generator's stream does not depend on the block size); blocks keep
    a large gold set from holding every index at once.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"bootstrap: samples must be a positive integer, got {samples!r}")
    if not sentences:
        raise ValueError("bootstrap: no sentences to redraw")
    generator = np.random.default_rng(seed)
    block = max(1, REDRAW_BLOCK // sentences)
    for start in range(0, samples, block):
        yield generator.integers(0, sentences, size=(min(block, samples - start), sentences))


def _aers(counts: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Corpus AER of every redraw: 1 − (Σ|A ∩ S| + Σ|A ∩ P|) / (Σ|A| + Σ|S|), 0 when the sum is 0."""
    sums = counts[indices].sum(axis=1)  # [samples, 4]
    total = sums[:, 0] + sums[:, 1]
    return np.where(total > 0, 1.0 - (sums[:, 2] + sums[:, 3]) / np.maximum(total, 1), 0.0)


def bootstrap_aers(
    predicted: Sequence[Links],
    sure: Sequence[Links],
    possible: Sequence[Links] | None = None,
    samples: int = 2000,
    seed: int = 0,
) -> np.ndarray:
    """Corpus AER of ``samples`` redraws of the sentences with replacement: float64 ``[samples]``.

    Redraw b takes sentence indices ``numpy.random.default_rng(seed).integers(0, N, (samples, N))[b]``
    and gives exactly what :func:`alignment_error_rate` gives on those sentences.
    """
    counts = _sentence_counts(predicted, sure, possible, caller="bootstrap")
    return np.concatenate([_aers(counts, block) for block in _redraws(len(counts), samples, seed)])


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap: level must lie strictly between 0 and 1, got {level!r}")
    tail = (1.0 - level) / 2
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def aer_interval(
    predicted: Sequence[Links],
    sure: Sequence[Links],
    possible: Sequence[Links] | None = None,
    level: float = 0.95,
    samples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval ``(low, high)`` of the corpus AER at ``level`` (e.g. 0.95)."""
    return _percentiles(bootstrap_aers(predicted, sure, possible, samples, seed), level)


def paired_bootstrap(
    predicted_a: Sequence[Links],
    predicted_b: Sequence[Links],
    sure: Sequence[Links],
    possible: Sequence[Links] | None = None,
    level: float = 0.95,
    samples: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """Does aligner A beat aligner B on this test set, beyond the luck of its sentences?

    Both are scored on the *same* redraws (Koehn, 2004). Returns ``{"difference": AER(A) − AER(B)
    on the whole set, "low", "high": the percentile interval of that difference at level,
    "a_better": the share of redraws where A's AER is lower}``.
    """
    counts_a = _sentence_counts(predicted_a, sure, possible, caller="paired_bootstrap")
    counts_b = _sentence_counts(predicted_b, sure, possible, caller="paired_bootstrap")
    differences = np.concatenate([_aers(counts_a, block) - _aers(counts_b, block)
                                  for block in _redraws(len(counts_a), samples, seed)])
    whole = np.arange(len(counts_a))[None, :]  # the test set itself, as one redraw
    low, high = _percentiles(differences, level)
    return {"difference": float(_aers(counts_a, whole)[0] - _aers(counts_b, whole)[0]), "low": low, "high": high,
            "a_better": float(np.mean(differences < 0))}


def read_gold(
    path: str | Path,
    format: str,
    src_lengths: Sequence[int] | None = None,
    tgt_lengths: Sequence[int] | None = None,
    one_based: bool = False,
) -> GoldAlignment:
    """Read a gold alignment file in ``"naacl"`` (always 1-based) or ``"pharaoh"`` format."""
    if format == "naacl":
        return read_naacl_alignments(path, src_lengths, tgt_lengths)
    if format == "pharaoh":
        return read_pharaoh_alignments(path, one_based, src_lengths, tgt_lengths)
    raise ValueError(f"unknown gold format {format!r}; choose one of {', '.join(GOLD_FORMATS)}")


