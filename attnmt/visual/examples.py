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

from attnmt.attribution.methods import ATTENTION, AttributionOptions
from attnmt.data.pieces import merge_subwords
from attnmt.evaluation.explain import ExplainSettings, Explanation, explain
from attnmt.evaluation.faithfulness import RANDOM

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
    saliency: AttributionOptions | str | None = None,
) -> list[dict[str, Any]]:
    """Translate ``sources`` and return one ``write_attention_viewer`` example dict per sentence.

    Each has the source, output and reference texts, the tokens (words, or pieces when
    ``merge_pieces`` is False, EOS shown as ``</s>``), ``weights`` [T, S] for a single-head model or
    ``heads`` {"average", per-head matrices} (module docstring), and ``meta``: sentence BLEU
    (sacrebleu, against the reference), the log-probability of the output and the beam size.
    With ``saliency`` (a method name or AttributionOptions) each example also has the gradient
    saliency of its output (``translator.read_attributions``), merged into words like the attention,
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
    options = None if saliency is None else AttributionOptions.of(saliency)
    explanations = None
    if options is not None:
        settings = ExplainSettings(steps=options.steps, samples=options.samples, noise=options.noise, seed=options.seed,
                                   counterfactual=False)
        explanations = explain(translator, translations, [ATTENTION, options.method], settings=settings)
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
        if explanations is not None and options is not None:
            explanation = explanations[index]
            matrix = explanation.word_matrix(options.method)[0] if merge_pieces else \
                explanation.attributions[options.method].astype(np.float32)
            example["saliency"], example["saliency_method"] = matrix, options.describe()
            report = explanation.methods[options.method]
            if report.rank_correlation is not None:
                meta["rank corr."] = round(report.rank_correlation, 2)
            if report.top1 is not None:
                meta["top-1 agreement"] = round(report.top1, 2)
            meta.update(_faithfulness_meta(explanation, options.method))
        examples.append(example)
    return examples


def _faithfulness_meta(explanation: Explanation, method: str) -> dict[str, str]:
    """This sentence's comprehensiveness and sufficiency, "attention / METHOD / random", as the
    viewer's readout shows them (nothing for a source without a word to remove)."""
    figures = {ATTENTION: explanation.methods[ATTENTION].faithfulness,
               method: explanation.methods[method].faithfulness, RANDOM: explanation.random}
    if not figures[RANDOM].comprehensiveness:
        return {}
    return {f"{measure} ({' / '.join(figures)})": " / ".join(
                f"{getattr(found, f'{measure}_aopc')['words']:.2f}" for found in figures.values())
            for measure in ("comprehensiveness", "sufficiency")}
