"""Does keeping freed memory make a long training grow? Two copies of a trained run are resumed side
by side for the same minutes, one thread each (as the long Hansards runs were): one with glibc told
to keep freed memory by the environment variables (``MALLOC_MMAP_THRESHOLD_`` and its companions:
attnmt leaves a user's setting alone), one with attnmt's own setting (``attnmt.runtime.allocator``).
The resident memory (VmRSS) of each is read every ``--every`` seconds.

    PYTHONPATH=benchmarks python benchmarks/experiments/allocator_growth.py runs/hansards-rnn --minutes 14   # 14 minutes, idle machine

Prints a table; writes benchmarks/results/allocator_growth.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from allocator import VARIANTS as ALLOCATOR_VARIANTS
from allocator import environment_with

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable

PROJECT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "glibc, keep freed memory (environment)": ALLOCATOR_VARIANTS["glibc, keep freed memory (environment)"],
    "glibc, keep freed memory (attnmt)": ALLOCATOR_VARIANTS["glibc, keep freed memory (attnmt)"],
}


def resident_gib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def records_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def trained_minutes(run: Path) -> float:
    return max(r["elapsed"] for r in records_of(run) if "elapsed" in r) / 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a trained run folder (copied; the original is not touched)")
    parser.add_argument("--minutes", type=float, default=14.0, help="training minutes after resuming")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between readings")
    parser.add_argument("--json", type=Path, default=PROJECT / "benchmarks" / "results" / "speed" / "allocator_growth.json")
    args = parser.parse_args()
    start_minutes = trained_minutes(args.run)
    until = start_minutes + args.minutes
    with tempfile.TemporaryDirectory(prefix="attnmt-growth-") as temporary:
        jobs = {}
        for k, (name, environment) in enumerate(VARIANTS.items()):
            copy = Path(temporary) / f"run{k}"
            shutil.copytree(args.run, copy)
            command = [sys.executable, "-m", "attnmt", "train", "--out", str(copy), "--resume", "--no-progress",
                       "--max-minutes", f"{until:.3f}"]
            log = open(Path(temporary) / f"run{k}.log", "w")  # noqa: SIM115 - closed below
            process = subprocess.Popen(command, env={**environment_with(environment), "OMP_NUM_THREADS": "1"},
                                       stdout=log, stderr=subprocess.STDOUT)
            jobs[name] = {"process": process, "log": log, "run": copy, "readings": []}
        started = time.monotonic()
        while any(job["process"].poll() is None for job in jobs.values()):
            for job in jobs.values():
                if job["process"].poll() is None and (gib := resident_gib(job["process"].pid)) is not None:
                    job["readings"].append((round((time.monotonic() - started) / 60, 2), round(gib, 3)))
            time.sleep(args.every)
        record = {"run": portable(str(args.run)), "minutes_after_resuming": args.minutes, "threads_each": 1,
                  "seconds_between_readings": args.every, "variants": {}}
        rows = []
        for name, job in jobs.items():
            job["log"].close()
            if job["process"].returncode != 0:
                print((Path(temporary) / f"{job['run'].name}.log").read_text()[-3000:], file=sys.stderr)
                raise SystemExit(f"{name}: training failed")
            train = [r for r in records_of(job["run"]) if r["type"] == "train"
                     and r["elapsed"] > start_minutes * 60]
            resident = [gib for _, gib in job["readings"]]
            late = [gib for minute, gib in job["readings"] if minute >= args.minutes / 2]
            speeds = sorted(r["tokens_per_s"] for r in train)
            entry = {
                "resident_gib_max": max(resident), "resident_gib_last": resident[-1],
                "resident_gib_max_second_half": max(late) if late else None,
                "tokens_per_s_median": speeds[len(speeds) // 2] if speeds else None,
                "steps": len(train) and train[-1]["step"] - train[0]["step"],
                "readings": job["readings"],
            }
            record["variants"][name] = entry
            rows.append([name, f"{entry['resident_gib_max']:.2f}", f"{entry['resident_gib_last']:.2f}",
                         f"{entry['tokens_per_s_median']:,.0f}" if speeds else "-"])
    print(format_table(["allocator", "max resident GiB", "last GiB", "target tokens/s"], rows))
    write_text_atomic(args.json, json.dumps(record, indent=2) + "\n")
    print(f"wrote {portable(str(args.json))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
