"""ALTI+ and attention rollout: a Transformer's layers composed into each source token's share of
each output token.

``alti`` (ALTI+, Ferrando et al., 2022, "Towards Opening the Black Box of Neural Machine
Translation"; ALTI itself is Ferrando et al., 2022, "Measuring the Mixing of Contextual
Information in the Transformer"), for attnmt's pre-norm Transformer. A pre-norm attention block
(``attnmt.attribution.trace``) maps its input z to

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

Neither depends on the output being explained: a foil changes nothing.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from attnmt.attribution.forced import Request
from attnmt.attribution.trace import BlockTrace, TransformerTrace, is_transformer, trace_transformer
from attnmt.models.readout import ForcedBatch

__all__ = ["applies", "composed_contributions", "compute"]


def applies(model: Any, name: str) -> str | None:
    """attnmt's Transformer; ALTI+ only in its pre-norm form."""
    if not is_transformer(model):
        return f"{name} decomposes a Transformer's layers; this model is not attnmt's Transformer"
    if name == "alti" and model.config.norm != "pre":
        return "alti is derived here for the pre-norm Transformer; this run's model.norm is 'post'"
    return None


def compute(name: str, model: Any, batch: ForcedBatch, request: Request) -> torch.Tensor:
    """R[..., :S] of the module docstring for one batch: [B, T, S] float64 on the CPU."""
    with torch.inference_mode():
        trace = trace_transformer(model, batch.src, batch.src_mask, batch.tgt_in)
        scores = composed_contributions(trace, name)[..., : batch.src.shape[1]]
    return scores.double().cpu() * batch.src_mask.cpu()[:, None, :]


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
