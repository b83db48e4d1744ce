"""TensorBoard event files of a run (``training.tensorboard: true``), beside its metrics.jsonl.

Every record the trainer writes to metrics.jsonl also goes to ``RUN/tensorboard`` as scalars at
its step: ``train/loss``, ``train/ppl``, ``train/lr``, ``train/grad_norm`` and
``train/tokens_per_s`` from the ``train`` records, ``valid/loss``, ``valid/ppl`` and
``valid/bleu`` from the validations. ``tensorboard --logdir runs`` then shows every run.
TensorBoard is an optional extra (``pip install attnmt[tensorboard]``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from attnmt.errors import ConfigError

__all__ = ["TENSORBOARD_DIR", "TensorBoardLog"]

TENSORBOARD_DIR = "tensorboard"
SCALARS = {
    "train": {"loss": "train/loss", "ppl": "train/ppl", "lr": "train/lr", "grad_norm": "train/grad_norm",
              "tokens_per_s": "train/tokens_per_s"},
    "valid": {"val_loss": "valid/loss", "val_ppl": "valid/ppl", "val_bleu": "valid/bleu"},
}
SCALARS["epoch"] = SCALARS["valid"]  # a validation at an epoch's end


class TensorBoardLog:
    """Writes metrics records as TensorBoard scalars into ``run_dir/tensorboard``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.check_available()
        from torch.utils.tensorboard import SummaryWriter  # an optional extra: imported only when asked for

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / TENSORBOARD_DIR))

    @staticmethod
    def check_available() -> None:
        """ConfigError, before any work, when the tensorboard package is not installed."""
        if importlib.util.find_spec("tensorboard") is None:
            raise ConfigError("training.tensorboard: true needs the tensorboard package; "
                              "pip install 'attnmt[tensorboard]' (or set it to false)")

    def add(self, record: dict[str, Any]) -> None:
        for key, tag in SCALARS.get(str(record.get("type")), {}).items():
            if record.get(key) is not None:
                self.writer.add_scalar(tag, float(record[key]), global_step=int(record["step"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
