"""Does attnmt keep its speed on a machine that is busy with other things?

The fast recipe's training steps (``configs/multi30k_rnn_fast.yaml``, the same batches each time)
and a beam-5 decoding of 200 test sentences with a trained run, on an idle machine, beside one and
two busy processes (``while True: pass``) and beside a burst of short processes (Python started
and ended over and over, as a test suite does), each started and stopped by this script. Three
forms take turns in every condition, in alternating order, round after round:

- ``2 threads``: today's fixed default, every core the process may use;
- ``1 thread``: fixed;
- ``adaptive``: ``attnmt.runtime.threads.ThreadChooser`` as ``attnmt train`` and the translator run
  it (a fresh one per block), reading the machine's load before every step or batch.

Training speed is target tokens per second over a block's steps (200, or those that fit in a
minute: two threads beside a burst run about 60 times slower than idle); decoding speed is source
sentences per second. The JSON counts the steps and batches the adaptive form ran at each thread
count, in each condition. Targets (issue: fast on a busy machine): adaptive beside one busy process at
least 0.75 of the idle speed of today's default, for training and decoding; adaptive on an idle
machine at least 0.97 of it; beside the burst at least 0.5 of one thread's idle speed.

    PYTHONPATH=benchmarks python benchmarks/experiments/contention.py --run RUN --json benchmarks/results/speed/contention.json

Needs the Multi30k files (``ATTNMT_DATA_DIR``). The machine must be otherwise idle.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import torch

from attnmt.data import batch_indices, collate
from attnmt.decoding.translator import Translator
from attnmt.runs.run_config import load_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.precision import effective_precision
from attnmt.runtime.tables import format_table
from attnmt.runtime.threads import ThreadChooser, available_cores
from attnmt.training.builder import build_training
from attnmt.training.distributed import DistributedContext
from attnmt.training.trainer import train_step

from common import portable

PROJECT = Path(__file__).resolve().parents[2]
FORMS = ("2 threads", "1 thread", "adaptive")
CONDITIONS = ("idle", "1 busy process", "2 busy processes", "burst of short processes")


def targets_of(idle: dict, one_idle: dict) -> list[tuple[str, str, str, dict]]:
    """(name, condition, work, the speed it is compared with) of each target of the issue."""
    return [("adaptive_beside_one_busy_train", "1 busy process", "train", idle),
            ("adaptive_beside_one_busy_decode", "1 busy process", "decode", idle),
            ("adaptive_idle_train", "idle", "train", idle), ("adaptive_idle_decode", "idle", "decode", idle),
            ("adaptive_burst_against_one_thread_train", "burst of short processes", "train", one_idle),
            ("adaptive_burst_against_one_thread_decode", "burst of short processes", "decode", one_idle)]


@contextlib.contextmanager
def neighbours(condition: str):
    """The other work of ``condition``, running while the block runs, stopped after it."""
    processes: list[subprocess.Popen] = []
    stop = threading.Event()
    burst = None
    if condition.endswith(("busy process", "busy processes")):
        for _ in range(int(condition[0])):
            processes.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
    elif condition.startswith("burst"):
        def spawn() -> None:
            while not stop.is_set():
                subprocess.run([sys.executable, "-c", "import json, re, pathlib"], check=False)
        burst = [threading.Thread(target=spawn, daemon=True) for _ in range(2)]
        for thread in burst:
            thread.start()
    time.sleep(0.5 if condition != "idle" else 0.0)
    try:
        yield
    finally:
        stop.set()
        for process in processes:
            process.kill()
            process.wait()
        for thread in burst or []:
            thread.join(timeout=30)


class CountingChooser(ThreadChooser):
    """The chooser, counting the units of work run at each thread count into ``used``."""

    def __init__(self, most: int, hold: int, used: Counter):
        super().__init__(most, hold=hold)
        self.used = used

    def before(self) -> int:
        threads = super().before()
        self.used[threads] += 1
        return threads


def chooser_for(form: str, cores: int, hold: int, used: Counter) -> ThreadChooser | None:
    """The adaptive chooser as ``attnmt train`` (``hold`` 3) and the translator (1) make it, or a
    fixed count."""
    torch.set_num_threads(cores if form != "1 thread" else 1)
    return CountingChooser(cores, hold, used) if form == "adaptive" else None


def train_block(parts, batches, form: str, cores: int, seconds_at_most: float, used: Counter) -> float:
    """Target tokens per second of the recipe's training steps over ``batches`` (those that fit in
    ``seconds_at_most``)."""
    chooser = chooser_for(form, cores, 3, used)
    tokens = seconds = 0.0
    for batch in batches:
        if seconds > seconds_at_most:
            break
        started = time.perf_counter()  # the chooser's reading of the load is part of the cost
        if chooser is not None:
            chooser.before()
        target = int(batch.tgt_mask.sum())
        train_step(parts, batch, target)  # the trainer's own step
        tokens, seconds = tokens + target, seconds + time.perf_counter() - started
    return tokens / seconds


def decode_block(translator: Translator, sentences: list[str], form: str, cores: int, used: Counter) -> float:
    """Sentences per second of a beam-5 decoding (batches of 16, as the chooser needs several)."""
    translator.threads = chooser_for(form, cores, 1, used)
    started = time.perf_counter()
    translator.translate(sentences, beam=5, batch_size=16)
    return len(sentences) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a trained run to decode with")
    parser.add_argument("--config", default="configs/multi30k_rnn_fast.yaml")
    parser.add_argument("--steps", type=int, default=200, help="training steps a block (default 200)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="a training block stops after its first step past this many seconds (default 60)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS), metavar="CONDITION",
                        help="conditions to measure (default all; the idle one is always included)")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    conditions = [condition for condition in CONDITIONS if condition in args.conditions or condition == "idle"]
    cores = available_cores()
    config = load_config(PROJECT / args.config)
    with tempfile.TemporaryDirectory() as folder:
        parts = build_training(config, Path(folder) / "run", False, DistributedContext(), lambda line: None)
    parts.model.train()
    positions = batch_indices([len(ids) for ids in parts.train_src], [len(ids) for ids in parts.train_tgt],
                              max_tokens=config.data.max_tokens, shuffle=True, seed=1, epoch=0)
    batches = [collate(parts.train_src, parts.train_tgt, indices) for indices in positions[:args.steps]]
    translator = Translator.load(args.run)
    data = Path(os.environ.get("ATTNMT_DATA_DIR", PROJECT.parent / "shared" / "data")) / "multi30k"
    with gzip.open(data / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as handle:
        sentences = [line.strip() for line in handle][: args.sentences]
    unused: Counter = Counter()
    train_block(parts, batches[:10], "2 threads", cores, args.seconds, unused)  # warm-up
    decode_block(translator, sentences[:32], "2 threads", cores, unused)
    used = {condition: {"train": Counter(), "decode": Counter()} for condition in conditions}  # adaptive

    speeds: dict[str, dict[str, dict[str, list[float]]]] = {
        condition: {form: {"train": [], "decode": []} for form in FORMS} for condition in conditions}
    for round_number in range(args.rounds):
        for condition in conditions:
            forms = FORMS if round_number % 2 == 0 else FORMS[::-1]
            with neighbours(condition):
                for form in forms:
                    speeds[condition][form]["train"].append(
                        train_block(parts, batches, form, cores, args.seconds, used[condition]["train"]))
                    speeds[condition][form]["decode"].append(
                        decode_block(translator, sentences, form, cores, used[condition]["decode"]))
            print(f"round {round_number + 1}, {condition}: " + "; ".join(
                f"{form} {speeds[condition][form]['train'][-1]:,.0f} tok/s, "
                f"{speeds[condition][form]['decode'][-1]:.1f} sent/s" for form in FORMS), flush=True)

    median = {condition: {form: {work: statistics.median(values) for work, values in by_work.items()}
                          for form, by_work in by_form.items()} for condition, by_form in speeds.items()}
    idle = median["idle"]["2 threads"]
    one_idle = median["idle"]["1 thread"]
    rows = []
    for condition in conditions:
        for form in FORMS:
            value = median[condition][form]
            rows.append([condition, form, f"{value['train']:,.0f}", f"{value['train'] / idle['train']:.2f}",
                         f"{value['decode']:.1f}", f"{value['decode'] / idle['decode']:.2f}"])
    print(format_table(["condition", "threads", "train tok/s", "against idle", "decode sent/s", "against idle"],
                       rows))
    adaptive = {condition: median[condition]["adaptive"] for condition in conditions}
    record = {
        "question": "does attnmt keep its speed on a busy machine?",
        "cores": cores, "torch": torch.__version__, "machine": platform.machine(), "config": args.config,
        "precision": effective_precision(config.training.precision, "cpu"),
        "steps_per_block": args.steps, "seconds_per_block": args.seconds,
        "sentences": len(sentences), "beam": 5, "rounds": args.rounds,
        "speeds": speeds, "median": median,
        "adaptive_threads_used": {condition: {work: {str(threads): count for threads, count in sorted(counter.items())}
                                              for work, counter in by_work.items()}
                                  for condition, by_work in used.items()},
        "against_idle_default": {condition: {form: {work: round(median[condition][form][work] / idle[work], 3)
                                                    for work in ("train", "decode")} for form in FORMS}
                                 for condition in conditions},
        "targets": {name: round(adaptive[condition][work] / baseline[work], 3)
                    for name, condition, work, baseline in targets_of(idle, one_idle) if condition in conditions},
    }
    print(json.dumps(record["targets"], indent=2))
    write_text_atomic(args.json, json.dumps(portable(record), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
