"""Pairs of runs that should differ in speed only (the same recipe and seed, one lever of the machine
changed): whether they trained the same numbers, and the memory each held.

For each pair ``A,B`` it reads both ``metrics.jsonl`` files and compares the training loss of every
"train" record at a step both logged (equal to the last bit, or not), and gives each run's steps
and its largest resident memory (``resident_gib``).

    PYTHONPATH=benchmarks python benchmarks/experiments/same_trajectory.py \\
        runs/ab/rnn5_off_s1,runs/ab/rnn5_on_s1 runs/ab/rnn5_off_s2,runs/ab/rnn5_on_s2 \\
        --json benchmarks/results/recipes/rnn5_kernel_cache_same_numbers.json

Prints a table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable


def train_records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"same_trajectory.py: {run}: no metrics.jsonl (not a run folder)")
    with path.open(encoding="utf-8") as handle:
        return [record for record in map(json.loads, handle) if record.get("type") == "train"]


def compare(first: Path, second: Path) -> dict:
    a, b = train_records(first), train_records(second)
    loss_a, loss_b = ({r["step"]: r["loss"] for r in records} for records in (a, b))
    shared = sorted(set(loss_a) & set(loss_b))
    return {
        "runs": [str(first), str(second)],
        "steps": [a[-1]["step"] if a else 0, b[-1]["step"] if b else 0],
        "shared_records": len(shared),
        "equal_losses": sum(loss_a[step] == loss_b[step] for step in shared),
        "peak_resident_gib": [max((r.get("resident_gib", 0.0) for r in records), default=0.0) for records in (a, b)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="+", metavar="RUN_A,RUN_B")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    pairs = []
    for item in args.pairs:
        names = item.split(",")
        if len(names) != 2:
            raise SystemExit(f"same_trajectory.py: {item!r}: give two runs joined by a comma")
        pairs.append(compare(Path(names[0]), Path(names[1])))
    print(format_table(["run A", "run B", "steps A", "steps B", "records both logged", "equal losses",
                        "peak GiB A", "peak GiB B"],
                       [[*p["runs"], *p["steps"], p["shared_records"], p["equal_losses"], *p["peak_resident_gib"]]
                        for p in pairs]))
    write_text_atomic(args.json, json.dumps(portable({"pairs": pairs}), indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
