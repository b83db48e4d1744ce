"""Do Part 2 of the course handout with your attention class, end to end: check it by the
handout's equations; train it with the handout's model (recipe homework), with the none and mean
baselines, several runs each; score them on the test split (perplexity, BLEU, chrF, mean and
variance); draw attention diagrams of test sentences; and decode with beam sizes 5, 10, 20 and 50.
Writes DIR/report.md and DIR/report.html with every table and figure and the command that made
them. Stopped and run again, it continues where it was.

  attnmt homework homework.py:SingleQueryScaledDotProductAttention --out report/
  attnmt homework homework.py:SingleQueryScaledDotProductAttention --out report/ --minutes 5 --runs 3

It trains 3 x N runs of M minutes each: 72 minutes with the defaults (8 minutes, 3 runs), then scores them.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from attnmt.commands.options import say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="CLASS", help="your class: path/to/file.py:ClassName")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the report's folder (new, or the one an earlier attnmt homework of this class wrote)")
    parser.add_argument("--minutes", type=float, default=8.0, metavar="M", help="training minutes per run (default 8)")
    parser.add_argument("--runs", type=int, default=3, metavar="N",
                        help="runs (seeds 1..N) of each of none, mean and your class (default 3)")
    parser.add_argument("--beams", type=int, nargs="+", default=[5, 10, 20, 50], metavar="K",
                        help="beam sizes of Task 2.EC (default 5 10 20 50)")
    parser.add_argument("--examples", type=int, default=3, metavar="N",
                        help="test sentences drawn as attention diagrams (default 3)")
    parser.add_argument("--config", default="homework",
                        help="the recipe or YAML config every run trains with (default: homework)")
    parser.add_argument("--max-steps", type=int, metavar="N", help="also stop each run after N steps (a quick try)")
    parser.add_argument("--set", dest="set_options", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value of every run, as attnmt train --set (repeatable)")


def run(args: argparse.Namespace) -> int:
    from attnmt.course.homework import run_homework

    report = run_homework(args.spec, args.out, minutes=args.minutes, runs=args.runs, config=args.config,
                          beams=args.beams, examples=args.examples, set_options=args.set_options,
                          limits={"max_steps": args.max_steps} if args.max_steps else None,
                          log=lambda line: say("homework", line), command=shlex.join(["attnmt", *sys.argv[1:]]))
    for path in report.paths.values():
        print(f"wrote {path}")
    return 0
