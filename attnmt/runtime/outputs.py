"""Where a command may write, decided before any work: never onto one of its own inputs, never onto
a file a run folder needs, never into a folder given as a file, only with a suffix it can write,
never over an existing file without ``--overwrite`` (nor over one that appears while the command
works: ``attnmt.runtime.atomic_files.claim_new``), and never over anything but a regular file (a
device such as ``/dev/null``, a FIFO, a socket), ``--overwrite`` or not."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from attnmt.errors import ConfigError
from attnmt.runtime.atomic_files import claim_new
from attnmt.runtime.reading import special_file_kind

__all__ = ["RUN_OWN_FILES", "check_not_run_folder", "check_output", "check_writable_folder", "is_run_folder",
           "run_owning"]

#: Files of a run folder (attnmt.runs.folder names them): what it needs, and what ``attnmt evaluate``
#: and ``compare`` keep in it. No other command's output may replace one, nor a heatmap in its
#: ``examples/`` folder.
RUN_OWN_FILES = ("best.pt", "last.pt", "config.yaml", "metrics.jsonl", "tokenizers.json", "spm.*.model",
                 "user_attention.py", "user_attention.json", ".attnmt.lock", "eval-*.json", "hyps-*.txt",
                 "beam-*.json", "beam-*.md", "agreement-*.json")
RUN_EXAMPLES = "examples"


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a run (a checkpoint, or the config and metrics of one)."""
    return (folder / "best.pt").is_file() or (folder / "last.pt").is_file() or (
        (folder / "config.yaml").is_file() and (folder / "metrics.jsonl").is_file())


def resolved(path: Path) -> Path:
    """``path.resolve()``, or the absolute path where it cannot be resolved (a loop of symbolic
    links, which Python 3.11 reports as a RuntimeError): the reading then names the problem."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def run_owning(path: Path) -> Path | None:
    """The run folder ``path`` is a file of (one of ``RUN_OWN_FILES``, or in its ``examples/``), or None."""
    for candidate in {path.absolute(), resolved(path)}:
        folder = candidate.parent
        if is_run_folder(folder) and any(fnmatch.fnmatch(candidate.name, name) for name in RUN_OWN_FILES):
            return folder
        if folder.name == RUN_EXAMPLES and is_run_folder(folder.parent):
            return folder.parent
    return None


def check_output(
    path: str | os.PathLike, option: str, overwrite: bool, inputs: Iterable[str | os.PathLike | None] = (),
    suffixes: Sequence[str] | None = None,
) -> Path:
    """``path`` as the output of ``option`` (e.g. ``--out``); ConfigError in one line when it is a
    folder, has a suffix not in ``suffixes``, is one of ``inputs`` (the same file by any name, or an
    existing file of an input folder), is a file of a run folder, exists while ``overwrite`` is False,
    or lies in a folder that cannot be written into. ``--overwrite`` replaces an earlier output,
    never an input: each command gives every path it reads as ``inputs``."""
    target = Path(path)
    if suffixes is not None and target.suffix.lower() not in suffixes:
        choices = ", ".join(suffixes[:-1]) + (" or " if len(suffixes) > 1 else "") + suffixes[-1]
        raise ConfigError(f"{option} {target}: the file name must end in {choices}, "
                          f"got {target.suffix or 'no suffix'!r}")
    if target.is_dir():
        raise ConfigError(f"{option} {target} is a folder; give a file name to write to")
    special = special_file_kind(target)
    if special is not None:  # /dev/null, a FIFO: --overwrite would replace it with a regular file
        raise ConfigError(f"{option} {target} is {special}, not a regular file; attnmt writes its outputs to "
                          "regular files only (even with --overwrite); choose a file name")
    for source in inputs:
        if source is None:
            continue
        source = Path(source)
        if _same_file(target, source) or resolved(target) == resolved(source):
            raise ConfigError(f"{option} {target} is also an input of this command ({source}); "
                              "write the output to another file")
        if (source.is_dir() and not is_run_folder(source) and target.exists()
                and resolved(target).parent == resolved(source)):
            raise ConfigError(f"{option} {target} is a file of {source}, an input of this command; "
                              "write the output to another file")
    run = run_owning(target)
    if run is not None:
        raise ConfigError(f"{option} {target} is a file of the run in {run}; write the output to another file")
    if target.exists() and not overwrite:
        raise ConfigError(f"{option} {target} exists; pass --overwrite to replace it, or choose another name")
    check_writable_folder(target.parent, f"{option} {target}")
    if not overwrite:  # a file that appears there while the command works is not replaced either
        claim_new(target)
    return target


def check_not_run_folder(folder: str | os.PathLike, option: str) -> None:
    """ConfigError when the output folder of ``option`` is a training run's folder: the files a
    command writes there (word vectors, a comparison's runs and summaries) would mix with the run's."""
    if Path(folder).is_dir() and is_run_folder(Path(folder)):
        raise ConfigError(f"{option} {folder} is the folder of a training run; write into a folder of its own "
                          "(a new name, or one outside the run)")


def check_writable_folder(folder: str | os.PathLike, what: str) -> None:
    """ConfigError when ``folder``, or the nearest part of it that exists, cannot be written into
    (a file where a folder should be, a read-only file system, no permission): before any work,
    not after it."""
    existing = Path(folder).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ConfigError(f"{what}: {existing} is a file, not a folder; choose another folder")
    if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: cannot write into {existing} (a read-only file system, or no permission); "
                          "choose another folder")
