"""A training's resident memory over its minutes, and its speed, read from finished run folders.

The trainer logs its resident memory (``resident_gib``, VmRSS) and its target tokens/s every
``log_every`` steps into ``metrics.jsonl``, and the bytes its allocator has handed out and not
taken back (``allocated_gib``, between two steps: the live tensors, the optimizer's state and the
kernels oneDNN keeps). For each run this script gives those curves, its largest
value over the whole run and over the first ``--early`` minutes, the steps, the target tokens trained
and the median tokens/s (over the run, and over its first minutes), with the run's
``data.pad_multiple`` and the allocator its log's first lines name (``RUN.log`` beside the folder). Where the run was started under
``/usr/bin/time -f "%M kB" -o RUN.rss``, the largest resident memory the kernel saw (between two
log lines too) is read from that file beside the run folder.

    PYTHONPATH=benchmarks python benchmarks/experiments/memory_curve.py \\
        pad1=runs/ab/hansards-pad1 pad8=runs/ab/hansards-pad8 --json benchmarks/results/speed/memory_hansards.json

Prints a table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnmt.runs.folder import read_saved_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import cpu_name, machine, portable


def largest_resident_by_time(run: Path) -> float | None:
    """GiB from ``RUN.rss`` (``/usr/bin/time -f "%M kB"``), or None when there is no such file."""
    rss = run.with_name(run.name + ".rss")
    if not rss.is_file():
        return None
    for line in rss.read_text(encoding="utf-8").splitlines():
        if line.endswith(" kB"):
            return round(int(line.split()[0]) / 2**20, 3)
    return None


def allocator_line(run: Path) -> str | None:
    """The trainer's ``memory: ...`` line from ``RUN.log`` beside the run folder, or None."""
    log = run.with_name(run.name + ".log")
    if not log.is_file():
        return None
    for line in log.read_text(encoding="utf-8", errors="replace").replace("\r", "\n").splitlines()[:40]:
        if line.startswith("memory: "):
            return line[len("memory: "):].strip()
    return None


def curve_of(run: Path, early_minutes: float) -> dict:
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise SystemExit(f"memory_curve.py: {run}: no metrics.jsonl (not a run folder)")
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line]
    train = [r for r in records if r["type"] == "train" and r.get("resident_gib") is not None]
    if not train:
        raise SystemExit(f"memory_curve.py: {run}: no training lines with resident_gib")
    speeds = sorted(r["tokens_per_s"] for r in train)
    summary = next((r for r in reversed(records) if r["type"] == "summary"), None)
    config = read_saved_config(run)
    early = [r["resident_gib"] for r in train if r["elapsed"] <= early_minutes * 60]
    early_speeds = sorted(r["tokens_per_s"] for r in train if r["elapsed"] <= early_minutes * 60)
    allocated = [r for r in train if r.get("allocated_gib") is not None]  # runs since the trainer logs it
    return {
        "run": str(run), "pad_multiple": config["data"].get("pad_multiple", 1),
        "token_ladder": config["data"].get("token_ladder", 0),
        "steps": train[-1]["step"], "minutes": round(train[-1]["elapsed"] / 60, 2),
        "target_tokens": summary.get("target_tokens") if summary else None,
        "tokens_per_s_median": round(speeds[len(speeds) // 2]),
        "tokens_per_s_median_early": round(early_speeds[len(early_speeds) // 2]) if early_speeds else None,
        "resident_gib_max": max(r["resident_gib"] for r in train),
        "resident_gib_max_early": max(early) if early else None,
        "resident_gib_last": train[-1]["resident_gib"],
        "largest_resident_gib_by_time": largest_resident_by_time(run),
        "allocator": allocator_line(run),
        "allocated_gib_first": allocated[0]["allocated_gib"] if allocated else None,
        "allocated_gib_max": max((r["allocated_gib"] for r in allocated), default=None),
        "allocated_gib_last": allocated[-1]["allocated_gib"] if allocated else None,
        "resident_gib_first": train[0]["resident_gib"],
        # what the allocator holds beyond the live blocks (and the program's code), first and last
        "held_gib_first": round(allocated[0]["resident_gib"] - allocated[0]["allocated_gib"], 3) if allocated else None,
        "held_gib_last": round(allocated[-1]["resident_gib"] - allocated[-1]["allocated_gib"], 3) if allocated else None,
        "curve": [[round(r["elapsed"] / 60, 2), r["resident_gib"]] for r in train],
        "allocated_curve": [[round(r["elapsed"] / 60, 2), r["allocated_gib"]] for r in allocated],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="NAME=RUN")
    parser.add_argument("--early", type=float, default=6.0, help="minutes of the early maximum (default 6)")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--note", default="", help="how the runs were made (recorded in the JSON)")
    parser.add_argument("--baseline", default=None, metavar="NAME",
                        help="the run whose early tokens/s the others are compared with (a ratio in the JSON)")
    args = parser.parse_args()
    results = {}
    for item in args.runs:
        name, _, path = item.partition("=")
        if not name or not path:
            parser.error(f"{item!r}: expected NAME=RUN")
        results[name] = curve_of(Path(path), args.early)
    if args.baseline is not None:
        if args.baseline not in results:
            parser.error(f"--baseline {args.baseline!r}: not one of the runs ({', '.join(results)})")
        base = results[args.baseline]["tokens_per_s_median_early"]
        for result in results.values():
            result["tokens_per_s_early_vs_baseline"] = round(result["tokens_per_s_median_early"] / base, 3)
    rows = [[name, r["pad_multiple"], r["token_ladder"], r["steps"], r["minutes"],
             f"{r['tokens_per_s_median_early']:,}", r["resident_gib_max_early"], r["resident_gib_max"],
             r["largest_resident_gib_by_time"] or "–", r["allocated_gib_last"] or "–"]
            for name, r in results.items()]
    print(format_table(["run", "pad multiple", "token ladder", "steps", "minutes",
                        f"tokens/s, first {args.early:g} min", f"GiB, first {args.early:g} min",
                        "GiB, largest logged", "GiB, largest (time)", "GiB allocated, last"], rows))
    write_text_atomic(args.json, json.dumps(portable({
        "note": args.note, "machine": machine("torch"), "cpu": cpu_name(), "early_minutes": args.early,
        "baseline": args.baseline,
        "runs": results}), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
