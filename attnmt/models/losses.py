"""The training losses: label-smoothed cross-entropy per token, and guided alignment.

Token loss of a batch with N real target tokens (EOS included, padding excluded)::

    L = Σ_t [(1 − ε) · (−log p(y_t | y_<t, x)) + ε · (1/V) Σ_v (−log p(v | y_<t, x))]

Guided alignment (Chen et al. 2016; Garg et al. 2019) pulls one cross-attention map a towards a
target distribution A built from word links (``attnmt.data.link_files``)::

    L_align = Σ_b Σ_t Σ_s −A[b, t, s] · log a[b, t, s]

Both are sums; the trainer divides by the (global) number of target tokens.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from attnmt.models.common import at_least_float32

__all__ = ["guided_alignment_loss", "select_attention", "symmetric_kl", "token_losses"]


def token_losses(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                 label_smoothing: float = 0.0,
                 scored: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Summed losses over the real target tokens.

    logits:  [B, T, V]  unnormalised scores of the next token, or [N, V] those of the N real
                        tokens only (``model(..., tgt_mask=mask)``: ``logits[mask]`` already),
                        or [N', V] those at the N' positions of ``scored``
    targets: [B, T]     the reference tokens (tokens + EOS, padded)
    mask:    [B, T]     True for real tokens, False for padding
    scored:  [B, T]     optional: the positions ``logits`` holds (``model(..., tgt_mask=scored)``), the
                        real ones and some padding (``attnmt.data.batching.scored_positions``); the
                        padding rows get loss 0, so the sums are those of the real tokens
    Returns ``(loss_sum, nll_sum, num_tokens)``: ``loss_sum`` is the training loss summed over the
    real tokens (cross-entropy with label smoothing ε against ``(1-ε)·onehot + ε/V``), ``nll_sum``
    the plain negative log-likelihood summed over them (a float tensor without gradient), and
    ``num_tokens`` how many real tokens there are. Without ``scored``, padding positions are not even
    scored; with it, the padding rows it names are computed but count for nothing.
    """
    positions = mask if scored is None else scored
    selected_already = (logits.dim() == 2 and positions.shape == targets.shape
                        and logits.shape[0] == int(positions.sum()))
    if not selected_already and (scored is not None or logits.dim() != 3 or targets.shape != logits.shape[:2]
                                 or mask.shape != targets.shape):
        raise ValueError(
            f"token_losses: expected logits [B, T, V], [N, V] (N = real tokens) or [N', V] (N' = the scored "
            f"positions), targets [B, T], mask [B, T]; got {tuple(logits.shape)}, {tuple(targets.shape)}, "
            f"{tuple(mask.shape)}"
        )
    selected = logits if selected_already else logits[mask]  # [N, V]
    gold = targets[positions]  # [N]
    real = None if scored is None else mask[scored]  # [N'] which of the scored rows are real tokens
    if real is not None:
        # the padding rows' logits as 0 (a uniform softmax): left as they were, they made a wider RNN's
        # epoch slower, most likely through denormal probabilities in their softmax (docs/experiments.md)
        selected = torch.where(real.unsqueeze(1), selected, selected.new_zeros(()))
    log_probs = F.log_softmax(at_least_float32(selected), dim=-1)  # float64 stays float64
    nll = -log_probs.gather(1, gold.unsqueeze(1)).squeeze(1)  # [N]
    if label_smoothing > 0.0:
        smooth = -log_probs.mean(dim=-1)  # cross-entropy against the uniform distribution
        loss = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    else:
        loss = nll
    count = int(gold.numel())
    if real is not None:  # the padding rows: loss 0, and no gradient through them
        loss, nll = torch.where(real, loss, 0.0), torch.where(real, nll, 0.0)
        count = int(real.sum())
    with torch.no_grad():
        nll_sum = nll.sum().detach()
    return loss.sum(), nll_sum, count


def symmetric_kl(logits_a: torch.Tensor, logits_b: torch.Tensor) -> torch.Tensor:
    """R-Drop's divergence between two predictions of the same tokens, summed over the tokens::

        Σ_n ½ [KL(p_n ‖ q_n) + KL(q_n ‖ p_n)] = Σ_n ½ Σ_v (p_nv − q_nv)(log p_nv − log q_nv)

    with p = softmax(logits_a), q = softmax(logits_b); logits_a, logits_b: [N, V] (computed in at
    least float32; float64 stays float64). Gradients flow into both (Liang et al., 2021).
    """
    if logits_a.shape != logits_b.shape or logits_a.dim() != 2:
        raise ValueError(f"symmetric_kl: expected two [N, V] tensors of one shape, got {tuple(logits_a.shape)} "
                         f"and {tuple(logits_b.shape)}")
    log_p = F.log_softmax(at_least_float32(logits_a), dim=-1)
    log_q = F.log_softmax(at_least_float32(logits_b), dim=-1)
    return 0.5 * ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum()


def select_attention(weights: torch.Tensor, layer: int, head: int | None) -> torch.Tensor:
    """One map [B, T, S] from a model's cross-attention [B, L, h, T, S] (``return_attention="heads"``):
    0-based ``layer`` and ``head``, ``head`` None = the mean over the heads."""
    per_head = weights[:, layer]
    return per_head.mean(dim=1) if head is None else per_head[:, head]


def guided_alignment_loss(attention: torch.Tensor, target: Any) -> torch.Tensor:
    """Σ −A · log a over every entry (a sum in at least float32); entries where A is 0 cost nothing.

    attention, target: [B, T, S]; ``a`` is clamped at 1e-9 so a zero weight under a link costs
    20.7 nats instead of infinity.
    """
    return -(target * at_least_float32(attention).clamp_min(1e-9).log()).sum()
