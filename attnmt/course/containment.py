"""What the process grading one submission may do, set up by that process before it imports the
submission: write only in its own scratch folder, read only what Python, torch and attnmt need
(and that folder), within a memory and a CPU-time limit.

Three layers, each set by the worker (``attnmt.course.worker``) on itself:

- resource limits: the address space (``RLIMIT_AS``, ``--memory``), CPU seconds (``RLIMIT_CPU``),
  the size of any file it writes (``RLIMIT_FSIZE``), no core dumps;
- Landlock (Linux 5.13 and later, no privileges needed): the kernel refuses reads outside an
  allow-list (the Python installation, the system's libraries, attnmt, the data folder and the
  scratch folder) and writes anywhere but the scratch folder and ``/dev/null``, to the process and
  everything it starts. Where the kernel has no Landlock this layer is missing, and the gradebook
  says so;
- an audit hook (PEP 578) for what Python itself opens: a write outside the scratch folder, or a
  read of the submissions or of the gradebook's folder outside it, raises PermissionError with a
  sentence that names the path. It gives the clear reason; Landlock is what holds against code
  that goes around Python.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["OUTSIDE", "forbid_outside", "limit_resources", "restrict_files"]

# Landlock's system calls (the same numbers on every architecture) and access rights (linux/landlock.h)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_READ_FILE, _READ_DIR = 1 << 2, 1 << 3
_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3

#: the start of the sentence a refused write or read raises (the gradebook shows it as the reason)
OUTSIDE = "attnmt grade: a submission may"

#: the system folders a Python process reads (libraries, configuration, devices, /proc and /sys)
SYSTEM_FOLDERS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/dev")


def limit_resources(memory_bytes: int, cpu_seconds: int, file_bytes: int = 1 << 30) -> None:
    """Soft and hard limits for this process and its children: address space, CPU time, file size, no cores."""
    for limit, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_seconds),
                         (resource.RLIMIT_FSIZE, file_bytes), (resource.RLIMIT_CORE, 0)):
        _, hard = resource.getrlimit(limit)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict_files(writable: Iterable[Path], readable: Iterable[Path]) -> str:
    """Landlock: from now on this process may read only beneath ``readable`` and ``writable``, and
    write only beneath ``writable`` (and ``/dev/null``). Returns what was set, in words, or "" where
    the kernel has no Landlock (nothing is restricted then)."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    if abi < 1:
        return ""
    write = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE | (_REFER if abi >= 2 else 0) | \
        (_TRUNCATE if abi >= 3 else 0)
    file_rights = _READ_FILE | _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0)
    read = _READ_FILE | _READ_DIR
    attr = _RulesetAttr(read | write)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        return ""
    try:
        rules = [(Path(path), read) for path in readable] + [(Path(path), read | write) for path in writable]
        rules.append((Path(os.devnull), file_rights))
        for path, rights in rules:
            try:
                descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a folder this machine does not have
            try:
                if not path.is_dir():
                    rights &= file_rights
                rule = _PathBeneathAttr(rights, descriptor)
                if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    raise OSError(ctypes.get_errno(), f"Landlock refused a rule for {path}")
            finally:
                os.close(descriptor)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 or libc.syscall(_RESTRICT_SELF, ruleset, 0) < 0:
            raise OSError(ctypes.get_errno(), "Landlock could not restrict the process")
    finally:
        os.close(ruleset)
    return f"Landlock ABI {abi}: reads and writes restricted by the kernel"


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: audit events that change the file system, and the positions of their path arguments
_CHANGES = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.symlink": (1,),
            "os.link": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
            "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (1,)}
_LISTINGS = ("os.listdir", "os.scandir", "glob.glob")


def _as_path(value: Any) -> Path | None:
    if isinstance(value, (str, bytes, os.PathLike)):
        return Path(os.path.abspath(os.fsdecode(value)))
    return None  # a file descriptor


def _beneath(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def forbid_outside(scratch: Path, private: Iterable[Path]) -> None:
    """An audit hook: a write outside ``scratch``, and a read or a listing of ``private`` folders
    (the submissions, the gradebook's folder) outside ``scratch``, raise PermissionError."""
    scratch = Path(os.path.abspath(scratch))
    private = [Path(os.path.abspath(folder)) for folder in private]

    def refuse_read(path: Path | None) -> None:
        if path is not None and not _beneath(path, scratch) and any(_beneath(path, folder) for folder in private):
            raise PermissionError(f"{OUTSIDE} read only its own files; it tried to read {path}")

    def refuse_write(path: Path | None) -> None:
        if path is not None and not _beneath(path, scratch) and str(path) != os.devnull:
            raise PermissionError(f"{OUTSIDE} write only in its own folder; it tried to write {path}")

    def hook(event: str, arguments: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(arguments) + (None, None))[:3]
            target = _as_path(path)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and mode is None and bool(flags & _WRITE_FLAGS))
            if writing:
                refuse_write(target)
            refuse_read(target)
        elif event in _CHANGES:
            for position in _CHANGES[event]:
                if position < len(arguments):
                    refuse_write(_as_path(arguments[position]))
        elif event in _LISTINGS and arguments:
            refuse_read(_as_path(arguments[0]))

    sys.addaudithook(hook)
