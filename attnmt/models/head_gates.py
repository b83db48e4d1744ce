"""Every attention head of a translator, named one way, and the one way to switch heads off.

A head is ``PART:LAYER:HEAD``: PART is ``encoder_self``, ``decoder_self`` or ``cross``; LAYER and
HEAD count from 1. attnmt's Transformer has all three parts; an RNN has one cross-attention, layer
1, with the heads of its mechanism (``multihead``'s h, one for every other mechanism); a Hugging
Face model (Marian, BART, mBART, M2M100, T5) has the parts of its encoder and decoder layers.

Switching a head off happens where the heads meet: the input of an attention's output projection
W^O, which is the heads' outputs side by side, [..., h·d_head]. A gate ξ_i per head scales head i's
share before W^O::

    MultiHead(…) = W^O [ξ_1 head_1 + (1 − ξ_1) m_1; …; ξ_h head_h + (1 − ξ_h) m_h] + b^O

ξ_i = 0 with m_i = 0 masks head i (its bias b^O stays; ``ablation="zero"``); with m_i the mean of
head i's output over real tokens of some sentences it is mean ablation (``ablation="mean"``,
``head_means``); ξ_i = 1 leaves the head as it is. A gate that requires a gradient gives Michel et
al. (2019)'s importance |∂L/∂ξ_i| at ξ = 1. The gates are forward pre-hooks on the projections
(``gated_heads``): nothing else in a model changes, they work the same in training, teacher forcing
and every search, and with no gate set the model runs exactly as it does without this module. An
RNN mechanism with one head and no projection has its context gated instead (c ← ξ c + (1 − ξ) m).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnmt.errors import ConfigError
from attnmt.runtime.choices import HEAD_ABLATIONS

__all__ = ["ABLATIONS", "PARTS", "AttentionSlot", "Head", "attention_slots", "gated_heads", "head_count",
           "head_means", "masked_heads", "parse_heads"]

#: the three kinds of attention in an encoder–decoder, in the order tables list them
PARTS = ("encoder_self", "decoder_self", "cross")
#: what takes a masked head's place: nothing (zero), or its mean output (``head_means``)
ABLATIONS = HEAD_ABLATIONS


@dataclass(frozen=True)
class Head:
    """One head: ``part`` (one of PARTS), ``layer`` and ``head`` counted from 0."""

    part: str
    layer: int
    head: int

    def label(self) -> str:
        """``PART:LAYER:HEAD``, counted from 1, as ``--mask-heads`` takes it."""
        return f"{self.part}:{self.layer + 1}:{self.head + 1}"

    def order(self) -> tuple[int, int, int]:
        """Where the head stands in tables: by part (as PARTS lists them), layer and head."""
        return PARTS.index(self.part), self.layer, self.head


@dataclass
class AttentionSlot:
    """One attention of a model: its ``part`` and ``layer`` (from 0), its number of ``heads``, and
    where its heads meet: ``projection`` (the output projection W^O, whose input is the heads side
    by side) or, for a one-head RNN mechanism without one, ``attention`` (whose context is gated)."""

    part: str
    layer: int
    heads: int
    projection: nn.Linear | None = None
    attention: Any = None

    @property
    def head_dim(self) -> int:
        """d_head: the size of one head's output."""
        if self.projection is not None:
            return int(self.projection.in_features) // self.heads if self.heads else 0
        return int(self.attention.output_dim)


def _unwrapped(model: Any) -> Any:
    """The model itself: a Hugging Face model behind ``HFReadout`` is its ``.model``."""
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, nn.Module) and not hasattr(model, "encoder_layers") else model


#: where a Hugging Face model keeps each part's output projections: (part, module-name pattern with
#: the layer number as its group, config keys of its number of heads)
_HF_PROJECTIONS = (
    ("encoder_self", r"(?:^|\.)encoder\.layers\.(\d+)\.self_attn\.out_proj$", ("encoder_attention_heads", "num_heads")),
    ("decoder_self", r"(?:^|\.)decoder\.layers\.(\d+)\.self_attn\.out_proj$", ("decoder_attention_heads", "num_heads")),
    ("cross", r"(?:^|\.)decoder\.layers\.(\d+)\.encoder_attn\.out_proj$", ("decoder_attention_heads", "num_heads")),
    ("encoder_self", r"(?:^|\.)encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.o$", ("num_heads",)),
    ("decoder_self", r"(?:^|\.)decoder\.block\.(\d+)\.layer\.0\.SelfAttention\.o$", ("num_decoder_heads", "num_heads")),
    ("cross", r"(?:^|\.)decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.o$", ("num_decoder_heads", "num_heads")),
)


