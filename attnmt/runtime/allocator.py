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
as fast in less memory; attnmt then leaves the allocator alone. The trainer records the
resident memory (``resident_gib``) and the allocator's live blocks (``allocated_gib``,
``allocated_bytes``).

Left alone: a process whose user chose an allocator (``LD_PRELOAD``, any ``MALLOC_*`` variable,
``glibc.malloc`` in ``GLIBC_TUNABLES``), one started with ``ATTNMT_ALLOCATOR=system``, and any
system without glibc.

**A faster allocator where the machine has one.** A command that trains (``attnmt train``,
``compare``, ``homework``) starts itself again, once, with tcmalloc (else jemalloc) preloaded when
the machine has one of them installed (``preload_fast_allocator``, as PyTorch's own CPU launcher
``torch.backends.xeon.run_cpu`` does): on the Hansards recipe tcmalloc trains at
glibc-with-kept-memory's speed in a little over half its memory over the first six minutes; what
still grew over a long run was live data (kernels kept for every new count of target tokens), which
``data.token_ladder`` removes (docs/experiments.md, "Fewer shapes"). The library is searched in
``library_folders``; jemalloc is told to keep its freed pages (``JEMALLOC_CONF``, through
``MALLOC_CONF``), without which it hands large blocks back at once and faults them in again. The
environment variable ``ATTNMT_PRELOADED_ALLOCATOR`` tells the new process (and the trainer's first
lines) which one it runs. The same user choices as above leave it alone.
Where neither is installed, glibc keeps freed memory as above (Debian's ``apt install
libtcmalloc-minimal4`` gives tcmalloc).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ALLOCATOR_ENV", "FAST_ALLOCATORS", "PRELOADED_ENV", "AllocatorSetting", "find_fast_allocator",
           "allocated_bytes", "keep_freed_memory", "preload_fast_allocator", "preload_plan", "resident_bytes"]

ALLOCATOR_ENV = "ATTNMT_ALLOCATOR"  # "system": leave the allocator as it comes
PRELOADED_ENV = "ATTNMT_PRELOADED_ALLOCATOR"  # "NAME:PATH" of the allocator attnmt preloaded

#: the faster allocators, in the order tried, and the file names of their shared library
FAST_ALLOCATORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tcmalloc", ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so")),
    ("jemalloc", ("libjemalloc.so.2", "libjemalloc.so")),
)


#: jemalloc as it comes hands blocks over 8 MiB back at once and faults them in again at the next step:
#: 0.91 of glibc's speed (docs/experiments.md, "A training step's speed"); told to keep its freed pages
#: it trains at glibc-with-kept-memory's speed, in less memory than glibc, though still growing
#: (docs/experiments.md, "Fewer shapes"). tcmalloc, tried first, grows less.
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"


def library_folders(environment: Mapping[str, str]) -> list[Path]:
    """Where a faster allocator's library is looked for: this Python's environment, a conda one, then
    the system's library folders (Debian's multiarch folder first)."""
    multiarch = f"{platform.machine()}-linux-gnu"
    folders = [Path(sys.prefix) / "lib"]
    if environment.get("CONDA_PREFIX"):
        folders.append(Path(environment["CONDA_PREFIX"]) / "lib")
    folders += [Path("/usr/local/lib"), Path("/usr/lib") / multiarch, Path("/lib") / multiarch, Path("/usr/lib64"),
                Path("/usr/lib")]
    return folders

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
    environment = os.environ if environment is None else environment
    preloaded = _preloaded(environment)
    choice = None if preloaded else _user_choice(environment)
    libc = None if preloaded or choice else _glibc()
    if preloaded:
        _applied = AllocatorSetting(False, preloaded)
    elif choice:
        _applied = AllocatorSetting(False, f"kept {choice}")
    elif libc is None:
        _applied = AllocatorSetting(False, "the allocator as it comes (not glibc)")
    elif all(libc.mallopt(parameter, value) == 1 for parameter, value in KEEP_FREED_MEMORY.items()):
        _applied = AllocatorSetting(True, f"glibc keeps freed memory ({ALLOCATOR_ENV}=system to turn off)")
    else:
        _applied = AllocatorSetting(False, "the allocator as it comes (glibc refused mallopt)")
    return _applied


