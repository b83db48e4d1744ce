"""Does the test suite pass beside a neighbour that comes and goes? (It must never flake.)

A neighbour process switches between a busy loop and sleep every ``--period`` seconds (0.4 by
default) on one core, while the suite runs ``--runs`` times in a row (5 by default). Before the
suite fixed its thread count (tests/conftest.py), a test that compares an interrupted training
with an uninterrupted one failed beside such a neighbour: attnmt's default thread count follows
the machine's load, and the two trainings ran at different counts.

    PYTHONPATH=benchmarks python benchmarks/experiments/suite_beside_neighbour.py --runs 5 --json benchmarks/results/faults/suite_beside_neighbour.json

Stops at the first failing run. Prints a table of the runs (exit status, seconds, pytest's last
line) and writes it as JSON with the command, the commit and the neighbour's period.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic

from common import portable

PROJECT = Path(__file__).resolve().parents[2]

NEIGHBOUR = """
import sys, time
period = float(sys.argv[1])
while True:
    end = time.monotonic() + period
    while time.monotonic() < end:
        pass
    time.sleep(period)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="suite runs in a row (default 5)")
    parser.add_argument("--period", type=float, default=0.4, help="seconds busy, then seconds idle (default 0.4)")
    parser.add_argument("--json", type=Path, default=None, help="write the table here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(args.period)])
    rows = []
    try:
        for run in range(1, args.runs + 1):
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.pytest_args],
                                  cwd=PROJECT, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.strip()]
            rows.append({"run": run, "exit": done.returncode, "seconds": round(time.monotonic() - start, 1),
                         "summary": lines[-1].strip("= ") if lines else ""})
            print(f"run {run}: exit {done.returncode}, {rows[-1]['seconds']:.0f} s, {rows[-1]['summary']}", flush=True)
            if done.returncode != 0:
                print(done.stdout[-5000:])
                break
    finally:
        neighbour.kill()
        neighbour.wait()
    passed = sum(row["exit"] == 0 for row in rows)
    print(f"\n{passed} of {args.runs} runs passed beside a neighbour switching every {args.period:g} s")
    if args.json is not None:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT, capture_output=True,
                                text=True).stdout.strip()
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.json, json.dumps({
            "command": portable(" ".join(["PYTHONPATH=benchmarks", "python", "benchmarks/experiments/suite_beside_neighbour.py", *sys.argv[1:]])),
            "commit": commit, "neighbour_period_s": args.period, "runs": rows,
            "passed_in_a_row": passed if passed == len(rows) else None,
        }, indent=2) + "\n")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
