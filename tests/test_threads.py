"""The thread count follows the machine (attnmt.runtime.threads): a fixed count is never changed,
and the chooser uses the cores the other running threads leave free, once that has held for a few
units of work. The load here is made up, so the choices are exact."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnmt.decoding.translator import Translator
from attnmt.runtime.threads import HOLD, ThreadChooser, available_cores, others_running, thread_plan


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def counts(loads: list[int | None], most: int = 2) -> tuple[list[int], list[str]]:
    """The thread count used for each unit of work when the other running threads are ``loads``."""
    changes: list[str] = []
    readings = iter(loads)
    torch.set_num_threads(most)
    chooser = ThreadChooser(most, on_change=lambda threads, reason: changes.append(reason),
                            read_others=lambda: next(readings))
    return [chooser.before() for _ in loads], changes


def test_the_suite_runs_at_one_fixed_thread_count():
    """tests/conftest.py fixes the count for every test and every subprocess (OMP_NUM_THREADS):
    tests compare trainings for equality, and a count that followed the load made them flaky."""
    fixed = os.environ.get("OMP_NUM_THREADS")
    assert fixed is not None and fixed.isdigit() and int(fixed) >= 1  # 1 unless given from outside
    plan = thread_plan(None)
    assert plan.threads == int(fixed) and not plan.adaptive
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['OMP_NUM_THREADS'])"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == fixed


def test_the_cores_others_leave_free_once_that_has_held():
    used, changes = counts([0] * 5 + [1] * 8 + [2] * 4 + [0] * 6)
    assert used[:5] == [2] * 5  # idle: every core
    assert used[5:5 + HOLD - 1] == [2] * (HOLD - 1) and used[5 + HOLD - 1:13] == [1] * (8 - HOLD + 1)
    assert used[13:17] == [1] * 4  # two busy neighbours: still one thread, never fewer
    assert used[-1] == 2 and changes[0].startswith("1 thread (1 other running thread")


def test_a_passing_process_does_not_make_the_count_flap():
    used, changes = counts([0, 1, 0, 1, 0, 0, 1, 1, 0, 2, 0])
    assert set(used) == {2} and not changes


def test_where_the_load_cannot_be_read_every_core_is_used():
    used, _ = counts([None] * 4, most=4)
    assert used == [4] * 4


def test_a_busy_neighbour_is_seen_and_this_process_is_not_counted():
    if others_running() is None:
        pytest.skip("no /proc/stat here: the count stays fixed")
    torch.set_num_threads(2)
    x = torch.randn(256, 256)
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started and looping
        readings = []
        for _ in range(10):
            x @ x  # this process's own threads run between the readings: they are not others
            readings.append(others_running())
    finally:
        neighbour.kill()
        neighbour.wait()
    assert min(readings) >= 1, readings  # a busy loop is always running or ready to run


def test_a_fixed_count_never_changes_and_says_where_it_came_from(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    most = available_cores()
    assert thread_plan(most, "--threads").reason == f"--threads {most}" and not thread_plan(most).adaptive
    assert thread_plan(1, "training.num_threads").reason == "training.num_threads=1"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    plan = thread_plan(None)
    assert plan.threads == 1 and not plan.adaptive and plan.reason == "OMP_NUM_THREADS=1"
    monkeypatch.delenv("OMP_NUM_THREADS")
    plan = thread_plan(None)
    assert plan.threads == available_cores()
    assert plan.adaptive == (available_cores() > 1 and others_running() is not None)
    assert not thread_plan(None, processes=2).adaptive  # processes under torchrun share the cores, fixed


def test_every_batch_of_a_translator_follows_the_chooser():
    """Searches, forced decoding (attention, alignment) and saliency each ask the chooser before
    every batch: a path that did not ran at a fixed two threads beside busy work (an `align
    --saliency` of four pairs took minutes instead of a second)."""
    class Counting:
        calls = 0

        def before(self) -> int:
            Counting.calls += 1
            return 1

    translator = Translator.load(Path(__file__).parent / "data" / "runs-0.1.0" / "rnn", num_threads=1)
    translator.threads = Counting()  # type: ignore[assignment]
    translations = translator.translate(["Ein Hund.", "Eine Katze läuft."], beam=2)
    for read in (translator.read_attention, translator.read_attributions):
        before = Counting.calls
        read(translations)
        assert Counting.calls > before, read.__name__
    assert Counting.calls >= 3


def test_more_threads_than_cores_is_refused_as_an_option_and_capped_in_a_config():
    """``--threads 1000`` was accepted and a step then took 78 s (issue 63, item 10); a config
    written on a larger machine still runs here, on the cores there are."""
    from attnmt.errors import ConfigError

    most = available_cores()
    with pytest.raises(ConfigError, match=f"--threads {most + 1}: this machine gives attnmt {most} core"):
        thread_plan(most + 1, "--threads")
    plan = thread_plan(1000, "training.num_threads")
    assert plan.threads == most and not plan.adaptive and "more than the" in plan.reason
