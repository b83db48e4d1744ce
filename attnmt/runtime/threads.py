"""How many threads PyTorch's CPU operators use: fixed when the user says so, else following how
many cores the rest of the machine leaves free, unit of work by unit of work.

Measured on 2 cores (``benchmarks/experiments/contention.py``, docs/experiments.md "A busy machine"): the fast RNN
recipe trains fastest with 2 threads on an idle machine, but beside one busy process 2 threads
keep a quarter of that speed while 1 thread keeps two thirds: the threads wait for each other at
every operator, and one of them waits for the neighbour. So before each unit of work (a training
step, a decoding batch) ``ThreadChooser`` reads how many other threads are running on the machine
(``procs_running`` of /proc/stat, less this process's own running threads: a fraction of a
millisecond) and uses the cores they leave free, at least one: ``threads = max(1, cores − others)``.
A new count is taken only once it has held for ``HOLD`` training steps in a row, so a passing
process does not make the count flap (a decoding batch, long and few, takes it at once).

Timing the work at each count instead was tried first: on an idle machine its probes at the
slower count cost 7% of a 60-step block, and during a burst of short processes one probe of a
decoding batch at 2 threads took as long as twenty at 1. Reading the load costs nothing and was
right in every condition measured.

A fixed count (``--threads N``, ``training.num_threads``, or ``$OMP_NUM_THREADS``) is never
changed, nor is the count where /proc/stat cannot be read (not Linux). A different thread count can
change the order of floating-point sums, so a run whose thread count changes is not bit-for-bit
repeatable; a fixed count keeps it so.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from attnmt.errors import ConfigError

__all__ = ["ThreadChooser", "ThreadPlan", "available_cores", "following", "others_running", "thread_plan"]

Unit = TypeVar("Unit")
HOLD = 3  # units in a row a new count must be indicated for before it is taken


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, and the cgroup's CPU quota where one
    is set (a container limited to 1.5 CPUs gets 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text(encoding="utf-8").split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


@dataclass(frozen=True)
class ThreadPlan:
    """The thread count to start with, whether it may change, and why (for the first line)."""

    threads: int
    adaptive: bool
    reason: str


def thread_plan(configured: int | None, option: str = "--threads", processes: int = 1) -> ThreadPlan:
    """What a command runs with: ``configured`` (an option or config key, named ``option``), else
    $OMP_NUM_THREADS, else adaptive over the cores available shared out among ``processes``."""
    if configured:
        cores = available_cores()
        named = f"{option} {configured}" if option.startswith("--") else f"{option}={configured}"
        if configured > cores:
            if option.startswith("--"):  # said now, on this machine: a mistake to name
                raise ConfigError(f"{named}: this machine gives attnmt {cores} core{'s' if cores > 1 else ''}; "
                                  f"more threads than cores only wait for each other (give at most {cores})")
            return ThreadPlan(cores, False, f"{named} is more than the {cores} cores here: {cores}")
        return ThreadPlan(configured, False, named)
    from_env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if from_env.isdigit() and int(from_env) > 0:
        return ThreadPlan(int(from_env), False, f"OMP_NUM_THREADS={from_env}")
    cores = available_cores()
    most = max(1, cores // processes)
    if most == 1 or processes > 1:
        return ThreadPlan(most, False, f"{cores} core{'s' if cores > 1 else ''} for {processes} "
                                       f"process{'es' if processes > 1 else ''}")
    if others_running() is None:
        return ThreadPlan(most, False, f"{cores} cores (the machine's load cannot be read here)")
    return ThreadPlan(most, True, f"following the load: the cores of {cores} that other processes leave free")


def others_running() -> int | None:
    """Threads of other processes running on the machine right now: ``procs_running`` of
    /proc/stat less this process's threads in state R (counted just before and just after, and the
    larger count kept: a thread of ours that spins while it waits for work must not count as
    another process); None where that cannot be read."""
    before = _own_running()
    try:
        with open("/proc/stat", "rb") as handle:
            total = next(int(line.split()[1]) for line in handle if line.startswith(b"procs_running"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    after = _own_running()
    if before is None or after is None:
        return None
    return max(0, total - max(before, after))


def _own_running() -> int | None:
    """This process's threads in state R (running or ready to run)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    running = 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as handle:
                running += handle.read().rsplit(b")", 1)[1].split()[0] == b"R"
        except (OSError, IndexError):
            continue
    return running


class ThreadChooser:
    """Before each unit of work, the thread count the machine's load leaves room for (module
    docstring); ``on_change(threads, reason)`` hears every change. ``read_others`` reads the load
    (tests give their own)."""

    def __init__(self, most: int, on_change: Callable[[int, str], None] | None = None,
                 read_others: Callable[[], int | None] = others_running, hold: int = HOLD):
        self.most, self.hold = most, hold
        self.on_change = on_change
        self.read_others = read_others
        self.current = torch.get_num_threads() if 1 <= torch.get_num_threads() <= most else most
        self._wanted, self._held = self.current, 0

    def before(self) -> int:
        """Set and return the thread count for the next unit of work."""
        others = self.read_others()
        wanted = self.most if others is None else max(1, self.most - others)
        if wanted != self._wanted:
            self._wanted, self._held = wanted, 0
        self._held += 1
        if wanted != self.current and self._held >= self.hold:
            self.current = wanted
            if self.on_change is not None:
                self.on_change(wanted, f"{wanted} thread{'s' if wanted > 1 else ''} ({others} other running "
                                       f"thread{'s' if others != 1 else ''} on {available_cores()} cores)")
        if torch.get_num_threads() != self.current:
            torch.set_num_threads(self.current)
        return self.current


def following(chooser: ThreadChooser | None, units: Iterable[Unit]) -> Iterator[Unit]:
    """``units`` (batches, steps) one by one, with ``chooser`` setting the thread count before each
    (no chooser: as they come)."""
    for unit in units:
        if chooser is not None:
            chooser.before()
        yield unit
