"""Checkpoints: one file holding everything needed to translate with, or to continue, a run.

A checkpoint is a plain dictionary saved with ``torch.save``::

    format            "attnmt-checkpoint"       (marker: this file was written by attnmt)
    format_version    2 (version 1 files, written before training became a package, are read too)
    attnmt_version    "0.1.0"
    model_type        "rnn" | "transformer"     (must equal config["model"]["type"])
    config            the run configuration as a plain dict (RunConfig.to_dict())
    model             the model's state_dict (tensors)
    tokenizers        {file name: bytes} — the sentencepiece model files, so a checkpoint alone translates
    optimizer, scheduler   their state_dicts (training state; absent in a checkpoint for inference only)
    scaler            fp16 training's GradScaler state (only with training.precision: fp16)
    rng               random generator states per rank (torch, CUDA, numpy, python) for an exact resume
    progress          {"step", "epoch", "batch_in_epoch", "elapsed_seconds", ..., "plateau": {...},
                      "window": {...}, "epoch_sums": {...}} (attnmt.training.statistics, .schedule)
    history           the metric records written so far (the lines of metrics.jsonl)

No device is stored: tensors load onto the CPU (``map_location``) and the model then moves to the
device it runs on, so a run trained on a GPU continues, translates and evaluates on a CPU and the
reverse. Everything in it is a dict, list, tuple, str, bytes, number or tensor, so it loads with
``torch.load(weights_only=True)``: loading never runs code from the file, and a checkpoint from an
untrusted source cannot do more than fail to load.

Writing is atomic: the bytes go to a temporary file in the same folder which then replaces the
target with ``os.replace``, so a crash while saving (or a kill -9) leaves the previous checkpoint
intact, never a truncated one.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from attnmt._version import __version__
from attnmt.attention.provenance import CodeRecord, resolve_recorded
from attnmt.attention.registry import is_builtin
from attnmt.attention.user_code import UntrustedCodeError, is_user_name, load_user_class
from attnmt.errors import CheckpointError
from attnmt.runs.run_config import with_old_defaults
from attnmt.runtime.atomic_files import atomic_writer
from attnmt.runtime.reading import DataTooLarge, check_plain_data

FORMAT = "attnmt-checkpoint"
FORMAT_VERSION = 2

# Keys every checkpoint has; training checkpoints also carry the TRAINING_KEYS.
REQUIRED_KEYS = ("format", "format_version", "attnmt_version", "model_type", "config", "model", "tokenizers")
TRAINING_KEYS = ("optimizer", "scheduler", "rng", "progress", "history")
OPTIONAL_KEYS = (
    "scaler",  # fp16 training's GradScaler state
    "attention_code",  # a user mechanism's CodeRecord (attnmt.attention.provenance): spec, file, SHA-256, text
    "weight_average",  # training.ema_decay: the weights being trained (``model`` holds their average)
    "averaged_steps",  # attnmt average: the steps of the kept checkpoints whose mean ``model`` holds
)


def make_checkpoint(
    *,
    config: dict,
    model_state: dict,
    tokenizers: dict[str, bytes],
    **training_state: Any,
) -> dict:
    """The checkpoint dictionary for a model (plus optional training state: optimizer, scheduler, rng, ...)."""
    model_type = config.get("model", {}).get("type")
    if not isinstance(model_type, str):
        raise ValueError(f"make_checkpoint: config['model']['type'] must be a string, got {model_type!r}")
    checkpoint = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "attnmt_version": __version__,
        "model_type": model_type,
        "config": config,
        "model": model_state,
        "tokenizers": dict(tokenizers),
    }
    unknown = set(training_state) - set(TRAINING_KEYS) - set(OPTIONAL_KEYS)
    if unknown:
        raise ValueError(f"make_checkpoint: unknown training state {sorted(unknown)}; "
                         f"known: {TRAINING_KEYS + OPTIONAL_KEYS}")
    checkpoint.update(training_state)
    return _on_cpu(checkpoint)


def _on_cpu(value: Any) -> Any:
    """``value`` with every tensor in it on the CPU (a no-op for CPU tensors): no device in the file."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {key: _on_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(item) for item in value)
    return value


def save_checkpoint(checkpoint: dict, path: str | Path) -> Path:
    """Write ``checkpoint`` to ``path`` atomically (temporary file in the same folder + os.replace).

    The archive is built in memory first and then written: ``torch.save`` into a file turns the
    file's own OSError (a full disk) into a RuntimeError about zip positions, and a write of bytes
    keeps the OSError that ``atomic_writer`` reports as a full disk.
    """
    path = Path(path)
    if checkpoint.get("format") != FORMAT:
        raise ValueError("save_checkpoint: build the dictionary with make_checkpoint()")
    archive = io.BytesIO()
    torch.save(checkpoint, archive)
    with atomic_writer(path) as handle:
        handle.write(archive.getbuffer())
    return path


