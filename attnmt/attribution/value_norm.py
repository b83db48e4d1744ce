"""Value norms (Kobayashi et al., 2020, "Attention is not only a weight").

An attention's output is a weighted sum of transformed vectors, Σ_s α_ts f(v_s); the size of what
token s adds is ‖α_ts f(v_s)‖₂, not α_ts alone. f is what the mechanism applies to a value before
the weighted sum, and, for multi-head attention, each head's share of the output projection W^O
(the columns of W^O that multiply head i), so that over the heads::

    a[t, s] = ‖ Σ_i α^i_ts (v_s W^V_i + b^V_i) W^O_iᵀ ‖₂          (Transformer: the mean over the
                                                                 decoder layers of this norm)
    a[t, s] = α_ts ‖v_s‖₂                                       (an RNN mechanism with one head:
                                                                 v_s the values it averages)

The output projection's bias b^O belongs to no token and is left out. The decoder layers after the
context (an RNN's W_c, a Transformer's later layers) are not part of f. It does not depend on the
output being explained: a foil changes nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from attnmt.attention.mechanisms import Attention, NoAttention
from attnmt.attention.user_adapter import UserAttention
from attnmt.attribution.forced import Request
from attnmt.attribution.trace import TransformerTrace, is_transformer, trace_transformer
from attnmt.models.readout import ForcedBatch

__all__ = ["applies", "compute"]


def applies(model: Any, name: str) -> str | None:
    """attnmt's Transformer, or an RNN whose mechanism shows the values it averages."""
    if is_transformer(model):
        return None
    attention = getattr(model, "attention", None)
    if not isinstance(attention, Attention):
        return "value_norm needs attnmt's RNN or Transformer, whose attention values it reads"
    if isinstance(attention, NoAttention):
        return "value_norm: this model's mechanism is 'none', which attends to nothing"
    if isinstance(attention, UserAttention) and attention.form == "forward":
        return "value_norm: this user mechanism computes its own context (forward form) and does not expose its values"
    return None


def compute(name: str, model: Any, batch: ForcedBatch, request: Request) -> torch.Tensor:
    """a[t, s] of the module docstring for one batch: [B, T, S] float64 on the CPU."""
    with torch.inference_mode():
        if is_transformer(model):
            scores = _transformer_value_norm(trace_transformer(model, batch.src, batch.src_mask, batch.tgt_in))
        else:
            scores = _rnn_value_norm(model, batch)
    return scores.double().cpu() * batch.src_mask.cpu()[:, None, :]


def _transformer_value_norm(trace: TransformerTrace) -> torch.Tensor:
    """The mean over decoder layers of ‖Σ_h α^h_ts f^h(X_s)‖₂: [B, T, S]."""
    norms = [torch.linalg.vector_norm(torch.einsum("bhts,bhsd->btsd", block.weights, block.values), dim=-1)
             for block in trace.decoder_cross]
    return torch.stack(norms).mean(dim=0)


def _rnn_value_norm(model: Any, batch: ForcedBatch) -> torch.Tensor:
    """α_ts ‖v_s‖₂, or for ``multihead`` ‖Σ_i α^i_ts v_{i,s} W^O_iᵀ‖₂: [B, T, S]."""
    _, weights = model(batch.src, batch.src_mask, batch.tgt_in, return_attention="heads")  # [B, 1, h, T, S]
    weights = weights[:, 0]
    values = model.encode(batch.src, batch.src_mask).prepared.values
    attention = model.attention
    if values.dim() == 3:  # one head: the values the context averages, [B, S, D]
        return weights[:, 0] * torch.linalg.vector_norm(values, dim=-1).unsqueeze(1)
    transformed = attention.head_outputs(values)  # multihead: [B, h, S, d_h] -> [B, h, S, D]
    return torch.linalg.vector_norm(torch.einsum("bhts,bhse->btse", weights, transformed), dim=-1)
