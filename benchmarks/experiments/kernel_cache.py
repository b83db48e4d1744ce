"""oneDNN's kernel cache at its own capacity (1,024) against attnmt's (``attnmt.runtime.kernel_cache``):
a recipe's training steps on the real, ever-changing batch shapes of an epoch.

Each capacity runs in its own process (oneDNN reads the capacity once): the trainer's own step
(``train_step``) over the first N batches of epoch 1, three times over. The first pass meets every
shape for the first time; in the second and third a cache that holds the pass's kernels finds them,
one that does not compiles them again. The capacities take turns over the rounds (A B, then B A) so
that a slow moment of the machine falls on both. A last process per capacity counts the kernels
oneDNN compiled (``ONEDNN_VERBOSE=profile_create``) and the milliseconds it spent compiling them,
pass by pass; reporting slows it, so its speed is not used.

    PYTHONPATH=benchmarks python benchmarks/experiments/kernel_cache.py configs/multi30k_rnn_fast.yaml \\
        --json benchmarks/results/speed/kernel_cache_rnn_fast.json

Needs the Multi30k files (``ATTNMT_DATA_DIR``); trains the recipe's tokenizers in a temporary folder
first. Run it on an otherwise idle machine. Prints a table; writes the JSON.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.kernel_cache import KERNEL_CACHE_CAPACITY, KERNEL_CACHE_VARIABLE
from attnmt.runtime.tables import format_table

from common import cpu_name, portable, recipe_steps_parser

PROJECT = Path(__file__).resolve().parents[2]
PASSES = 3

# One process: the recipe's steps over the first N batches of epoch 1, PASSES times; prints one
# line "PASS p tokens seconds" per pass (and oneDNN's reports, when asked for, on the same stdout).
STEPS = """
import sys, tempfile, time
from pathlib import Path
import torch
from attnmt.data import batch_indices, collate
from attnmt.runs.run_config import load_config
from attnmt.runtime.allocator import keep_freed_memory
from attnmt.training.builder import build_training
from attnmt.training.distributed import DistributedContext
from attnmt.training.trainer import train_step
keep_freed_memory()
torch.set_num_threads(int(sys.argv[3]))
config = load_config(sys.argv[1])
with tempfile.TemporaryDirectory(prefix="attnmt-kernel-cache-") as folder:
    parts = build_training(config, Path(folder) / "run", False, DistributedContext(), lambda message: None)
    parts.model.train()
    positions = batch_indices([len(ids) for ids in parts.train_src], [len(ids) for ids in parts.train_tgt],
                              max_tokens=config.data.max_tokens, shuffle=True, seed=config.training.seed, epoch=0)
    batches = [collate(parts.train_src, parts.train_tgt, indices) for indices in positions[: int(sys.argv[2])]]
    for number in range(1, PASSES + 1):
        print(f"PASS START {number}", flush=True)
        tokens, started = 0, time.perf_counter()
        for batch in batches:
            count = int(batch.tgt_mask.sum())
            train_step(parts, batch, count)
            tokens += count
        print(f"PASS {number} {tokens} {time.perf_counter() - started}", flush=True)
""".replace("PASSES", str(PASSES))


def run_passes(config: str, batches: int, threads: int, capacity: int, verbose: bool = False) -> dict:
    """One process at ``capacity``: tokens/s of each pass, and with ``verbose`` the kernels compiled
    and found, and the compiling milliseconds, of each pass."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONEDNN_", "DNNL_"))}
    env[KERNEL_CACHE_VARIABLE] = str(capacity)
    if verbose:
        env["ONEDNN_VERBOSE"] = "profile_create"
    done = subprocess.run([sys.executable, "-c", STEPS, str(PROJECT / config), str(batches), str(threads)],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"kernel_cache.py: the steps at capacity {capacity} failed:\n{done.stderr[-2000:]}")
    passes: list[dict] = []
    for line in done.stdout.splitlines():
        if line.startswith("PASS START"):
            passes.append({"compiled": 0, "found": 0, "compile_ms": 0.0})
        elif line.startswith("PASS "):
            _, _, tokens, seconds = line.split()
            passes[-1]["tokens_per_s"] = round(int(tokens) / float(seconds))
        elif "create:cache_miss" in line and passes:
            passes[-1]["compiled"] += 1
            passes[-1]["compile_ms"] += float(line.rsplit(",", 1)[1])
        elif "create:cache_hit" in line and passes:
            passes[-1]["found"] += 1
    for item in passes:
        item["compile_ms"] = round(item["compile_ms"], 1)
        if not verbose:
            del item["compiled"], item["found"], item["compile_ms"]
    return {"capacity": capacity, "passes": passes}


def main() -> int:
    parser = recipe_steps_parser(__doc__, "batches of epoch 1 a pass trains on")
    parser.add_argument("--rounds", type=int, default=2, help="timed processes of each capacity (default 2)")
    args = parser.parse_args()
    capacities = (1024, KERNEL_CACHE_CAPACITY)
    timed: dict[int, list[dict]] = {capacity: [] for capacity in capacities}
    for round_index in range(args.rounds):
        for capacity in capacities if round_index % 2 == 0 else capacities[::-1]:
            print(f"round {round_index + 1}: capacity {capacity} ...", file=sys.stderr)
            timed[capacity].append(run_passes(args.config, args.batches, args.threads, capacity))
    counted = {capacity: run_passes(args.config, args.batches, args.threads, capacity, verbose=True)
               for capacity in capacities}
    rows, results = [], []
    for capacity in capacities:
        per_pass = [[run["passes"][p]["tokens_per_s"] for run in timed[capacity]] for p in range(PASSES)]
        medians = [statistics.median(speeds) for speeds in per_pass]
        kernels = counted[capacity]["passes"]
        results.append({"capacity": capacity, "tokens_per_s": per_pass, "tokens_per_s_median": medians,
                        "kernels": kernels})
        for p in range(PASSES):
            rows.append([capacity, p + 1, round(medians[p]), kernels[p]["compiled"], kernels[p]["found"],
                         kernels[p]["compile_ms"]])
    for p in range(PASSES):
        results[1].setdefault("speedup", []).append(
            round(results[1]["tokens_per_s_median"][p] / results[0]["tokens_per_s_median"][p], 3))
    print(format_table(["capacity", "pass", "target tok/s", "kernels compiled", "kernels found", "compiling ms"], rows))
    print(f"attnmt's capacity against oneDNN's, by pass: {results[1]['speedup']}")
    write_text_atomic(args.json, json.dumps(portable({
        "config": args.config, "batches": args.batches, "rounds": args.rounds, "threads": args.threads,
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
        "cpu": cpu_name(), "results": results,
    }), indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
