"""Numeric precision of a model's matrix products: one name list, one check, one autocast, one scaler.

``fp32`` runs everything in float32. ``bf16`` and ``fp16`` run the matrix products under autocast
in bfloat16 or float16, on whatever device runs them; weights, gradients, optimizer state, losses
and log-probabilities stay float32 (``attnmt.models.common.log_probabilities``). fp16 has a narrow
range, so its training scales the loss by a dynamic factor (``torch.amp.GradScaler``) whose state
is saved with the checkpoint; bf16 has float32's range and needs none. On CPUs with AVX512-BF16 or
AMX, bf16 runs the products faster (docs/results.md, "Precision"); on GPUs both 16-bit types use
the tensor cores.
"""

from __future__ import annotations

import torch

from attnmt.errors import ConfigError
from attnmt.runtime.choices import PRECISIONS

__all__ = ["PRECISIONS", "autocast", "check_precision", "grad_scaler"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision, name: str = "precision") -> str:
    """``precision`` when it is one of PRECISIONS, else ConfigError naming ``name`` and the value."""
    if precision not in PRECISIONS:
        raise ConfigError(f"{name}: must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def autocast(precision: str, device_type: str = "cpu"):
    """The autocast context for ``precision`` on ``device_type`` (disabled for fp32)."""
    check_precision(precision)
    return torch.autocast(device_type, dtype=_DTYPES.get(precision, torch.bfloat16), enabled=precision != "fp32")


def grad_scaler(precision: str, device_type: str = "cpu") -> torch.amp.GradScaler:
    """A loss scaler, enabled only for fp16 (for fp32 and bf16 every call passes through unchanged)."""
    return torch.amp.GradScaler(device_type, enabled=check_precision(precision) == "fp16")
