"""An exponential moving average of the weights (Polyak & Juditsky 1992), for ``training.ema_decay``.

After every optimizer step t = 1, 2, ... each trained parameter θ updates its average θ̄::

    d_t = min(decay, (1 + t) / (10 + t))        # a short memory while the weights move fast
    θ̄  ← d_t · θ̄ + (1 − d_t) · θ                # θ̄ starts as the initial weights

The average changes less from step to step than θ does, so it sits nearer the bottom of the valley
the optimizer bounces across: with a large constant learning rate and a budget of minutes, it
scores better than the last weights (docs/experiments.md, "A good translator in minutes"). Validation,
``best.pt`` and ``last.pt``'s ``model`` hold the average, so every command that reads a run uses
it; ``last.pt`` also keeps the weights being trained, to continue from them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from attnmt.errors import CheckpointError

__all__ = ["WeightAverage"]

WARM_UP = 10  # d_t = min(decay, (1 + t) / (WARM_UP + t))


class WeightAverage:
    """θ̄ of every parameter of ``model`` that requires a gradient (float32, on the model's device)."""

    def __init__(self, model: torch.nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"WeightAverage: decay must be in (0, 1), got {decay!r}")
        self.decay = decay
        self.updates = 0
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self._parameters: list[torch.Tensor] = [p for _, p in named]
        self.average = [p.detach().clone() for p in self._parameters]

    def current_decay(self) -> float:
        """d_t of the next update."""
        t = self.updates + 1
        return min(self.decay, (1 + t) / (WARM_UP + t))

    @torch.no_grad()
    def update(self) -> None:
        """θ̄ ← d_t · θ̄ + (1 − d_t) · θ for every parameter: call after each optimizer step."""
        weight = 1.0 - self.current_decay()
        torch._foreach_lerp_(self.average, [p.detach() for p in self._parameters], weight)
        self.updates += 1

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Inside the block the model holds θ̄; after it (even on an error) its own θ again."""
        with torch.no_grad():
            trained = [p.detach().clone() for p in self._parameters]
            torch._foreach_copy_(self._parameters, self.average)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self._parameters, trained)

    def training_state(self) -> dict[str, Any]:
        """For ``last.pt``: the decay, the number of updates and the weights being trained, θ (the
        checkpoint's ``model`` holds θ̄)."""
        return {"decay": self.decay, "updates": self.updates,
                "training_weights": {name: p.detach().clone() for name, p in zip(self.names, self._parameters)}}

    @torch.no_grad()
    def restore(self, state: dict[str, Any], source: str) -> None:
        """Continue from ``training_state()``: the model holds θ̄ (the checkpoint's ``model``), which
        becomes the average, and takes θ back from the state. ``source`` names the file in errors."""
        weights = state.get("training_weights") if isinstance(state, dict) else None
        if not isinstance(weights, dict) or not isinstance(state.get("updates"), int):
            raise CheckpointError(f"{source}: its weight_average is not a saved average (damaged or foreign file)")
        missing = [name for name in self.names if name not in weights]
        if missing:
            raise CheckpointError(f"{source}: its weight_average lacks {', '.join(missing[:3])}: "
                                  f"saved from another model")
        for name, average, parameter in zip(self.names, self.average, self._parameters):
            saved = weights[name]
            if not isinstance(saved, torch.Tensor) or saved.shape != parameter.shape:
                raise CheckpointError(f"{source}: its weight_average's {name} does not fit the model")
            average.copy_(parameter)
            parameter.copy_(saved)
        self.updates = state["updates"]
