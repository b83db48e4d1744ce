"""A run folder: its file names, its checkpoints, and the policy for starting and resuming.

Files of a run folder (written by ``attnmt train``; only rank 0 writes)::

    config.yaml                      the resolved run config
    spm.*.model, tokenizers.json     the tokenizers (also inside every checkpoint)
    last.pt, best.pt                 checkpoints (attnmt.runs.checkpoint); best.pt holds no optimizer state
    metrics.jsonl                    one JSON record a line: "train" every log_every steps, "epoch" per
                                     validation at an epoch end, "valid" for the validation when a step or
                                     time limit stops training mid-epoch, and a final "summary"
    examples/epochNN-K.png           attention heatmaps of validation sentence K after epoch NN
    user_attention.py, .json         a user mechanism's file as trained, and its spec, place and SHA-256

and by ``attnmt evaluate`` (``-bf16`` ends the names of a bf16 search's files)::

    hyps-<split>[-beamK].txt         the translations, one a line
    eval-<split>[-beamK].json        perplexity, BLEU, chrF and their signatures
    beam-<split>.json, .md           the beam-size table
    examples/<split>-NNN.png         heatmaps of the first sentences

A folder with files in it is only trained into again with ``--resume``; a resumed run keeps its
own config, except for the limits and reporting keys in ``RESUMABLE_CHANGES``.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from attnmt.attention.provenance import CodeRecord
from attnmt.data.data_config import DataConfig
from attnmt.errors import CheckpointError, ConfigError, ConfigMismatch
from attnmt.runs.run_config import (
    DuplicateKeyError,
    RunConfig,
    with_old_defaults,
    yaml_error_line,
    yaml_load,
)
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.checks import check_plain_name
from attnmt.runtime.reading import DataTooLarge, read_text_bounded

__all__ = [
    "AVERAGED", "BEST", "CONFIG_FILE", "LAST", "LOCK", "MACHINE_FIELDS", "METRICS", "RESUMABLE_CHANGES",
    "append_metrics", "beam_table_path", "check_run_dir", "checkpoint_path", "config_differences", "data_of_run",
    "eval_json_path",
    "hyps_path",
    "machine_free", "read_code_summary", "read_saved_config", "resolve_resume_config", "training_finished",
    "with_old_defaults", "write_metrics", "writer_lock",
]

LAST, BEST, AVERAGED = "last.pt", "best.pt", "averaged.pt"
METRICS = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
CHECKPOINT_NAMES = {"best": BEST, "last": LAST, "averaged": AVERAGED}  # averaged: attnmt average
CODE_COPY, CODE_RECORD = "user_attention.py", "user_attention.json"  # a user mechanism's code, as trained
LOCK = ".attnmt.lock"  # held by the process writing into a folder (train, compare)

# Training keys a resumed run may change: the limits, how often it reports, and where it runs.
RESUMABLE_CHANGES = {
    "max_epochs", "max_steps", "max_minutes", "log_every", "checkpoint_every", "num_threads",
    "bleu_max_sentences", "examples", "device", "keep_checkpoints",
}


# ------------------------------------------------------------------------------- checkpoints


def checkpoint_path(run: str | Path, checkpoint: str = "best") -> Path:
    """The checkpoint file of a run folder (``best``/``last``/``averaged``), or ``run`` itself when it is a file."""
    run = Path(run)
    if run.is_file():
        return run
    if not run.exists():
        raise CheckpointError(f"{run}: no such run folder or checkpoint file")
    path = run / CHECKPOINT_NAMES.get(checkpoint, checkpoint)
    if not path.is_file() and checkpoint == "averaged":
        raise CheckpointError(f"{path}: checkpoint not found; average the run's kept checkpoints first: "
                              f"attnmt average {run}")
    if not path.is_file():
        other = [name for name, file in CHECKPOINT_NAMES.items() if (run / file).is_file() and name != checkpoint]
        hint = f"; this run has {' and '.join(other)} (use checkpoint={other[0]})" if other else \
            "; the run has no checkpoint yet"
        raise CheckpointError(f"{path}: checkpoint not found{hint}")
    return path


# ------------------------------------------------------------------------------- start or resume


def check_run_dir(run_dir: str | Path, resume: bool) -> bool:
    """Decide whether ``run_dir`` starts a new run or continues one; True = continue from last.pt.

    A folder with files in it is only used with ``resume``; without a ``last.pt`` there, ``resume``
    starts the run afresh (it was stopped before its first checkpoint), unless a ``best.pt`` shows
    that it trained further. Raises ConfigError otherwise.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: exists and is not a folder; choose another folder")
    has_files = run_dir.is_dir() and any(path.name != LOCK for path in run_dir.iterdir())
    if not resume:
        if has_files:
            raise ConfigError(
                f"{run_dir}: run folder already exists and is not empty; pass resume=True to continue "
                f"that run, or choose another folder (nothing was overwritten)"
            )
        return False
    if not (run_dir / LAST).is_file() and (run_dir / BEST).is_file():
        raise ConfigError(
            f"{run_dir / LAST}: missing, but the run has a {BEST}: it trained past a checkpoint, so starting "
            f"it afresh would overwrite that; copy {BEST} elsewhere or start a new run in another folder"
        )
    return (run_dir / LAST).is_file()


