"""Looking inside, and reaching into, one decoding step of an RNN translator's attention.

Two questions a student asks first, answered on the model itself (``attnmt serve`` asks them):

- **What does the mechanism compute at step t?** ``watched_step`` records, at decoding step t, the
  query q_t, the scores e_t,s = score(q_t, h̄_s) (for a mechanism with separate scores, as every
  built-in single-head one has), the weights α_t = normalize(e_t) and the context
  c_t = Σ_s α_t,s v_s, exactly as the mechanism computes them in the search.
- **Does the attention cause the word?** ``pinned_attention`` replaces the weights at step t by
  given ones (all of it on one source word, say): c_t = Σ_s w_s v_s, with the mechanism's own
  values v_s; every other step attends as usual. Decoding on from there shows what the model
  then writes.
- **Would other weights do as well?** ``replaced_attention`` replaces the weights of every step
  by uniform ones or by the model's own permuted over the source, and decoding shows the
  translation the model then writes.

All three hold for the RNN's single-query mechanisms with one head (``Attention`` with
``num_heads == 1``), and for each head of a Transformer's decoder, cross-attention or masked
self-attention, named by ``head`` (``attnmt.models.head_gates.Head``; what changes inside the layer
is in ``attnmt.decoding.head_interventions``). The RNN asks its mechanism through
``attention.attend(query, prepared, step)``; within the block that method is wrapped on the
instance, and restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from attnmt.attention.mechanisms import Attention, PreparedKeys
from attnmt.attention.user_adapter import UserAttention
from attnmt.decoding.head_interventions import HeadCall, changed_head, decoder_attention, head_scores, is_transformer
from attnmt.errors import ConfigError
from attnmt.models.head_gates import Head

__all__ = ["REPLACEMENTS", "StepRecord", "can_intervene", "needs_head", "pinned_attention", "replaced_attention",
           "watched_step"]


def can_intervene(model: Any) -> bool:
    """Whether ``model`` is attnmt's Transformer (each decoder head, named by ``head``) or an RNN whose
    mechanism has one head and returns Σ α v as its context (a user's forward-form mechanism makes
    its own context, which a pin would not reproduce)."""
    if is_transformer(model):
        return True
    attention = getattr(model, "attention", None)
    if not isinstance(attention, Attention) or getattr(attention, "num_heads", 1) != 1:
        return False
    return not (isinstance(attention, UserAttention) and attention.form == "forward")


def needs_head(model: Any) -> bool:
    """Whether an intervention on ``model`` must name the head (a Transformer: several layers and heads)."""
    return is_transformer(model)


def _head_of(model: Any, head: Head | None) -> Head | None:
    """``head`` for a Transformer (ConfigError without one; ``changed_head`` checks that the model has
    it); None for an RNN (ConfigError with one other than its own cross:1:1)."""
    if is_transformer(model):
        if head is None:
            raise ConfigError("a Transformer has many heads: name the one to intervene on (e.g. cross:1:1)")
        return head
    if head is not None and head != Head("cross", 0, 0):
        raise ConfigError(f"{head.label()}: this RNN has one attention head, cross:1:1")
    return None


def _at(step_now: Any, step: int) -> bool:
    return isinstance(step_now, int) and step_now == step


@contextmanager
def pinned_attention(model: Any, step: int, weights: torch.Tensor, head: Head | None = None) -> Iterator[None]:
    """Within the block, ``model``'s attention at decoding step ``step`` puts ``weights`` [S] (a
    distribution over the source positions) where its own would be, for every row asked, or
    ``weights`` [N, S], one distribution per row (the counterfactuals of
    ``attnmt.evaluation.counterfactual``). For a Transformer, in ``head``: over the source for a
    cross-attention head, over the target positions 0 … step for a decoder self-attention head."""
    if _head_of(model, head) is not None:
        assert head is not None
        with changed_head(model, head, _pin(step, weights, head)):
            yield
        return
    attention = model.attention
    original = attention.attend

    def attend(query: torch.Tensor, prepared: PreparedKeys, step_now: Any = None) -> Any:
        if not _at(step_now, step):
            return original(query, prepared, step_now)
        pinned = weights.to(prepared.values.dtype).to(prepared.values.device).expand(query.shape[0], -1)
        return torch.bmm(pinned.unsqueeze(1), prepared.values).squeeze(1), pinned

    attention.attend = attend
    try:
        yield
    finally:
        del attention.attend


#: what ``replaced_attention`` puts in place of a mechanism's weights at every step
REPLACEMENTS = ("permuted", "uniform")


def _pin(step: int, weights: torch.Tensor, head: Head) -> Any:
    """A ``changed_head`` change that puts ``weights`` at target position ``step``."""
    def change(call: HeadCall) -> torch.Tensor | None:
        if step not in call.positions:
            return None
        keys = call.weights.shape[-1]
        if weights.shape[-1] != keys:
            raise ConfigError(f"{head.label()}: {weights.shape[-1]} pinned weights for {keys} positions at step {step}")
        new = call.weights.clone()
        new[:, call.positions.index(step)] = weights.to(new.dtype).to(new.device).expand(new.shape[0], -1)
        return new
    return change


@contextmanager
def replaced_attention(model: Any, kind: str, seed: int = 0, head: Head | None = None) -> Iterator[None]:
    """Within the block, ``model``'s attention at *every* step is replaced before its context is
    taken: ``uniform``, 1/S on each real source position, or ``permuted``, its own weights
    permuted over the real source positions (one permutation per sentence row, drawn from
    ``seed``). c = Σ_s w_s v_s with the mechanism's own values; decoding on shows what the model
    writes when its attention carries no information, or the wrong one (Jain & Wallace, 2019)."""
    if kind not in REPLACEMENTS:
        raise ValueError(f"replaced_attention: kind must be one of {', '.join(REPLACEMENTS)}, got {kind!r}")
    if _head_of(model, head) is not None:
        assert head is not None
        with changed_head(model, head, _replacement(kind, seed)):
            yield
        return
    attention = model.attention
    original = attention.attend
    generator = torch.Generator().manual_seed(seed)
    orders: dict[int, torch.Tensor] = {}

    def attend(query: torch.Tensor, prepared: PreparedKeys, step_now: Any = None) -> Any:
        _, weights = original(query, prepared, step_now)
        mask = prepared.mask if weights.dim() == 2 else prepared.mask.unsqueeze(1)  # [B, S] or [B, 1, S]
        if kind == "uniform":
            replaced = mask.to(weights.dtype) / prepared.lengths.clamp_min(1).to(weights.dtype).view(
                -1, *([1] * (weights.dim() - 1)))
        else:
            replaced = torch.zeros_like(weights)
            for row, length in enumerate(prepared.lengths.tolist()):
                if length not in orders:
                    orders[length] = torch.randperm(length, generator=generator)
                order = orders[length].to(weights.device)
                replaced[row, ..., :length] = weights[row, ..., :length][..., order]
        values = prepared.values
        context = torch.bmm(replaced.unsqueeze(1) if replaced.dim() == 2 else replaced, values)
        return (context.squeeze(1) if replaced.dim() == 2 else context), replaced

    attention.attend = attend
    try:
        yield
    finally:
        del attention.attend


def _replacement(kind: str, seed: int) -> Any:
    """A ``changed_head`` change that replaces a head's weights at every position: uniform over the
    keys a query may attend to, or its own permuted over them (one permutation per number of keys)."""
    generator = torch.Generator().manual_seed(seed)
    orders: dict[int, torch.Tensor] = {}

    def change(call: HeadCall) -> torch.Tensor:
        allowed = call.allowed.to(call.weights.dtype)
        if kind == "uniform":
            return allowed / allowed.sum(-1, keepdim=True).clamp_min(1)
        new = torch.zeros_like(call.weights)
        for row in range(new.shape[0]):
            for query in range(new.shape[1]):
                places = call.allowed[row, query].nonzero().flatten()
                count = int(places.numel())
                if count not in orders:
                    orders[count] = torch.randperm(count, generator=generator)
                new[row, query, places] = call.weights[row, query, places[orders[count].to(places.device)]]
        return new
    return change


@dataclass
class StepRecord:
    """One decoding step of one sentence: the scores e_s [S] (None when the mechanism has none of
    its own), the weights α_s [S] and the context c [D]."""

    scores: torch.Tensor | None
    weights: torch.Tensor
    context: torch.Tensor


@contextmanager
def watched_step(model: Any, step: int, head: Head | None = None) -> Iterator[list[StepRecord]]:
    """Within the block, the first time ``model`` decodes step ``step`` its mechanism's scores,
    weights and context (of the first row) are recorded in the list the block receives; for a
    Transformer, those of ``head`` (its context Σ α v of the head's values, [d_head])."""
    if _head_of(model, head) is not None:
        assert head is not None
        watched: list[StepRecord] = []
        layer_attention = decoder_attention(model, head)

        def record(call: HeadCall) -> None:
            if step in call.positions and not watched:
                at = call.positions.index(step)
                scores = head_scores(layer_attention, call.queries[:1, at:at + 1], call.keys[:1])
                weights = call.weights[0, at]
                watched.append(StepRecord(None if scores is None else scores[0, 0].detach(), weights.detach(),
                                          torch.matmul(weights.to(call.values.dtype), call.values[0]).detach()))
            return None

        with changed_head(model, head, record):
            yield watched
        return
    attention = model.attention
    original = attention.attend
    seen: list[StepRecord] = []

    def attend(query: torch.Tensor, prepared: PreparedKeys, step_now: Any = None) -> Any:
        context, weights = original(query, prepared, step_now)
        if _at(step_now, step) and not seen:
            scores = None
            if type(attention).score is not Attention.score and not isinstance(attention, UserAttention):
                scores = attention.score(query[:1].unsqueeze(1), _first_row(prepared))[0, 0]
            seen.append(StepRecord(scores, weights[0].detach(), context[0].detach()))
        return context, weights

    attention.attend = attend
    try:
        yield seen
    finally:
        del attention.attend


def _first_row(prepared: PreparedKeys) -> PreparedKeys:
    return PreparedKeys(keys=prepared.keys[:1], values=prepared.values[:1], mask=prepared.mask[:1],
                        lengths=prepared.lengths[:1])
