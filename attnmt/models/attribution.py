"""Attributions made for attention models: value norms, erasure, ALTI+ and attention rollout.

Like gradient saliency (``attnmt.models.saliency``, whose registry of names they share), each
method reads a given pair under force decoding (source x_1 … x_S, output y_1 … y_T, the decoder
reading start, y_1 … y_{T−1}) and gives one matrix per pair::

    scores   [T, S] float   row t: how much each source token s matters to output token t

``value_norm`` (Kobayashi et al., 2020, "Attention is not only a weight"). An attention's output
is a weighted sum of transformed vectors, Σ_s α_ts f(v_s); the size of what token s adds is
‖α_ts f(v_s)‖₂, not α_ts alone. f is what the mechanism applies to a value before the weighted
sum, and, for multi-head attention, each head's share of the output projection W^O (the
columns of W^O that multiply head i), so that over the heads::

    a[t, s] = ‖ Σ_i α^i_ts (v_s W^V_i + b^V_i) W^O_iᵀ ‖₂          (Transformer: the mean over the
                                                                 decoder layers of this norm)
    a[t, s] = α_ts ‖v_s‖₂                                       (an RNN mechanism with one head:
                                                                 v_s the values it averages)

The output projection's bias b^O belongs to no token and is left out. The decoder layers after
the context (an RNN's W_c, a Transformer's later layers) are not part of f.

``erasure`` (leave one out; Li et al., 2016, "Understanding Neural Networks through
Representation Erasure")::

    a[t, s] = log p(y_t | y_<t, x) − log p(y_t | y_<t, x \\ s)

Removing token s means replacing it by the unknown piece: every model reads it (an RNN's encoder
reads every token, so a mask over attention could not remove a word from it), the positions of
the other tokens stay where they were, and a Hugging Face model has an unknown piece too. The
faithfulness measures (``attnmt.evaluation.faithfulness``) remove words the same way.

``alti`` (ALTI+, Ferrando et al., 2022, "Towards Opening the Black Box of Neural Machine
Translation"; ALTI itself is Ferrando et al., 2022, "Measuring the Mixing of Contextual
Information in the Transformer"), for attnmt's pre-norm Transformer. A pre-norm attention block
maps its input z (the residual stream, one vector per position) to

    y_i = z_i + Σ_j Σ_h α^h_ij f^h(z_j) + b^O,      f^h(z) = (LN(z) W^V_h + b^V_h) W^O_hᵀ

where LN is the block's own layer normalisation, applied to each z_j alone. So y_i − b^O is a
sum of one term per input token, T_i(z_j) = Σ_h α^h_ij f^h(z_j) + [i = j] z_i (the residual is
token i's own), with no normalisation after the sum: the post-sum layer norm that ALTI
decomposes linearly in a post-norm model is not there. ALTI's contribution of j to i is::

    c_ij = max(0, ‖ŷ_i‖₁ − ‖ŷ_i − T_i(z_j)‖₁) / Σ_k max(0, ‖ŷ_i‖₁ − ‖ŷ_i − T_i(z_k)‖₁),
    ŷ_i = Σ_j T_i(z_j)

The feed-forward blocks (z + FFN(LN(z))) and the final layer norms act on each position alone, so
they contribute each position wholly to itself. In the decoder's cross-attention block the terms
are the S encoder outputs X_s (keys and values, with no layer norm: X is already normalised) and
the residual z_t. The blocks compose as ALTI+ composes them::

    E   = C^enc_L ⋯ C^enc_1                         [S, S]     source token -> encoder output
    R⁰  = [0 | I]                                   [T, S+T]   decoder position t is its own token
    R   ← C^self_l R;    R[t] ← c_t,res R[t] + Σ_s c_t,s [E[s] | 0]       per decoder layer l

R[t, :S] is each source token's share of output token t (the scores) and R[t, S:] the target
prefix's (start symbol, y_1 … y_{t−1}); each row sums to 1, so a row of the scores sums to the
source's share, the split ALTI+ reports: ``source_share``.

``rollout`` (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers"): each block's
attention averaged over heads, with the residual as half of it, Â = ½ mean_h(A) + ½ I, multiplied
through the layers. The paper rolls out one stack; for an encoder–decoder the composition above
is used, with Â in place of ALTI's contributions: the encoder's rollout, then per decoder layer
the self-attention's Â, and the cross-attention block's ½ mean_h(A_cross) on the encoder's
rollout beside ½ on the residual. A row of its scores sums to the source's share as well.

Shapes inside: B pairs, h heads, d = d_model; ``TransformerTrace`` holds every layer's inputs,
weights and transformed values, computed from the model's own modules in its own dtype (float64
for a model cast to float64: the tests compare with plain loops there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.attention.functional import causal_mask
from attnmt.attention.mechanisms import Attention, NoAttention
from attnmt.attention.multihead import MultiHeadAttention
from attnmt.attention.user import UserAttention
from attnmt.errors import ConfigError
from attnmt.models.common import log_probabilities
from attnmt.models.readout import ATTNMT_SPECIALS, DEFAULT_MAX_TOKENS, ForcedBatch, SpecialIds, padded_rows
from attnmt.runtime.choices import ATTRIBUTION_METHODS, GRADIENT_METHODS

__all__ = ["ATTRIBUTION_METHODS", "BlockTrace", "TransformerTrace", "applicable_methods", "attribution",
           "composed_contributions", "erased_rows", "not_applicable", "target_log_probs", "trace_transformer"]


# --------------------------------------------------------------------------------------------
# Which methods apply to which model
# --------------------------------------------------------------------------------------------


def _is_transformer(model: Any) -> bool:
    return getattr(model, "model_type", None) == "transformer" and hasattr(model, "decoder_layers")


def _is_rnn(model: Any) -> bool:
    return getattr(model, "model_type", None) == "rnn" or isinstance(getattr(model, "attention", None), Attention)


def not_applicable(model: Any, method: str) -> str | None:
    """Why ``method`` cannot read ``model`` (one line), or None when it can."""
    if method in GRADIENT_METHODS or method == "erasure":
        return None
    if method in ("alti", "rollout"):
        if not _is_transformer(model):
            return f"{method} decomposes a Transformer's layers; this model is not attnmt's Transformer"
        if method == "alti" and model.config.norm != "pre":
            return "alti is derived here for the pre-norm Transformer; this run's model.norm is 'post'"
        return None
    if method == "value_norm":
        if _is_transformer(model):
            return None
        attention = getattr(model, "attention", None)
        if not isinstance(attention, Attention):
            return "value_norm needs attnmt's RNN or Transformer, whose attention values it reads"
        if isinstance(attention, NoAttention):
            return "value_norm: this model's mechanism is 'none', which attends to nothing"
        if isinstance(attention, UserAttention) and attention.form == "forward":
            return ("value_norm: this user mechanism computes its own context (forward form) and does not "
                    "expose its values")
        return None
    return f"unknown attribution method {method!r}"


def applicable_methods(model: Any, methods: Sequence[str]) -> list[str]:
    """The methods of ``methods`` that apply to ``model``."""
    return [method for method in methods if not_applicable(model, method) is None]


# --------------------------------------------------------------------------------------------
# Log-probabilities of given outputs, for erasure and the faithfulness measures
# --------------------------------------------------------------------------------------------


def target_log_probs(model: Any, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                     targets: torch.Tensor, max_tokens: int) -> torch.Tensor:
    """log p(targets[n, t] | tgt_in[n, :t+1], src[n]) for every row n and position t: [N, T] on the
    CPU, in chunks of at most ``max_tokens`` padded tokens. Unlike ``readout.force_decode`` (float32
    readings) it keeps a float64 model's precision, which the erasure's float64 test compares."""
    rows = src.shape[0]
    chunk = max(1, max_tokens // max(1, src.shape[1], tgt_in.shape[1]))
    result = torch.zeros(rows, tgt_in.shape[1], dtype=torch.float64)
    with torch.inference_mode():
        for start in range(0, rows, chunk):
            part = slice(start, min(rows, start + chunk))
            logits, _ = model(src[part], src_mask[part], tgt_in[part], return_attention="heads")
            scores = log_probabilities(logits).gather(-1, targets[part].unsqueeze(-1)).squeeze(-1)
            result[part] = scores.double().cpu()
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


def _variants_log_probs(model: Any, source: Sequence[int], output: Sequence[int], variants: list[list[int]],
                        specials: SpecialIds, max_tokens: int) -> torch.Tensor:
    """log p(y_t | y_<t, variant) for each variant of one pair's source: [V, T] float64."""
    device = next(model.parameters()).device
    count, start = len(variants), specials.start
    src = padded_rows(variants, len(source), specials.pad).to(device)
    src_mask = torch.ones(count, len(source), dtype=torch.bool, device=device)
    tgt_in = torch.tensor([[start, *output[:-1]]] * count, dtype=torch.long, device=device)
    targets = torch.tensor([list(output)] * count, dtype=torch.long, device=device)
    return target_log_probs(model, src, src_mask, tgt_in, targets, max_tokens)


