"""Kept checkpoints of a run and their average (``training.keep_checkpoints``, ``attnmt average``).

With ``training.keep_checkpoints: N`` the trainer writes the weights being trained, θ, every
``checkpoint_every`` steps to ``RUN/checkpoints/step-<step>.pt`` and keeps the newest N. Averaging
the last K of them (Vaswani et al. 2017 average their last checkpoints) gives::

    θ_avg = (1/K) · Σ_{i=1..K} θ_i          # element-wise, in float64, stored in each weight's dtype

written to ``RUN/averaged.pt``, a checkpoint every command reads (``--checkpoint averaged``). It is
an alternative to the moving average of ``training.ema_decay``, which weighs recent steps more and
is what best.pt holds: a snapshot holds θ, never the moving average.

Every snapshot is read as any checkpoint is (``load_checkpoint``: plain data only, never code);
snapshots of another model, another vocabulary or other shapes are refused, naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path

from attnmt.errors import CheckpointError, ConfigError
from attnmt.runs.checkpoint import load_checkpoint, make_checkpoint, save_checkpoint

__all__ = ["SNAPSHOT_FOLDER", "average_snapshots", "list_snapshots", "prune_snapshots", "snapshot_path",
           "write_average"]

SNAPSHOT_FOLDER = "checkpoints"
_NAME = re.compile(r"step-(\d{1,12})\.pt")


def snapshot_path(run_dir: str | Path, step: int) -> Path:
    """Where the trainer keeps the weights of ``step``: ``RUN/checkpoints/step-<step, 8 digits>.pt``."""
    return Path(run_dir) / SNAPSHOT_FOLDER / f"step-{step:08d}.pt"


def list_snapshots(run_dir: str | Path) -> list[tuple[int, Path]]:
    """The kept snapshots of a run as (step, file), oldest first; other files in the folder are ignored."""
    folder = Path(run_dir) / SNAPSHOT_FOLDER
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _NAME.fullmatch(path.name)
        if match and path.is_file() and not path.is_symlink():
            found.append((int(match.group(1)), path))
    return sorted(found)


def prune_snapshots(run_dir: str | Path, keep: int | None, after_step: int | None = None) -> list[int]:
    """Delete the snapshots beyond the newest ``keep`` (None = keep them all), and (``after_step``)
    those of steps after it: a resumed run trains those steps again. Returns the deleted steps."""
    snapshots = list_snapshots(run_dir)
    stale = [(step, path) for step, path in snapshots if after_step is not None and step > after_step]
    current = [entry for entry in snapshots if entry not in stale]
    doomed = stale + (current[:len(current) - keep] if keep is not None and keep < len(current) else [])
    for _, path in doomed:
        path.unlink(missing_ok=True)
    return sorted(step for step, _ in doomed)


def average_snapshots(run_dir: str | Path, last: int | None = None) -> tuple[dict, list[int]]:
    """The checkpoint (``make_checkpoint``) whose weights are the mean of the newest ``last`` snapshots
    (None = all of them), with the config and tokenizers of the newest, and the steps averaged.

    ConfigError when the run kept none or fewer than ``last``; CheckpointError, naming the file,
    when a snapshot does not fit the others (another model, vocabulary or shapes)."""
    run_dir = Path(run_dir)
    snapshots = list_snapshots(run_dir)
    if not snapshots:
        raise ConfigError(f"{run_dir / SNAPSHOT_FOLDER}: no kept checkpoints to average; train with "
                          "--set training.keep_checkpoints=5 (the trainer then keeps the last 5, one "
                          "every checkpoint_every steps)")
    if last is not None:
        if last < 1:
            raise ConfigError(f"last={last}: average at least 1 checkpoint")
        if last > len(snapshots):
            kept = ", ".join(str(step) for step, _ in snapshots)
            raise ConfigError(f"last={last}: {run_dir / SNAPSHOT_FOLDER} keeps only {len(snapshots)} "
                              f"(steps {kept}); average at most {len(snapshots)}")
        snapshots = snapshots[-last:]
    newest = load_checkpoint(snapshots[-1][1])
    sums = {name: value.double() if value.is_floating_point() else value for name, value in newest["model"].items()}
    for _, path in snapshots[:-1]:
        checkpoint = load_checkpoint(path)
        _check_fits(checkpoint, newest, path, snapshots[-1][1])
        for name, value in checkpoint["model"].items():
            if value.is_floating_point():
                sums[name] += value.double()
    count = len(snapshots)
    model = {name: (total / count).to(newest["model"][name].dtype) if total.is_floating_point() else total
             for name, total in sums.items()}
    steps = [step for step, _ in snapshots]
    extra = {key: newest[key] for key in ("attention_code",) if key in newest}
    averaged = make_checkpoint(config=newest["config"], model_state=model, tokenizers=newest["tokenizers"],
                               averaged_steps=steps, **extra)
    return averaged, steps


def _check_fits(checkpoint: dict, newest: dict, path: Path, newest_path: Path) -> None:
    """CheckpointError when ``checkpoint`` cannot be averaged with ``newest``."""
    if checkpoint["config"].get("model") != newest["config"].get("model"):
        raise CheckpointError(f"{path}: another model than {newest_path} (its config's model section differs); "
                              "average snapshots of one run only")
    if checkpoint["tokenizers"] != newest["tokenizers"]:
        raise CheckpointError(f"{path}: another vocabulary than {newest_path}; average snapshots of one run only")
    mine, theirs = checkpoint["model"], newest["model"]
    if set(mine) != set(theirs) or any(mine[name].shape != theirs[name].shape for name in theirs):
        raise CheckpointError(f"{path}: its weights do not have the names and shapes of {newest_path}'s")


def write_average(run_dir: str | Path, out: str | Path, last: int | None = None) -> tuple[Path, list[int]]:
    """``average_snapshots`` written atomically to ``out``; returns the file and the steps averaged."""
    checkpoint, steps = average_snapshots(run_dir, last)
    return save_checkpoint(checkpoint, out), steps
