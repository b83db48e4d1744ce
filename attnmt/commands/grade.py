"""Grade a course's attention homework: each submission (a student's .py file, or a folder
holding one) is checked in a process of its own, with time and memory limits, where it can write
only into its own scratch folder and read no other submission. Each gets attnmt check's properties
and the handout's equations (Eq. 1, 2 and 15, the shapes, the batch); points come from a rubric.
Run again, it grades only new or changed submissions.

  attnmt grade submissions/ --class SingleQueryScaledDotProductAttention --out grades/
  attnmt grade submissions/ --class SingleQueryScaledDotProductAttention --out grades/ --rubric rubric.yaml
  attnmt grade submissions/ --class SingleQueryScaledDotProductAttention --out grades/ --minutes 8

With --minutes M each submission that loads also trains the handout's model (recipe homework, or
--config) with its class for at most M minutes, seed 1, one thread, and the check 'trains' gives its
validation BLEU. For equal work per student, fix the steps instead: --set training.max_steps=N.

It writes DIR/gradebook.csv (a row per submission, a column per check, the points and the reason
for any failure), DIR/gradebook.md and DIR/gradebook.html (each submission's checks and one
attention diagram). Exit status 0 when every submission was graded, 2 for bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.commands.options import say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                        help="a folder of submissions: each a .py file, or a folder holding one")
    parser.add_argument("--class", dest="class_name", required=True, metavar="NAME",
                        help="the class each submission defines, e.g. SingleQueryScaledDotProductAttention")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the gradebook's folder (new, or one an earlier attnmt grade wrote)")
    parser.add_argument("--rubric", type=Path, metavar="FILE",
                        help="YAML, check -> points (default: 1 point per check)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help="wall-clock seconds one submission may take, all its checks together (default 120)")
    parser.add_argument("--memory", type=float, default=4.0, metavar="GIB",
                        help="address space one submission's process may use, in GiB (default 4)")
    parser.add_argument("--expect", choices=("scaled_dot",),
                        help="check the 1/√d of Eq. 1 whatever the class is called (a class named "
                             "...ScaledDot... is checked for it anyway)")
    parser.add_argument("--minutes", type=float, metavar="M",
                        help="also train each submission's class for at most M minutes and measure its "
                             "validation BLEU (the check 'trains')")
    parser.add_argument("--config", default="homework", metavar="FILE|RECIPE",
                        help="what --minutes trains (default: the recipe homework, the handout's model)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a value of that config, e.g. --set training.max_steps=600 (repeatable)")
    parser.add_argument("--overwrite", action="store_true",
                        help="grade into an --out folder that holds other files")


def run(args: argparse.Namespace) -> int:
    from attnmt.course import grade_course

    gradebook = grade_course(args.submissions, args.class_name, args.out, rubric=args.rubric, timeout=args.timeout,
                             memory_gib=args.memory, expect=args.expect, overwrite=args.overwrite,
                             minutes=args.minutes, config=args.config, set_options=args.set,
                             log=lambda line: say("grade", line))
    passing = sum(gradebook.result(row) == "passes" for row in gradebook.rows)
    total = [gradebook.points(row) for row in gradebook.rows]
    print(f"{len(gradebook.rows)} submissions graded: {passing} pass every check; points mean "
          f"{sum(total) / max(1, len(total)):.1f} of {gradebook.max_points:g}")
    for path in gradebook.paths.values():
        print(f"wrote {path}")
    return 0
