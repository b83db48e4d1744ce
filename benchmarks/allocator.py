"""Does the memory allocator cost training speed? The fast recipe for a fixed number of steps under
glibc malloc as it comes, glibc told to keep freed memory (no unmapping of large blocks), jemalloc
jemalloc told to keep freed pages, and tcmalloc (LD_PRELOAD, where installed: Debian libjemalloc2,
libgoogle-perftools4), measured with GNU time: minor page faults and peak resident memory, and the
median training target tokens/s from metrics.jsonl.

    python benchmarks/allocator.py --steps 300 --rounds 2   # about 12 minutes, on an idle machine

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
from pathlib import Path

from portable import portable

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

PROJECT = Path(__file__).resolve().parents[1]
LIBRARIES = Path("/usr/lib/x86_64-linux-gnu")
VARIANTS = {
    "glibc (default)": {},
    # Blocks up to 1 GiB come from the heap instead of mmap, and freed memory is not given back:
    # large tensors are no longer unmapped at every free and faulted in again at the next step.
    "glibc, keep freed memory": {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 34),
                                 "MALLOC_TOP_PAD_": str(1 << 28)},
    "jemalloc": {"LD_PRELOAD": str(LIBRARIES / "libjemalloc.so.2")},
    # jemalloc returns freed pages to the system after 10 s by default; -1 keeps them for reuse
    "jemalloc, keep freed pages": {"LD_PRELOAD": str(LIBRARIES / "libjemalloc.so.2"),
                                   "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"},
    "tcmalloc": {"LD_PRELOAD": str(LIBRARIES / "libtcmalloc_minimal.so.4")},
}


def run_once(environment: dict, steps: int, folder: Path) -> dict:
    out = folder / "run"
    shutil.rmtree(out, ignore_errors=True)
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "attnmt", "train", "--config",
               str(PROJECT / "configs" / "multi30k_rnn_fast.yaml"), "--out", str(out), "--no-progress",
               "--max-steps", str(steps), "--set", "training.bleu_max_sentences=0"]
    done = subprocess.run(command, env={**os.environ, **environment}, capture_output=True, text=True, check=True)
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
    parser.add_argument("--json", type=Path, default=PROJECT / "benchmarks" / "results" / "allocator.json")
    args = parser.parse_args()
    variants = {name: env for name, env in VARIANTS.items()
                if "LD_PRELOAD" not in env or Path(env["LD_PRELOAD"]).exists()}
    measured: dict[str, list[dict]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="attnmt-allocator-") as temporary:
        for round_number in range(args.rounds):
            for name, environment in variants.items():
                measured[name].append(run_once(environment, args.steps, Path(temporary)))
                print(f"  round {round_number + 1}, {name}: {measured[name][-1]}", flush=True)
    base = statistics.median(m["tokens_per_s_median"] for m in measured["glibc (default)"])
    rows, record = [], {"steps": args.steps, "rounds": args.rounds, "cpus": os.cpu_count(), "variants": {}}
    for name, runs in measured.items():
        speed = statistics.median(m["tokens_per_s_median"] for m in runs)
        faults = statistics.median(m["faults_per_training_second"] for m in runs)
        peak = max(m["peak_resident_gib"] for m in runs)
        record["variants"][name] = {"tokens_per_s_median": round(speed), "ratio_to_default": round(speed / base, 3),
                                    "minor_page_faults_per_second": round(faults),
                                    "peak_resident_gib": round(peak, 2), "runs": runs,
                                    "environment": variants[name]}
        rows.append([name, f"{speed:.0f}", f"{speed / base:.3f}", f"{faults:,.0f}", f"{peak:.2f}"])
    print(format_table(["allocator", "target tokens/s", "ratio", "minor page faults / s", "peak GiB"], rows))
    write_text_atomic(args.json, json.dumps(portable(record), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
