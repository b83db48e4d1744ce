"""Helpers both models share: the target-mask check, the float32-when-16-bit log-softmax,
parameter counting, and naming a layer and head of cross-attention."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from attnmt.errors import ConfigError

__all__ = ["MAX_SIZE", "check_target_mask", "count_parameters", "default_layer", "log_probabilities",
           "resolve_position"]

#: the largest model dimension or layer count a config may give: far above any model that fits in
#: memory (which the trainer checks), and low enough that the products of sizes torch computes stay
#: within its 64-bit integers (2**70 reached torch and came back as a C++ stack trace)
MAX_SIZE = 2**20


def check_target_mask(tgt_mask: torch.Tensor | None, tgt_in: torch.Tensor) -> torch.Tensor:
    """``forward``'s ``tgt_mask`` must be a bool tensor shaped like ``tgt_in`` [B, T]; returns it."""
    if not isinstance(tgt_mask, torch.Tensor) or tgt_mask.dtype != torch.bool or tgt_mask.shape != tgt_in.shape:
        raise ValueError(
            f"tgt_mask must be a bool tensor of tgt_in's shape {tuple(tgt_in.shape)}, got "
            f"{getattr(tgt_mask, 'dtype', type(tgt_mask).__name__)} {tuple(getattr(tgt_mask, 'shape', ()))}"
        )
    return tgt_mask


def at_least_float32(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in float32 when it is in a 16-bit type (autocast's products), else unchanged: a
    float64 model's numbers stay float64, so it can serve as a reference."""
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


def log_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """log_softmax over the last axis, in at least float32 (:func:`at_least_float32`)."""
    return torch.log_softmax(at_least_float32(logits), dim=-1)


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters; a tied weight counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def default_layer(layers: int) -> int:
    """The layer read by default, numbered from 1: the penultimate one (the only one when ``layers`` is 1)."""
    return max(1, layers - 1)


def resolve_position(value: int, count: int, what: str) -> int:
    """A 1-based layer or head number, or a negative one counting from the end, as a 0-based index.

    ConfigError naming ``count`` when it is out of range (``what`` is e.g. "decoder layer").
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"the {what} must be an integer, got {value!r}")
    value = int(value)
    if 1 <= value <= count:
        return value - 1
    if -count <= value <= -1:
        return count + value
    plural = what if count == 1 else f"{what}s"
    raise ConfigError(
        f"{what} {value} is out of range: the model has {count} {plural} with attention over the source "
        f"(give 1..{count}, or -1 for the last)"
    )
