"""Examples for the HTML attention viewer (``attnmt view``, and notebooks): translations with
their attention, per head when the model has several.

For each source sentence the translator's search (greedy or beam) gives the output and its
attention ``[T, S]``, the weights each output token put on the source pieces, EOS included on
both sides. Models with several heads also get one matrix per head, read by force-decoding the
output (``translator.read_attention``, ``attnmt.models.readout``): [L, h, T, S] becomes

    RNN with the ``multihead`` mechanism:  [1, h, T, S]          -> "head 1" … "head h"
    Transformer:                            [N_dec, h, T, S]      -> "layer l / head j"

plus "average", the matrix the search itself reports (the mean over the heads of the last
decoder layer for a Transformer), which the viewer shows first. Matrices over subword pieces are
merged into words (``attnmt.data.pieces.merge_subwords``) unless ``merge_pieces`` is False.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU

from attnmt.data.pieces import merge_subwords
from attnmt.evaluation.agreement import translation_agreement
from attnmt.evaluation.faithfulness import RANDOM, translation_faithfulness
from attnmt.models.saliency import SaliencyOptions

__all__ = ["named_heads", "view_examples"]


def named_heads(weights: np.ndarray) -> dict[str, np.ndarray] | None:
    """[L, h, T, S] as named matrices: ``{"head 1": [T, S], ...}`` for one layer of attention over
    the source (the RNN) and ``{"layer 1 / head 1": [T, S], ...}`` for several (a Transformer);
    None for one layer with one head."""
    layers, heads = weights.shape[:2]
    if layers * heads <= 1:
        return None
    return {
        (f"layer {layer + 1} / head {head + 1}" if layers > 1 else f"head {head + 1}"): weights[layer, head]
        for layer in range(layers)
        for head in range(heads)
    }


def view_examples(
    translator,
    sources: Sequence[str],
    references: Sequence[str] | None = None,
    beam: int | None = None,
    merge_pieces: bool = True,
    batch_size: int | None = None,
    progress: bool = False,
    saliency: SaliencyOptions | str | None = None,
) -> list[dict[str, Any]]:
    """Translate ``sources`` and return one ``write_attention_viewer`` example dict per sentence.

    Each has the source, output and reference texts, the tokens (words, or pieces when
    ``merge_pieces`` is False, EOS shown as ``</s>``), ``weights`` [T, S] for a single-head model or
    ``heads`` {"average", per-head matrices} (module docstring), and ``meta``: sentence BLEU
    (sacrebleu, against the reference), the log-probability of the output and the beam size.
    With ``saliency`` (a method name or SaliencyOptions) each example also has the gradient
    saliency of its output (``translator.read_saliency``), merged into words like the attention,
    and its mean agreement with the attention in ``meta``, with this sentence's comprehensiveness
    and sufficiency AOPC over 1-3 words (``attnmt.evaluation.faithfulness``) for the attention, the
    method and a random ranking.
    """
    if references is not None and len(references) != len(sources):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    beam = translator.search_config.beam if beam is None else beam
    translations = translator.translate(
        list(sources), beam=beam, return_attention=True, batch_size=batch_size, progress=progress
    )
    every_head = translator.read_attention(translations)
    options = None if saliency is None else SaliencyOptions.of(saliency)
    scores = translator.read_saliency(translations, options, progress=progress) if options is not None else None
    sentence_bleu = BLEU(effective_order=True)
    examples = []
    for index, translation in enumerate(translations):
        src_pieces, out_pieces = translation.src_pieces, translation.out_pieces
        matrices: dict[str, np.ndarray] = {"average": np.asarray(translation.attention, dtype=np.float64)}
        heads = named_heads(np.asarray(every_head[index], dtype=np.float64))
        if heads is not None:
            matrices.update(heads)
        src_tokens, out_tokens = list(src_pieces), list(out_pieces)
        if merge_pieces:
            merged = {}
            for name, matrix in matrices.items():
                merged[name], src_tokens, out_tokens = merge_subwords(matrix, src_pieces, out_pieces)
            matrices = merged
        meta: dict[str, Any] = {}
        reference = None if references is None else references[index]
        if reference is not None:
            meta["BLEU"] = round(sentence_bleu.sentence_score(translation.output, [reference]).score, 1)
        meta["log P"] = round(translation.score, 2)
        meta["beam"] = beam
        example: dict[str, Any] = {
            "source": translation.source,
            "output": translation.output,
            "reference": reference,
            "src_tokens": src_tokens,
            "out_tokens": out_tokens,
            "meta": meta,
        }
        if heads is None:
            example["weights"] = matrices["average"]
        else:
            example["heads"] = matrices
        if scores is not None and options is not None:
            matrix = scores[index]
            if merge_pieces:
                matrix = merge_subwords(matrix, src_pieces, out_pieces, output_words="sum")[0]
            example["saliency"], example["saliency_method"] = matrix, options.describe()
            correlations, same_top, _ = translation_agreement(every_head[index], scores[index], translation)
            if correlations:
                meta["rank corr."] = round(float(np.mean(correlations)), 2)
                meta["same top"] = f"{sum(same_top)}/{len(same_top)}"
            meta.update(_faithfulness_meta(translator, translation, options.method, scores[index]))
        examples.append(example)
    return examples


def _faithfulness_meta(translator: Any, translation: Any, method: str, scores: np.ndarray) -> dict[str, str]:
    """This sentence's comprehensiveness and sufficiency, "attention / METHOD / random", as the
    viewer's readout shows them (nothing for a source without a word to remove)."""
    measured = translation_faithfulness(translator, translation,
                                        {"attention": np.asarray(translation.attention, dtype=np.float64),
                                         method: np.asarray(scores, dtype=np.float64)})
    if not measured:
        return {}
    names = ("attention", method, RANDOM)
    return {f"{measure} ({' / '.join(names)})": " / ".join(
                f"{getattr(measured[name], f'{measure}_aopc')['words']:.2f}" for name in names)
            for measure in ("comprehensiveness", "sufficiency")}
