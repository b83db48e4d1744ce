"""glibc keeps freed memory for attnmt's processes unless the user chose their allocator."""

import os
import subprocess
import sys

import pytest

from attnmt.runtime import allocator
from attnmt.runtime.allocator import keep_freed_memory

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


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_resident_memory_on_this_machine():
    resident = allocator.resident_bytes()
    assert resident is not None and resident > 10 * 2**20
