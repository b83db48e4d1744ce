"""Translating sentences with a trained run: text in, text (and attention weights) out.

    translator = Translator.load("runs/sdp")                # best.pt of the run (or "last")
    [t] = translator.translate(["Ein Mann fährt Fahrrad."], beam=5, return_attention=True)
    t.output        -> "A man rides a bike."
    t.attention     -> np.ndarray [T, S]: row t is the attention of output piece t over the source
    t.src_pieces    -> the S column labels, t.out_pieces -> the T row labels (both end with "</s>")
    translator.read_attention([t])  -> [np.ndarray [L, h, T, S]]: every decoder layer and head
    translator.read_attributions([t], "integrated")  -> [np.ndarray [T, S]]: gradient saliency

The source is encoded with the run's tokenizer, EOS appended (as in training); sentences are
decoded in batches, longest first, and returned in input order. Search is attnmt.decoding.search:
greedy for ``beam=1``, batched beam search otherwise. The weights of every layer and head come
from force-decoding the output (``attnmt.models.readout``).

In a notebook, ``Translations`` render as the interactive attention viewer: ``attnmt.visual.notebook``
registers that display with IPython (``import attnmt`` does it in a running kernel), so this module
holds data and imports nothing of the presentation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from attnmt.attention.user_code import bound_classes
from attnmt.attribution.methods import AttributionOptions
from attnmt.attribution.reader import attribute
from attnmt.data import Batch, Tokenizers, batches_for_inference
from attnmt.data.special_tokens import EOS_ID, UNK_ID
from attnmt.decoding.base import BaseTranslator, Translation, Translations, source_texts
from attnmt.decoding.search import Hypothesis, beam_search, greedy_search
from attnmt.errors import AttnmtError, CheckpointError, ConfigError
from attnmt.models import build_model, check_model_fits
from attnmt.models.readout import DEFAULT_MAX_TOKENS, ForcedReading, force_decode
from attnmt.runs.checkpoint import check_weights_match, checkpoint_code, load_checkpoint, load_model_state
from attnmt.runs.folder import checkpoint_path
from attnmt.runs.run_config import RunConfig, SearchConfig
from attnmt.runtime.checks import MAX_THREADS, is_int
from attnmt.runtime.device import (
    available_memory,
    check_device_name,
    describe,
    enable_tf32,
    memory_size,
    resolve_device,
)
from attnmt.runtime.precision import autocast, check_precision
from attnmt.runtime.threads import ThreadChooser, following, thread_plan

__all__ = ["Translation", "Translations", "Translator", "source_texts"]


class Translator(BaseTranslator):
    """A model, its tokenizers and its search settings (``search_config``, a ``SearchConfig``: the
    defaults of every ``translate`` call). ``run_config`` is the run's whole config when the
    translator was loaded from a run, ``progress`` the position its checkpoint was written at
    (step, epoch, elapsed_seconds, stop_reason; empty when unknown). ``threads``, when set, chooses
    the CPU thread count batch by batch (``attnmt.runtime.threads``; ``Translator.load`` sets it
    unless the count is fixed), and ``thread_reason`` says why the count is what it is."""

    def __init__(
        self,
        model: Any,
        tokenizers: Tokenizers,
        search_config: SearchConfig | None = None,
        run_config: RunConfig | None = None,
        progress: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.tokenizers = tokenizers
        self.run_config = run_config
        if search_config is None:
            search_config = run_config.search if run_config is not None else SearchConfig()
        self.search_config = search_config
        self.progress = dict(progress or {})
        self.threads: ThreadChooser | None = None
        self.thread_reason: str | None = None

    @property
    def step(self) -> int | None:
        """The training step of the checkpoint (None when unknown)."""
        return self.progress.get("step")

    @property
    def precision(self) -> str:
        return self.search_config.precision

    @property
    def device(self) -> torch.device:
        """Where the model (and so every search) runs."""
        return next(self.model.parameters()).device

    def describe(self) -> str:
        """One line for stderr: the device and precision searches run on."""
        tf32 = self.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
        return describe(self.device, self.precision, tf32=tf32, threads=self.thread_reason)

    @classmethod
    def load(
        cls, run: str | Path, checkpoint: str = "best", num_threads: int | None = None, precision: str | None = None,
        device: str | None = None, trust_run_code: bool = False, attention: str | None = None,
    ) -> Translator:
        """Load ``run/best.pt`` (or ``last.pt``, or a checkpoint file given directly) onto ``device``
        (attnmt.runtime.device; ConfigError when the machine lacks it). ``precision`` / ``device`` None
        keep the run's ``search.precision`` / ``search.device``.

        A run trained with a user's attention runs the code it keeps only with consent: code this
        user trained with on this machine, or ``trust_run_code=True``; ``attention`` (the spec the user
        names now) imports that file instead, which must hold the same code. Else UntrustedCodeError."""
        if num_threads is not None and (not is_int(num_threads) or not 1 <= num_threads <= MAX_THREADS):
            raise ConfigError(f"num_threads={num_threads!r}: must be an integer from 1 to {MAX_THREADS}")
        plan = thread_plan(num_threads, "--threads")
        torch.set_num_threads(plan.threads)
        path = checkpoint_path(run, checkpoint)
        state = load_checkpoint(path)
        classes = checkpoint_code(state, path, trust_run_code, attention)  # its errors name the file
        try:
            run_config = RunConfig.from_dict(state["config"])
            tokenizers = Tokenizers.from_state_dict(state["tokenizers"])
            with bound_classes(classes, only=True):
                wanted = resolve_device(check_device_name(device if device is not None else run_config.search.device))
                _check_weights_on_meta(run_config, tokenizers, state, path)
                check_model_fits(run_config.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size,
                                 [(torch.device("cpu"), 4)] + ([(wanted, 4)] if wanted.type != "cpu" else []))
                model = build_model(run_config.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
        except CheckpointError:
            raise  # it names the file already
        except AttnmtError as error:
            raise CheckpointError(f"{path}: cannot rebuild the model it holds: {error}") from None
        load_model_state(model, state, path)
        search_config = replace(
            run_config.search,
            precision=check_precision(precision if precision is not None else run_config.search.precision),
            device=check_device_name(device if device is not None else run_config.search.device),
        )
        target = resolve_device(search_config.device)
        enable_tf32(target)
        model.to(target).eval()
        translator = cls(model, tokenizers, search_config, run_config, progress=state.get("progress"))
        translator.thread_reason = plan.reason
        if plan.adaptive and target.type == "cpu":
            translator.threads = ThreadChooser(plan.threads, hold=1)  # batches are long and few
        return translator

    # ---- limits, checked before any work -----------------------------------------------------------

    # Bytes a search step holds per decoder row and vocabulary entry: the logits and log-probabilities
    # in float32, the top-k work space, and the float64 scores of the candidates.
    BYTES_PER_ROW_AND_TOKEN = 16

    @property
    def max_source_pieces(self) -> int:
        """The longest source the search takes: ten times the longest the run was trained on
        (``data.max_length``, else 100 pieces); beyond it decoding would run for thousands of steps."""
        trained = self.run_config.data.max_length if self.run_config and self.run_config.data.max_length else 100
        return 10 * trained

    def source_problem(self, sentence: str) -> str | None:
        """Why ``sentence`` cannot be translated (too many subword pieces), or None."""
        pieces = len(self.tokenizers.src.encode(sentence))
        if pieces > self.max_source_pieces:
            return (f"{pieces} subword pieces, more than {self.max_source_pieces} (ten times the longest this run "
                    f"was trained on); split it into sentences")
        return None

    def search_bytes(self, beam: int, batch_size: int, source_length: int, return_attention: bool) -> int:
        """About the most memory one batch of search holds: batch_size × beam rows, each with
        one step's vocabulary-sized work (V × 16 bytes) and, for every one of up to
        L_max = max_len_a · S + max_len_b + 1 output tokens, its id (8 bytes), its attention
        over the S = ``source_length`` source positions (4 · S, when kept) and the decoder
        state's growth (``model.state_bytes_per_token``)."""
        search = self.search_config
        longest_output = int(search.max_len_a * source_length + search.max_len_b) + 1
        per_token = 8 + (4 * source_length if return_attention else 0) + self.model.state_bytes_per_token
        per_row = self.tokenizers.tgt.vocab_size * self.BYTES_PER_ROW_AND_TOKEN + longest_output * per_token
        return batch_size * beam * per_row

    def _check_resources(self, beam: int, batch_size: int, source_length: int, return_attention: bool,
                         beam_named: str = "beam") -> None:
        """ConfigError, before any work, for a beam wider than the vocabulary or a batch of search
        (``search_bytes``) larger than half the memory the device has free. ``beam_named`` says where
        the beam came from ("beam", an argument the command line shows as --beam, or the run's own)."""
        vocabulary = self.tokenizers.tgt.vocab_size
        if beam > vocabulary:
            shown = f"beam={beam}" if beam_named == "beam" else f"{beam_named} {beam}"
            raise ConfigError(f"{shown}: at most the target vocabulary size, {vocabulary}")
        needed = self.search_bytes(beam, batch_size, source_length, return_attention)
        available = available_memory(self.device)
        if available is not None and needed > available // 2:
            fits = max(1, available // 2 // self.search_bytes(beam, 1, source_length, return_attention))
            longest_output = int(self.search_config.max_len_a * source_length + self.search_config.max_len_b)
            raise ConfigError(
                f"beam={beam} with {batch_size} sentences at once and outputs of up to {longest_output} tokens "
                f"needs about {memory_size(needed)}, more than half of the {memory_size(available)} free on "
                f"{self.device}; use batch_size={fits} or less"
                + (", a smaller beam or a smaller search.max_len_a / max_len_b" if fits == 1 else "")
            )

    # ---- translation ---------------------------------------------------------------------------------

    def translate(
        self,
        sentences: Sequence[str],
        beam: int | None = None,
        return_attention: bool = False,
        batch_size: int | None = None,
        alpha: float | None = None,
        progress: bool = False,
        precision: str | None = None,
    ) -> Translations:
        """Translate ``sentences`` (one string each); returns one Translation per sentence, in order.

        beam: 1 = greedy search, K > 1 = beam search with K hypotheses (default: ``search_config``).
        return_attention: fill ``Translation.attention`` ([T, S] per sentence).
        batch_size: sentences decoded at once (default: ``search_config``).
        alpha: length penalty of beam search (default: ``search_config``).
        progress: show a tqdm bar (on stderr).
        precision: "fp32", "bf16" or "fp16" (matrix products under autocast; default:
            ``search_config.precision``).
        """
        if isinstance(sentences, str):
            raise TypeError("translate: sentences must be a list of strings, not one string")
        search = self.search_config
        beam_named = "beam" if beam is not None else "the run's search.beam"
        beam = search.beam if beam is None else beam
        if not is_int(beam) or beam < 1:
            raise ValueError(f"translate: beam must be an integer >= 1, got {beam!r}")
        batch_size = search.batch_size if batch_size is None else batch_size
        if not is_int(batch_size) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r}: must be an integer >= 1")
        alpha = search.alpha if alpha is None else alpha
        precision = check_precision(search.precision if precision is None else precision)
        sentences = source_texts(sentences)
        if not sentences:
            return Translations()
        src_ids = self.tokenizers.src.encode_many(sentences)
        for number, ids in enumerate(src_ids, start=1):
            if len(ids) > self.max_source_pieces:
                raise ConfigError(f"sentence {number}: {self.source_problem(sentences[number - 1])}")
        longest_source = max(len(ids) for ids in src_ids) + 1  # with EOS
        self._check_resources(beam, min(batch_size, len(sentences)), longest_source, return_attention, beam_named)

        results: list[Translation | None] = [None] * len(sentences)
        bar = tqdm(total=len(sentences), desc=f"translate (beam {beam})", unit="sent", leave=False) \
            if progress else None
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode(), autocast(precision, self.device.type):
                for batch in following(self.threads, batches_for_inference(src_ids, batch_size=batch_size)):
                    hypotheses = self._search(batch.to(self.device), beam, alpha, return_attention)
                    for index, hypothesis in zip(batch.indices, hypotheses):
                        if math.isnan(float(hypothesis.score)):
                            raise CheckpointError(
                                f"sentence {index + 1}: the model's scores are not numbers (NaN): its weights, "
                                "or its attention mechanism (attnmt check tells), are broken")
                        results[index] = self._translation(sentences[index], src_ids[index], hypothesis,
                                                           return_attention)
                    if bar is not None:
                        bar.update(len(batch.indices))
        finally:
            self.model.train(was_training)
            if bar is not None:
                bar.close()
        return Translations(results)

    def translate_n_best(self, sentence: str, beam: int, n_best: int, alpha: float | None = None) -> list[Translation]:
        """The ``n_best`` best translations of one ``sentence`` by beam search of width ``beam``
        (best first, by GNMT-normalised score), each with its attention [T, S]."""
        texts = source_texts([sentence])
        if isinstance(n_best, bool) or not isinstance(n_best, int) or not 1 <= n_best <= beam:
            raise ConfigError(f"n_best={n_best!r}: must be an integer from 1 to beam={beam}")
        src_ids = self._checked_source(texts[0])
        self._check_resources(beam, 1, len(src_ids) + 1, True)
        batch = next(iter(batches_for_inference([src_ids], batch_size=1))).to(self.device)
        search = self.search_config
        with torch.inference_mode(), autocast(search.precision, self.device.type):
            n_best_found = beam_search(self.model, batch.src, batch.src_mask, beam=beam,
                                       alpha=search.alpha if alpha is None else alpha, max_len_a=search.max_len_a,
                                       max_len_b=search.max_len_b, n_best=n_best, return_attention=True)[0]
        return [self._translation(texts[0], src_ids, hypothesis, True) for hypothesis in n_best_found]

    def translate_from_prefix(self, sentence: str, prefix: Sequence[int]) -> Translation:
        """The translation of one ``sentence`` that begins with the target pieces ``prefix`` (ids,
        without BOS and EOS), whatever the model prefers there: greedy search from its end. The
        score counts the forced pieces' log-probabilities too."""
        texts = source_texts([sentence])
        src_ids = self._checked_source(texts[0])
        self._check_resources(1, 1, len(src_ids) + 1, True)
        batch = next(iter(batches_for_inference([src_ids], batch_size=1))).to(self.device)
        search = self.search_config
        with torch.inference_mode(), autocast(search.precision, self.device.type):
            hypothesis = greedy_search(self.model, batch.src, batch.src_mask, max_len_a=search.max_len_a,
                                       max_len_b=search.max_len_b, return_attention=True, prefix=[list(prefix)])[0]
        return self._translation(texts[0], src_ids, hypothesis, True)

    def _checked_source(self, sentence: str) -> list[int]:
        """The source pieces of ``sentence``; ConfigError when there are more than the search takes."""
        src_ids = self.tokenizers.src.encode(sentence)
        if len(src_ids) > self.max_source_pieces:
            raise ConfigError(f"sentence: {self.source_problem(sentence)}")
        return src_ids

    def _search(self, batch: Batch, beam: int, alpha: float, return_attention: bool) -> list[Hypothesis]:
        """The best hypothesis of each sentence of ``batch``: greedy search for ``beam`` 1, else beam search."""
        search = self.search_config
        if beam == 1:
            return greedy_search(self.model, batch.src, batch.src_mask, max_len_a=search.max_len_a,
                                 max_len_b=search.max_len_b, return_attention=return_attention)
        n_best = beam_search(self.model, batch.src, batch.src_mask, beam=beam, alpha=alpha,
                             max_len_a=search.max_len_a, max_len_b=search.max_len_b, n_best=1,
                             return_attention=return_attention)
        return [hypotheses[0] for hypotheses in n_best]

    def _translation(self, sentence: str, src_ids: list[int], hypothesis: Hypothesis,
                     return_attention: bool) -> Translation:
        """A hypothesis as text and pieces; its output pieces end with "</s>" unless the search
        stopped at the length limit before EOS (then the attention has one row per token)."""
        tokens = [int(token) for token in hypothesis.tokens]
        out_ids = tokens + [EOS_ID]
        attention = None
        if return_attention and hypothesis.attention is not None:
            attention = np.asarray(hypothesis.attention, dtype=np.float32)
            if attention.shape[0] == len(tokens):  # stopped at the length limit, no EOS
                out_ids = tokens
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        return Translation(
            source=sentence, output=tgt_tok.decode(tokens), src_pieces=src_tok.pieces(src_ids + [EOS_ID]),
            out_pieces=tgt_tok.pieces(out_ids), attention=attention, score=float(hypothesis.score),
        )

    # ---- reading the attention of given outputs (attnmt.models.readout) ------------------------------

    #: the id that ends a source and an output, and the one of an unknown piece
    eos_id, unk_id = EOS_ID, UNK_ID

    def encode_words(self, words: Sequence[str], side: str = "source") -> list[list[int]]:
        """The piece ids of each word of ``words`` encoded alone with the ``side`` ("source" or
        "target") tokenizer, without special tokens (a word may have none)."""
        tokenizer = self.tokenizers.src if side == "source" else self.tokenizers.tgt
        return tokenizer.encode_many(list(words)) if len(words) else []

    def force_decode(
        self, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], *,
        max_tokens: int = DEFAULT_MAX_TOKENS, log_probs: bool = False, progress: bool = False,
        foils: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[tuple[int, ForcedReading]]:
        """``attnmt.models.readout.force_decode`` with this translator's model: complete rows of
        source and output ids in, ``(pair index, ForcedReading)`` out, batch by batch."""
        return force_decode(self.model, sources, outputs, max_tokens=max_tokens, log_probs=log_probs,
                            progress=progress, before_batch=None if self.threads is None else self.threads.before,
                            foils=foils)

    @property
    def attributed_model(self) -> torch.nn.Module:
        """The run's model: saliency and the attributions read it."""
        return self.model

    def target_pieces(self, ids: Sequence[int]) -> list[str]:
        """The target pieces of ``ids`` under the run's target tokenizer."""
        return [self.tokenizers.tgt.id_to_piece(int(i)) for i in ids]

    def target_ids(self, pieces: Sequence[str]) -> list[int]:
        """The ids of target ``pieces`` under the run's target tokenizer."""
        return [self.tokenizers.tgt.piece_to_id(piece) for piece in pieces]

    def piece_ids(self, translations: Sequence[Translation]) -> tuple[list[list[int]], list[list[int]]]:
        """The source and output piece ids of ``translations`` under the run's tokenizers."""
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        return ([[src_tok.piece_to_id(piece) for piece in t.src_pieces] for t in translations],
                [[tgt_tok.piece_to_id(piece) for piece in t.out_pieces] for t in translations])

    def attribute(
        self, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
        options: AttributionOptions | str = "gradient", *, max_tokens: int = DEFAULT_MAX_TOKENS, progress: bool = False,
        foils: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``attnmt.attribution.reader.attribute`` with this translator's model: complete rows of
        source and output ids in, ``(pair index, scores [T, S])`` out, batch by batch."""
        return attribute(self.model, sources, outputs, **AttributionOptions.of(options).as_keywords(),
                         max_tokens=max_tokens, progress=progress, foils=foils,
                         before_batch=None if self.threads is None else self.threads.before)


def _check_weights_on_meta(run_config: RunConfig, tokenizers: Tokenizers, state: dict, path: Path) -> None:
    """CheckpointError when the checkpoint's weights do not fit the model its config describes,
    found on the ``meta`` device, before anything is allocated: a config that asks for
    ``embed_dim: 1000000`` beside weights of 256 costs nothing (a model that cannot be built on
    meta, such as a user's attention that allocates itself, is checked after it is built)."""
    try:
        with torch.device("meta"):
            shapes = build_model(run_config.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    except Exception:  # noqa: BLE001 - the real build reports it, in its own words
        return
    check_weights_match(shapes, state, path)

