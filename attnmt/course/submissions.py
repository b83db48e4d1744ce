"""A course's submissions: each a student's ``.py`` file, or a folder holding one, in one folder.

    find_submissions(folder, class_name) -> [Submission]   sorted by name; hidden entries skipped

A folder holding several ``.py`` files is one submission whose file is the one that defines
``class <class_name>``. A submission's digest is the SHA-256 of its files (their relative paths and
bytes), so a grading run again grades only the new or changed ones.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from attnmt.errors import ConfigError

__all__ = ["MAX_SUBMISSION_BYTES", "Submission", "find_submissions"]

#: the most a submission may hold (its files together); beyond it, it is not copied and its row says why
MAX_SUBMISSION_BYTES = 20 * 2**20


@dataclass(frozen=True)
class Submission:
    """A student's submission: its file or folder, the .py file to import, its digest, and why it
    cannot be graded where it cannot."""

    name: str  # the file's or the folder's name, the gradebook's row
    path: Path  # the file, or the folder
    file: str  # the .py file, relative to ``path`` for a folder ("" for a file submission)
    digest: str
    problem: str = ""  # why it cannot be graded (no .py file, too large, a link), else ""


def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() or p.is_symlink())


def _digest(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    for file in _files(path):
        relative = file.relative_to(path).as_posix() if path.is_dir() else file.name
        digest.update(relative.encode("utf-8", "surrogateescape") + b"\0")
        if file.is_symlink():
            digest.update(b"link:" + str(file.readlink()).encode("utf-8", "surrogateescape"))
            continue
        size += file.stat().st_size
        if size <= MAX_SUBMISSION_BYTES:
            digest.update(file.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest(), size


def _defines(file: Path, class_name: str) -> bool:
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return re.search(rf"^\s*class\s+{re.escape(class_name)}\b", text, re.MULTILINE) is not None


def _submission(entry: Path, class_name: str) -> Submission:
    name = entry.stem if entry.is_file() else entry.name
    if entry.is_symlink():
        return Submission(name, entry, "", "", "a link, not a file or folder of its own: it is not read")
    digest, size = _digest(entry)
    if size > MAX_SUBMISSION_BYTES:
        return Submission(name, entry, "", digest, f"{size / 2**20:.0f} MiB, more than the "
                                                  f"{MAX_SUBMISSION_BYTES // 2**20} MiB a submission may hold")
    if entry.is_file():
        return Submission(name, entry, "", digest)
    python = sorted(p for p in entry.rglob("*.py") if p.is_file() and not p.is_symlink()
                    and not any(part.startswith(".") for part in p.relative_to(entry).parts))
    if not python:
        return Submission(name, entry, "", digest, "the folder holds no .py file")
    if len(python) > 1:
        defining = [p for p in python if _defines(p, class_name)]
        if len(defining) != 1:
            found = "none of them defines" if not defining else f"{len(defining)} of them define"
            return Submission(name, entry, "", digest,
                              f"the folder holds {len(python)} .py files and {found} class {class_name}")
        python = defining
    return Submission(name, entry, python[0].relative_to(entry).as_posix(), digest)


def find_submissions(folder: str | Path, class_name: str) -> list[Submission]:
    """Every submission in ``folder``: its ``.py`` files and its folders, sorted by name. ConfigError
    when ``folder`` is not a folder or holds none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"SUBMISSIONS {folder}: {'no such folder' if not folder.exists() else 'not a folder'}")
    entries = sorted(entry for entry in folder.iterdir() if not entry.name.startswith(".")
                     and not entry.name.startswith("__") and (entry.is_dir() or entry.suffix.lower() == ".py"))
    if not entries:
        raise ConfigError(f"SUBMISSIONS {folder}: the folder holds no submission (a student's .py file, or a "
                          "folder holding one)")
    submissions = [_submission(entry, class_name) for entry in entries]
    names = [submission.name for submission in submissions]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"SUBMISSIONS {folder}: {twice[0]!r} is both a file and a folder; rename one")
    return submissions
