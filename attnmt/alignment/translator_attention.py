"""Word alignment from a trained translator: its attention while force-decoding a given translation.

A translator (an attnmt run, or a Hugging Face model) is made to *read* a sentence pair instead of
translating: the source words go into the encoder and the decoder is fed the given target under
teacher forcing, ``tgt_in = start + target pieces`` (``attnmt.models.readout``). At every target
position the decoder's attention over the source is read off; nothing is searched, so the weights
describe the pair as given.

Pipeline for one pair (source x of S words, target y of T words)::

    pieces     every word encoded on its own with the run's sentencepiece model, so word k owns
               the pieces P(k) = [start_k, stop_k); sources get EOS appended as in training
    forward    the translator's force_decode (attnmt.models.readout)
               -> a: [L, h, n + 1, m + 1]  (L cross-attention layers, h heads, n target pieces,
                  m source pieces; row t is the step whose decoder input is tgt_in[t])
    select     one layer l and one head, or the mean over the heads of layer l
    rows       row t predicts target piece t (t = 0 … n−1): the *output* reading, the usual one.
               With ``shift`` row t + 1 is used, the step whose *input* is piece t
               (Shift-Att, Chen et al. 2020); either way the EOS row is not a word
    EOS        the source EOS column is dropped; with ``renormalize`` every row is divided by
               its remaining sum, so each target piece's row is again a distribution
    merge      W[i, j] = mean_{t ∈ Q(i)} sum_{s ∈ P(j)} a[t, s]
               (Q(i) the pieces of target word i): the mass a target word put on a source word,
               rows still summing to 1: ``attnmt.data.pieces.merge_spans``, on the exact word
               spans rather than on a regrouping of the pieces by "▁"
    result     W: [T, S], rows = target words, as ``attnmt.alignment.align_corpus`` expects

Why every word is encoded on its own: gold sentences are pre-tokenized and their word positions
are what the gold links count (``attnmt.data.pieces.word_pieces`` says why this is exact).

Direction. The alignment's source is the translator's source by default. A translator trained the
other way round (French → English when English is the alignment source) is run on the pair
swapped and its weights transposed: then *columns* are the decoder's distributions (``src_lang``
picks the direction from the run's languages; a Hugging Face model is read as it translates).

Which attention. Single-attention models (RNN) have one layer; ``multihead`` RNN attention has h
heads. For a Transformer the default is the mean over the heads of the *penultimate* decoder layer
(the last one when there is only one): the top layer's cross-attention serves the prediction of
the next word and is typically more diffuse, while the layer below it is the one found to align
best (Garg et al., 2019, "Jointly learning to align and translate with Transformer models").
Layers and heads are numbered from 1 like in the viewer ("layer 2 / head 1"); negative numbers
count from the end (−1 = last).

Saliency instead of attention (``saliency=``, ``attnmt align --saliency METHOD``): the gradient
saliency of each target piece on the source pieces (``attnmt.attribution``) replaces the
weights, as one matrix [1, 1, n + 1, m + 1] after ``saliency_weights``; the rest of the pipeline
is the same (Ding, Xu and Koehn, 2019, read alignments from saliency this way).

Which reading. A decoder whose query has just consumed the previous target word (the RNN's
``parallel`` flow: h_i = RNN(y_{i−1}, h_{i−1}), a_i = Attn(h_i, ·) without input feeding) tends to
look at the source word of y_{i−1}, i.e. one position late; ``shift`` corrects for exactly that,
and ``benchmarks/alignment_translator.py`` chooses it on the trial set only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnmt.alignment.aer import alignment_error_rate
from attnmt.alignment.links import align_corpus, extract_links
from attnmt.attribution.methods import AttributionOptions
from attnmt.data.pieces import Span, merge_spans, spans_of, word_pieces
from attnmt.decoding.hf import HFTranslator
from attnmt.decoding.translator import Translator
from attnmt.errors import ConfigError
from attnmt.models.common import default_layer, resolve_position
from attnmt.models.readout import DEFAULT_MAX_TOKENS

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ForcedAttention",
    "TranslatorAligner",
    "file_language",
    "head_aers",
    "guided_reading",
    "merge_spans",
    "piece_to_word_weights",
    "saliency_weights",
    "word_pieces",
]


def file_language(path: str | Path, languages: tuple[str, str]) -> str | None:
    """The language a file's name ends with (``test.en-fr.en``, ``valid.fr.gz``), when it is one of
    ``languages`` (a translator's two), else None: which way round to read a pair of files."""
    name = Path(path).name
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = name.rsplit(".", 1)[-1] if "." in name else None
    return suffix if suffix in languages else None


def piece_to_word_weights(
    piece_weights: Any,
    src_spans: Sequence[Span],
    tgt_spans: Sequence[Span],
    renormalize: bool = True,
) -> np.ndarray:
    """``piece_weights: [n, m + 1]`` (last column: the source EOS) -> word weights ``[T, S]``.

    Drops the EOS column, with ``renormalize`` divides each row by what is left of it (a row with
    nothing left stays 0), then merges pieces into words (``attnmt.data.pieces.merge_spans``).
    """
    matrix = np.asarray(piece_weights, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] < 1:
        raise ValueError(f"piece_to_word_weights: piece_weights must be [n, m + 1], got shape {matrix.shape}")
    matrix = matrix[:, :-1]
    if renormalize:
        totals = matrix.sum(axis=1, keepdims=True)
        matrix = np.divide(matrix, totals, out=np.zeros_like(matrix), where=totals > 0)
    return merge_spans(matrix, src_spans, tgt_spans)


def saliency_weights(scores: Any) -> np.ndarray:
    """Saliency ``[T, S]`` as weights the link methods take: each row's positive part divided by
    its sum, so a row is a distribution over the source pieces that make its word more likely
    (an all-negative row stays 0). attnmt's choice: the links read which source words support an
    output word, not which ones argue against it."""
    positive = np.clip(np.asarray(scores, dtype=np.float64), 0.0, None)
    totals = positive.sum(axis=1, keepdims=True)
    return np.divide(positive, totals, out=np.zeros_like(positive), where=totals > 0).astype(np.float32)


# --------------------------------------------------------------------------- layers and heads


def guided_reading(run_config) -> dict[str, Any] | None:
    """The reading a run's attention was trained to align with, or None for a run without a guide.

    ``{"layer": int | None, "head": int | "mean", "shift": bool, "renormalize": bool}`` from
    ``training.guide_layer``, ``guide_head`` (None there = the mean) and ``guide_shift`` of a run (an
    ``attnmt.runs.run_config.RunConfig``) trained with ``data.train_links``. ``renormalize`` is False for a run
    whose unaligned words were guided to the source EOS (``guide_unaligned: eos``): the weight such a
    row puts on EOS is its "unaligned", which renormalising would undo.
    """
    if run_config is None or not run_config.data.train_links:
        return None
    training = run_config.training
    head = training.guide_head
    return {"layer": training.guide_layer, "head": "mean" if head is None else head, "shift": training.guide_shift,
            "renormalize": training.guide_unaligned != "eos"}


# --------------------------------------------------------------------------- one pair


@dataclass
class ForcedAttention:
    """Every layer's and head's attention of one force-decoded pair, over pieces.

    weights    [L, h, n + 1, m + 1] float32: row t is the decoder step with input tgt_in[t]
               (BOS, then target piece t), so rows 0..n−1 predict the n target pieces and row n
               predicts EOS; column m is the source EOS
    src_spans  the pieces of each word of the translator's source (m pieces in all)
    tgt_spans  the pieces of each word of the translator's target (n pieces in all)
    reversed   the alignment's source is the translator's target: word weights are transposed
    """

    weights: np.ndarray
    src_spans: list[Span]
    tgt_spans: list[Span]
    reversed: bool = False

    @property
    def layers(self) -> int:
        return int(self.weights.shape[0])

    @property
    def heads(self) -> int:
        return int(self.weights.shape[1])

    def piece_weights(self, layer: int | None = None, head: int | None = None, shift: bool = False) -> np.ndarray:
        """``[n, m + 1]`` float64: layer ``layer`` (default :func:`default_layer`), head ``head`` or
        the mean over heads (None), rows of the output reading or, with ``shift``, of the input reading."""
        layer_index = resolve_position(default_layer(self.layers) if layer is None else layer, self.layers,
                                       "decoder layer")
        per_head = self.weights[layer_index].astype(np.float64)  # [h, n + 1, m + 1]
        matrix = per_head.mean(axis=0) if head is None else per_head[resolve_position(head, self.heads, "head")]
        return matrix[1:] if shift else matrix[:-1]

    def word_weights(
        self,
        layer: int | None = None,
        head: int | None = None,
        shift: bool = False,
        renormalize: bool = True,
    ) -> np.ndarray:
        """Alignment weights ``[len(alignment tgt words), len(alignment src words)]`` (module doc)."""
        words = piece_to_word_weights(self.piece_weights(layer, head, shift), self.src_spans, self.tgt_spans,
                                      renormalize)
        return words.T.copy() if self.reversed else words


# --------------------------------------------------------------------------- the aligner


class TranslatorAligner:
    """A translator's attention as a weight function for :func:`attnmt.alignment.align_corpus`.

        aligner = TranslatorAligner("runs/hansards-rnn")            # best.pt, forward direction
        aligner.precompute(src_sentences, tgt_sentences)            # batched force-decoding
        links = align_corpus(aligner, src_sentences, tgt_sentences, "intersect")

    ``aligner(src_tokens, tgt_tokens) -> weights [len(tgt), len(src)]``: looked up among the pairs
    of the last :meth:`precompute` (many pairs per forward call), else force-decoded alone.
    Sentences are lists of words; their case is kept (the run's tokenizer learned the training
    text's case). :meth:`align` does both steps.

    run          a run folder, a checkpoint file, a loaded :class:`attnmt.decoding.Translator`, or an
                 :class:`attnmt.decoding.hf.HFTranslator`
    checkpoint   "best" or "last" (for a run folder)
    layer, head  which cross-attention (module doc): numbers from 1, negative from the end;
                 head "mean" = the mean over the heads. None = the run's choice: the layer, head
                 and reading its attention was trained to align with (``training.guide_*`` of a
                 run trained with ``data.train_links``), else the default layer and the mean
    src_lang     the language of the alignment's source; the run's target language makes the
                 aligner force-decode the pair swapped and transpose (None = the run's source)
    shift        read the step whose decoder *input* is the target piece (Shift-Att); None =
                 the run's guided reading, else False
    renormalize  divide each row by its weight on real source pieces after dropping EOS; None =
                 the run's guided reading (False when it learned to put unaligned words on EOS),
                 else True
    max_tokens   bound on B · max(S, T) padded tokens per forward call
    num_threads  torch threads (None = leave torch's setting)
    """

    def __init__(  # noqa: PLR0913 (the reading options of `attnmt align --model`, each a keyword)
        self,
        run,
        checkpoint: str = "best",
        layer: int | None = None,
        head: int | str | None = None,
        *,
        src_lang: str | None = None,
        shift: bool | None = None,
        renormalize: bool | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        num_threads: int | None = None,
        trust_run_code: bool = False,
        saliency: AttributionOptions | str | None = None,
    ):
        self.translator = run if isinstance(run, (Translator, HFTranslator)) else \
            Translator.load(run, checkpoint, num_threads, trust_run_code=trust_run_code)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"TranslatorAligner: max_tokens must be a positive integer, got {max_tokens!r}")
        if isinstance(self.translator, HFTranslator):
            self.layers, self.heads = self.translator.layers, self.translator.heads
            self.run_languages: tuple[str | None, str | None] = (None, None)
            guided = None
        else:
            model = self.translator.model
            self.layers, self.heads = model.cross_attention_layers, model.attention_heads
            self.run_languages = (self.translator.tokenizers.src_lang, self.translator.tokenizers.tgt_lang)
            guided = guided_reading(self.translator.run_config)
        self.saliency = None if saliency is None else AttributionOptions.of(saliency)
        if self.saliency is not None:  # one matrix, read where it predicts the word (not the attention's guide)
            if layer is not None or head is not None:
                raise ConfigError("layer and head choose an attention; saliency has neither")
            self.layers, self.heads, guided = 1, 1, None
        if guided is not None:
            layer = guided["layer"] if layer is None else layer
            head = guided["head"] if head is None else head
            shift = guided["shift"] if shift is None else shift
            renormalize = guided["renormalize"] if renormalize is None else renormalize
        if layer is None:
            layer = default_layer(self.layers)
        self.layer = resolve_position(layer, self.layers, "decoder layer") + 1
        self.head = None if head is None or isinstance(head, str) else resolve_position(head, self.heads, "head") + 1
        self.shift = bool(shift)
        self.guided = guided is not None
        self.renormalize = True if renormalize is None else bool(renormalize)
        self.max_tokens = max_tokens
        src, tgt = self.run_languages
        if src_lang is None or src_lang == src or src is None:
            self.reversed = False
        elif src_lang == tgt:
            self.reversed = True
        else:
            raise ConfigError(f"source language {src_lang!r} is neither of the run's languages: it translates "
                              f"{src} → {tgt}")
        self._cache: dict[tuple[tuple[str, ...], tuple[str, ...]], np.ndarray] = {}

    # ---- description ----------------------------------------------------------------------------

    @property
    def languages(self) -> tuple[str | None, str | None]:
        """(alignment source language, alignment target language); None for a Hugging Face model."""
        src, tgt = self.run_languages
        return (tgt, src) if self.reversed else (src, tgt)

    def describe(self) -> str:
        """One line: the model, the direction and the attention (or saliency) read."""
        heads = f"head {self.head} of {self.heads}" if self.head is not None else \
            f"mean of {self.heads} head{'s' if self.heads != 1 else ''}"
        reading = "input reading (shift)" if self.shift else "output reading"
        if not self.renormalize:
            reading += ", EOS weight kept as 'unaligned'"
        if self.guided:
            reading += " (the run's guided-alignment defaults)"
        where = f"layer {self.layer} of {self.layers}, {heads}, {reading}"
        if self.saliency is not None:
            where = f"{self.saliency.describe()}, its positive part normalised per row, {reading}"
        if isinstance(self.translator, HFTranslator):
            return f"{self.translator.name}: {where}"
        model = self.translator.model
        config = getattr(model, "config", None)
        kind = getattr(model, "model_type", type(model).__name__)
        if kind == "rnn" and config is not None:
            kind += f", {config.attention} attention, {config.flow} flow"
        src, tgt = self.run_languages
        direction = (f"reversed: {tgt} is the alignment source, the pair is force-decoded {src} → {tgt} and the "
                     f"weights transposed") if self.reversed else f"alignment source {src} = the translator's source"
        return f"{kind} translator {src} → {tgt}; {where}; {direction}"

    # ---- force-decoding ---------------------------------------------------------------------------

    def forced_attention(
        self,
        src_sentences: Sequence[Sequence[str]],
        tgt_sentences: Sequence[Sequence[str]],
        progress: bool = False,
    ) -> list[ForcedAttention | None]:
        """Every layer and head of every pair (alignment orientation in, None for a pair with an empty side).

        Keeps all L · h maps of every pair: for choosing a layer/head on a small set. For a large
        corpus use :meth:`weights_many`, which keeps only the selected map.
        """
        results: list[ForcedAttention | None] = [None] * len(src_sentences)
        for index, forced in self._force_decode(src_sentences, tgt_sentences, progress):
            results[index] = forced
        return results

    def weights_many(
        self,
        src_sentences: Sequence[Sequence[str]],
        tgt_sentences: Sequence[Sequence[str]],
        progress: bool = False,
    ) -> list[np.ndarray]:
        """The weights ``[len(tgt), len(src)]`` of every pair, force-decoded in batches (empty side: zeros)."""
        results = [np.zeros((len(tgt), len(src))) for src, tgt in zip(src_sentences, tgt_sentences)]
        for index, forced in self._force_decode(src_sentences, tgt_sentences, progress):
            results[index] = forced.word_weights(self.layer, self.head, self.shift, self.renormalize)
        return results

    def precompute(
        self,
        src_sentences: Sequence[Sequence[str]],
        tgt_sentences: Sequence[Sequence[str]],
        progress: bool = False,
    ) -> None:
        """Force-decode all pairs in batches now; calls on these pairs then only look them up.

        Replaces the pairs of an earlier call (the memory held is that of one corpus).
        """
        weights = self.weights_many(src_sentences, tgt_sentences, progress)
        self._cache = {
            (tuple(src), tuple(tgt)): matrix for src, tgt, matrix in zip(src_sentences, tgt_sentences, weights)
        }

    def __call__(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> np.ndarray:
        cached = self._cache.get((tuple(src_tokens), tuple(tgt_tokens)))
        if cached is not None:
            return cached
        return self.weights_many([list(src_tokens)], [list(tgt_tokens)])[0]

    def align(
        self,
        src_sentences: Sequence[Sequence[str]],
        tgt_sentences: Sequence[Sequence[str]],
        method: str = "intersect",
        progress: bool = False,
    ) -> list[set[tuple[int, int]]]:
        """Links ``(i_src, j_tgt)`` of every pair: :meth:`precompute`, then ``align_corpus`` with ``method``."""
        if len(src_sentences) != len(tgt_sentences):
            raise ValueError(
                f"align: {len(src_sentences)} source sentences but {len(tgt_sentences)} target sentences"
            )
        self.precompute(src_sentences, tgt_sentences, progress)
        return align_corpus(self, src_sentences, tgt_sentences, method, progress=progress)

    def _pieces(self, words: Sequence[str], side: str) -> tuple[list[int], list[Span]]:
        """The pieces of ``words`` (each word encoded alone) and each word's span."""
        return spans_of(self.translator.encode_words(words, side), self.translator.unk_id)

    def _force_decode(
        self,
        src_sentences: Sequence[Sequence[str]],
        tgt_sentences: Sequence[Sequence[str]],
        progress: bool,
    ) -> Iterator[tuple[int, ForcedAttention]]:
        """(pair index, ForcedAttention) for every pair with two non-empty sides, batch by batch."""
        if len(src_sentences) != len(tgt_sentences):
            raise ValueError(
                f"{len(src_sentences)} source sentences but {len(tgt_sentences)} target sentences"
            )
        for side, sentences in (("source", src_sentences), ("target", tgt_sentences)):
            for sentence in sentences:
                if isinstance(sentence, str):
                    raise TypeError(f"{side} sentences must be lists of words, got the string {sentence[:40]!r}")
        # The translator reads its own source: the alignment's target when reversed.
        reader_src, reader_tgt = (tgt_sentences, src_sentences) if self.reversed else (src_sentences, tgt_sentences)
        live = [k for k in range(len(reader_src)) if len(reader_src[k]) and len(reader_tgt[k])]
        if not live:
            return
        sources, outputs, src_spans, tgt_spans = [], [], [], []
        eos = self.translator.eos_id
        for k in live:
            ids, spans = self._pieces(reader_src[k], "source")
            sources.append(ids + [eos])
            src_spans.append(spans)
            ids, spans = self._pieces(reader_tgt[k], "target")
            outputs.append(ids + [eos])
            tgt_spans.append(spans)
        if self.saliency is not None:
            for position, scores in self.translator.attribute(sources, outputs, self.saliency,
                                                             max_tokens=self.max_tokens, progress=progress):
                yield live[position], ForcedAttention(weights=saliency_weights(scores)[None, None],
                                                      src_spans=src_spans[position], tgt_spans=tgt_spans[position],
                                                      reversed=self.reversed)
            return
        for position, reading in self.translator.force_decode(sources, outputs, max_tokens=self.max_tokens,
                                                              progress=progress):
            yield live[position], ForcedAttention(weights=reading.weights, src_spans=src_spans[position],
                                                  tgt_spans=tgt_spans[position], reversed=self.reversed)


def head_aers(aligner: TranslatorAligner, src_sentences: Sequence[Sequence[str]],
              tgt_sentences: Sequence[Sequence[str]], sure: Sequence[set[tuple[int, int]]],
              possible: Sequence[set[tuple[int, int]]], method: str = "intersect") -> dict[tuple[int, int], float]:
    """The alignment error rate of every cross-attention head on a gold set: (layer, head) from 1 ->
    AER of the links ``method`` draws from that head's word weights (the aligner's reading: its
    shift and renormalisation), every pair force-decoded once."""
    forced = aligner.forced_attention(src_sentences, tgt_sentences)
    found = {}
    for layer in range(1, aligner.layers + 1):
        for head in range(1, aligner.heads + 1):
            links = [set() if pair is None else
                     extract_links(pair.word_weights(layer, head, aligner.shift, aligner.renormalize), method)
                     for pair in forced]
            found[(layer, head)] = float(alignment_error_rate(links, sure, possible)["aer"])
    return found
