"""A simulated full disk, to check that attnmt's writers lose nothing when space runs out (the tests
and ``benchmarks/faults.py`` use it).

Every file attnmt writes is opened through ``os.fdopen`` in ``attnmt.runtime.atomic_files``;
while ``FullDisk(folder, budget)`` is entered, files under ``folder`` accept ``budget`` more bytes
in all, and the write that would pass it writes what fits and fails with ENOSPC, as a real disk.
"""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path

import attnmt.runtime.atomic_files

__all__ = ["FullDisk", "disk_full"]


def disk_full(*args, **kwargs):
    """Raise ENOSPC, as any write to a full disk (to patch in for a function that writes)."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _FullDiskFile:
    """A file whose writes fail with ENOSPC once ``disk.budget`` bytes have been written in all."""

    def __init__(self, handle, disk: FullDisk) -> None:
        self._handle, self._disk = handle, disk

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        budget = math.inf if self._disk.budget is None else self._disk.budget
        room = budget - self._disk.written
        if size > room:  # room is finite here
            self._disk.written += self._handle.write(memoryview(data)[: max(int(room), 0)])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._disk.written += size
        return self._handle.write(data)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()


class FullDisk:
    """The file system under ``folder`` holding only ``budget`` more bytes (None: counting only).

    ``written`` counts what attnmt's writer put there. Files are opened through ``os.fdopen``
    (``attnmt.runtime.atomic_files``), which this replaces while it is entered."""

    def __init__(self, folder: Path, budget: int | None = None) -> None:
        self.folder, self.written = Path(folder).resolve(), 0
        self.budget: float | None = budget

    def _fdopen(self, descriptor, *args, **kwargs):
        handle = self._original(descriptor, *args, **kwargs)
        target = Path(os.readlink(f"/proc/self/fd/{descriptor}"))
        if not target.is_relative_to(self.folder):
            return handle
        if self.budget is None:
            self.budget = float("inf")
        return _FullDiskFile(handle, self)

    def __enter__(self) -> FullDisk:
        self._original = attnmt.runtime.atomic_files.os.fdopen
        # the module's os is the real os module: typeshed's overloads of fdopen do not fit a wrapper
        attnmt.runtime.atomic_files.os.fdopen = self._fdopen  # type: ignore[assignment]
        return self

    def __exit__(self, *exc) -> None:
        attnmt.runtime.atomic_files.os.fdopen = self._original
