"""Dropout (Srivastava et al. 2014) with a choice of how its random mask is drawn (``model.dropout_mask``).

In training, each element of x is kept with probability q and scaled by 1/q, so E[y] = x::

    y = x ⊙ m / q,   m_i ∈ {0, 1}                                  x, y: [...] (any shape)

- ``"bernoulli"`` (the default, what every run before this option used): ``F.dropout``, which
  draws one float per element, m_i ~ Bernoulli(1 − p), so q = 1 − p.
- ``"bytes"``: one random byte u_i per element, uniform on {0, …, 255}, and m_i = [u_i ≥ k] with
  k = round(256 p), at most 255. Then q = 1 − k/256: p = 0.2 drops with probability 51/256 ≈ 0.1992.
  The bytes come eight to one 64-bit draw, so the mask costs a fraction of ``F.dropout``'s on a
  CPU (docs/experiments.md, "A training step's speed"). Other masks than ``F.dropout``'s, so the same
  seed trains other numbers: that is why it is not the default.

Outside training, and for p = 0 (or k = 0), both return x unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DROPOUT_MASKS", "Dropout", "byte_dropout", "dropout"]

DROPOUT_MASKS = ("bernoulli", "bytes")
_LOWEST_INT64 = -(2**63)


def byte_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """y = x ⊙ [u ≥ k] · 256/(256 − k), u uniform bytes, k = min(round(256 p), 255) (module docstring)."""
    dropped = min(round(256 * p), 255)
    if not training or dropped == 0:
        return x
    count = x.numel()
    words = torch.empty((count + 7) // 8, dtype=torch.int64, device=x.device).random_(_LOWEST_INT64, None)
    draws = words.view(torch.uint8)[:count].view(x.shape)  # all 64 bits of each word: 8 uniform bytes
    scaled_keep = (draws >= dropped).to(x.dtype).mul_(256 / (256 - dropped))
    return x * scaled_keep


def dropout(x: torch.Tensor, p: float, training: bool, mask: str = "bernoulli") -> torch.Tensor:
    """Dropout of x with the mask ``mask`` draws (``DROPOUT_MASKS``); x unchanged outside training."""
    if mask == "bytes":
        return byte_dropout(x, p, training)
    return F.dropout(x, p, training)


class Dropout(nn.Module):
    """``nn.Dropout`` with a choice of mask: ``dropout(x, p, self.training, mask)``. No parameters."""

    def __init__(self, p: float, mask: str = "bernoulli") -> None:
        super().__init__()
        if mask not in DROPOUT_MASKS:
            raise ValueError(f"Dropout: mask must be one of {', '.join(DROPOUT_MASKS)}, got {mask!r}")
        self.p = p
        self.mask = mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training, self.mask)

    def extra_repr(self) -> str:
        return f"p={self.p}, mask={self.mask}"
