"""Draw the training curves of one or several runs into one figure.

Training loss, validation perplexity and validation BLEU (columns), against training steps and
against minutes of training (rows), every run in its own colour on shared axes; read from each
run's metrics.jsonl, so it works on finished runs and on runs still training.

Examples:
  attnmt curves runs/multi30k_rnn-sdp-seed1 --out curves.png
  attnmt curves runs/*-seed1 --out seeds.svg --title "mechanisms, seed 1"
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folders (or their metrics.jsonl)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the figure (.png, .svg or .pdf)")
    parser.add_argument("--title", default=None, help="a title above the panels")
    parser.add_argument("--overwrite", action="store_true", help="replace FILE if it exists")


def run(args: argparse.Namespace) -> int:
    from attnmt.runtime.outputs import check_output
    from attnmt.visual.curves import plot_curves

    runs = [Path(run) for run in args.runs]  # those after an option come as text (cli.main)
    check_output(args.out, "--out", args.overwrite, [*runs, *(run / "metrics.jsonl" for run in runs)])
    path = plot_curves(runs, args.out, overwrite=args.overwrite, title=args.title)
    print(f"wrote {path}: curves of {len(runs)} run{'' if len(runs) == 1 else 's'}")
    return 0
