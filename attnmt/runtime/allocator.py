"""glibc told to keep freed memory, for every attnmt process that trains or decodes, and a bound on
what that memory may grow to.

A training step allocates and frees the same large tensors at every step. glibc as it comes hands
blocks over ``M_MMAP_THRESHOLD`` (128 KiB, rising to at most 32 MiB) back to the system at every
``free`` and trims the top of its heap, so the next step maps those pages again and faults each one
in: on 2 cores a third of the training time (docs/results.md, "The memory allocator").
``keep_freed_memory`` sets, through ``mallopt``:

    M_MMAP_THRESHOLD = 1 GiB    blocks up to 1 GiB come from the heap, not from mmap
    M_TRIM_THRESHOLD = 16 GiB   the heap's free top is not given back
    M_TOP_PAD        = 256 MiB  the heap grows in large steps

which is what the environment variables ``MALLOC_MMAP_THRESHOLD_`` and its two companions set, but
for every user and every way of calling attnmt (the command line, ``attnmt.train``, a notebook,
``compare``). A heap that keeps everything can fragment: blocks of ever-changing sizes leave free
holes that stay resident. ``MemoryBound`` watches the resident memory and, when it passes its bound,
gives the free pages back with ``malloc_trim(0)`` (they fault in again when reused).

Left alone: a process whose user chose an allocator (``LD_PRELOAD``, any ``MALLOC_*`` variable,
``glibc.malloc`` in ``GLIBC_TUNABLES``), one started with ``ATTNMT_ALLOCATOR=system``, and any
system without glibc.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["ALLOCATOR_ENV", "AllocatorSetting", "MemoryBound", "keep_freed_memory", "process_memory_bound",
           "resident_bytes", "trim"]

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
    """The C library when it is glibc (which has mallopt and malloc_trim), else None."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        libc = ctypes.CDLL("libc.so.6")
    except (AttributeError, ValueError, OSError):  # no confstr name (not glibc), or no libc.so.6
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
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


def trim() -> bool:
    """Give glibc's free pages back to the system (``malloc_trim(0)``); False where there is no glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


class MemoryBound:
    """Bounds the resident memory of a process whose glibc keeps freed memory.

    ``check()`` is called at regular points (the trainer: every ``log_every`` steps; ``watch``: a
    thread, every few seconds). The first call sets the bound to ``factor`` × the resident memory
    at that point, at least ``floor`` more than it. A later call that finds the process above the
    bound gives the free pages back (``malloc_trim(0)``), never in the first ``warmup`` seconds after
    the bound was set and then at most once every ``interval`` seconds: the heap of a training grows
    for its first few hundred steps as it meets batches of new shapes (a five-minute run is never
    trimmed), and the pages a trim gives back that a step still uses fault in again (about a second
    for a few GiB), so trims are kept rare. When the memory in use is itself above the
    bound after trimming, the bound moves to ``factor`` × that. Inactive (never trims) unless
    ``keep_freed_memory`` kept freed memory."""

    def __init__(self, active: bool, factor: float = 2.0, floor: int = 1 << 30, warmup: float = 300.0,
                 interval: float = 60.0,
                 read: Callable[[], int | None] = resident_bytes, release: Callable[[], bool] = trim,
                 clock: Callable[[], float] = time.monotonic):
        self.active = active
        self.factor = factor
        self.floor = floor
        self.warmup = warmup
        self.interval = interval
        self.bound: int | None = None
        self.trims = 0
        self._read = read
        self._release = release
        self._clock = clock
        self._quiet_until = 0.0  # no trim before this time of the clock

    def check(self) -> bool:
        """True when this call trimmed."""
        if not self.active:
            return False
        resident = self._read()
        if resident is None:
            self.active = False
            return False
        if self.bound is None:
            self.bound = max(int(self.factor * resident), resident + self.floor)
            self._quiet_until = self._clock() + self.warmup
            return False
        if resident <= self.bound or self._clock() < self._quiet_until or not self._release():
            return False
        self.trims += 1
        self._quiet_until = self._clock() + self.interval
        after = self._read()
        if after is not None and after > self.bound / self.factor:
            self.bound = max(self.bound, int(self.factor * after))
        return True

    def watch(self, seconds: float = 5.0) -> threading.Thread | None:
        """Check every ``seconds`` in a daemon thread (for commands whose loops do not call
        ``check``); None when inactive."""
        if not self.active:
            return None
        stop = threading.Event()

        def run() -> None:
            while self.active and not stop.wait(seconds):
                self.check()

        thread = threading.Thread(target=run, name="attnmt-memory-bound", daemon=True)
        thread.start()
        return thread


_process_bound: MemoryBound | None = None


def process_memory_bound() -> MemoryBound:
    """The one bound of this process (after ``keep_freed_memory``; active when it kept freed memory).
    One per process, not per training: a second training in the same process (a notebook,
    ``compare``, a resumed budget) is bounded by the first reading of the process, not by its own
    reading of a heap that the first has already grown."""
    global _process_bound
    if _process_bound is None:
        _process_bound = MemoryBound(active=keep_freed_memory().kept)
    return _process_bound