# --------------------------------------------------------------------------------------------
# The Transformer, layer by layer
# --------------------------------------------------------------------------------------------


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


def _head_values(attention: MultiHeadAttention, v_heads: torch.Tensor) -> torch.Tensor:
    """v_heads [B, h, L, d_h] (with b^V) -> each head's transformed values v W^O_iᵀ [B, h, L, d]."""
    h, d_h = attention.num_heads, attention.head_dim
    out_weight = attention.out_proj.weight.view(attention.embed_dim, h, d_h)  # [d, h, d_h]
    return torch.einsum("bhld,ehd->bhle", v_heads, out_weight)


def _attention_block(attention: MultiHeadAttention, norm_in: torch.Tensor, keys_in: torch.Tensor,
                     mask: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, BlockTrace]:
    """One attention block: (its output, its trace). ``norm_in`` is what the queries read (the
    block's LN(z) in pre-norm), ``keys_in`` what the keys and values read."""
    keys, values = attention.project_key_value(keys_in, keys_in)
    output, weights = attention.attend(attention.project_query(norm_in), keys, values, mask, need_weights=True)
    assert weights is not None
    return output, BlockTrace(residual, weights, _head_values(attention, values))


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


def _alti_contributions(block: BlockTrace, self_attention: bool) -> torch.Tensor:
    """ALTI's c_ij of one block (module docstring): [B, Lq, Lk] for a self-attention block (the
    residual on the diagonal), [B, Lq, Lk + 1] for a cross-attention block (the residual last)."""
    weighted = torch.einsum("bhij,bhjd->bijd", block.weights, block.values)  # [B, Lq, Lk, d]
    if self_attention:  # the residual z_i joins term j = i, in place (no [B, d, L, L] temporary)
        terms = weighted
        terms.diagonal(dim1=1, dim2=2).add_(block.inputs.transpose(1, 2))
    else:
        terms = torch.cat([weighted, block.inputs.unsqueeze(2)], dim=2)
    total = terms.sum(dim=2, keepdim=True)  # ŷ_i: [B, Lq, 1, d]
    size = total.abs().sum(-1)  # ‖ŷ_i‖₁: [B, Lq, 1]
    distance = terms.sub_(total).abs_().sum(-1)  # ‖ŷ_i − T_i(z_j)‖₁: [B, Lq, Lk(+1)], in place
    raw = torch.clamp(size - distance, min=0.0)
    return raw / raw.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(raw.dtype).tiny)


