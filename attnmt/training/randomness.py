"""Random states: seeding a run, and saving and restoring every generator with a checkpoint.

The batches of epoch e are a function of (seed, e) only (``attnmt.data.batching``); initialisation
and dropout draw from torch's generator. A checkpoint holds the torch, NumPy and Python states of
every rank, so a run resumed from it draws exactly the numbers a run never stopped would have.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["capture_rng_state", "restore_rng_state", "seed_everything"]


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators from one seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng_state() -> dict[str, Any]:
    """torch (and CUDA's, where there is CUDA), NumPy and Python random states as plain data
    (loadable with weights_only=True)."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    cuda = {"cuda": torch.cuda.get_rng_state_all()} if torch.cuda.is_available() else {}
    return {
        **cuda,
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python": random.getstate(),
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Set every generator to a state made by ``capture_rng_state``."""
    torch.set_rng_state(state["torch"])
    numpy_state = state["numpy"]
    np.random.set_state((
        numpy_state["kind"],
        numpy_state["keys"].numpy().astype(np.uint32),
        numpy_state["position"],
        numpy_state["has_gauss"],
        numpy_state["cached_gaussian"],
    ))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)  # a run moved to a machine with other GPUs starts them afresh
