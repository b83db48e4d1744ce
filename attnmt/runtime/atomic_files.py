"""Writing files so that a reader never sees half of one.

Every file attnmt writes (checkpoints, tokenizers, configs, hypotheses, reports, figures, HTML
pages, word vectors, downloads) goes through ``atomic_writer``: the bytes go to a new temporary
file beside the target, are flushed to disk, and only then replace the target with
``os.replace``. A crash, a kill -9 or a full disk while writing leaves the previous file (or
none) in place, never a truncated one, and removes the temporary file when Python still can. A
write that fails (a full disk, no permission) is an OutputError, one line from the CLI.

A command's output that did not exist when the command checked it (``check_output`` without
``--overwrite``) is *claimed* (``claim_new``): its final step is then a hard link, which fails
where a file appeared at that name while the command worked, instead of a rename that would replace
it. The command then stops with an OutputError and leaves that file as it is. A file the command
itself wrote there earlier is replaced as usual. ``release_claims`` forgets them when the command ends.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from attnmt.errors import OutputError
from attnmt.runtime.reading import special_file_kind

__all__ = ["atomic_writer", "check_target", "claim_new", "release_claims", "remove_stale_temporaries",
           "write_bytes_atomic", "write_text_atomic"]


_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")

#: claimed outputs (absolute paths): None until the command writes one, then its (device, inode)
_CLAIMED: dict[str, tuple[int, int] | None] = {}
#: where a file system has no hard links, the final step checks for a file, then renames
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EXDEV}
_APPEARED = ("a file appeared there while attnmt worked; it was left as it is and this output was not written "
             "(pass --overwrite to replace it, or choose another name)")


def claim_new(path: str | os.PathLike) -> None:
    """Mark ``path``, absent now, as a new output: a file that appears there before ``atomic_writer``
    finishes it is never replaced (the module docstring)."""
    _CLAIMED[os.path.abspath(path)] = None


def release_claims() -> None:
    """Forget every claim (when the command that made them ends)."""
    _CLAIMED.clear()


def _publish(temporary: Path, path: Path) -> None:
    """Move the finished ``temporary`` to ``path``: a rename, or for a claimed path a hard link that
    fails when someone else's file is there (OutputError)."""
    key = os.path.abspath(path)
    if key not in _CLAIMED:
        os.replace(temporary, path)
        return
    try:
        existing = os.stat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None and _CLAIMED[key] == (existing.st_dev, existing.st_ino):
        os.replace(temporary, path)  # the command's own earlier version of it
    else:
        try:
            os.link(temporary, path)
        except FileExistsError:
            raise OutputError(f"{path}: {_APPEARED}") from None
        except OSError as error:
            if error.errno not in _NO_HARD_LINKS:
                raise
            if os.path.lexists(path):
                raise OutputError(f"{path}: {_APPEARED}") from None
            os.replace(temporary, path)
    written = os.stat(path)
    _CLAIMED[key] = (written.st_dev, written.st_ino)


@contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """``with atomic_writer(path) as handle:`` write binary data to ``handle``; on a clean exit the
    file replaces ``path``, on an exception ``path`` is untouched and the temporary file removed.

    The folder is created when missing. An OSError while writing (a full disk, no permission)
    becomes an OutputError naming the file and saying that its previous version is intact.
    """
    path = Path(path)
    _refuse_special(path)
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:  # a new file beside the target, created with 0666 & ~umask like an ordinary file
            # named before it exists, so that a Ctrl-C at any moment leaves no file the finally misses
            temporary = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
            try:
                descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:  # pragma: no cover - 32 random bits collided: not ours to remove
                temporary = None
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _publish(temporary, path)
    except OSError as error:
        kept = "its previous version is unchanged" if path.exists() else "nothing was written"
        raise OutputError(f"{path}: could not write it ({error.strerror or error}); {kept}") from None
    finally:
        if temporary is not None:
            try:
                temporary.unlink(missing_ok=True)
            except OSError:  # a read-only folder refuses even the unlink of a file never made there
                pass


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files a killed writer left in ``folder`` (``.NAME.XXXXXXXX.tmp``);
    call it only while no other process writes there (a run's writer lock). Returns them."""
    stale = [path for path in Path(folder).glob(".*.tmp") if _TEMPORARY.fullmatch(path.name)]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see ``atomic_writer``); returns ``path``."""
    with atomic_writer(path) as handle:
        handle.write(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically; returns ``path``."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def _refuse_special(path: Path) -> None:
    """OutputError when ``path`` exists as a device, a FIFO or a socket: replacing one with a
    regular file (``/dev/null``, as root) is never what a user asked for."""
    if special_file_kind(path) is not None:
        raise OutputError(f"{path}: is not a regular file (a device, a FIFO or a socket); attnmt writes only "
                          "regular files and left it as it is")


def check_target(path: str | os.PathLike, overwrite: bool) -> Path:
    """``path`` as a file to write: IsADirectoryError for a folder, FileExistsError for an existing
    file without ``overwrite``; its folder is created."""
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(f"{target} is a folder; give a file name to write to")
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists; pass overwrite=True to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target