def _rollout_contributions(block: BlockTrace, self_attention: bool) -> torch.Tensor:
    """Rollout's Â of one block: ½ mean_h(A) + ½ I, shaped as ``_alti_contributions``."""
    mean = block.weights.mean(dim=1)  # [B, Lq, Lk]
    if self_attention:
        return 0.5 * mean + 0.5 * torch.eye(mean.shape[-1], dtype=mean.dtype, device=mean.device)
    residual = torch.full((*mean.shape[:2], 1), 0.5, dtype=mean.dtype, device=mean.device)
    return torch.cat([0.5 * mean, residual], dim=-1)


def composed_contributions(trace: TransformerTrace, method: str) -> torch.Tensor:
    """R of the module docstring, [B, T, S + T]: columns :S the source tokens, S: the decoder's
    input positions (start symbol, y_1 …)."""
    block_matrix = _alti_contributions if method == "alti" else _rollout_contributions
    first = trace.encoder[0].inputs  # the embedded source, [B, S, d]
    batch, source_length = first.shape[0], first.shape[1]
    dtype, device = first.dtype, first.device
    encoded = torch.eye(source_length, dtype=dtype, device=device).expand(batch, -1, -1)
    for block in trace.encoder:
        encoded = block_matrix(block, True) @ encoded  # [B, S, S]
    target_length = trace.decoder_self[0].inputs.shape[1]
    total = torch.cat([torch.zeros(batch, target_length, source_length, dtype=dtype, device=device),
                       torch.eye(target_length, dtype=dtype, device=device).expand(batch, -1, -1)], dim=-1)
    for self_block, cross_block in zip(trace.decoder_self, trace.decoder_cross):
        total = block_matrix(self_block, True) @ total  # [B, T, S+T]
        cross = block_matrix(cross_block, False)  # [B, T, S+1]
        from_source = cross[..., :source_length] @ encoded  # [B, T, S]
        total = cross[..., source_length:] * total
        total = total + F.pad(from_source, (0, target_length))
    return total


