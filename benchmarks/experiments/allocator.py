"""Does the memory allocator cost training speed? The fast recipe for a fixed number of steps under
glibc malloc as it comes (``ATTNMT_ALLOCATOR=system``), glibc told to keep freed memory by the
environment variables, glibc told the same by attnmt itself (its default:
``attnmt.runtime.allocator``), jemalloc, jemalloc told to keep freed pages, and tcmalloc (LD_PRELOAD,
where installed: Debian libjemalloc2, libgoogle-perftools4), measured with GNU time: minor page
faults and peak resident memory, and the median training target tokens/s from metrics.jsonl.
With ``--evaluate RUN``, also the seconds of ``attnmt evaluate RUN --split valid --beam 5`` under
each variant (does the setting pay for decoding?).

    PYTHONPATH=benchmarks python benchmarks/experiments/allocator.py --steps 200 --rounds 2   # about 15 minutes, on an idle machine
    PYTHONPATH=benchmarks python benchmarks/experiments/allocator.py --variants default environment attnmt --evaluate RUN

Variants alternate within each round, so a drifting machine affects them alike. Prints a table;
writes benchmarks/results/allocator.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
LIBRARIES = Path("/usr/lib/x86_64-linux-gnu")
VARIANTS = {
    "glibc (default)": {"ATTNMT_ALLOCATOR": "system"},
    # Blocks up to 1 GiB come from the heap instead of mmap, and freed memory is not given back:
    # large tensors are no longer unmapped at every free and faulted in again at the next step.
    "glibc, keep freed memory (environment)": {"MALLOC_MMAP_THRESHOLD_": str(1 << 30),
                                               "MALLOC_TRIM_THRESHOLD_": str(1 << 34),
                                               "MALLOC_TOP_PAD_": str(1 << 28)},
    "glibc, keep freed memory (attnmt)": {},  # attnmt's default: the same values, through mallopt
    "jemalloc": {"LD_PRELOAD": str(LIBRARIES / "libjemalloc.so.2")},
    # jemalloc returns freed pages to the system after 10 s by default; -1 keeps them for reuse
    "jemalloc, keep freed pages": {"LD_PRELOAD": str(LIBRARIES / "libjemalloc.so.2"),
                                   "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"},
    "tcmalloc": {"LD_PRELOAD": str(LIBRARIES / "libtcmalloc_minimal.so.4")},
}
SHORT_NAMES = {"default": "glibc (default)", "environment": "glibc, keep freed memory (environment)",
               "attnmt": "glibc, keep freed memory (attnmt)", "jemalloc": "jemalloc",
               "jemalloc-keep": "jemalloc, keep freed pages", "tcmalloc": "tcmalloc"}


def environment_with(variant: dict) -> dict:
    """This process's environment without any allocator setting of its own, plus ``variant``'s."""
    base = {key: value for key, value in os.environ.items()
            if not key.startswith("MALLOC_") and key not in ("LD_PRELOAD", "ATTNMT_ALLOCATOR")}
    return {**base, **variant}


def evaluate_seconds(environment: dict, run: Path, folder: Path) -> float:
    """Wall seconds of ``attnmt evaluate RUN --split valid --beam 5`` (on a copy of the run)."""
    copy = folder / "evaluated"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run, copy)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attnmt", "evaluate", str(copy), "--split", "valid", "--beam", "5",
                    "-n", "0", "--no-progress"], env=environment_with(environment), capture_output=True, check=True)
    return time.perf_counter() - started


def run_once(environment: dict, steps: int, folder: Path) -> dict:
    out = folder / "run"
    shutil.rmtree(out, ignore_errors=True)
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "attnmt", "train", "--config",
               str(PROJECT / "configs" / "multi30k_rnn_fast.yaml"), "--out", str(out), "--no-progress",
               "--max-steps", str(steps), "--set", "training.bleu_max_sentences=0"]
    done = subprocess.run(command, env=environment_with(environment), capture_output=True, text=True, check=True)
    faults = int(re.search(r"Minor \(reclaiming a frame\) page faults: (\d+)", done.stderr).group(1))
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    speeds = sorted(r["tokens_per_s"] for r in records if r["type"] == "train")
    elapsed = [r for r in records if r["type"] == "summary"][-1]["elapsed"]
    return {"minor_page_faults": faults, "tokens_per_s_median": speeds[len(speeds) // 2],
            "training_seconds": elapsed, "faults_per_training_second": faults / elapsed,
            "peak_resident_gib": peak_kib / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", nargs="+", choices=sorted(SHORT_NAMES), default=sorted(SHORT_NAMES),
                        help="which allocators (default: all that are installed)")
    parser.add_argument("--evaluate", type=Path, metavar="RUN", help="also time attnmt evaluate on RUN")
    parser.add_argument("--json", type=Path, default=PROJECT / "benchmarks" / "results" / "speed" / "allocator.json")
    args = parser.parse_args()
    chosen = {SHORT_NAMES[short] for short in args.variants} | {"glibc (default)"}
    variants = {name: env for name, env in VARIANTS.items()
                if name in chosen and ("LD_PRELOAD" not in env or Path(env["LD_PRELOAD"]).exists())}
    evaluations: dict[str, list[float]] = {name: [] for name in variants}
    measured: dict[str, list[dict]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="attnmt-allocator-") as temporary:
        for round_number in range(args.rounds):
            for name, environment in variants.items():
                measured[name].append(run_once(environment, args.steps, Path(temporary)))
                print(f"  round {round_number + 1}, {name}: {measured[name][-1]}", flush=True)
                if args.evaluate is not None:
                    evaluations[name].append(evaluate_seconds(environment, args.evaluate, Path(temporary)))
                    print(f"  round {round_number + 1}, {name}: evaluate {evaluations[name][-1]:.1f} s", flush=True)
    base = statistics.median(m["tokens_per_s_median"] for m in measured["glibc (default)"])
    rows, record = [], {"steps": args.steps, "rounds": args.rounds, "cpus": os.cpu_count(), "variants": {}}
    if args.evaluate is not None:
        record["evaluate"] = {"run": str(args.evaluate), "command": "attnmt evaluate RUN --split valid --beam 5"}
    base_evaluation = statistics.median(evaluations["glibc (default)"]) if args.evaluate is not None else None
    for name, runs in measured.items():
        speed = statistics.median(m["tokens_per_s_median"] for m in runs)
        faults = statistics.median(m["faults_per_training_second"] for m in runs)
        peak = max(m["peak_resident_gib"] for m in runs)
        record["variants"][name] = {"tokens_per_s_median": round(speed), "ratio_to_default": round(speed / base, 3),
                                    "minor_page_faults_per_second": round(faults),
                                    "peak_resident_gib": round(peak, 2), "runs": runs,
                                    "environment": variants[name]}
        rows.append([name, f"{speed:.0f}", f"{speed / base:.3f}", f"{faults:,.0f}", f"{peak:.2f}"])
        if base_evaluation is not None:
            seconds = statistics.median(evaluations[name])
            record["variants"][name].update(evaluate_seconds=[round(s, 2) for s in evaluations[name]],
                                            evaluate_ratio_to_default=round(base_evaluation / seconds, 3))
            rows[-1] += [f"{seconds:.1f}", f"{base_evaluation / seconds:.3f}"]
    headers = ["allocator", "target tokens/s", "ratio", "minor page faults / s", "peak GiB"]
    if base_evaluation is not None:
        headers += ["evaluate s", "evaluate speed ratio"]
    print(format_table(headers, rows))
    write_text_atomic(args.json, json.dumps(portable(record), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
