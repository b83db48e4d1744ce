"""Erasure, leave one out (Li et al., 2016, "Understanding Neural Networks through Representation
Erasure")::

    a[t, s] = f_t(x) − f_t(x \\ s)

f_t the score of output token t (``attnmt.attribution.forced``: log p(y_t | y_<t, x), or its
contrast with a foil), x \\ s the source with token s replaced by the unknown piece. One source row
per token of each pair, plus the whole source: S + 1 forced decodes of the pair.
"""

from __future__ import annotations

from typing import Any

import torch

from attnmt.attribution.forced import Request, erased_rows, variants_log_probs
from attnmt.models.readout import ForcedBatch

__all__ = ["applies", "compute"]


def applies(model: Any, name: str) -> str | None:
    """Every model: it reads only the scores of outputs."""
    return None


def compute(name: str, model: Any, batch: ForcedBatch, request: Request) -> torch.Tensor:
    """a[t, s] of the module docstring for one batch: [B, T, S] float64 on the CPU, zero at padding."""
    scores = torch.zeros(len(batch.pairs), batch.tgt_in.shape[1], batch.src.shape[1], dtype=torch.float64)
    unk = request.specials.unk
    foils = request.foils_of(batch.pairs)
    for row, k in enumerate(batch.pairs):
        source, output = request.sources[k], request.outputs[k]
        variants = [list(source)] + erased_rows(source, [[s] for s in range(len(source))], unk)
        log_probs = variants_log_probs(model, source, output, variants, request.specials, request.max_tokens,
                                       None if foils is None else foils[row])  # [1+S, T]
        scores[row, : len(output), : len(source)] = (log_probs[0:1] - log_probs[1:]).T
    return scores
