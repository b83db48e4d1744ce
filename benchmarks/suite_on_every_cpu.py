"""Does the test suite hold on this CPU, whatever its bf16 arithmetic and thread count?

A test that asserts what a training learnt must pass on an Intel CPU with AMX as on an AMD one: the
kernels differ, so their float trajectories differ. This script runs

1. the whole suite four times: ``ATTNMT_CPU_BF16`` on and off, ``OMP_NUM_THREADS`` 1 and 2
   (tests/conftest.py keeps both when they are given);
2. the tests marked ``outcome`` (they train and assert what the model learnt) under ``--seeds``
   training seeds, with bf16 on and off, reading the figures each one records (its final loss,
   BLEU, alignment hits...), so the table shows how far the worst seed stayed from its threshold.

    python benchmarks/suite_on_every_cpu.py --json benchmarks/results/faults/suite_on_every_cpu.json

Prints a table of each part and writes both, with the CPU's name and flags, the commit and the
command, as JSON. Exits 1 when any run failed. ``--outcome-only`` skips the four suite runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import cpu_name, portable

PROJECT = Path(__file__).resolve().parents[1]
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags() -> list[str]:
    """The bf16 and AMX flags of this CPU, from /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [flag for flag in BF16_FLAGS if flag in flags]


def run_pytest(env: dict[str, str], arguments: list[str]) -> dict:
    """One pytest run: its exit status, seconds, counts and each test's recorded properties."""
    with tempfile.TemporaryDirectory(prefix="attnmt-suite-") as folder:
        report = Path(folder) / "junit.xml"
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"--junitxml={report}", "-o", "junit_family=xunit1", *arguments],
                              cwd=PROJECT, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - start
        tests = []
        if report.is_file():
            for case in ElementTree.parse(report).getroot().iter("testcase"):
                outcome = "passed"
                for kind in ("failure", "error", "skipped"):
                    if case.find(kind) is not None:
                        outcome = "skipped" if kind == "skipped" else "failed"
                properties = {item.get("name"): item.get("value") for item in case.iter("property")}
                tests.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                              "properties": properties})
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"exit": done.returncode, "seconds": round(seconds, 1), "summary": lines[-1].strip("= ") if lines else "",
            "passed": sum(t["outcome"] == "passed" for t in tests),
            "failed": [t["test"] for t in tests if t["outcome"] == "failed"],
            "skipped": sum(t["outcome"] == "skipped" for t in tests), "tests": tests}


def environment(bf16: str, threads: int) -> dict[str, str]:
    return {**os.environ, "ATTNMT_CPU_BF16": bf16, "OMP_NUM_THREADS": str(threads), "PYTHONHASHSEED": "0"}


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT,
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + ("+changes" if dirty else "")


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        first, last = text.split("-", 1)
        return list(range(int(first), int(last) + 1))
    return [int(part) for part in text.split(",")]


def outcome_table(runs: list[dict]) -> list[list]:
    """One row per outcome test and recorded figure: its range over seeds and bf16 settings."""
    figures: dict[tuple[str, str], list[float]] = {}
    failures: dict[str, int] = {}
    for run in runs:
        for test in run["result"]["tests"]:
            failures[test["test"]] = failures.get(test["test"], 0) + (test["outcome"] == "failed")
            for name, value in test["properties"].items():
                figures.setdefault((test["test"], name), []).append(float(value))
    rows = []
    for (test, name), values in sorted(figures.items()):
        rows.append([test.split("::", 1)[-1], name, len(values), min(values), max(values), failures[test]])
    for test, failed in sorted(failures.items()):
        if not any(row[0] == test.split("::", 1)[-1] for row in rows):
            rows.append([test.split("::", 1)[-1], "-", len(runs), "", "", failed])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-6",
                        help="training seeds of the outcome tests: 1-6 or 1,4,9 (default 1-6)")
    parser.add_argument("--outcome-only", action="store_true", help="skip the four runs of the whole suite")
    parser.add_argument("--json", type=Path, default=None, help="write the tables here")
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    print(f"CPU: {cpu_name()} (bf16 flags: {', '.join(cpu_flags()) or 'none'}); {os.cpu_count()} cores", flush=True)

    suite = []
    if not args.outcome_only:
        for bf16 in ("on", "off"):
            for threads in (1, 2):
                result = run_pytest(environment(bf16, threads), [])
                suite.append({"ATTNMT_CPU_BF16": bf16, "OMP_NUM_THREADS": threads, "result": result})
                print(f"suite, bf16 {bf16}, {threads} thread(s): exit {result['exit']}, {result['seconds']:.0f} s, "
                      f"{result['summary']}", flush=True)
    outcome = []
    for bf16 in ("on", "off"):
        for seed in seeds:
            result = run_pytest(environment(bf16, 1), ["-m", "outcome", f"--training-seed={seed}"])
            outcome.append({"ATTNMT_CPU_BF16": bf16, "seed": seed, "result": result})
            print(f"outcome tests, bf16 {bf16}, seed {seed}: exit {result['exit']}, {result['summary']}", flush=True)

    if suite:
        print()
        print(format_table(["ATTNMT_CPU_BF16", "OMP_NUM_THREADS", "exit", "passed", "failed", "skipped", "seconds"],
                           [[row["ATTNMT_CPU_BF16"], row["OMP_NUM_THREADS"], row["result"]["exit"],
                             row["result"]["passed"], len(row["result"]["failed"]), row["result"]["skipped"],
                             row["result"]["seconds"]] for row in suite], digits=1))
        for row in suite:
            for test in row["result"]["failed"]:
                print(f"  failed (bf16 {row['ATTNMT_CPU_BF16']}, {row['OMP_NUM_THREADS']} threads): {test}")
    rows = outcome_table(outcome)
    print()
    print(f"outcome tests over seeds {args.seeds}, bf16 on and off ({len(outcome)} runs each)")
    print(format_table(["test", "figure", "runs", "lowest", "highest", "failed runs"], rows, digits=4))

    if args.json:
        for part in (*suite, *outcome):  # the outcome tests' figures are in the table; keep the file short
            part["result"]["tests"] = [test for test in part["result"]["tests"]
                                       if test["properties"] or test["outcome"] == "failed"]
        write_text_atomic(args.json, json.dumps(portable({
            "command": "python benchmarks/suite_on_every_cpu.py " + " ".join(sys.argv[1:]),
            "commit": commit(), "cpu": cpu_name(), "cpu_bf16_flags": cpu_flags(), "cores": os.cpu_count(),
            "suite": suite, "outcome_seeds": seeds, "outcome": outcome,
            "outcome_table": [dict(zip(["test", "figure", "runs", "lowest", "highest", "failed_runs"], row))
                              for row in rows],
        }), indent=2) + "\n")
        print(f"wrote {args.json}")
    failed = any(part["result"]["exit"] != 0 for part in (*suite, *outcome))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
