"""glibc keeps freed memory for attnmt's processes unless the user chose their allocator, and the
resident memory stays bounded."""

import os
import subprocess
import sys
import threading

import pytest

from attnmt.runtime import allocator
from attnmt.runtime.allocator import MemoryBound, keep_freed_memory

GLIBC = bool(getattr(os, "confstr", None) and os.confstr("CS_GNU_LIBC_VERSION"))

# Page faults of touching a freshly allocated 64 MB block, three times over: glibc as it comes maps
# and unmaps the block each time; keeping freed memory faults it in only the first time.
FAULTS_OF_REUSE = """
import ctypes, resource, sys
from attnmt.runtime.allocator import keep_freed_memory
setting = keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(64_000_000)
    ctypes.memset(block, 1, 64_000_000)
    libc.free(block)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(setting.kept, faults[1] + faults[2], setting.describe())
"""


def _faults_of_reuse(**environment: str) -> tuple[bool, int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k not in ("LD_PRELOAD",)}
    env.pop("ATTNMT_ALLOCATOR", None)
    done = subprocess.run([sys.executable, "-c", FAULTS_OF_REUSE], env={**env, **environment},
                          capture_output=True, text=True, check=True)
    kept, faults, line = done.stdout.strip().split(" ", 2)
    return kept == "True", int(faults), line


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_the_fix_keeps_freed_memory_as_the_environment_setting_does():
    kept, faults, line = _faults_of_reuse()
    assert kept and faults < 100, line  # reused: no page faulted in again
    assert "glibc keeps freed memory" in line
    off, faults_off, line_off = _faults_of_reuse(ATTNMT_ALLOCATOR="system")
    assert not off and faults_off > 10_000  # 64 MB = 15,625 pages, faulted in at each reuse
    assert "ATTNMT_ALLOCATOR=system" in line_off


@pytest.mark.parametrize("environment, words", [
    ({"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"}, "LD_PRELOAD"),
    ({"MALLOC_ARENA_MAX": "2"}, "MALLOC_ARENA_MAX"),
    ({"MALLOC_CONF": "dirty_decay_ms:-1"}, "MALLOC_CONF"),
    ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}, "GLIBC_TUNABLES"),
    ({"ATTNMT_ALLOCATOR": "System"}, "ATTNMT_ALLOCATOR=system"),
])
def test_a_users_own_allocator_is_kept(monkeypatch, environment, words):
    monkeypatch.setattr(allocator, "_applied", None)
    called = []
    monkeypatch.setattr(allocator, "_glibc", lambda: called.append(1))
    setting = keep_freed_memory(environment)
    assert not setting.kept and words in setting.describe() and not called


def test_once_per_process(monkeypatch):
    monkeypatch.setattr(allocator, "_applied", None)
    first = keep_freed_memory({"ATTNMT_ALLOCATOR": "system"})
    assert keep_freed_memory({}) is first


def test_without_glibc_nothing_is_changed(monkeypatch):
    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    setting = keep_freed_memory({})
    assert not setting.kept and "not glibc" in setting.reason


def test_the_bound_trims_only_above_it():
    readings = iter([1000, 1500, 2100, 900, 1200, None])  # 900: read again after the trim
    trims = []
    bound = MemoryBound(active=True, factor=2.0, floor=100, warmup=0, interval=0,
                        read=lambda: next(readings), release=lambda: trims.append(1) or True)
    assert [bound.check() for _ in range(4)] == [False, False, True, False]
    assert bound.bound == 2000 and bound.trims == 1 and trims == [1]
    assert not bound.check() and not bound.active  # cannot read: stops watching


def test_the_bound_is_at_least_the_floor_above_the_first_reading():
    bound = MemoryBound(active=True, factor=1.1, floor=500, read=lambda: 1000, release=lambda: True)
    bound.check()
    assert bound.bound == 1500


def test_an_inactive_bound_never_reads_or_trims():
    bound = MemoryBound(active=False, read=lambda: pytest.fail("read"), release=lambda: pytest.fail("trimmed"))
    assert not bound.check()


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_trim_and_resident_memory_on_this_machine():
    assert allocator.trim() is True
    resident = allocator.resident_bytes()
    assert resident is not None and resident > 10 * 2**20


def test_a_process_that_needs_more_moves_the_bound_instead_of_trimming_at_every_call():
    readings = iter([1000, 2500, 2400, 2600, 4000, 1200])
    bound = MemoryBound(active=True, factor=2.0, floor=100, warmup=0, interval=0,
                        read=lambda: next(readings), release=lambda: True)
    bound.check()  # bound 2000
    assert bound.check() and bound.bound == 4800  # 2500 > 2000: trimmed, still 2400 in use
    assert not bound.check()  # 2600 <= 4800
    assert not bound.check() and bound.trims == 1  # 4000 <= 4800


def test_watch_checks_in_a_thread():
    seen = threading.Event()
    bound = MemoryBound(active=True, read=lambda: seen.set() or 1000, release=lambda: True)
    thread = bound.watch(seconds=0.01)
    assert thread is not None and thread.daemon and seen.wait(5)
    bound.active = False
    thread.join(5)
    assert not thread.is_alive()
    assert MemoryBound(active=False).watch() is None


def test_trims_are_spaced_and_none_comes_while_the_heap_is_still_growing():
    now = [0.0]
    trims: list[float] = []

    def read() -> int:  # 1000 at the start and right after each trim, 5000 otherwise
        return 1000 if now[0] == 0 or (trims and trims[-1] == now[0]) else 5000

    bound = MemoryBound(active=True, factor=2.0, floor=100, warmup=300, interval=60, read=read,
                        release=lambda: trims.append(now[0]) or True, clock=lambda: now[0])
    bound.check()  # at 0 s: bound 2000, quiet until 300 s
    for now[0] in (10.0, 299.0, 301.0, 340.0, 362.0):
        bound.check()
    assert trims == [301.0, 362.0]


def test_one_bound_per_process(monkeypatch):
    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setattr(allocator, "_process_bound", None)
    monkeypatch.setenv("ATTNMT_ALLOCATOR", "system")
    bound = allocator.process_memory_bound()
    assert bound is allocator.process_memory_bound() and not bound.active