def find_fast_allocator(folders: Sequence[Path]) -> tuple[str, Path] | None:
    """(name, library) of the first faster allocator (``FAST_ALLOCATORS``) found in ``folders``, or None."""
    for name, files in FAST_ALLOCATORS:
        for folder in folders:
            for file in files:
                library = folder / file
                if library.is_file() and os.access(library, os.R_OK):
                    return name, library
    return None


def preload_plan(environment: Mapping[str, str], folders: Sequence[Path] | None = None) -> dict[str, str] | None:
    """The environment to start this process again with a faster allocator preloaded, or None: on
    Linux only, when the user made no allocator choice (``_user_choice``), attnmt has not preloaded
    one already, and one is installed."""
    if not sys.platform.startswith("linux") or environment.get(PRELOADED_ENV) is not None:
        return None
    if _user_choice(environment) is not None:
        return None
    found = find_fast_allocator(library_folders(environment) if folders is None else folders)
    if found is None:
        return None
    name, library = found
    plan = {**environment, "LD_PRELOAD": str(library), PRELOADED_ENV: f"{name}:{library}"}
    if name == "jemalloc":
        plan["MALLOC_CONF"] = JEMALLOC_CONF
    return plan


def preload_fast_allocator() -> None:
    """Start this process again, the same command with the same arguments, with a faster allocator
    preloaded (``preload_plan``); return at once when there is nothing to do, or when starting again
    fails (the process then goes on with glibc)."""
    plan = preload_plan(os.environ)
    if plan is None:
        return
    arguments = [sys.executable, *getattr(sys, "orig_argv", [sys.executable, *sys.argv])[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, arguments, plan)
    except OSError:
        return


def _preloaded(environment: Mapping[str, str]) -> str | None:
    """In words, the allocator attnmt preloaded into this process, or None."""
    marker = environment.get(PRELOADED_ENV, "")
    name, _, library = marker.partition(":")
    if not name or library not in environment.get("LD_PRELOAD", "").split(":"):
        return None
    return f"{name} ({library}), preloaded by attnmt ({ALLOCATOR_ENV}=system to turn off)"


def resident_bytes() -> int | None:
    """This process's resident memory (/proc/self/statm), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33 and later), every field a size_t."""

    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _tcmalloc_allocated(process: ctypes.CDLL) -> int | None:
    read = getattr(process, "MallocExtension_GetNumericProperty", None)
    if read is None:
        return None
    read.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
    read.restype = ctypes.c_int
    value = ctypes.c_size_t()
    return value.value if read(b"generic.current_allocated_bytes", ctypes.byref(value)) else None


def _jemalloc_allocated(process: ctypes.CDLL) -> int | None:
    control = getattr(process, "mallctl", None)
    if control is None:
        return None
    control.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                        ctypes.c_size_t]
    control.restype = ctypes.c_int
    epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(8)
    control(b"epoch", None, None, ctypes.byref(epoch), 8)  # jemalloc's statistics are refreshed per epoch
    value = ctypes.c_size_t()
    failed = control(b"stats.allocated", ctypes.byref(value), ctypes.byref(size), None, 0)
    return None if failed else value.value


def _glibc_allocated(process: ctypes.CDLL) -> int | None:
    read = getattr(process, "mallinfo2", None)
    if read is None:
        return None
    read.argtypes = []
    read.restype = _MallInfo2
    info = read()
    return int(info.uordblks + info.hblkhd)  # in use in the heaps + in mmap'd blocks


def allocated_bytes() -> int | None:
    """The bytes this process's allocator has handed out and not taken back (live blocks), or None
    where it cannot say: tcmalloc's ``generic.current_allocated_bytes``, jemalloc's
    ``stats.allocated``, or glibc's ``mallinfo2`` (in use in its heaps and mmap'd blocks), whichever
    runs, asked in that order. Resident memory minus this is what the allocator holds free (and the
    program's code): a training whose resident memory grows while this stays level is not leaking,
    its allocator is keeping blocks it cannot reuse."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        process = ctypes.CDLL(None)
    except OSError:
        return None
    for read in (_tcmalloc_allocated, _jemalloc_allocated, _glibc_allocated):
        value = read(process)
        if value is not None:
            return value
    return None
