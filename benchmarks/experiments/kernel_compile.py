"""How long does oneDNN spend compiling kernels in a training's first steps, for each batch-shape policy?

oneDNN, which runs PyTorch's bf16 matrix products and LSTMs on a CPU, creates (JIT-compiles) one
primitive per problem shape and keeps it in its cache. With ``ONEDNN_VERBOSE=profile_create`` it
prints one line per creation: ``create:cache_miss`` for a new kernel, ``create:cache_hit`` for one
taken from the cache, the last field the milliseconds it took. This script trains a recipe from
scratch for ``--steps`` steps (or one epoch with ``--steps 0``) once per multiple, the arms taking
turns, reads those lines as they come, and reports the kernels compiled, the milliseconds spent
compiling them, the training's wall time and its steps. The cache is the one attnmt sets (16,384
kernels), so a miss is a shape seen for the first time. An arm is ``M`` (``data.pad_multiple`` M)
, ``M:K`` (and ``data.token_ladder`` K: the output layer's rows on K sizes per doubling) or ``M:K:R``
(and ``data.row_ladder`` R: each batch's row count on R sizes per doubling).

    PYTHONPATH=benchmarks python benchmarks/experiments/kernel_compile.py multi30k_rnn_fast --steps 0 \\
        --arms 1 8 8:16 8:16:4 --json benchmarks/results/speed/kernel_compile_rnn5.json

Prints a table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import cpu_name, machine, portable

PROJECT = Path(__file__).resolve().parents[2]


def creations(stream) -> dict:
    """Count oneDNN's creation lines on ``stream`` (text lines) until it ends."""
    counts = {"kernels_compiled": 0, "compile_ms": 0.0, "cache_hits": 0, "by_kind": {}}
    for line in stream:
        if not line.startswith("onednn_verbose") or ",create:" not in line:
            continue
        fields = line.rstrip("\n").split(",")
        try:
            milliseconds = float(fields[-1])
        except ValueError:
            continue
        if "create:cache_miss" in fields:
            kind = fields[fields.index("create:cache_miss") + 2]
            counts["kernels_compiled"] += 1
            counts["compile_ms"] += milliseconds
            entry = counts["by_kind"].setdefault(kind, {"kernels": 0, "ms": 0.0})
            entry["kernels"] += 1
            entry["ms"] = round(entry["ms"] + milliseconds, 1)
        elif "create:cache_hit" in fields:
            counts["cache_hits"] += 1
    counts["compile_ms"] = round(counts["compile_ms"], 1)
    return counts


def parse_arm(text: str) -> tuple[int, int, int]:
    """``M``, ``M:K`` or ``M:K:R`` as (pad multiple, token ladder, row ladder)."""
    parts = text.split(":")
    try:
        if not 1 <= len(parts) <= 3:
            raise ValueError
        numbers = [int(part) for part in parts] + [0] * (3 - len(parts))
    except ValueError:
        raise argparse.ArgumentTypeError(f"an arm is M, M:K or M:K:R (integers), got {text!r}") from None
    return numbers[0], numbers[1], numbers[2]


def arm_name(multiple: int, ladder: int, rows: int = 0) -> str:
    """The arm's key in the JSON: "M", "M:K" with a token ladder, "M:K:R" with a row ladder too."""
    if rows:
        return f"{multiple}:{ladder}:{rows}"
    return f"{multiple}:{ladder}" if ladder else str(multiple)


def train_once(config: str, arm: tuple[int, int, int], steps: int, seed: int, folder: Path) -> dict:
    multiple, ladder, rows = arm
    out = folder / f"pad{multiple}-ladder{ladder}-rows{rows}"
    command = [sys.executable, "-m", "attnmt", "train", "--config", config, "--out", str(out), "--seed", str(seed),
               "--no-progress", "--set", f"data.pad_multiple={multiple}", "--set", f"data.token_ladder={ladder}",
               "--set", f"data.row_ladder={rows}", "--set", "training.bleu_max_sentences=0"]
    command += ["--max-steps", str(steps)] if steps else ["--max-epochs", "1"]
    environment = {**os.environ, "ONEDNN_VERBOSE": "profile_create"}
    started = time.perf_counter()
    with subprocess.Popen(command, cwd=PROJECT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as process:
        counts = creations(process.stdout)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"kernel_compile.py: {' '.join(command)} failed (exit {process.returncode})")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    train = [r for r in records if r["type"] == "train"]
    return {"pad_multiple": multiple, "token_ladder": ladder, "row_ladder": rows, **counts, "steps": train[-1]["step"] if train else 0,
            "training_seconds": round(train[-1]["elapsed"], 1) if train else None,
            "wall_seconds": round(wall, 1),
            "compile_share_of_training": (round(counts["compile_ms"] / 1000 / train[-1]["elapsed"], 3)
                                          if train else None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a recipe name or config file")
    parser.add_argument("--arms", type=parse_arm, nargs="+", default=[(1, 0, 0), (8, 0, 0), (8, 16, 0)],
                        help="M (data.pad_multiple), M:K (and data.token_ladder K) or M:K:R (and data.row_ladder R); "
                             "default 1 8 8:16")
    parser.add_argument("--steps", type=int, default=0, help="training steps per arm; 0: one epoch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="kernel-compile-") as folder:
        for arm in args.arms:
            print(f"training {args.config} with data.pad_multiple={arm[0]}, data.token_ladder={arm[1]}, "
                  f"data.row_ladder={arm[2]} ...",
                  file=sys.stderr, flush=True)
            results.append(train_once(args.config, arm, args.steps, args.seed, Path(folder)))
    rows = [[r["pad_multiple"], r["token_ladder"], r["row_ladder"], r["steps"], f"{r['kernels_compiled']:,}",
             f"{r['by_kind'].get('matmul', {}).get('kernels', 0):,}", f"{r['compile_ms'] / 1000:.1f}",
             r["training_seconds"], r["compile_share_of_training"]] for r in results]
    print(format_table(["pad multiple", "token ladder", "row ladder", "steps", "kernels compiled", "of them matmul", "compile s",
                        "training s", "compile share"], rows))
    write_text_atomic(args.json, json.dumps(portable({
        "config": args.config, "steps": args.steps or "one epoch", "seed": args.seed,
        "machine": machine("torch"), "cpu": cpu_name(), "threads": os.cpu_count(),
        "arms": {arm_name(r["pad_multiple"], r["token_ladder"], r["row_ladder"]): r for r in results}}), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
