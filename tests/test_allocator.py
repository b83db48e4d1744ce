"""glibc keeps freed memory for attnmt's processes unless the user chose their allocator."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_the_allocated_bytes_follow_a_large_block_in_and_out():
    """allocated_bytes, from whichever allocator runs this process (glibc's mallinfo2, or tcmalloc's
    or jemalloc's statistics when preloaded): a 64 MiB block shows while it lives, within 8 MiB (other
    threads allocate meanwhile), and is gone when freed."""
    before = allocator.allocated_bytes()
    assert before is not None and before > 0
    block = torch.ones(16 * 2**20)  # 64 MiB of float32
    during = allocator.allocated_bytes()
    del block
    after = allocator.allocated_bytes()
    assert abs(during - before - 64 * 2**20) < 8 * 2**20
    assert abs(after - before) < 8 * 2**20


# ---- a faster allocator, preloaded where the machine has one -------------------------------------------


def _library(folder, name):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"\x7fELF")
    return folder / name


def test_tcmalloc_is_found_before_jemalloc_and_the_plan_preloads_it(tmp_path, monkeypatch):
    monkeypatch.setattr(allocator.sys, "platform", "linux")
    jemalloc = _library(tmp_path / "a", "libjemalloc.so.2")
    tcmalloc = _library(tmp_path / "b", "libtcmalloc_minimal.so.4")
    folders = [tmp_path / "a", tmp_path / "b"]
    assert allocator.find_fast_allocator(folders) == ("tcmalloc", tcmalloc)
    assert allocator.find_fast_allocator(folders[:1]) == ("jemalloc", jemalloc)
    assert allocator.find_fast_allocator([tmp_path / "none"]) is None
    plan = allocator.preload_plan({"PATH": "/bin"}, folders)
    assert plan == {"PATH": "/bin", "LD_PRELOAD": str(tcmalloc), allocator.PRELOADED_ENV: f"tcmalloc:{tcmalloc}"}
    plan = allocator.preload_plan({}, folders[:1])  # jemalloc alone: told to keep its freed pages
    assert plan["LD_PRELOAD"] == str(jemalloc) and plan["MALLOC_CONF"] == "dirty_decay_ms:-1,muzzy_decay_ms:-1"
    assert allocator.preload_plan({}, [tmp_path / "none"]) is None  # nothing installed: glibc, as before


@pytest.mark.parametrize("environment", [
    {"ATTNMT_ALLOCATOR": "system"},
    {"LD_PRELOAD": "/opt/my/libtcmalloc.so"},
    {"MALLOC_CONF": "background_thread:true"},
    {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},
    {allocator.PRELOADED_ENV: "jemalloc:/x/libjemalloc.so.2", "LD_PRELOAD": "/x/libjemalloc.so.2"},  # the second start
])
def test_a_users_choice_or_an_earlier_preload_is_never_replaced(tmp_path, monkeypatch, environment):
    monkeypatch.setattr(allocator.sys, "platform", "linux")
    _library(tmp_path, "libjemalloc.so.2")
    assert allocator.preload_plan(environment, [tmp_path]) is None


def test_the_first_line_names_the_preloaded_allocator(monkeypatch):
    monkeypatch.setattr(allocator, "_applied", None)
    setting = keep_freed_memory({allocator.PRELOADED_ENV: "jemalloc:/x/libjemalloc.so.2",
                                 "LD_PRELOAD": "/x/libjemalloc.so.2"})
    assert not setting.kept
    assert setting.describe() == ("memory: jemalloc (/x/libjemalloc.so.2), preloaded by attnmt "
                                  "(ATTNMT_ALLOCATOR=system to turn off)")
    monkeypatch.setattr(allocator, "_applied", None)  # a user who replaced LD_PRELOAD since: their choice
    setting = keep_freed_memory({allocator.PRELOADED_ENV: "jemalloc:/x/libjemalloc.so.2", "LD_PRELOAD": "/y/lib.so"})
    assert "your allocator (LD_PRELOAD)" in setting.describe()


INSTALLED = allocator.find_fast_allocator(allocator.library_folders(os.environ))


@pytest.mark.slow
@pytest.mark.skipif(INSTALLED is None or not sys.platform.startswith("linux"),
                    reason="no jemalloc or tcmalloc installed on this machine")
def test_attnmt_train_starts_again_with_the_installed_allocator_and_says_so(tmp_path):
    """The trainer's first lines name the library that the command started again with."""
    from helpers import save_yaml, tiny_run_config

    project = Path(__file__).resolve().parents[1]

    config = tiny_run_config(tmp_path, train_pairs=40, max_steps=2, bleu_max_sentences=0, examples=0)
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("MALLOC_") and key not in ("LD_PRELOAD", "ATTNMT_ALLOCATOR",
                                                                     allocator.PRELOADED_ENV)}
    done = subprocess.run([sys.executable, "-m", "attnmt", "train", "--config", str(save_yaml(tmp_path, config)),
                           "--out", str(tmp_path / "run"), "--no-progress"],
                          env={**environment, "PYTHONPATH": str(project)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    name, library = INSTALLED
    assert f"memory: {name} ({library}), preloaded by attnmt" in done.stdout + done.stderr
