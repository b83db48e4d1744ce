"""Where a run stands, and the running sums of what it has trained on since a point.

``Progress`` is the position (a checkpoint's ``progress``): ``epoch`` counts *completed* epochs,
``batch_in_epoch`` this rank's batches done in the current one. ``RunningStatistics`` sums the
global (all-reduced) numbers of the steps since it was last reset; the trainer keeps one per
logging window and one per epoch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import torch

__all__ = ["Progress", "RunningStatistics", "perplexity_of"]


def perplexity_of(loss: float) -> float:
    """exp(loss), NaN for a non-finite loss, without overflowing."""
    return math.exp(min(loss, 700.0)) if math.isfinite(loss) else float("nan")


#: a running sum: a number, or a 0-d tensor on the training device
Sum = Union[float, "torch.Tensor"]


@dataclass
class RunningStatistics:
    """Sums over steps: training loss, plain NLL and guide term (over target tokens), tokens,
    steps, seconds and gradient norms. The loss, NLL, guide and gradient-norm sums may be 0-d
    float64 tensors on the training device (added up there, read back only when a record is made)."""

    loss: Sum = 0.0
    nll: Sum = 0.0
    guide: Sum = 0.0
    tokens: float = 0.0
    steps: int = 0
    seconds: float = 0.0
    grad_norm: Sum = 0.0

    def update(self, loss: Sum, nll: Sum, guide: Sum, tokens: float, seconds: float, grad_norm: Sum) -> None:
        self.loss += loss
        self.nll += nll
        self.guide += guide
        self.tokens += tokens
        self.steps += 1
        self.seconds += seconds
        self.grad_norm += grad_norm

    def per_token(self, total) -> float:
        return float(total) / max(self.tokens, 1)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)

    def state_dict(self) -> dict[str, Any]:
        return {key: value if isinstance(value, int) else float(value) for key, value in asdict(self).items()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> RunningStatistics:
        return cls(**state)


@dataclass
class Progress:
    """The position of a run; a checkpoint stores it (with the plateau tracker and the running sums)."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    elapsed_seconds: float = 0.0
    target_tokens: int = 0  # training target tokens seen, over all ranks (EOS included)
    last_eval_step: int = -1
    stop_reason: str | None = None
    world_size: int = 1

    def position(self) -> tuple[int, int, int, int]:
        """What a checkpoint of this moment would hold: a new one is written only when it changed."""
        return (self.step, self.epoch, self.batch_in_epoch, self.last_eval_step)

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Progress:
        return cls(**{key: state[key] for key in cls.__dataclass_fields__ if key in state})
