"""Reading a model's attention while it reads a given output: the one read-out of attnmt.

To see where a translator looks when it produces an output ``y`` for a source ``x``, the decoder is
*force-decoded*: it reads ``y`` under teacher forcing instead of searching, and at every output
position the cross-attention over the source is read off. Nothing is searched, so the weights
describe the pair as given; for the output of a search they are the weights the search saw, step
by step, since the decoder reads exactly the tokens it produced.

For one pair, with complete rows of token ids (the special tokens included)::

    source          x_1 … x_S                what the encoder reads (attnmt's sources end with EOS)
    output          y_1 … y_T                what the decoder predicts (usually ending with EOS)
    decoder input   start, y_1 … y_{T−1}     teacher forcing

    weights    [L, h, T, S]   row t: the attention over the source of the step that predicts y_t,
                              in each of the L decoder layers that attend over the source, per head
    log_probs  [T]            log p(y_t | y_<t, x)   (with ``log_probs=True``)
    foil_log_probs [T]        log p(y′_t | y_<t, x)  (with ``foils``: a foil y′_t per position,
                              read under the same prefix; contrastive explanations)

Pairs are read in batches under a token budget, B · max(S, T) ≤ ``max_tokens``, longest first,
padded with ``specials.pad``. The model sees the source mask and its decoder is causal, so a pair's
weights do not depend on the other pairs of its batch.

The model keeps attnmt's contract (``attnmt.models``)::

    logits [B, T, V], weights [B, L, h, T, S] = model(src [B, S], src_mask [B, S], tgt_in [B, T],
                                                      return_attention="heads")

and has ``parameters()`` on one device. A Hugging Face model fits it through
``attnmt.decoding.hf.HFReadout``. The viewer (a translation's weights per layer and head), the
aligner (``attnmt.alignment.translator_attention``) and Hugging Face translators all read here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from attnmt.data.batching import longest_first
from attnmt.data.special_tokens import BOS_ID, PAD_ID, UNK_ID

__all__ = ["ATTNMT_SPECIALS", "DEFAULT_MAX_TOKENS", "ForcedBatch", "ForcedReading", "SpecialIds", "batch_plan",
           "batches_in_eval_mode", "force_decode", "forced_batch", "padded_rows"]

#: bound on B · max(S, T) padded tokens per forward call (as ``data.max_tokens`` in training)
DEFAULT_MAX_TOKENS = 4000


@dataclass(frozen=True)
class SpecialIds:
    """The ids the read-out adds: ``pad`` fills the rows of a batch, ``start`` is the decoder's
    first input (attnmt's BOS; a Hugging Face model's ``decoder_start_token_id``), ``unk`` is what
    a removed source token becomes (erasure and the faithfulness measures)."""

    pad: int
    start: int
    unk: int = UNK_ID


ATTNMT_SPECIALS = SpecialIds(pad=PAD_ID, start=BOS_ID, unk=UNK_ID)


@dataclass
class ForcedReading:
    """What force-decoding one pair read (module docstring): ``weights`` [L, h, T, S] float32 and,
    when asked for, ``log_probs`` [T] float32 and ``foil_log_probs`` [T] float32."""

    weights: np.ndarray
    log_probs: np.ndarray | None = None
    foil_log_probs: np.ndarray | None = None


def padded_rows(rows: Sequence[Sequence[int]], width: int, pad: int) -> torch.Tensor:
    """Rows of token ids as one [len(rows), width] long tensor, each filled up with ``pad``."""
    return torch.tensor([list(row) + [pad] * (width - len(row)) for row in rows], dtype=torch.long)


@dataclass
class ForcedBatch:
    """One batch of pairs as the model reads them under force decoding, on the model's device:
    ``src`` [B, S] and ``src_mask`` [B, S] (True = a real token), ``tgt_in`` [B, T] (the start
    symbol, then the output without its last token) and ``targets`` [B, T] (the output), padded."""

    pairs: list[int]
    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    targets: torch.Tensor


def batch_plan(sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], max_tokens: int,
               caller: str) -> list[list[int]]:
    """The pair indices of each batch: B · max(S, T) ≤ ``max_tokens`` padded tokens, longest first.
    ValueError (naming ``caller``) when the lists differ in length or a row is empty."""
    if len(sources) != len(outputs):
        raise ValueError(f"{caller}: {len(sources)} sources but {len(outputs)} outputs")
    for name, rows in (("source", sources), ("output", outputs)):
        if any(len(row) == 0 for row in rows):
            raise ValueError(f"{caller}: every {name} needs at least one token (its EOS)")
    widths = [max(len(source), len(output)) for source, output in zip(sources, outputs)]
    return [list(pairs) for pairs in longest_first(widths, max_tokens=max_tokens)]


def forced_batch(pairs: Sequence[int], sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
                 specials: SpecialIds, device: torch.device) -> ForcedBatch:
    """The pairs ``pairs`` (indices into ``sources`` and ``outputs``) as one padded ForcedBatch."""
    src_lengths = torch.tensor([len(sources[k]) for k in pairs])
    src = padded_rows([sources[k] for k in pairs], int(src_lengths.max()), specials.pad)
    out_len = max(len(outputs[k]) for k in pairs)
    return ForcedBatch(
        pairs=list(pairs),
        src=src.to(device),
        src_mask=(torch.arange(src.shape[1]).unsqueeze(0) < src_lengths.unsqueeze(1)).to(device),
        tgt_in=padded_rows([[specials.start, *outputs[k][:-1]] for k in pairs], out_len, specials.pad).to(device),
        targets=padded_rows([outputs[k] for k in pairs], out_len, specials.pad).to(device),
    )


def batches_in_eval_mode(model: Any, plan: Sequence[Sequence[int]], sources: Sequence[Sequence[int]],
                         outputs: Sequence[Sequence[int]], specials: SpecialIds, device: torch.device,
                         progress: str | None = None) -> Iterator[ForcedBatch]:
    """The batches of ``plan``, each built when it is reached, with the model in eval mode: its mode
    comes back when the loop ends, also when the caller stops early. ``progress``: the label of a
    tqdm bar of pairs (None: no bar)."""
    bar = tqdm(total=len(sources), desc=progress, unit=" pairs", leave=False, mininterval=0.5) \
        if progress is not None else None
    was_training = model.training
    model.eval()
    try:
        for pairs in plan:
            yield forced_batch(pairs, sources, outputs, specials, device)
            if bar is not None:
                bar.update(len(pairs))
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()


def force_decode(  # noqa: PLR0913 (the pairs, then keyword-only settings)
    model: Any,
    sources: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    log_probs: bool = False,
    specials: SpecialIds = ATTNMT_SPECIALS,
    progress: bool = False,
    before_batch: Callable[[], object] | None = None,
    foils: Sequence[Sequence[int]] | None = None,
) -> Iterator[tuple[int, ForcedReading]]:
    """``(k, reading)`` for every pair ``(sources[k], outputs[k])``, batch by batch (longest first).

    sources, outputs: complete rows of token ids (module docstring); every row needs at least one
    token. ``foils``: for each pair a row of ids as long as its output, whose log-probabilities at
    each position are read too (``foil_log_probs``). The model runs in eval mode under
    ``torch.inference_mode`` and gets its mode back. ``before_batch`` is called before each batch
    runs (a translator's thread chooser).
    """
    device = next(model.parameters()).device
    plan = batch_plan(sources, outputs, max_tokens, caller="force_decode")
    for batch in batches_in_eval_mode(model, plan, sources, outputs, specials, device,
                                      "force-decoding" if progress else None):
        if before_batch is not None:
            before_batch()
        with torch.inference_mode():
            logits, weights = model(batch.src, batch.src_mask, batch.tgt_in, return_attention="heads")
            every_head = weights.float().cpu().numpy()  # [B, L, h, T, S]
            scores: np.ndarray | None = None
            foil_scores: np.ndarray | None = None
            if log_probs or foils is not None:
                log_softmax = torch.log_softmax(logits.float(), dim=-1)
                scores = log_softmax.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1).cpu().numpy()  # [B, T]
                if foils is not None:
                    foil_rows = padded_rows([foils[k] for k in batch.pairs], batch.targets.shape[1], specials.pad)
                    gathered = log_softmax.gather(-1, foil_rows.to(logits.device).unsqueeze(-1)).squeeze(-1)
                    foil_scores = gathered.cpu().numpy()
        for row, k in enumerate(batch.pairs):
            length, source_length = len(outputs[k]), len(sources[k])
            yield k, ForcedReading(
                weights=np.ascontiguousarray(every_head[row, :, :, :length, :source_length]),
                log_probs=None if scores is None or not log_probs else scores[row, :length].copy(),
                foil_log_probs=None if foil_scores is None else foil_scores[row, :length].copy(),
            )