def attention_slots(model: Any) -> list[AttentionSlot]:
    """Every attention of ``model`` (attnmt's Transformer or RNN, or a Hugging Face encoder–decoder,
    bare or behind ``HFReadout``), part by part and layer by layer; ConfigError when it has none
    that attnmt can find."""
    model = _unwrapped(model)
    if hasattr(model, "encoder_layers") and hasattr(model, "decoder_layers"):  # attnmt's Transformer
        slots = [AttentionSlot("encoder_self", n, layer.self_attention.num_heads, layer.self_attention.out_proj)
                 for n, layer in enumerate(model.encoder_layers)]
        for part, name in (("decoder_self", "self_attention"), ("cross", "cross_attention")):
            slots += [AttentionSlot(part, n, getattr(layer, name).num_heads, getattr(layer, name).out_proj)
                      for n, layer in enumerate(model.decoder_layers)]
        return slots
    attention = getattr(model, "attention", None)
    if attention is not None and hasattr(model, "encoder_rnn"):  # attnmt's RNN: one cross-attention
        projection = getattr(attention, "output_proj", None)
        heads = int(getattr(attention, "num_heads", 1))
        if heads > 1 and isinstance(projection, nn.Linear):
            return [AttentionSlot("cross", 0, heads, projection)]
        return [AttentionSlot("cross", 0, 1, attention=attention)]
    config = getattr(model, "config", None)
    found: list[AttentionSlot] = []
    for name, module in getattr(model, "named_modules", lambda: [])():
        for part, pattern, keys in _HF_PROJECTIONS:
            match = re.search(pattern, name)
            if match and isinstance(module, nn.Linear):
                heads = next((int(getattr(config, key)) for key in keys if getattr(config, key, None)), 0)
                found.append(AttentionSlot(part, int(match.group(1)), heads, module))
    if not found or any(slot.heads < 1 or slot.head_dim * slot.heads != slot.projection.in_features  # type: ignore[union-attr]
                        for slot in found):
        raise ConfigError(f"{type(model).__name__}: attnmt finds no attention heads in this model to intervene on")
    return sorted(found, key=lambda slot: (PARTS.index(slot.part), slot.layer))


def head_count(model: Any) -> dict[str, tuple[int, int]]:
    """Per part the model has: (its layers, the most heads a layer of it has: a pruned model's
    layers may hold fewer)."""
    counts: dict[str, tuple[int, int]] = {}
    for slot in attention_slots(model):
        layers, heads = counts.get(slot.part, (0, 0))
        counts[slot.part] = (max(layers, slot.layer + 1), max(heads, slot.heads))
    return counts


def parse_heads(spec: str, model: Any, where: str = "--mask-heads") -> list[Head]:
    """The heads a SPEC names: a comma list of ``PART:LAYER:HEAD``, LAYER and HEAD numbers from 1 or
    ``*`` (every one); an empty SPEC names none. ConfigError naming ``where``, the item, and the
    parts, layers and heads the model has."""
    per_layer = {(slot.part, slot.layer): slot.heads for slot in attention_slots(model)}
    counts = head_count(model)
    have = "; ".join(f"{part}: layers 1-{layers}, heads 1-{heads}" for part, (layers, heads) in counts.items())
    heads: set[Head] = set()
    for item in (piece.strip() for piece in str(spec).split(",")):
        if not item:
            continue
        fields = item.split(":")
        if len(fields) != 3:
            raise ConfigError(f"{where}: {item!r} is not PART:LAYER:HEAD (e.g. cross:2:1, encoder_self:*:3); "
                              f"this model has {have}")
        part, layer, head = (field.strip() for field in fields)
        if part not in counts:
            raise ConfigError(f"{where}: {item!r}: unknown part {part!r}; this model has {have}")
        for n in _numbers(layer, counts[part][0], "layer", item, where, have):
            heads.update(Head(part, n, k) for k in _numbers(head, per_layer[(part, n)], "head", item, where, have,
                                                             wildcard_empty=True))
    return sorted(heads, key=Head.order)


def _numbers(text: str, count: int, what: str, item: str, where: str, have: str,
             wildcard_empty: bool = False) -> range:
    if text == "*":
        if count == 0 and not wildcard_empty:
            raise ConfigError(f"{where}: {item!r}: no {what} to name; this model has {have}")
        return range(count)
    if not text.isdigit() or not 1 <= int(text) <= count:
        raise ConfigError(f"{where}: {item!r}: {what} {text!r} is out of range (1-{count}, or *); "
                          f"this model has {have}")
    return range(int(text) - 1, int(text))


