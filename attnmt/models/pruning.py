"""A Transformer without some of its heads: the weights that served them removed, not masked.

Removing head i of an attention takes its d_head rows out of W^Q, W^K and W^V (and their biases)
and its d_head columns out of W^O; the bias of W^O stays. Since the heads meet only in
W^O [head_1; …; head_h], the pruned attention computes exactly what the original does with head i
switched off (``attnmt.models.head_gates``, zero ablation), with fewer products. The model's config
records the heads it no longer holds (``model.pruned_heads``, in the numbering of the model they
were first pruned from), so the pruned weights load into a model of the right shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnmt.errors import ConfigError
from attnmt.models.head_gates import Head, attention_slots

__all__ = ["pruned_model_state"]

#: the name of each part's attention inside a Transformer layer
_MODULES = {"encoder_self": ("encoder_layers", "self_attention"), "decoder_self": ("decoder_layers", "self_attention"),
            "cross": ("decoder_layers", "cross_attention")}


def pruned_model_state(model: Any, heads: Sequence[Head]) -> tuple[list[str], dict[str, torch.Tensor]]:
    """For attnmt's Transformer ``model`` and the ``heads`` to remove (numbered as ``model`` numbers
    them): the ``model.pruned_heads`` of the pruned model (those already pruned included) and its
    state dict. ConfigError for any other model."""
    config = getattr(model, "config", None)
    if getattr(model, "model_type", None) != "transformer" or config is None:
        raise ConfigError("prune: only attnmt's Transformer can lose heads (an RNN's multihead keeps its own)")
    state = {name: value.detach().clone() for name, value in model.state_dict().items()}
    pruned = set(config.pruned_heads)
    dropped: dict[tuple[str, int], set[int]] = {}
    for head in heads:
        dropped.setdefault((head.part, head.layer), set()).add(head.head)
    for slot in attention_slots(model):
        drop = dropped.get((slot.part, slot.layer))
        if not drop:
            continue
        original = config.kept_heads(slot.part, slot.layer)  # current number -> the unpruned model's
        pruned.update(f"{slot.part}:{slot.layer + 1}:{original[k] + 1}" for k in drop)
        stack, name = _MODULES[slot.part]
        _remove_heads(state, f"{stack}.{slot.layer}.{name}.", slot.heads, slot.head_dim,
                      [k for k in range(slot.heads) if k not in drop])
    order = {part: rank for rank, part in enumerate(_MODULES)}
    labels = sorted(pruned, key=lambda label: (order[label.split(":")[0]], *map(int, label.split(":")[1:])))
    return labels, state


def _remove_heads(state: dict[str, torch.Tensor], prefix: str, heads: int, head_dim: int, kept: list[int]) -> None:
    """Keep the rows of W^Q, W^K, W^V (and biases) and the columns of W^O of the ``kept`` heads of
    the attention whose parameters start with ``prefix``; a packed in_proj_weight is split into
    q_proj_weight, k_proj_weight and v_proj_weight, as a pruned layer names them."""
    rows = torch.cat([torch.arange(k * head_dim, (k + 1) * head_dim) for k in kept]) if kept else \
        torch.zeros(0, dtype=torch.long)
    inner = heads * head_dim
    packed = state.pop(prefix + "in_proj_weight", None)
    weights = packed.split(inner) if packed is not None else \
        [state.pop(prefix + f"{name}_proj_weight") for name in ("q", "k", "v")]
    for name, weight in zip(("q", "k", "v"), weights):
        state[prefix + f"{name}_proj_weight"] = weight.index_select(0, rows).clone()
    bias = state.get(prefix + "in_proj_bias")
    if bias is not None:
        state[prefix + "in_proj_bias"] = torch.cat([part.index_select(0, rows) for part in bias.split(inner)])
    state[prefix + "out_proj.weight"] = state[prefix + "out_proj.weight"].index_select(1, rows).clone()
