"""Does a translator's attention agree with its gradients? Agreement between the attention of
each output word over the source and its gradient saliency (``attnmt.attribution``).

Both are read by force-decoding the translator's own output, and merged from pieces into words
by the one rule of ``attnmt.data.pieces`` (summed over a source word's pieces, averaged over an
output word's pieces). The attention is the matrix the search returns: the last decoder layer's
cross-attention, averaged over its heads. For output word i, with A[i, :] its attention and
G[i, :] its saliency over the source words (the "</s>" row and column left out)::

    rank correlation   ρ_i = Spearman(A[i, :], G[i, :])      (average ranks for ties)
    top-1 agreement    [argmax_j A[i, j] = argmax_j G[i, j]]

The saliency keeps its sign: a source word that makes the output word less likely ranks low.
A row counts only when the source has at least two words and neither A[i, :] nor G[i, :] is
constant (a constant row has no ranking: a ``none`` or ``mean`` mechanism's attention). Both
measures are means over the counted output words of the whole corpus.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import rankdata

from attnmt.attribution.methods import AttributionOptions
from attnmt.data.pieces import merge_subwords
from attnmt.decoding.translator import Translation, Translator
from attnmt.runtime.atomic_files import write_text_atomic

__all__ = ["Agreement", "agreement_path", "corpus_agreement", "row_agreement", "run_agreement",
           "translation_agreement"]

END = "</s>"


@dataclass
class Agreement:
    """Mean rank correlation and top-1 agreement over ``counted`` of ``words`` output words
    (module docstring); NaN when no word counted."""

    rank_correlation: float
    top1: float
    counted: int
    words: int

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        return {key: None if isinstance(value, float) and math.isnan(value) else value
                for key, value in values.items()}


def row_agreement(attention: np.ndarray, saliency: np.ndarray) -> tuple[list[float], list[bool], int]:
    """``attention, saliency [T, S]`` over words -> (ρ of each counted row, its top-1 agreement,
    the number of rows T)."""
    attention, saliency = np.asarray(attention, dtype=np.float64), np.asarray(saliency, dtype=np.float64)
    if attention.shape != saliency.shape or attention.ndim != 2:
        raise ValueError(f"row_agreement: attention {attention.shape} and saliency {saliency.shape} must be "
                         "the same [T, S]")
    correlations: list[float] = []
    same_top: list[bool] = []
    if attention.shape[1] < 2:
        return correlations, same_top, attention.shape[0]
    for a, g in zip(attention, saliency):
        if np.ptp(a) == 0 or np.ptp(g) == 0 or not (np.isfinite(a).all() and np.isfinite(g).all()):
            continue
        correlations.append(float(np.corrcoef(rankdata(a), rankdata(g))[0, 1]))
        same_top.append(bool(np.argmax(a) == np.argmax(g)))
    return correlations, same_top, attention.shape[0]


def _without_end(matrix: np.ndarray, src_words: list[str], out_words: list[str]) -> np.ndarray:
    rows = [i for i, word in enumerate(out_words) if word != END]
    columns = [j for j, word in enumerate(src_words) if word != END]
    return matrix[np.ix_(rows, columns)]


def translation_agreement(attention: np.ndarray, saliency: np.ndarray, translation: Translation
                          ) -> tuple[list[float], list[bool], int]:
    """``row_agreement`` of one translation: ``attention`` [L, h, T, S] (``read_attention``) and
    ``saliency`` [T, S] (``read_attributions``) over pieces, merged into words, "</s>" left out."""
    matrix = np.asarray(attention, dtype=np.float64)[-1].mean(axis=0)
    words, src_words, out_words = merge_subwords(matrix, translation.src_pieces, translation.out_pieces)
    scores = merge_subwords(saliency, translation.src_pieces, translation.out_pieces, output_words="sum")[0]
    return row_agreement(_without_end(words, src_words, out_words), _without_end(scores, src_words, out_words))


def corpus_agreement(translator: Translator, translations: Sequence[Translation], options: AttributionOptions,
                     progress: bool = False) -> Agreement:
    """The Agreement of ``translator``'s attention and saliency over ``translations`` (its own outputs)."""
    correlations: list[float] = []
    same_top: list[bool] = []
    words = 0
    attention = translator.read_attention(translations, progress=progress)
    saliency = translator.read_attributions(translations, options, progress=progress)
    for translation, weights, scores in zip(translations, attention, saliency):
        rows, tops, count = translation_agreement(weights, scores, translation)
        correlations += rows
        same_top += tops
        words += count
    if not correlations:
        return Agreement(math.nan, math.nan, 0, words)
    return Agreement(float(np.mean(correlations)), float(np.mean(same_top)), len(correlations), words)


def agreement_path(run_dir: str | Path, split: str, beam: int, options: AttributionOptions) -> Path:
    """Where a run keeps the agreement of its outputs on ``split``: agreement-SPLIT[-beamK]-METHOD.json."""
    beam_part = "" if beam == 1 else f"-beam{beam}"
    return Path(run_dir) / f"agreement-{split}{beam_part}-{options.method}.json"


def run_agreement(translator: Translator, run_dir: str | Path, split: str, sources: Sequence[str], beam: int,
                  options: AttributionOptions, progress: bool = False) -> dict[str, Any]:
    """The agreement report of a run on ``split`` (its outputs with ``beam``), read from the run's
    agreement json when one with the same settings and step exists, else computed and written there."""
    path = agreement_path(run_dir, split, beam, options)
    settings = {"split": split, "beam": beam, "saliency": asdict(options), "step": translator.step}
    if path.is_file():
        try:
            earlier = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            earlier = None
        if isinstance(earlier, dict) and all(earlier.get(key) == value for key, value in settings.items()):
            return earlier
    translations = translator.translate(list(sources), beam=beam, progress=progress)
    report = {**settings, "method": options.describe(),
              **corpus_agreement(translator, translations, options, progress).to_dict()}
    write_text_atomic(path, json.dumps(report, indent=2) + "\n")
    return report

