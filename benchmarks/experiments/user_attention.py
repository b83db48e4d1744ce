"""What does a user's own attention cost? The fast recipe (configs/multi30k_rnn_fast.yaml) trained
for a fixed number of steps with the built-in scaled_dot, then with the same mechanism written by a
user in the all-steps form (examples/my_attention.py:MyAttentionAllSteps), then in the forward form
that attnmt asks one decoding step at a time (examples/my_attention.py:MyAttention). All three use
attention_dim = kq_dim = 512, so they do the same arithmetic. Also times `attnmt check` on the
forward-form example.

    PYTHONPATH=benchmarks python benchmarks/experiments/user_attention.py --steps 150 --rounds 2   # about 12 minutes, on an idle machine

Training target tokens/s is the median of the trainer's own "train" records after the first.
Variants alternate within each round, so a drifting machine affects them alike; the ratio to the
built-in is taken within a round. Prints a table; writes benchmarks/results/user_attention.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "examples" / "my_attention.py"
VARIANTS = {
    "built-in scaled_dot": ["--attention", "scaled_dot", "--set", "model.attention_options={kq_dim: 512}"],
    "user, all-steps form": ["--attention", f"{EXAMPLE}:MyAttentionAllSteps",
                             "--set", "model.attention_options={attention_dim: 512}"],
    "user, per-step form": ["--attention", f"{EXAMPLE}:MyAttention",
                            "--set", "model.attention_options={attention_dim: 512}"],
}
BASELINE = "built-in scaled_dot"


def train_once(arguments: list[str], steps: int, folder: Path) -> float:
    """Median training target tokens/s of one run of ``steps`` steps (the first record left out)."""
    out = folder / "run"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "attnmt", "train", "--config", str(PROJECT / "configs" / "multi30k_rnn_fast.yaml"),
               "--out", str(out), "--no-progress", "--max-steps", str(steps), "--set", "training.bleu_max_sentences=0",
               "--set", "training.log_every=25", *arguments]
    subprocess.run(command, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    speeds = [r["tokens_per_s"] for r in records if r["type"] == "train"][1:]
    return statistics.median(speeds)


def time_check() -> float:
    """Wall seconds of `attnmt check examples/my_attention.py:MyAttention` (speed timing included)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attnmt", "check", f"{EXAMPLE}:MyAttention"], capture_output=True,
                   check=True, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150, help="training steps per run (default 150)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all variants (default 2)")
    parser.add_argument("--output", type=Path, default=PROJECT / "benchmarks" / "results" / "mechanisms" / "user_attention.json")
    args = parser.parse_args()

    speeds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="attnmt-user-attention-") as folder:
        for round_number in range(1, args.rounds + 1):
            for name, arguments in VARIANTS.items():
                speeds[name].append(train_once(arguments, args.steps, Path(folder)))
                print(f"round {round_number}: {name}: {speeds[name][-1]:,.0f} target tokens/s", file=sys.stderr)
    check_seconds = time_check()

    rows, results = [], {}
    for name in VARIANTS:
        ratios = [mine / base for mine, base in zip(speeds[name], speeds[BASELINE])]
        results[name] = {"tokens_per_s": speeds[name], "ratio_to_builtin": ratios,
                         "ratio_median": statistics.median(ratios)}
        rows.append([name, f"{statistics.median(speeds[name]):,.0f}", f"{statistics.median(ratios):.2f}×"])
    print(format_table(["attention", "target tokens/s", "against the built-in"], rows))
    print(f"\nattnmt check examples/my_attention.py:MyAttention: {check_seconds:.1f} s (target < 20 s)")
    all_steps = results["user, all-steps form"]["ratio_median"]
    print(f"all-steps form: {all_steps:.2f}× the built-in (target >= 0.9×: {'met' if all_steps >= 0.9 else 'NOT met'})")
    report = {
        "benchmark": "user_attention", "config": "configs/multi30k_rnn_fast.yaml", "steps": args.steps,
        "rounds": args.rounds, "threads": os.environ.get("OMP_NUM_THREADS"), "cpus": os.cpu_count(),
        "arguments": {name: portable(" ".join(arguments)) for name, arguments in VARIANTS.items()},
        "variants": results,
        "check_seconds": check_seconds, "targets": {"all_steps_ratio": 0.9, "check_seconds": 20},
    }
    write_text_atomic(args.output, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
