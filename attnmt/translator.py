"""Translating sentences with a trained run: text in, text (and attention weights) out.

    translator = Translator.load("runs/sdp")                # best.pt of the run (or "last")
    [t] = translator.translate(["Ein Mann fährt Fahrrad."], beam=5, return_attention=True)
    t.output        -> "A man rides a bike."
    t.attention     -> np.ndarray [T, S]: row t is the attention of output piece t over the source
    t.src_pieces    -> the S column labels, t.out_pieces -> the T row labels (both end with "</s>")

The source is encoded with the run's tokenizer, EOS appended (as in training); sentences are
decoded in batches, longest first, and returned in input order. Search is attnmt.search:
greedy for ``beam=1``, batched beam search otherwise.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from attnmt.checkpoint import load_checkpoint, load_model_state
from attnmt.config import RunConfig, SearchConfig
from attnmt.data import Tokenizers, batches_for_inference
from attnmt.device import (
    available_memory,
    memory_size,
    check_device_name,
    describe,
    enable_tf32,
    resolve_device,
)
from attnmt.errors import AttnmtError, CheckpointError, ConfigError
from attnmt.models import build_model
from attnmt.notebook import AttentionView, translation_example
from attnmt.precision import autocast, check_precision
from attnmt.runs import checkpoint_path
from attnmt.search import beam_search, greedy_search
from attnmt.special_tokens import EOS_ID
from attnmt.viewing import force_decoded_attention


@dataclass
class Translation:
    """One translated sentence.

    source       the input sentence as given
    output       the detokenized translation
    src_pieces   source subword pieces + "</s>": the columns of ``attention``
    out_pieces   output subword pieces + "</s>": the rows of ``attention``
    attention    [len(out_pieces), len(src_pieces)] float array, or None when not asked for
    score        log-probability of the output (EOS included) under the model
    """

    source: str
    output: str
    src_pieces: list[str]
    out_pieces: list[str]
    attention: np.ndarray | None
    score: float

    def _repr_html_(self) -> str:
        """In a notebook: the interactive attention viewer (attnmt.notebook), or the texts."""
        return Translations([self])._repr_html_()


class Translations(list):
    """The list ``Translator.translate`` returns; in a notebook it renders as the interactive
    attention viewer when its translations carry attention, else as a table of texts."""

    def _repr_html_(self) -> str:
        if self and all(translation.attention is not None for translation in self):
            return AttentionView([translation_example(t) for t in self], "attnmt translations")._repr_html_()
        rows = "".join(f"<tr><td>{html.escape(t.source)}</td><td>{html.escape(t.output)}</td></tr>" for t in self)
        return f"<table><tr><th>source</th><th>translation</th></tr>{rows}</table>"


class Translator:
    """A model, its tokenizers and its search settings (``SearchConfig``: the defaults of every
    ``translate`` call). ``run_config`` is the run's whole config when the translator was loaded
    from a run, ``progress`` the position its checkpoint was written at (step, epoch,
    elapsed_seconds, stop_reason; empty when unknown)."""

    def __init__(
        self,
        model,
        tokenizers: Tokenizers,
        search: SearchConfig | None = None,
        run_config: RunConfig | None = None,
        progress: dict[str, Any] | None = None,
    ):
        self.model = model
        self.tokenizers = tokenizers
        self.run_config = run_config
        self.search = search if search is not None else (run_config.search if run_config else SearchConfig())
        self.progress = dict(progress or {})

    @property
    def step(self) -> int | None:
        """The training step of the checkpoint (None when unknown)."""
        return self.progress.get("step")

    @property
    def precision(self) -> str:
        return self.search.precision

    @property
    def device(self) -> torch.device:
        """Where the model (and so every search) runs."""
        return next(self.model.parameters()).device

    def describe(self) -> str:
        """One line for stderr: the device and precision searches run on."""
        return describe(self.device, self.precision, tf32=self.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32)

    @classmethod
    def load(
        cls, run: str | Path, checkpoint: str = "best", num_threads: int | None = None, precision: str | None = None,
        device: str | None = None,
    ) -> "Translator":
        """Load ``run/best.pt`` (or ``last.pt``, or a checkpoint file given directly) onto ``device``
        (attnmt.device; ConfigError when the machine lacks it). ``precision`` / ``device`` None keep
        the run's ``search.precision`` / ``search.device``."""
        if num_threads is not None:
            if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
                raise ConfigError(f"threads must be an integer >= 1, got {num_threads!r}")
            torch.set_num_threads(num_threads)
        path = checkpoint_path(run, checkpoint)
        state = load_checkpoint(path)
        try:
            run_config = RunConfig.from_dict(state["config"])
            tokenizers = Tokenizers.from_state_dict(state["tokenizers"])
            model = build_model(run_config.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
        except AttnmtError as error:
            raise CheckpointError(f"{path}: cannot rebuild the model it holds: {error}") from None
        load_model_state(model, state, path)
        search = replace(
            run_config.search,
            precision=check_precision(precision if precision is not None else run_config.search.precision),
            device=check_device_name(device if device is not None else run_config.search.device),
        )
        target = resolve_device(search.device)
        enable_tf32(target)
        model.to(target).eval()
        return cls(model, tokenizers, search, run_config, progress=state.get("progress"))

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
        search = self.search
        longest_output = int(search.max_len_a * source_length + search.max_len_b) + 1
        per_token = 8 + (4 * source_length if return_attention else 0) + self.model.state_bytes_per_token
        per_row = self.tokenizers.tgt.vocab_size * self.BYTES_PER_ROW_AND_TOKEN + longest_output * per_token
        return batch_size * beam * per_row

    def _check_resources(self, beam: int, batch_size: int, source_length: int, return_attention: bool) -> None:
        """ConfigError, before any work, for a beam wider than the vocabulary or a batch of search
        (``search_bytes``) larger than half the memory the device has free."""
        vocabulary = self.tokenizers.tgt.vocab_size
        if beam > vocabulary:
            raise ConfigError(f"beam {beam}: at most the target vocabulary size, {vocabulary}")
        needed = self.search_bytes(beam, batch_size, source_length, return_attention)
        available = available_memory(self.device)
        if available is not None and needed > available // 2:
            fits = max(1, available // 2 // self.search_bytes(beam, 1, source_length, return_attention))
            longest_output = int(self.search.max_len_a * source_length + self.search.max_len_b)
            raise ConfigError(
                f"beam {beam} with {batch_size} sentences at once and outputs of up to {longest_output} tokens "
                f"needs about {memory_size(needed)}, more than half of the {memory_size(available)} free on "
                f"{self.device}; use --batch-size {fits} or less"
                + (", a smaller --beam or a smaller search.max_len_a / max_len_b" if fits == 1 else "")
            )

    def layer_head_attention(self, translation: Translation) -> np.ndarray:
        """Every decoder layer's and head's cross-attention of ``translation``'s output, force-decoded
        (``attnmt.viewing.force_decoded_attention``): [L, h, T, S] float64."""
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        return force_decoded_attention(
            self.model,
            [src_tok.piece_to_id(piece) for piece in translation.src_pieces],
            [tgt_tok.piece_to_id(piece) for piece in translation.out_pieces],
        )

    def translate(
        self,
        sentences: Sequence[str],
        beam: int | None = None,
        return_attention: bool = False,
        batch_size: int | None = None,
        alpha: float | None = None,
        progress: bool = False,
        precision: str | None = None,
    ) -> list[Translation]:
        """Translate ``sentences`` (one string each); returns one Translation per sentence, in order.

        beam: 1 = greedy search, K > 1 = beam search with K hypotheses (default: the run's config).
        return_attention: fill ``Translation.attention`` ([T, S] per sentence).
        batch_size: sentences decoded at once (default: the run's config).
        alpha: length penalty of beam search (default: the run's config).
        progress: show a tqdm bar (on stderr).
        precision: "fp32" or "bf16" (matrix products under bfloat16 autocast; default:
            ``self.search.precision``).
        """
        if isinstance(sentences, str):
            raise TypeError("translate: sentences must be a list of strings, not one string")
        search = self.search
        beam = search.beam if beam is None else beam
        if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
            raise ValueError(f"translate: beam must be an integer >= 1, got {beam!r}")
        batch_size = search.batch_size if batch_size is None else batch_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch size must be an integer >= 1, got {batch_size!r}")
        alpha = search.alpha if alpha is None else alpha
        precision = check_precision(search.precision if precision is None else precision)
        sentences = [str(sentence) for sentence in sentences]
        if not sentences:
            return Translations()
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        src_ids = src_tok.encode_many(sentences)
        for number, ids in enumerate(src_ids, start=1):
            if len(ids) > self.max_source_pieces:
                raise ConfigError(f"sentence {number}: {self.source_problem(sentences[number - 1])}")
        longest_source = max(len(ids) for ids in src_ids) + 1  # with EOS
        self._check_resources(beam, min(batch_size, len(sentences)), longest_source, return_attention)
        batches = batches_for_inference(src_ids, batch_size=batch_size)
        results: list[Translation | None] = [None] * len(sentences)

        bar = None
        if progress:
            bar = tqdm(total=len(sentences), desc=f"translate (beam {beam})", unit="sent", leave=False)
        was_training = self.model.training
        self.model.eval()
        try:
            device = self.device
            with torch.inference_mode(), autocast(precision, device.type):
                for batch in batches:
                    batch = batch.to(device)
                    if beam == 1:
                        hypotheses = greedy_search(
                            self.model, batch.src, batch.src_mask, max_len_a=search.max_len_a,
                            max_len_b=search.max_len_b, return_attention=return_attention,
                        )
                    else:
                        hypotheses = [
                            n_best[0]
                            for n_best in beam_search(
                                self.model, batch.src, batch.src_mask, beam_size=beam, alpha=alpha,
                                max_len_a=search.max_len_a, max_len_b=search.max_len_b, n_best=1,
                                return_attention=return_attention,
                            )
                        ]
                    for row, (index, hypothesis) in enumerate(zip(batch.indices, hypotheses)):
                        tokens = [int(t) for t in hypothesis.tokens]
                        out_ids = tokens + [EOS_ID]
                        attention = None
                        if return_attention and hypothesis.attention is not None:
                            attention = np.asarray(hypothesis.attention, dtype=np.float32)
                            if attention.shape[0] == len(tokens):  # stopped at the length limit, no EOS
                                out_ids = tokens
                        results[index] = Translation(
                            source=sentences[index],
                            output=tgt_tok.decode(tokens),
                            src_pieces=src_tok.pieces(src_ids[index] + [EOS_ID]),
                            out_pieces=tgt_tok.pieces(out_ids),
                            attention=attention,
                            score=float(hypothesis.score),
                        )
                    if bar is not None:
                        bar.update(len(batch.indices))
        finally:
            self.model.train(was_training)
            if bar is not None:
                bar.close()
        return Translations(results)