def _gate_projection(gate: torch.Tensor, fill: torch.Tensor | None) -> Callable[..., Any]:
    """A forward pre-hook putting ξ_i head_i + (1 − ξ_i) m_i in place of each head's share."""
    def hook(module: nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        x = inputs[0]
        heads = gate.shape[0]
        split = x.view(*x.shape[:-1], heads, x.shape[-1] // heads)
        weight = gate.to(dtype=x.dtype, device=x.device).unsqueeze(-1)
        gated = split * weight
        if fill is not None:
            gated = gated + (1 - weight) * fill.to(dtype=x.dtype, device=x.device)
        return (gated.reshape(x.shape), *inputs[1:])
    return hook


@contextmanager
def gated_heads(model: Any, gates: dict[tuple[str, int], torch.Tensor],
                fills: dict[tuple[str, int], torch.Tensor] | None = None) -> Iterator[None]:
    """Within the block, the heads of each attention ``(part, layer)`` of ``gates`` are scaled by its
    gate ξ [h] (module docstring), with ``fills`` m [h, d_head] in the rest of their share."""
    slots = {(slot.part, slot.layer): slot for slot in attention_slots(model)}
    handles, wrapped = [], []
    try:
        for key, gate in gates.items():
            slot = slots[key]
            fill = (fills or {}).get(key)
            if slot.projection is not None:
                handles.append(slot.projection.register_forward_pre_hook(_gate_projection(gate, fill)))
            else:
                wrapped.append(_gate_context(slot.attention, gate, fill))
        yield
    finally:
        for handle in handles:
            handle.remove()
        for attention in wrapped:
            del attention.attend


def _gate_context(attention: Any, gate: torch.Tensor, fill: torch.Tensor | None) -> Any:
    """An RNN mechanism with one head: its context c becomes ξ c + (1 − ξ) m (weights unchanged)."""
    original = attention.attend

    def attend(query: torch.Tensor, prepared: Any, step: Any = None) -> Any:
        context, weights = original(query, prepared, step)
        weight = gate.to(dtype=context.dtype, device=context.device)[0]
        gated = context * weight
        if fill is not None:
            gated = gated + (1 - weight) * fill.to(dtype=context.dtype, device=context.device)[0]
        return gated, weights

    attention.attend = attend
    return attention


@contextmanager
def masked_heads(model: Any, heads: Sequence[Head], ablation: str = "zero",
                 means: dict[tuple[str, int], torch.Tensor] | None = None) -> Iterator[None]:
    """Within the block, ``heads`` are switched off: their output is zero (``ablation="zero"``) or
    their mean output (``"mean"``, from ``means`` as ``head_means`` gives them). No heads: the model
    is untouched."""
    if ablation not in ABLATIONS:
        raise ConfigError(f"ablation must be one of {', '.join(ABLATIONS)}, got {ablation!r}")
    if ablation == "mean" and means is None:
        raise ConfigError("mean ablation needs each head's mean output (head_means) over some sentences")
    slots = {(slot.part, slot.layer): slot for slot in attention_slots(model)}
    gates: dict[tuple[str, int], torch.Tensor] = {}
    for head in heads:
        key = (head.part, head.layer)
        gate = gates.setdefault(key, torch.ones(slots[key].heads))
        gate[head.head] = 0.0
    fills = {key: means[key] for key in gates} if ablation == "mean" and means is not None else None
    if not gates:
        yield
        return
    with gated_heads(model, gates, fills):
        yield


def head_means(model: Any, batches: Sequence[tuple[torch.Tensor, ...]]) -> dict[tuple[str, int], torch.Tensor]:
    """Each head's mean output [h, d_head] per attention, over the real tokens of ``batches`` of
    (src [B, S], src_mask [B, S], tgt_in [B, T], tgt_mask [B, T]) teacher-forced through ``model``
    (in eval mode): the queries of encoder self-attention are the source tokens, those of the
    decoder's the target tokens. A decoder that asks its attention one step at a time (an RNN's
    ``bahdanau`` and ``luong`` flows) is counted step by step."""
    slots = attention_slots(model)
    sums: dict[tuple[str, int], torch.Tensor] = {}
    counts: dict[tuple[str, int], float] = {}
    current: dict[str, Any] = {}

    def recorder(slot: AttentionSlot) -> Callable[[torch.Tensor], None]:
        key = (slot.part, slot.layer)

        def record(x: torch.Tensor) -> None:
            real = current["src" if slot.part == "encoder_self" else "tgt"]
            x = x.detach().double().reshape(real.shape[0], -1, slot.heads, slot.head_dim)  # [B, L, h, d_head]
            if x.shape[1] != real.shape[1]:  # one step of a step-by-step decoder
                step = current["steps"].get(key, 0)
                current["steps"][key] = step + 1
                real = real[:, step:step + 1]
            sums[key] = sums.get(key, 0) + (x * real[..., None, None]).sum(dim=(0, 1))
            counts[key] = counts.get(key, 0.0) + float(real.sum())
        return record

    handles = []
    wrapped = []
    for slot in slots:
        record = recorder(slot)
        if slot.projection is not None:
            handles.append(slot.projection.register_forward_pre_hook(
                lambda module, inputs, record=record: record(inputs[0])))
        else:
            wrapped.append(_record_context(slot.attention, record))
    try:
        with torch.no_grad():
            for src, src_mask, tgt_in, tgt_mask in batches:
                current.update(src=src_mask.double(), tgt=tgt_mask.double(), steps={})
                model(src, src_mask, tgt_in)
    finally:
        for handle in handles:
            handle.remove()
        for attention in wrapped:
            del attention.attend
    return {key: (total / max(counts[key], 1.0)).float() for key, total in sums.items()}


def _record_context(attention: Any, record: Callable[[torch.Tensor], None]) -> Any:
    """An RNN mechanism with one head: ``record`` sees each context it returns."""
    original = attention.attend

    def attend(query: torch.Tensor, prepared: Any, step: Any = None) -> Any:
        context, weights = original(query, prepared, step)
        record(context)
        return context, weights

    attention.attend = attend
    return attention