@contextmanager
def writer_lock(folder: str | Path, command: str) -> Iterator[None]:
    """Hold ``folder/.attnmt.lock`` while this process writes into ``folder``: a second ``attnmt
    train`` into the same run folder, or a second ``attnmt compare`` into the same output folder,
    is refused in one line instead of interleaving its writes. The lock is an advisory ``flock``,
    so the kernel releases it when the process ends, even by SIGKILL."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: exists and is not a folder; choose another folder")
    created_folder = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = folder / LOCK
        created_lock = not lock.exists()
        handle = open(lock, "a", encoding="utf-8")
    except PermissionError:
        raise ConfigError(f"{folder}: no permission to write into this folder; choose another folder") from None
    except OSError as error:
        raise ConfigError(f"{folder}: cannot write into this folder ({error.strerror or error})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"{folder}: another attnmt {command} is writing into this folder right now (it holds "
                f"{folder / LOCK}); wait for it to end, or choose another folder"
            ) from None
        try:
            yield
        finally:
            # What this process made only to hold the lock goes: a refused or failed start leaves
            # the user's folder as it was, and no empty run folder that would block a rerun.
            if created_lock:
                lock.unlink(missing_ok=True)
            fcntl.flock(handle, fcntl.LOCK_UN)
            if created_folder and not any(folder.iterdir()):
                folder.rmdir()


def read_saved_config(run_dir: str | Path) -> dict | None:
    """The run's ``config.yaml`` as a plain dict, None when there is none; ConfigError when unreadable.

    A run saved before an option existed ran as ``attnmt.runs.run_config.with_old_defaults`` says,
    which the dict then holds: a new default must not change a run half-way through (``train
    --resume``)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        saved = yaml_load(read_text_bounded(path))
    except DataTooLarge as error:
        raise ConfigError(f"{path}: the run's config {error}; it cannot be a run's config") from None
    except DuplicateKeyError as error:
        raise ConfigError(f"{path}:{error.line}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: the run's config is {yaml_error_line(error)}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the run's config ({error})") from None
    if not isinstance(saved, dict):
        found = "empty" if saved is None else f"a {type(saved).__name__}, not a mapping of sections"
        raise ConfigError(f"{path}: the run's config is {found}; it was damaged (each checkpoint keeps a copy "
                          "of the config)")
    return with_old_defaults(saved)


def config_differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    differences = []
    for key in sorted(set(old) | set(new), key=str):
        name = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            differences += config_differences(a, b, prefix=f"{name}.")
        elif a != b and not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and list(a) == list(b)):
            differences.append(f"{name} ({a!r} in the run, {b!r} now)")
    return differences


def resolve_resume_config(saved_config: dict, requested: RunConfig | None, limits: dict[str, Any],
                          run_dir: str | Path | None = None) -> RunConfig:
    """The config a resumed run continues with: the run's own, with new limits.

    requested: the config given again on the command line (if any); it must equal the run's,
        except for the keys in RESUMABLE_CHANGES, or ConfigError lists the differences.
    limits: overrides of max_epochs / max_steps / max_minutes (None = keep).
    run_dir: the run folder, whose config.yaml's relative data paths start there (as ``evaluate``'s do).
    """
    saved = RunConfig.from_dict(saved_config, base_dir=run_dir)
    if requested is not None:
        old, new = saved.to_dict(), requested.to_dict()
        for section in (old, new):
            for key in RESUMABLE_CHANGES:
                section["training"].pop(key, None)
        differences = config_differences(old, new)
        if differences:
            raise ConfigMismatch(
                "resume=True: the config differs from the one the run was started with: "
                + "; ".join(differences)
                + ". Resume without giving the config again (the run's own config is used) or start a new run.",
                differences,
            )
        for key in RESUMABLE_CHANGES:
            setattr(saved.training, key, getattr(requested.training, key))
    for key, value in limits.items():
        if value is not None:
            setattr(saved.training, key, value)
    saved.training.validate()
    return saved