def _describe_foreign(obj: Any) -> str:
    if isinstance(obj, dict):
        keys = sorted(map(str, obj))
        shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
        return f"a dictionary with keys [{shown}]"
    return f"an object of type {type(obj).__name__}"


def _read_archive(path: Path):
    """What the torch.save archive at ``path`` holds, read with ``weights_only``; CheckpointError
    for a missing, empty, foreign, damaged or code-bearing file."""
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    data = path.read_bytes()
    if not data:
        raise CheckpointError(f"{path}: checkpoint file is empty (expected an attnmt checkpoint)")
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise CheckpointError(
            f"{path}: not a readable checkpoint: expected a torch.save archive (zip) written by attnmt, "
            f"found {len(data)} bytes that are not one (corrupt, truncated or another kind of file)"
        )
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(
            f"{path}: refused to load: it contains objects other than plain dicts, lists, numbers, "
            f"strings and tensors (attnmt checkpoints only hold those), so it was not written by attnmt "
            f"or is damaged ({first_line})"
        ) from None
    except Exception as error:  # torch raises RuntimeError/EOFError/... for damaged archives
        first_line = str(error).splitlines()[0] if str(error) else ""
        raise CheckpointError(
            f"{path}: corrupt or truncated checkpoint ({type(error).__name__}: {first_line})"
        ) from None
    return checkpoint


def load_checkpoint(
    path: str | Path,
    expected_model_type: str | None = None,
    require_training_state: bool = False,
) -> dict:
    """Read and check a checkpoint written by :func:`save_checkpoint`.

    expected_model_type: when given, a checkpoint of another model type is refused.
    require_training_state: refuse a checkpoint without optimizer/scheduler/rng/progress (for --resume).

    Raises CheckpointError, naming the file, what was expected and what was found, when the file is
    missing, truncated or otherwise unreadable, was not written by attnmt, is of a newer format,
    lacks keys, or holds another model type than expected or than its own config says.
    """
    path = Path(path)
    checkpoint = _read_archive(path)
    try:  # before anything renders it: shared references in a pickle expand when printed
        check_plain_data(checkpoint, str(path), max_string=None)
    except DataTooLarge as error:
        raise CheckpointError(f"{error}; attnmt never writes such a checkpoint") from None

    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: not an attnmt checkpoint: expected a dictionary with format={FORMAT!r}, "
            f"found {_describe_foreign(checkpoint)}"
        )
    version = checkpoint.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {version!r} is not supported by attnmt {__version__} "
            f"(expected at most {FORMAT_VERSION}); it was written by attnmt {checkpoint.get('attnmt_version')}"
        )
    if version == 1:
        checkpoint = _upgrade_from_version_1(checkpoint)
    missing = [key for key in REQUIRED_KEYS if key not in checkpoint]
    if require_training_state:
        missing += [key for key in TRAINING_KEYS if key not in checkpoint]
    if missing:
        raise CheckpointError(
            f"{path}: checkpoint is missing {', '.join(missing)} "
            f"(found keys: {', '.join(sorted(map(str, checkpoint)))})"
        )
    progress = checkpoint.get("progress")
    if progress is not None and not (isinstance(progress, dict) and all(
            isinstance(progress.get(part, {}), dict) for part in ("plateau", "window", "epoch_sums"))):
        raise CheckpointError(f"{path}: its progress is damaged (a {type(progress).__name__}, not the mapping "
                              "attnmt writes); the checkpoint was edited")
    model_type = checkpoint["model_type"]
    config = checkpoint["config"]
    model_section = config.get("model") if isinstance(config, dict) else None
    config_type = model_section.get("type") if isinstance(model_section, dict) else None
    if config_type != model_type:
        raise CheckpointError(
            f"{path}: inconsistent checkpoint: it holds a {model_type!r} model but its config says "
            f"model.type = {config_type!r}"
        )
    if expected_model_type is not None and model_type != expected_model_type:
        raise CheckpointError(
            f"{path}: checkpoint holds a {model_type!r} model, expected a {expected_model_type!r} model"
        )
    if not isinstance(checkpoint["model"], dict) or not isinstance(checkpoint["tokenizers"], dict):
        raise CheckpointError(f"{path}: checkpoint's 'model' and 'tokenizers' entries must be dictionaries")
    _check_weights(checkpoint["model"], path)
    checkpoint["config"] = with_old_defaults(config)  # as the run was trained (options added since)
    return checkpoint


def _check_weights(state: dict, path: Path) -> None:
    """CheckpointError when a weight is not a tensor, or holds a value that is not finite (a training
    that diverged, or an edited file): such a model would translate into nothing but "⁇"."""
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{path}: weight {name!r} is a {type(tensor).__name__}, not a tensor")
        if tensor.is_floating_point() or tensor.is_complex():
            if tensor.is_complex() or not bool(torch.isfinite(tensor).all()):
                raise CheckpointError(f"{path}: weight {name!r} holds values that are not finite real numbers; the "
                                      "checkpoint comes from a training that diverged, or was edited")


