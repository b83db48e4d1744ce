"""What the attributions share: the pairs they are asked about (``Request``), the foils of a
contrastive explanation, and log-probabilities of given outputs under erased sources.

Removing source token s means replacing it by the unknown piece: every model reads it (an RNN's
encoder reads every token, so a mask over attention could not remove a word from it), the positions
of the other tokens stay where they were, and a Hugging Face model has an unknown piece too. The
erasure attribution and the faithfulness measures (``attnmt.evaluation.faithfulness``) remove words
this way.

The score an output-dependent method explains at position t is, without a foil and with one::

    f_t = log p(y_t | y_<t, x)                         f_t = log p(y_t | y_<t, x) − log p(y′_t | y_<t, x)

Foils come per pair as a row as long as its output, ``NO_FOIL`` where position t has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from attnmt.attribution.methods import AttributionOptions
from attnmt.models.common import log_probabilities
from attnmt.models.readout import ATTNMT_SPECIALS, DEFAULT_MAX_TOKENS, SpecialIds, padded_rows

__all__ = ["NO_FOIL", "Request", "batch_foils", "erased_rows", "explained_scores", "target_log_probs",
           "variants_log_probs"]

#: a position without a foil: its score is log p(y_t) itself
NO_FOIL = -1


@dataclass(frozen=True)
class Request:
    """What an attribution is asked: the pairs' complete rows of ids (``sources[k]``,
    ``outputs[k]``), the options, the special ids, the token budget, and for each pair its foils
    (a row as long as its output, ``NO_FOIL`` where there is none) or None for no contrast."""

    sources: Sequence[Sequence[int]]
    outputs: Sequence[Sequence[int]]
    options: AttributionOptions = AttributionOptions()
    specials: SpecialIds = ATTNMT_SPECIALS
    max_tokens: int = DEFAULT_MAX_TOKENS
    foils: Sequence[Sequence[int]] | None = None

    def foils_of(self, pairs: Sequence[int]) -> list[list[int]] | None:
        """The foils of the pairs ``pairs`` (None without a contrast)."""
        return None if self.foils is None else [list(self.foils[k]) for k in pairs]


def batch_foils(foils: Sequence[Sequence[int]] | None, width: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per-pair foil rows -> (ids [B, T] long, with 0 where there is none; has [B, T] bool), or None."""
    if foils is None:
        return None
    rows = padded_rows(foils, width, NO_FOIL).to(device)
    has = rows != NO_FOIL
    return rows.clamp_min(0), has


def explained_scores(log_probs: torch.Tensor, targets: torch.Tensor,
                     foils: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """f_t of the module docstring from log-probabilities [N, T, V]: [N, T]."""
    scores = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if foils is None:
        return scores
    ids, has = foils
    return scores - log_probs.gather(-1, ids.unsqueeze(-1)).squeeze(-1) * has


def target_log_probs(model: Any, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                     targets: torch.Tensor, max_tokens: int,
                     foils: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """f_t (module docstring) for every row n and position t: [N, T] float64 on the CPU, in chunks
    of at most ``max_tokens`` padded tokens. Unlike ``readout.force_decode`` (float32 readings) it
    keeps a float64 model's precision, which the erasure's float64 test compares."""
    rows = src.shape[0]
    chunk = max(1, max_tokens // max(1, src.shape[1], tgt_in.shape[1]))
    result = torch.zeros(rows, tgt_in.shape[1], dtype=torch.float64)
    with torch.inference_mode():
        for start in range(0, rows, chunk):
            part = slice(start, min(rows, start + chunk))
            logits, _ = model(src[part], src_mask[part], tgt_in[part], return_attention="heads")
            part_foils = None if foils is None else (foils[0][part], foils[1][part])
            result[part] = explained_scores(log_probabilities(logits), targets[part], part_foils).double().cpu()
    return result


def erased_rows(source: Sequence[int], erased: Sequence[Sequence[int]], unk: int) -> list[list[int]]:
    """``source`` once per set of positions in ``erased``, those positions replaced by ``unk``."""
    rows = []
    for positions in erased:
        row = list(source)
        for position in positions:
            row[position] = unk
        rows.append(row)
    return rows


def variants_log_probs(model: Any, source: Sequence[int], output: Sequence[int], variants: list[list[int]],
                       specials: SpecialIds, max_tokens: int, foils: Sequence[int] | None = None) -> torch.Tensor:
    """f_t for each variant of one pair's source: [V, T] float64 (``foils``: the pair's row)."""
    device = next(model.parameters()).device
    count, start = len(variants), specials.start
    src = padded_rows(variants, len(source), specials.pad).to(device)
    src_mask = torch.ones(count, len(source), dtype=torch.bool, device=device)
    tgt_in = torch.tensor([[start, *output[:-1]]] * count, dtype=torch.long, device=device)
    targets = torch.tensor([list(output)] * count, dtype=torch.long, device=device)
    row_foils = None if foils is None else batch_foils([list(foils)] * count, len(output), device)
    return target_log_probs(model, src, src_mask, tgt_in, targets, max_tokens, row_foils)
