"""When a run improves, and what follows from it: the learning rate, early stopping, best.pt.

One ``PlateauTracker`` decides, with one rule, whether a validation improved: its loss is
strictly lower than the lowest so far. That decision alone drives

- ``best.pt``: written at every improvement;
- early stopping: after ``early_stopping_patience`` epoch-end validations without one;
- lr decay: the lr is multiplied by ``lr_decay`` after every ``lr_patience + 1`` epoch-end
  validations without one (as ReduceLROnPlateau, which resets its count after a decay).

Only epoch-end validations count towards the patience: the extra validation a step or time limit
makes mid-epoch can give a new best.pt, but a resumed run then counts as one never stopped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["LearningRateSchedule", "PlateauTracker"]


@dataclass
class PlateauTracker:
    """The lowest validation loss so far, where it was reached, and how long ago.

    stale: epoch-end validations since the last improvement.
    """

    best_loss: float = math.inf
    best_step: int = -1
    best_epoch: float = -1
    best_bleu: float | None = None
    stale: int = 0
    best_seconds: float | None = None  # training time to the best checkpoint
    best_tokens: int | None = None  # training target tokens to the best checkpoint

    def update(self, loss: float, step: int, epoch: float, bleu: float | None, at_epoch_end: bool,
               seconds: float | None = None, tokens: int | None = None) -> bool:
        """Account for one validation; True when it improved (its loss is the lowest so far)."""
        improved = loss < self.best_loss
        if improved:
            self.best_loss, self.best_step, self.best_epoch, self.best_bleu = loss, step, epoch, bleu
            self.best_seconds, self.best_tokens = seconds, tokens
            self.stale = 0
        elif at_epoch_end:
            self.stale += 1
        return improved

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PlateauTracker:
        return cls(**state)


class LearningRateSchedule:
    """The lr of every step: a per-step schedule times a decay on validation plateaus::

        lr(step) = lr · schedule(step) · plateau_scale
        schedule(step) = min(1, step / warmup_steps)                          "constant" (1 without warm-up)
                       = min(step / warmup_steps, sqrt(warmup_steps / step))  "inverse_sqrt"
                       = min(1, step / warmup_steps) · (m + (1 − m) · (1 + cos(π f)) / 2)   "cosine"
                       = min(1, step / warmup_steps) · (m + (1 − m) · min(1, (1 − f) / w))  "warmdown"

    For "cosine" and "warmdown", f in [0, 1] is the share of the training budget spent: the larger of
    step / max_steps and (training minutes) / max_minutes, whichever limits are set, so the lr
    falls from lr to min_lr (m = min_lr / lr) by the end of the budget (a one-cycle with its
    warm-up). "warmdown" holds the lr and lets it fall linearly to min_lr over the last share w
    (``warmdown_share``) of the budget only (warm-up, stable, decay: Hu et al. 2024): a short budget
    spends most of its steps at the full lr. With a time budget f follows the clock (rank 0's
    clock under torchrun, read every ``log_every`` steps), so two such runs differ slightly, as they
    already stop at different steps.

    ``plateau_scale`` starts at 1 and is multiplied by ``lr_decay`` after every ``lr_patience + 1``
    epoch-end validations without improvement (``on_plateau``); lr · plateau_scale never goes
    below ``min_lr``. Steps count from 1. ``state_dict`` / ``load_state_dict`` make it part of a
    checkpoint.
    """

    def __init__(self, optimizer, training) -> None:
        self.optimizer = optimizer
        self.base_lr = training.lr
        self.schedule = training.lr_schedule
        self.warmup_steps = training.warmup_steps
        self.decay = training.lr_decay
        self.patience = training.lr_patience
        self.min_lr = training.min_lr
        self.warmdown_share = training.warmdown_share
        self.plateau_scale = 1.0

    def factor(self, step: int, spent: float = 0.0) -> float:
        step = max(step, 1)
        if self.schedule == "inverse_sqrt":
            return min(step / self.warmup_steps, math.sqrt(self.warmup_steps / step))
        warm = min(1.0, step / self.warmup_steps) if self.warmup_steps > 0 else 1.0
        if self.schedule not in ("cosine", "warmdown"):
            return warm
        floor = min(1.0, self.min_lr / self.base_lr)
        spent = min(max(spent, 0.0), 1.0)
        if self.schedule == "cosine":
            fall = 0.5 * (1.0 + math.cos(math.pi * spent))
        else:  # warmdown: flat, then linear over the last warmdown_share of the budget
            fall = min(1.0, (1.0 - spent) / self.warmdown_share)
        return warm * (floor + (1.0 - floor) * fall)

    def lr(self, step: int, spent: float = 0.0) -> float:
        return self.base_lr * self.factor(step, spent) * self.plateau_scale

    def set_step(self, step: int, spent: float = 0.0) -> float:
        """Set the optimizer's lr for optimizer step ``step`` (1-based), ``spent`` the share of the
        budget used (for "cosine" and "warmdown"), and return it."""
        lr = self.lr(step, spent)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def on_plateau(self, stale: int) -> bool:
        """Decay after every ``patience + 1`` stale validations (``PlateauTracker.stale``); True when it did."""
        if stale == 0 or stale % (self.patience + 1) != 0 or self.decay >= 1.0:
            return False
        new_scale = max(self.plateau_scale * self.decay, self.min_lr / self.base_lr)
        decayed = new_scale < self.plateau_scale
        self.plateau_scale = new_scale
        return decayed

    def state_dict(self) -> dict[str, Any]:
        return {"plateau_scale": self.plateau_scale}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.plateau_scale = float(state["plateau_scale"])
