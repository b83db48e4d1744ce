"""attnmt's Transformer read layer by layer, for the attributions that decompose it (value norms,
ALTI+, rollout).

A pre-norm attention block maps its input z (the residual stream, one vector per position) to

    y_i = z_i + Σ_j Σ_h α^h_ij f^h(z_j) + b^O,      f^h(z) = (LN(z) W^V_h + b^V_h) W^O_hᵀ

where LN is the block's own layer normalisation and W^O_h the columns of the output projection that
multiply head h. ``trace_transformer`` keeps, for every attention block, its inputs z, its weights
α and its transformed values f^h, computed from the model's own modules in its own dtype (float64
for a model cast to float64: the tests compare with plain loops there).

Shapes: B pairs, h heads, d = d_model, Lq queries, Lk keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnmt.attention.functional import causal_mask
from attnmt.attention.multihead import MultiHeadAttention

__all__ = ["BlockTrace", "TransformerTrace", "is_transformer", "trace_transformer"]


def is_transformer(model: Any) -> bool:
    """Whether ``model`` is attnmt's Transformer (what the trace reads)."""
    return getattr(model, "model_type", None) == "transformer" and hasattr(model, "decoder_layers")


@dataclass
class BlockTrace:
    """One attention block: ``inputs`` z [B, Lq, d] (the residual stream it adds to), ``weights``
    α [B, h, Lq, Lk] and ``values`` f^h(key side) [B, h, Lk, d] (each head's transformed values,
    its share of W^O applied), so that the block's output is z + Σ_h α^h f^h + b^O."""

    inputs: torch.Tensor
    weights: torch.Tensor
    values: torch.Tensor


@dataclass
class TransformerTrace:
    """A force-decoded batch, layer by layer: ``encoder`` (a BlockTrace per encoder layer's
    self-attention), ``decoder_self`` and ``decoder_cross`` (per decoder layer), and ``logits``
    [B, T, V] (equal to the model's own forward: a test checks it)."""

    encoder: list[BlockTrace]
    decoder_self: list[BlockTrace]
    decoder_cross: list[BlockTrace]
    logits: torch.Tensor


def _attention_block(attention: MultiHeadAttention, norm_in: torch.Tensor, keys_in: torch.Tensor,
                     mask: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, BlockTrace]:
    """One attention block: (its output, its trace). ``norm_in`` is what the queries read (the
    block's LN(z) in pre-norm), ``keys_in`` what the keys and values read."""
    keys, values = attention.project_key_value(keys_in, keys_in)
    output, weights = attention.attend(attention.project_query(norm_in), keys, values, mask, need_weights=True)
    assert weights is not None
    return output, BlockTrace(residual, weights, attention.head_outputs(values))


def _self_attention_step(block: Any, attention: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor,
                         traces: list[BlockTrace]) -> torch.Tensor:
    """A self-attention block in its residual: its output, its trace appended to ``traces``."""
    z = block.before(x)
    output, trace = _attention_block(attention, z, z, mask, x)
    traces.append(trace)
    return block.after(x, output)


def trace_transformer(model: Any, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> TransformerTrace:
    """Run ``model`` (attnmt's Transformer, in eval mode) on a batch with its own modules, keeping
    every attention block's inputs, weights and transformed values (module docstring)."""
    x = model.source_embeddings(src)
    encoder: list[BlockTrace] = []
    self_padding = src_mask[:, None, None, :]
    for layer in model.encoder_layers:
        x = _self_attention_step(layer.attention_block, layer.self_attention, x, self_padding, encoder)
        x = layer.feed_forward_block(x, layer.feed_forward)
    states = model.encoder_norm(x)

    length = tgt_in.shape[1]
    self_mask = (causal_mask(length, device=tgt_in.device) & (tgt_in != model.pad_id)[:, None, :]).unsqueeze(1)
    y = model.target_embeddings(tgt_in, 0)
    decoder_self: list[BlockTrace] = []
    decoder_cross: list[BlockTrace] = []
    for layer in model.decoder_layers:
        y = _self_attention_step(layer.self_attention_block, layer.self_attention, y, self_mask, decoder_self)
        block = layer.cross_attention_block
        output, trace = _attention_block(layer.cross_attention, block.before(y), states, self_padding, y)
        decoder_cross.append(trace)
        y = block.after(y, output)
        y = layer.feed_forward_block(y, layer.feed_forward)
    logits = model.output_projection(model.decoder_norm(y))
    return TransformerTrace(encoder, decoder_self, decoder_cross, logits)
