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

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attnmt.errors import CheckpointError
from attnmt.special_tokens import EOS_ID

CHECKPOINT_NAMES = {"best": "best.pt", "last": "last.pt"}


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


def checkpoint_path(run: str | Path, checkpoint: str = "best") -> Path:
    """The checkpoint file of a run folder (``best``/``last``), or ``run`` itself when it is a file."""
    run = Path(run)
    if run.is_file():
        return run
    if not run.exists():
        raise CheckpointError(f"{run}: no such run folder or checkpoint file")
    if checkpoint in CHECKPOINT_NAMES:
        path = run / CHECKPOINT_NAMES[checkpoint]
    else:
        path = run / checkpoint
    if not path.is_file():
        other = [name for name, file in CHECKPOINT_NAMES.items() if (run / file).is_file() and name != checkpoint]
        hint = f"; this run has {' and '.join(other)} (use --checkpoint {other[0]})" if other else \
            "; the run has no checkpoint yet"
        raise CheckpointError(f"{path}: checkpoint not found{hint}")
    return path


class Translator:
    """A model, its tokenizers and decoding defaults (from the run's ``search`` config)."""

    def __init__(
        self,
        model,
        tokenizers,
        config: dict[str, Any] | None = None,
        max_len_a: float | None = None,
        max_len_b: int | None = None,
        alpha: float | None = None,
        checkpoint: dict[str, Any] | None = None,
        precision: str | None = None,
    ):
        search = dict((config or {}).get("search") or {})
        self.model = model
        self.tokenizers = tokenizers
        self.config = config or {}
        self.max_len_a = float(max_len_a if max_len_a is not None else search.get("max_len_a", 1.5))
        self.max_len_b = int(max_len_b if max_len_b is not None else search.get("max_len_b", 10))
        self.alpha = float(alpha if alpha is not None else search.get("alpha", 0.6))
        self.default_beam = int(search.get("beam", 1))
        self.default_batch_size = int(search.get("batch_size", 64))
        self.precision = _check_precision(precision if precision is not None else search.get("precision", "fp32"))
        self.checkpoint_info = {
            key: checkpoint.get(key) for key in ("progress", "attnmt_version", "model_type")
        } if checkpoint else {}

    @classmethod
    def load(
        cls, run: str | Path, checkpoint: str = "best", num_threads: int | None = None, precision: str | None = None
    ) -> "Translator":
        """Load ``run/best.pt`` (or ``last.pt``, or a checkpoint file given directly); ``precision``
        None keeps the run's ``search.precision``."""
        import torch

        from attnmt.checkpoint import load_checkpoint, load_model_state
        from attnmt.data import Tokenizers
        from attnmt.errors import AttnmtError
        from attnmt.models import build_model

        if num_threads:
            torch.set_num_threads(num_threads)
        path = checkpoint_path(run, checkpoint)
        state = load_checkpoint(path)
        try:
            tokenizers = Tokenizers.from_state_dict(state["tokenizers"])
            model = build_model(dict(state["config"]["model"]), tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
        except AttnmtError as error:
            raise CheckpointError(f"{path}: cannot rebuild the model it holds: {error}") from None
        load_model_state(model, state, path)
        model.eval()
        return cls(model, tokenizers, config=state["config"], checkpoint=state, precision=precision)

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
        precision: "fp32" or "bf16" (matrix products under CPU bfloat16 autocast; default:
            ``self.precision``, from the run's ``search.precision``).
        """
        import torch

        from attnmt.data import batches_for_inference
        from attnmt.search import beam_search, greedy_search

        if isinstance(sentences, str):
            raise TypeError("translate: sentences must be a list of strings, not one string")
        beam = self.default_beam if beam is None else beam
        if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
            raise ValueError(f"translate: beam must be an integer >= 1, got {beam!r}")
        batch_size = batch_size or self.default_batch_size
        alpha = self.alpha if alpha is None else alpha
        precision = _check_precision(self.precision if precision is None else precision)
        sentences = [str(sentence) for sentence in sentences]
        if not sentences:
            return []
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        src_ids = src_tok.encode_many(sentences)
        batches = batches_for_inference(src_ids, batch_size=batch_size)
        results: list[Translation | None] = [None] * len(sentences)

        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(sentences), desc=f"translate (beam {beam})", unit="sent", leave=False)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                for batch in batches:
                    if beam == 1:
                        hypotheses = greedy_search(
                            self.model, batch.src, batch.src_mask, max_len_a=self.max_len_a,
                            max_len_b=self.max_len_b, return_attention=return_attention,
                        )
                    else:
                        hypotheses = [
                            n_best[0]
                            for n_best in beam_search(
                                self.model, batch.src, batch.src_mask, beam_size=beam, alpha=alpha,
                                max_len_a=self.max_len_a, max_len_b=self.max_len_b, n_best=1,
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
        return results  # type: ignore[return-value]


def _check_precision(precision: str) -> str:
    from attnmt.config import PRECISIONS

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision
