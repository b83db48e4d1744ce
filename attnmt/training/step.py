"""One optimizer step's forward and backward pass.

With N real target tokens in the global batch (all ranks), the loss whose gradient a step takes is::

    L = (1/N) · [Σ_t token_loss_t  +  λ · Σ −A log a]          (attnmt.models.losses)

the second term only when training is guided by word links. With R-Drop (``training.rdrop_weight``
α > 0; Liang et al., 2021) the batch goes through the model twice in one forward pass (two copies,
two dropout masks), and the summed token loss becomes::

    ½ (Σ_t loss¹_t + Σ_t loss²_t)  +  (α/2) · Σ_t ½ [KL(p¹_t ‖ p²_t) + KL(p²_t ‖ p¹_t)]

half of Liang et al.'s loss, so that α means what it means there and the learning rate needs no
change; the guide term then reads the first copy's attention. Each rank backpropagates its share
``loss_sum · world_size / N``; DistributedDataParallel averages the gradients over the ranks, so
the step equals one process's step on the whole global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnmt.models.common import at_least_float32
from attnmt.models.losses import guided_alignment_loss, select_attention, symmetric_kl, token_losses
from attnmt.runtime.precision import autocast

__all__ = ["GuideBatch", "StepStats", "backward_on_batch"]


@dataclass
class StepStats:
    """Sums over the real target tokens of one batch (of this rank). The sums are 0-d tensors on
    the model's device, detached: reading them (``float``) waits for the device, so the trainer
    adds them up as tensors and reads them only when it logs."""

    loss_sum: torch.Tensor  # label-smoothed training loss (without the guide term)
    nll_sum: torch.Tensor  # plain negative log-likelihood
    num_tokens: int
    guide_sum: torch.Tensor | float = 0.0  # Σ −A log a of the guided-alignment term (before its weight)


@dataclass
class GuideBatch:
    """The guided-alignment term of one batch: target A [B, T, S] (``attnmt.data.link_files``), weight λ,
    and the 0-based layer and head (None = mean) of the cross-attention it guides."""

    target: torch.Tensor
    weight: float
    layer: int
    head: int | None


def backward_on_batch(  # noqa: PLR0913 (the step's settings, each a keyword)
    model, batch, label_smoothing: float, global_tokens: float, world_size: int = 1, precision: str = "fp32",
    guide: GuideBatch | None = None, scaler: torch.amp.GradScaler | None = None, rdrop_weight: float = 0.0,
) -> StepStats:
    """Forward ``batch`` through ``model`` (plain or DDP-wrapped, on the batch's device) and
    backpropagate its share of the global loss ``loss_sum · world_size / global_tokens`` (plus the
    guide term).

    ``precision`` "bf16" or "fp16" runs the forward pass under autocast on the batch's device; the
    loss is computed from logits in at least float32 (a float64 model's stay float64) and the
    gradients arrive in the parameters' own precision. With ``scaler`` (fp16) the loss is scaled
    before the backward pass; unscale before clipping. ``rdrop_weight`` > 0: R-Drop (module docstring);
    the sums returned are then the means of the two passes'.
    """
    if global_tokens <= 0:
        raise ValueError(f"backward_on_batch: global_tokens must be > 0, got {global_tokens}")
    twice = rdrop_weight > 0
    # the output layer's rows: the real tokens, or with them the padding that puts their count on the
    # token ladder (attnmt.data.batching, "The output layer's rows"; R-Drop keeps the real ones only)
    scored = None if twice else batch.scored_mask
    src, src_mask, tgt_in, tgt_mask = (torch.cat([t, t]) if twice else t
                                       for t in (batch.src, batch.src_mask, batch.tgt_in,
                                                 batch.tgt_mask if scored is None else scored))
    with autocast(precision, batch.src.device.type):
        logits, attention = model(src, src_mask, tgt_in, return_attention="heads" if guide else False,
                                  tgt_mask=tgt_mask)  # logits of the scored tokens only: [N, V] ([2N, V] twice)
    logits = at_least_float32(logits)
    if twice:  # the real tokens of the first copy, then those of the second
        first, second = logits.chunk(2)
        loss_a, nll_a, count = token_losses(first, batch.tgt_out, batch.tgt_mask, label_smoothing)
        loss_b, nll_b, _ = token_losses(second, batch.tgt_out, batch.tgt_mask, label_smoothing)
        loss_sum, nll_sum = 0.5 * (loss_a + loss_b), 0.5 * (nll_a + nll_b)
        total = loss_sum + 0.5 * rdrop_weight * symmetric_kl(first, second)
        if attention is not None:
            attention = attention[: batch.src.shape[0]]
    else:
        loss_sum, nll_sum, count = token_losses(logits, batch.tgt_out, batch.tgt_mask, label_smoothing, scored)
        total = loss_sum
    guide_sum: float | torch.Tensor = 0.0
    if guide is not None:
        guide_term = guided_alignment_loss(select_attention(attention, guide.layer, guide.head), guide.target)
        total = total + guide.weight * guide_term
        guide_sum = guide_term.detach()
    share = total * (world_size / global_tokens)
    (scaler.scale(share) if scaler is not None else share).backward()
    return StepStats(loss_sum.detach(), nll_sum, count, guide_sum)
