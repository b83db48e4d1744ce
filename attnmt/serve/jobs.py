"""Where the models' work runs: one worker thread per model, each with one PyTorch thread.

PyTorch's CPU operators run their parallel parts in OpenMP teams, one per calling thread, and on a
request thread (a second team) they ran several times slower than on the thread that ran first:
timed while this was built (2 cores, an AVX2 CPU), fifty forward and backward passes of a
bidirectional LSTM took 0.11 s on the first thread and 0.62 s on another, integrated gradients over
a 22-word sentence 0.85 s against 5.9 s. With one intra-op thread per worker there is no team to
share: a translation with beam 5 took 0.066 s (0.078 s with two threads on the main thread),
integrated gradients 1.68 s (1.50 s), and a translation on one model while another model computed
saliency 0.24 s, not blocked. So each model gets a worker thread with one PyTorch thread, and the
two cores serve two models at once; ``benchmarks/serve.py`` measures the server as it is.

A model's jobs run one at a time, a translation (priority 0) before saliency, gold links or an
export (priority 1) queued earlier that has not started. Each kind has its own bound of waiting
jobs per model (``MAX_WAITING``: 8 heavy jobs, ``MAX_WAITING_TRANSLATIONS``: 32 translations; more
are refused: ``BUSY``), so a queue full of saliency never refuses a cheap translation, which
starts next anyway. A waiting job whose client has gone (``watching``: the
HTTP handler says how to tell) is cancelled before it starts, so abandoned requests do not hold
up the next one. ``InlineJobs`` runs a job in the caller's
thread instead (the views called directly: tests, notebooks).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import TypeVar

import torch

__all__ = ["BUSY", "MAX_WAITING", "MAX_WAITING_TRANSLATIONS", "ClientGone", "InlineJobs", "ModelWorkers", "watching"]

T = TypeVar("T")
STOPPING = "attnmt serve is stopping"
BUSY = "this model has too many requests waiting; try again in a moment"
MAX_WAITING = 8  # heavy jobs (priority 1 and later: saliency, gold links, exports) waiting per model
MAX_WAITING_TRANSLATIONS = 32  # translations (priority 0) waiting per model; each takes well under a second
_client = threading.local()  # .gone: what tells the request thread's client has left (see watching)


@contextmanager
def watching(gone: Callable[[], bool]) -> Iterator[None]:
    """Within the block, jobs this thread queues are cancelled while they wait once ``gone()``
    says the client has left."""
    previous = getattr(_client, "gone", None)
    _client.gone = gone
    try:
        yield
    finally:
        _client.gone = previous


class ClientGone(ConnectionError):
    """The client left while its job waited: the job was cancelled before it started."""


class InlineJobs:
    """Jobs run in the thread that asks for them."""

    def run(self, model: str, job: Callable[[], T], priority: int = 0) -> T:
        return job()

    def stop(self, wait: float = 0.0) -> bool:
        return True


class ModelWorkers:
    """A worker thread per model name; ``run`` queues a job on that model's worker and waits."""

    def __init__(self, names: Sequence[str]) -> None:
        self._queues: dict[str, queue.PriorityQueue] = {name: queue.PriorityQueue() for name in names}
        self._order = itertools.count()
        self._stopped = threading.Event()
        # jobs queued, not started and not cancelled, per (model, translation or heavy)
        self._waiting = {(name, kind): 0 for name in names for kind in (True, False)}
        self._count = threading.Lock()
        self._threads = [threading.Thread(target=self._work, args=(name, jobs), name=f"attnmt-serve-{name}",
                                          daemon=True) for name, jobs in self._queues.items()]
        for thread in self._threads:
            thread.start()

    def run(self, model: str, job: Callable[[], T], priority: int = 0) -> T:
        """Queue ``job`` on ``model``'s worker and wait for its result (or its exception);
        RuntimeError(BUSY) when as many jobs of its kind already wait there as its bound
        (``MAX_WAITING_TRANSLATIONS`` for priority 0, else ``MAX_WAITING``), ClientGone when the
        client left before the job started (module docstring)."""
        if self._stopped.is_set():
            raise RuntimeError(STOPPING)
        kind = (model, priority <= 0)
        with self._count:
            if self._waiting[kind] >= (MAX_WAITING_TRANSLATIONS if priority <= 0 else MAX_WAITING):
                raise RuntimeError(BUSY)
            self._waiting[kind] += 1
        done: Future = Future()
        self._queues[model].put((priority, next(self._order), job, done))
        gone = getattr(_client, "gone", None)
        while True:
            try:
                return done.result(timeout=None if gone is None else 0.25)
            except FutureTimeout:
                if gone is not None and gone() and done.cancel():
                    self._left(kind)
                    raise ClientGone("the client left before its job started") from None

    def _left(self, kind: tuple[str, bool]) -> None:
        """A job of ``kind`` (its model, and whether it is a translation) stopped waiting: it
        started, or was cancelled."""
        with self._count:
            self._waiting[kind] -= 1

    def _work(self, model: str, jobs: queue.PriorityQueue) -> None:
        torch.set_num_threads(1)  # this thread's own: no OpenMP team to share (module docstring)
        while True:
            priority, _, job, done = jobs.get()
            if job is None:
                return
            if not done.set_running_or_notify_cancel():
                continue
            self._left((model, priority <= 0))
            try:
                done.set_result(job())
            except BaseException as error:  # noqa: BLE001 - handed to the request that asked for it
                done.set_exception(error)

    def stop(self, wait: float = 60.0) -> bool:
        """No new jobs; those queued fail with RuntimeError, so no request waits forever; then wait up
        to ``wait`` seconds for the jobs running now to end. The interpreter must not exit while a
        worker is inside a PyTorch operator: that aborted the process (SIGABRT, "terminate called
        without an active exception") on Ctrl-C during saliency. True when every worker ended."""
        self._stopped.set()
        for jobs in self._queues.values():
            while True:
                try:
                    _, _, _, done = jobs.get_nowait()
                except queue.Empty:
                    break
                if done is not None and done.set_running_or_notify_cancel():
                    done.set_exception(RuntimeError(STOPPING))
            jobs.put((-1, -1, None, None))  # ends the worker
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(wait)
        return not any(thread.is_alive() for thread in self._threads)