def _transformer_value_norm(trace: TransformerTrace) -> torch.Tensor:
    """The mean over decoder layers of ‖Σ_h α^h_ts f^h(X_s)‖₂: [B, T, S]."""
    norms = [torch.linalg.vector_norm(torch.einsum("bhts,bhsd->btsd", block.weights, block.values), dim=-1)
             for block in trace.decoder_cross]
    return torch.stack(norms).mean(dim=0)


# --------------------------------------------------------------------------------------------
# The RNN's value norms
# --------------------------------------------------------------------------------------------


def _rnn_value_norm(model: Any, batch: ForcedBatch) -> torch.Tensor:
    """α_ts ‖v_s‖₂, or for ``multihead`` ‖Σ_i α^i_ts v_{i,s} W^O_iᵀ‖₂: [B, T, S]."""
    _, weights = model(batch.src, batch.src_mask, batch.tgt_in, return_attention="heads")  # [B, 1, h, T, S]
    weights = weights[:, 0]
    values = model.encode(batch.src, batch.src_mask).prepared.values
    attention = model.attention
    if values.dim() == 3:  # one head: the values the context averages, [B, S, D]
        return weights[:, 0] * torch.linalg.vector_norm(values, dim=-1).unsqueeze(1)
    h, d_h = attention.num_heads, attention.head_dim  # multihead: [B, h, S, d_h]
    out_weight = attention.output_proj.weight.view(-1, h, d_h)  # [D, h, d_h]
    transformed = torch.einsum("bhsd,ehd->bhse", values, out_weight)
    return torch.linalg.vector_norm(torch.einsum("bhts,bhse->btse", weights, transformed), dim=-1)


# --------------------------------------------------------------------------------------------
# Erasure
# --------------------------------------------------------------------------------------------


def _erasure(model: Any, batch: ForcedBatch, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
             specials: SpecialIds, max_tokens: int) -> torch.Tensor:
    """log p(y_t | y_<t, x) − log p(y_t | y_<t, x with token s replaced by ``unk``): [B, T, S]."""
    scores = torch.zeros(len(batch.pairs), batch.tgt_in.shape[1], batch.src.shape[1], dtype=torch.float64)
    for row, k in enumerate(batch.pairs):
        source, output = sources[k], outputs[k]
        variants = [list(source)] + erased_rows(source, [[s] for s in range(len(source))], specials.unk)
        log_probs = _variants_log_probs(model, source, output, variants, specials, max_tokens)  # [1+S, T]
        scores[row, : len(output), : len(source)] = (log_probs[0:1] - log_probs[1:]).T
    return scores


# --------------------------------------------------------------------------------------------
# One batch, any method of this module
# --------------------------------------------------------------------------------------------


def attribution(model: nn.Module, method: str, batch: ForcedBatch, sources: Sequence[Sequence[int]],
                outputs: Sequence[Sequence[int]], *, specials: SpecialIds = ATTNMT_SPECIALS,
                max_tokens: int = DEFAULT_MAX_TOKENS) -> torch.Tensor:
    """The scores [B, T, S] (float64, on the CPU; zero at padding) of ``method`` for a batch of
    pairs read in eval mode. ConfigError (one line naming the methods that apply) when the method
    cannot read this model."""
    reason = not_applicable(model, method)
    if reason is not None:
        raise ConfigError(f"{reason}. For this model use one of: "
                          f"{', '.join(applicable_methods(model, (*GRADIENT_METHODS, *ATTRIBUTION_METHODS)))}")
    if method == "erasure":
        return _erasure(model, batch, sources, outputs, specials, max_tokens)
    with torch.inference_mode():
        if _is_transformer(model):
            trace = trace_transformer(model, batch.src, batch.src_mask, batch.tgt_in)
            if method == "value_norm":
                scores = _transformer_value_norm(trace)
            else:
                scores = composed_contributions(trace, method)[..., : batch.src.shape[1]]
        else:
            scores = _rnn_value_norm(model, batch)
    return scores.double().cpu() * batch.src_mask.cpu()[:, None, :]
