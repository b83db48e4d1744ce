"""Numeric precision of a model's matrix products: one name list, one check, one autocast, one scaler.

``fp32`` runs everything in float32. ``bf16`` and ``fp16`` run the matrix products under autocast
in bfloat16 or float16, on whatever device runs them; weights, gradients, optimizer state, losses
and log-probabilities stay float32 (``attnmt.models.common.log_probabilities``). fp16 has a narrow
range, so its training scales the loss by a dynamic factor (``torch.amp.GradScaler``) whose state
is saved with the checkpoint; bf16 has float32's range and needs none. On CPUs with AVX512-BF16 or
AMX, bf16 runs the products faster (docs/experiments.md, "A training step's speed"); on GPUs both 16-bit types use
the tensor cores. A CPU without bf16 arithmetic (no ``avx512_bf16`` or ``amx_bf16`` among its
flags, an AVX2 one say) can only emulate it: there the fast RNN recipe trained at 537 target
tokens/s in bf16 against 6,500 in fp32, so ``effective_precision`` runs fp32 instead and
``describe`` says so.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

from attnmt.errors import ConfigError
from attnmt.runtime.choices import PRECISIONS

__all__ = ["CPU_BF16_VARIABLE", "PRECISIONS", "autocast", "check_precision", "cpu_has_bf16", "effective_precision",
           "grad_scaler"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision, name: str = "precision") -> str:
    """``precision`` when it is one of PRECISIONS, else ConfigError naming ``name`` and the value."""
    if precision not in PRECISIONS:
        raise ConfigError(f"{name}: must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


#: ``on`` runs bf16 on any CPU (emulated where it has none: the tests do, to check bf16's numbers
#: on every machine), ``off`` never on a CPU; unset, ``cpu_has_bf16`` decides
CPU_BF16_VARIABLE = "ATTNMT_CPU_BF16"


def cpu_has_bf16() -> bool:
    """Whether bf16 runs on this CPU: its flags name ``avx512_bf16`` or ``amx_bf16`` (True where
    they cannot be read, not Linux, so that nothing changes there), or $ATTNMT_CPU_BF16 says so."""
    forced = os.environ.get(CPU_BF16_VARIABLE, "").strip().lower()
    if forced in ("on", "off"):
        return forced == "on"
    return _cpu_flags_have_bf16()


@functools.cache
def _cpu_flags_have_bf16() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    return flags is None or "avx512_bf16" in flags or "amx_bf16" in flags


def effective_precision(precision: str, device_type: str = "cpu") -> str:
    """The precision that runs: ``precision``, except bf16 on a CPU without bf16 arithmetic, which
    runs in fp32 (``cpu_has_bf16``; the module docstring says why)."""
    check_precision(precision)
    if precision == "bf16" and device_type == "cpu" and not cpu_has_bf16():
        return "fp32"
    return precision


def autocast(precision: str, device_type: str = "cpu"):
    """The autocast context for ``precision`` on ``device_type`` (disabled for fp32, and for bf16 on
    a CPU without bf16 arithmetic: ``effective_precision``)."""
    precision = effective_precision(precision, device_type)
    return torch.autocast(device_type, dtype=_DTYPES.get(precision, torch.bfloat16), enabled=precision != "fp32")


def grad_scaler(precision: str, device_type: str = "cpu") -> torch.amp.GradScaler:
    """A loss scaler, enabled only for fp16 (for fp32 and bf16 every call passes through unchanged)."""
    return torch.amp.GradScaler(device_type, enabled=check_precision(precision) == "fp16")
