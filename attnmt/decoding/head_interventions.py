"""Reaching into one head of a Transformer's decoder: its weights at one step, or at every step.

The Transformer's decoder has two attentions per layer whose queries are the target positions:
cross-attention (over the source) and masked self-attention (over the target so far). One head
``i`` of either computes, for the query at target position t (Vaswani et al., 2017),

    e_t,l = q_t,i · k_l,i / √d_head        (or a user's score)
    α_t,i = softmax over the keys that position t may attend to (e_t)
    head_i(t) = Σ_l α_t,l v_l,i            [d_head]
    output(t) = W^O [head_1(t); …; head_h(t)] + b^O

``changed_head`` puts other weights w in place of α_t,i for the query positions it is asked about
and adds the difference this makes through head i's share of W^O:

    output'(t) = output(t) + W^O_i (Σ_l w_l v_l,i − Σ_l α_t,l v_l,i)

so every other head and every other position keeps its output (inside the block the layer
computes its weights explicitly, not in PyTorch's fused kernel, which agrees to rounding). It
reads the target position of each query from the decoder (``Transformer._decode``'s ``start``), so
it acts the same in teacher forcing and in step-by-step search, where step t's query is position t.

``attnmt.decoding.interventions`` builds the pin, the replaced attention and the watched step on it
for a ``Head`` (``attnmt.models.head_gates``) of part ``cross`` or ``decoder_self``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from attnmt.errors import ConfigError
from attnmt.models.head_gates import Head, attention_slots

__all__ = ["HeadCall", "HeadChange", "changed_head", "decoder_attention", "head_scores", "is_transformer"]


@dataclass
class HeadCall:
    """One call of a head, as ``changed_head`` shows it to its ``change``: the target ``positions``
    of its Lq queries, its own ``weights`` α [B, Lq, Lk], the keys each query may attend to
    (``allowed`` [B, Lq, Lk] bool), and its ``queries`` [B, Lq, d_head], ``keys`` and ``values``
    [B, Lk, d_head]."""

    positions: list[int]
    weights: torch.Tensor
    allowed: torch.Tensor
    queries: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor


#: what may change a head: its call -> new weights [B, Lq, Lk], or None to leave it as it is
HeadChange = Callable[[HeadCall], "torch.Tensor | None"]

#: the parts of a Transformer whose queries are target positions
DECODER_PARTS = ("cross", "decoder_self")


def is_transformer(model: Any) -> bool:
    """Whether ``model`` is attnmt's Transformer (it has encoder and decoder layers)."""
    return hasattr(model, "encoder_layers") and hasattr(model, "decoder_layers") and hasattr(model, "_decode")


def decoder_attention(model: Any, head: Head) -> Any:
    """The ``MultiHeadAttention`` that holds ``head`` (part ``cross`` or ``decoder_self``);
    ConfigError naming the heads there are."""
    if head.part not in DECODER_PARTS:
        raise ConfigError(f"{head.label()}: only a head whose queries are target positions (cross or "
                          "decoder_self) can be pinned, stepped through or replaced")
    slots = {(slot.part, slot.layer): slot for slot in attention_slots(model)}
    slot = slots.get((head.part, head.layer))
    if slot is None or not 0 <= head.head < slot.heads:
        have = ", ".join(f"{part}:{layer + 1}:1-{s.heads}" for (part, layer), s in slots.items()
                         if part in DECODER_PARTS)
        raise ConfigError(f"{head.label()}: no such head in this model (it has {have})")
    layer = model.decoder_layers[head.layer]
    return layer.cross_attention if head.part == "cross" else layer.self_attention


def _allowed(mask: torch.Tensor | None, shape: tuple[int, int, int]) -> torch.Tensor:
    """The keys each query may attend to, [B, Lq, Lk], from the attention's mask [B|1, 1, Lq|1, Lk]."""
    if mask is None:
        return torch.ones(shape, dtype=torch.bool)
    return mask[:, 0].expand(shape)


@contextmanager
def changed_head(model: Any, head: Head, change: HeadChange) -> Iterator[None]:
    """Within the block, ``change`` may give head ``head`` other weights (module docstring)."""
    attention = decoder_attention(model, head)
    index = head.head
    original_attend, original_decode = attention.attend, model._decode
    start = [0]

    def decode(tokens: torch.Tensor, begin: int, *rest: Any, **options: Any) -> Any:
        start[0] = begin
        return original_decode(tokens, begin, *rest, **options)

    def attend(q_heads: torch.Tensor, k_heads: torch.Tensor, v_heads: torch.Tensor,
               mask: torch.Tensor | None = None, need_weights: bool = False) -> Any:
        batch, _, queries, _ = q_heads.shape
        keys = k_heads.shape[2]
        positions = list(range(start[0], start[0] + queries))
        output, weights = original_attend(q_heads, k_heads, v_heads, mask, need_weights=True)
        assert weights is not None
        own = weights[:, index]  # [B, Lq, Lk]
        allowed = _allowed(mask, (batch, queries, keys)).to(own.device)
        values = v_heads[:, index]  # [B, Lk, d_head]
        new = change(HeadCall(positions, own, allowed, q_heads[:, index], k_heads[:, index], values))
        if new is None:
            return output, weights if need_weights else None
        new = new.to(dtype=own.dtype, device=own.device)
        difference = torch.matmul((new - own).to(values.dtype), values)  # [B, Lq, d_head]
        share = attention.out_proj.weight[:, index * attention.head_dim:(index + 1) * attention.head_dim]
        output = output + torch.matmul(difference.to(share.dtype), share.t()).to(output.dtype)
        if need_weights:
            weights = weights.clone()
            weights[:, index] = new
        return output, weights if need_weights else None

    attention.attend = attend
    model._decode = decode
    try:
        yield
    finally:
        del attention.attend
        del model._decode


def head_scores(attention: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
    """The scores q·kᵀ/√d_head of one head's queries q [B, Lq, d_head] over keys k [B, Lk, d_head]:
    [B, Lq, Lk]; None for a layer that scores with a user's class (its scores may depend on the
    other heads, which one head's call does not show)."""
    if attention.score is not None:
        return None
    return torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
