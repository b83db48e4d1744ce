"""How long does `attnmt grade` take for a course of 30 submissions, without training?

The course is built from the test suite's planted submissions (tests/data/submissions and the
mistakes of tests/helpers.PLANTED): 10 correct ones (each its own file), 4 of each planted
mistake, and one each that calls sys.exit at import, has a syntax error, writes outside its
folder and loops for ever. It is graded with the defaults (--timeout 120: the loop costs its
30 s property limit), as `attnmt grade` in a process of its own, and then graded again with one
file changed (the second grading checks only that one).

    python benchmarks/grading.py --json benchmarks/results/grading/grading.json

Prints a table (seconds in all, per submission, per kind) and writes it as JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import cpu_name

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "tests"))
from helpers import HANDOUT_CLASS, PLANTED, SUBMISSIONS, submission  # noqa: E402 (the suite's planted submissions)

WRITES_OUTSIDE = (SUBMISSIONS / "correct.py").read_text().replace(
    "import math\n", "import math\nopen('/tmp/attnmt-grading-escaped.txt', 'w').write('out')\n", 1)


def build_course(folder: Path) -> dict[str, str]:
    """30 submissions in ``folder``; returns each one's kind."""
    kinds = {}
    correct = (SUBMISSIONS / "correct.py").read_text()
    for number in range(10):
        (folder / f"correct_{number:02d}.py").write_text(f"# student {number}\n{correct}")
        kinds[f"correct_{number:02d}"] = "correct"
    scratch = folder.parent / "planted"
    scratch.mkdir()
    for name in PLANTED:
        source = Path(submission(name, scratch).rpartition(":")[0]).read_text()
        for number in range(4):
            (folder / f"{name}_{number}.py").write_text(f"# student {number}\n{source}")
            kinds[f"{name}_{number}"] = name
    for name in ("exits_at_import", "syntax_error", "endless_loop"):
        (folder / f"{name}.py").write_bytes((SUBMISSIONS / f"{name}.py").read_bytes())
        kinds[name] = name
    (folder / "writes_outside.py").write_text(WRITES_OUTSIDE)
    kinds["writes_outside"] = "writes_outside"
    return kinds


def grade(folder: Path, out: Path) -> float:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "attnmt", "grade", str(folder), "--class", HANDOUT_CLASS,
                           "--out", str(out)], capture_output=True, text=True, cwd=PROJECT)
    if done.returncode != 0:
        raise SystemExit(f"attnmt grade failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None, help="write the table here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="attnmt-grading-") as root:
        folder = Path(root) / "submissions"
        folder.mkdir()
        kinds = build_course(folder)
        out = Path(root) / "grades"
        first = grade(folder, out)
        with open(out / "gradebook.csv", newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        (folder / "correct_00.py").write_text((folder / "correct_00.py").read_text() + "\n# changed\n")
        second = grade(folder, out)
    escaped = Path("/tmp/attnmt-grading-escaped.txt").exists()
    by_kind: dict[str, list[dict]] = {}
    for row in rows:
        by_kind.setdefault(kinds[row["submission"]], []).append(row)
    table = [[kind, len(group), f"{sum(float(r['seconds']) for r in group) / len(group):.1f}",
              sorted({f"{r['points']}/{r['max_points']}" for r in group})[0], group[0]["reason"][:70]]
             for kind, group in sorted(by_kind.items())]
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores")
    print(format_table(["kind", "submissions", "seconds each", "points", "reason"], table))
    print(f"\n{len(rows)} submissions: {first:.0f} s ({first / len(rows):.1f} s each); graded again with one "
          f"changed: {second:.0f} s; a write escaped: {escaped}")
    result = {"question": __doc__.split("\n\n")[0], "cpu": cpu_name(), "cores": os.cpu_count(),
              "command": "python benchmarks/grading.py", "submissions": len(rows),
              "seconds": round(first, 1), "seconds_each": round(first / len(rows), 2),
              "seconds_again_one_changed": round(second, 1), "write_escaped": escaped,
              "kinds": {kind: {"submissions": n, "seconds_each": float(s), "points": p, "reason": reason}
                        for kind, n, s, p, reason in table}}
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if len(rows) == 30 and not escaped else 1


if __name__ == "__main__":
    sys.exit(main())
