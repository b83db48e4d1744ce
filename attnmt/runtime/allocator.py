"""glibc told to keep freed memory, for every attnmt process that trains or decodes.

A training step allocates and frees the same large tensors at every step. glibc as it comes hands
blocks over ``M_MMAP_THRESHOLD`` (128 KiB, rising to at most 32 MiB) back to the system at every
``free`` and trims the top of its heap, so the next step maps those pages again and faults each one
in: on 2 cores a third of the training time (docs/experiments.md, "A training step's speed").
``keep_freed_memory`` sets, through ``mallopt``:

    M_MMAP_THRESHOLD = 1 GiB    blocks up to 1 GiB come from the heap, not from mmap
    M_TRIM_THRESHOLD = 16 GiB   the heap's free top is not given back
    M_TOP_PAD        = 256 MiB  the heap grows in large steps

which is what the environment variables ``MALLOC_MMAP_THRESHOLD_`` and its two companions set, but
for every user and every way of calling attnmt (the command line, ``attnmt.train``, a notebook,
``compare``). A heap that keeps everything fragments: on batches of ever-changing shapes its
resident memory keeps growing (the Hansards recipe: past 8 GiB in 12 minutes), and giving the free
pages back (``malloc_trim``) does not hold it, as the next steps touch them again within a minute
(docs/experiments.md, "A training step's speed"). For long runs tcmalloc or jemalloc (``LD_PRELOAD``) train
as fast with steady memory; attnmt then leaves the allocator alone. The trainer records the
resident memory (``resident_gib``).

Left alone: a process whose user chose an allocator (``LD_PRELOAD``, any ``MALLOC_*`` variable,
``glibc.malloc`` in ``GLIBC_TUNABLES``), one started with ``ATTNMT_ALLOCATOR=system``, and any
system without glibc.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ALLOCATOR_ENV", "AllocatorSetting", "keep_freed_memory", "resident_bytes"]

ALLOCATOR_ENV = "ATTNMT_ALLOCATOR"  # "system": leave the allocator as it comes

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
KEEP_FREED_MEMORY = {M_MMAP_THRESHOLD: 1 << 30, M_TRIM_THRESHOLD: 1 << 34, M_TOP_PAD: 1 << 28}


@dataclass(frozen=True)
class AllocatorSetting:
    """What ``keep_freed_memory`` did: ``kept`` is True when glibc now keeps freed memory; ``reason``
    says why or why not, in words for a log line."""

    kept: bool
    reason: str

    def describe(self) -> str:
        return f"memory: {self.reason}"


_applied: AllocatorSetting | None = None  # the first call's setting: mallopt acts on the whole process


def _user_choice(environment: Mapping[str, str]) -> str | None:
    """The allocator settings the user made, in words, or None."""
    if environment.get(ALLOCATOR_ENV, "").strip().lower() == "system":
        return f"the allocator as it comes ({ALLOCATOR_ENV}=system)"
    if environment.get("LD_PRELOAD", "").strip():
        return "your allocator (LD_PRELOAD) as you set it"
    names = sorted(name for name in environment if name.startswith("MALLOC_"))
    if names:
        return f"your allocator settings ({', '.join(names)}) as you set them"
    if "glibc.malloc" in environment.get("GLIBC_TUNABLES", ""):
        return "your allocator settings (GLIBC_TUNABLES) as you set them"
    return None


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (which has mallopt), else None."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        libc = ctypes.CDLL("libc.so.6")
    except (AttributeError, ValueError, OSError):  # no confstr name (not glibc), or no libc.so.6
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def keep_freed_memory(environment: Mapping[str, str] | None = None) -> AllocatorSetting:
    """Tell glibc to keep freed memory for reuse (see the module docstring), once per process;
    later calls return the first call's setting."""
    global _applied
    if _applied is not None:
        return _applied
    choice = _user_choice(os.environ if environment is None else environment)
    libc = None if choice else _glibc()
    if choice:
        _applied = AllocatorSetting(False, f"kept {choice}")
    elif libc is None:
        _applied = AllocatorSetting(False, "the allocator as it comes (not glibc)")
    elif all(libc.mallopt(parameter, value) == 1 for parameter, value in KEEP_FREED_MEMORY.items()):
        _applied = AllocatorSetting(True, f"glibc keeps freed memory ({ALLOCATOR_ENV}=system to turn off)")
    else:
        _applied = AllocatorSetting(False, "the allocator as it comes (glibc refused mallopt)")
    return _applied


def resident_bytes() -> int | None:
    """This process's resident memory (/proc/self/statm), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