# ------------------------------------------------------------------------------- metrics.jsonl


#: record fields that depend on the machine and the moment: time, memory, and the thread count
#: (it follows the machine's load unless fixed)
MACHINE_FIELDS = ("elapsed", "tokens_per_s", "val_seconds", "resident_gib", "allocated_gib", "threads")


def machine_free(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metric records without the fields that measure the machine (``MACHINE_FIELDS``): what two runs
    of the same seed must agree on, bit for bit, with a fixed thread count."""
    return [{k: v for k, v in r.items() if k not in MACHINE_FIELDS} for r in records]


def append_metrics(run_dir: str | Path, record: dict[str, Any]) -> None:
    """Append one record to the run's metrics.jsonl."""
    with open(Path(run_dir) / METRICS, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def write_metrics(run_dir: str | Path, records: list[dict[str, Any]]) -> None:
    """Replace the run's metrics.jsonl by ``records`` (atomically)."""
    write_text_atomic(Path(run_dir) / METRICS, "".join(json.dumps(r) + "\n" for r in records))


def training_finished(run_dir: str | Path) -> bool:
    """True when the run's metrics.jsonl ends with the trainer's final ``summary`` record."""
    path = Path(run_dir) / METRICS
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (FileNotFoundError, UnicodeDecodeError):
        return False
    if not lines:
        return False
    try:
        return json.loads(lines[-1]).get("type") == "summary"
    except (json.JSONDecodeError, AttributeError):
        return False  # a line cut short by a kill: the run did not finish


# ------------------------------------------------------------------------------- evaluation files


def data_of_run(run_dir: str | Path, stored: DataConfig) -> DataConfig:
    """The ``data`` section of the run folder's ``config.yaml`` (relative paths from the run
    folder): a user who moves a run with its data points it there. The checkpoint's own section
    when the folder has no ``config.yaml``."""
    saved = read_saved_config(run_dir)
    if saved is None:
        return stored
    try:
        return RunConfig.from_dict(saved, base_dir=Path(run_dir)).data
    except ConfigError as error:
        raise ConfigError(f"{Path(run_dir) / CONFIG_FILE}: {error}") from None


def _suffix(split: str, beam: int, precision: str = "fp32") -> str:
    """``<split>`` for greedy search, ``<split>-beam<K>`` otherwise, then ``-bf16`` for a bf16 search.
    The split's name is checked to be a plain name: it may come from a hand-edited config."""
    check_plain_name(split, "split")
    return split + (f"-beam{beam}" if beam > 1 else "") + ("" if precision == "fp32" else f"-{precision}")


def eval_json_path(run_dir: str | Path, split: str, beam: int, precision: str = "fp32", variant: str = "") -> Path:
    """Where ``attnmt evaluate`` keeps a run's scores on ``split`` with ``beam`` and ``precision``;
    ``variant`` (e.g. ``heads-1a2b3c4d`` for some heads switched off) ends the name."""
    return Path(run_dir) / f"eval-{_suffix(split, beam, precision)}{_variant(variant)}.json"


def hyps_path(run_dir: str | Path, split: str, beam: int, precision: str = "fp32", variant: str = "") -> Path:
    """Where ``attnmt evaluate`` keeps the translations it scored (one a line)."""
    return Path(run_dir) / f"hyps-{_suffix(split, beam, precision)}{_variant(variant)}.txt"


def _variant(variant: str) -> str:
    if variant:
        check_plain_name(variant, "variant")
    return f"-{variant}" if variant else ""


def beam_table_path(run_dir: str | Path, split: str, precision: str, suffix: str) -> Path:
    """``beam-<split>[-bf16].json`` / ``.md``: the beam-size table of ``attnmt evaluate --beam 1 5 ...``."""
    return Path(run_dir) / f"beam-{_suffix(split, 1, precision)}{suffix}"


def write_code_copy(run_dir: str | Path, record: CodeRecord) -> None:
    """Keep a user mechanism's code in the run: ``user_attention.py`` (its file, byte for byte) and
    ``user_attention.json`` (the spec, where the file was, its SHA-256). Checkpoints hold the same."""
    run_dir = Path(run_dir)
    write_text_atomic(run_dir / CODE_COPY, record.source)
    summary = {"spec": record.spec, "path": record.path, "sha256": record.sha256}
    write_text_atomic(run_dir / CODE_RECORD, json.dumps(summary, indent=2) + "\n")


def read_code_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's ``user_attention.json`` (its mechanism's spec, place and SHA-256 as trained), or None
    when it is missing or unreadable."""
    try:
        summary = json.loads((Path(run_dir) / CODE_RECORD).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return summary if isinstance(summary, dict) else None
