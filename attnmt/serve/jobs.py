"""Where the models' work runs: on one thread, the one that loaded them.

PyTorch's CPU operators run their parallel parts in OpenMP teams, one per thread that calls them.
Timed while this was built (2 cores, an AVX2 CPU), whichever thread uses a second team is several
times slower: fifty forward and backward passes of a bidirectional LSTM took 0.11 s on the thread
that had run first and 0.62 s on another, and integrated gradients over a 22-word sentence 0.85 s
against 5.9 s (``benchmarks/serve.py`` measures the server as it is). So
``attnmt serve`` answers HTTP on request threads, but every piece of model work is a job that the
main thread runs, one at a time: a translation (priority 0) before saliency, gold links or an
export (priority 1) that came earlier and have not started.

``InlineJobs`` runs a job in the caller's thread (the views called directly: tests, notebooks).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["InlineJobs", "MainThreadJobs"]

T = TypeVar("T")


class InlineJobs:
    """Jobs run in the thread that asks for them."""

    def run(self, job: Callable[[], T], priority: int = 0) -> T:
        return job()


class MainThreadJobs:
    """Jobs queued by request threads and run by the thread that calls ``work_forever``."""

    def __init__(self) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Callable[[], Any], Future]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._stopped = threading.Event()

    def run(self, job: Callable[[], T], priority: int = 0) -> T:
        """Queue ``job`` and wait for its result (or its exception)."""
        if self._stopped.is_set():
            raise RuntimeError("attnmt serve is stopping")
        done: Future = Future()
        self._queue.put((priority, next(self._order), job, done))
        return done.result()

    def work_forever(self, poll_seconds: float = 0.2) -> None:
        """Run the queued jobs until ``stop`` (or a KeyboardInterrupt, which propagates)."""
        while not self._stopped.is_set():
            try:
                _, _, job, done = self._queue.get(timeout=poll_seconds)
            except queue.Empty:
                continue
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(job())
            except KeyboardInterrupt:  # Ctrl-C while a job ran: the request hears that the server stops
                done.set_exception(RuntimeError("attnmt serve is stopping"))
                raise
            except BaseException as error:  # noqa: BLE001 - handed to the request that asked for it
                done.set_exception(error)

    def stop(self) -> None:
        """No new jobs; those queued fail with RuntimeError, so no request waits forever."""
        self._stopped.set()
        while True:
            try:
                _, _, _, done = self._queue.get_nowait()
            except queue.Empty:
                return
            if done.set_running_or_notify_cancel():
                done.set_exception(RuntimeError("attnmt serve is stopping"))