def _upgrade_from_version_1(checkpoint: dict) -> dict:
    """A version-1 checkpoint in version 2's layout: its flat ``progress`` (one dict of 24 fields)
    split into the position, the plateau tracker and the running sums; its scheduler's own plateau
    count dropped (the tracker's count drives the lr decay now). Weights, config and tokenizers are
    the same in both versions."""
    checkpoint = dict(checkpoint, format_version=FORMAT_VERSION)
    old = checkpoint.get("progress")
    if isinstance(old, dict) and "plateau" not in old:
        position_keys = ("step", "epoch", "batch_in_epoch", "elapsed_seconds", "last_eval_step", "stop_reason",
                         "world_size")
        checkpoint["progress"] = {
            **{key: old[key] for key in position_keys if key in old},
            "plateau": {
                "best_loss": old.get("best_val_loss", float("inf")), "best_step": old.get("best_step", -1),
                "best_epoch": old.get("best_epoch", -1), "best_bleu": old.get("best_val_bleu"),
                "stale": old.get("evals_without_improvement", 0),
            },
            "window": {name: old.get(f"window_{name}", 0) for name in
                       ("loss", "nll", "guide", "tokens", "steps", "seconds", "grad_norm")},
            "epoch_sums": {name: old.get(f"epoch_{name}", 0) for name in
                           ("loss", "nll", "guide", "tokens", "steps", "seconds", "grad_norm")},
        }
    if isinstance(checkpoint.get("scheduler"), dict):
        checkpoint["scheduler"] = {"plateau_scale": checkpoint["scheduler"].get("plateau_scale", 1.0)}
    return checkpoint


def load_model_state(model, checkpoint: dict, path: str | Path = "checkpoint") -> None:
    """Copy the checkpoint's weights into ``model``; CheckpointError when names or shapes differ."""
    check_weights_match(model, checkpoint, path)
    model.load_state_dict(checkpoint["model"])


def check_weights_match(model, checkpoint: dict, path: str | Path = "checkpoint") -> None:
    """CheckpointError when the checkpoint's weights differ from ``model``'s in names or shapes.
    ``model`` may be built on the ``meta`` device (shapes, no storage), so that a config that asks
    for a huge model is found out before its weights are allocated."""
    state = checkpoint["model"]
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong_shape = [
        f"{name} (model {tuple(expected[name].shape)}, checkpoint {tuple(state[name].shape)})"
        for name in sorted(set(expected) & set(state))
        if hasattr(state[name], "shape") and tuple(state[name].shape) != tuple(expected[name].shape)
    ]
    if missing or unexpected or wrong_shape:
        parts = []
        if missing:
            parts.append(f"missing weights {', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(f"unexpected weights {', '.join(unexpected[:5])}{', ...' if len(unexpected) > 5 else ''}")
        if wrong_shape:
            parts.append(f"shape mismatch for {', '.join(wrong_shape[:3])}")
        raise CheckpointError(
            f"{path}: the weights do not fit the model its config describes: {'; '.join(parts)}"
        )


def checkpoint_code(checkpoint: dict, path: str | Path, trust_run_code: bool = False,
                    named: str | None = None) -> dict[str, type]:
    """Before a checkpoint's model is built: the class of its user mechanism, if any, as
    ``{name: class}`` for ``bound_classes(..., only=True)``. No path or module the checkpoint names is
    imported: ``attnmt.attention.provenance.resolve_recorded`` says when its kept code runs (``trust_run_code``,
    code trained with on this machine) or the file the user ``named`` now is imported.

    Raises UntrustedCodeError (one line, naming the file) when there is no such consent."""
    model = checkpoint["config"].get("model")  # a dict: load_checkpoint checked its type
    name = model.get("attention", "scaled_dot") if isinstance(model, dict) else "scaled_dot"
    if not isinstance(name, str) or is_builtin(name) or not is_user_name(name):
        return {}  # a built-in, or a name the config check will refuse
    record = checkpoint.get("attention_code")
    if record is None:
        if named is not None and named.strip() == name.strip():
            return {name.strip(): load_user_class(named)}  # the file the user names now
        raise UntrustedCodeError(
            f"{path}: its attention {name!r} is a user mechanism, but the checkpoint keeps no copy of its code; "
            "name your file with --attention to build it"
        )
    code = CodeRecord.from_dict(record, str(path))
    if code.spec != name.strip():
        raise CheckpointError(f"{path}: inconsistent checkpoint: its config names attention {name!r}, but the "
                              f"code it keeps is that of {code.spec!r}")
    return {code.spec: resolve_recorded(code, trust_run_code, str(path), named)}
