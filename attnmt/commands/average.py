"""Average a run's kept checkpoints into one: RUN/averaged.pt (Vaswani et al. 2017).

A run trained with ``--set training.keep_checkpoints=N`` keeps the weights being trained every
checkpoint_every steps, the newest N, in RUN/checkpoints/. This command writes their element-wise
mean (the newest --last of them) to RUN/averaged.pt, which every command reads with
``--checkpoint averaged``. Choose --last on validation, as docs/experiments.md does.

Examples:
  attnmt train --config multi30k_rnn_fast --out runs/fast --set training.keep_checkpoints=10
  attnmt average runs/fast --last 5
  attnmt evaluate runs/fast --checkpoint averaged --split valid --beam 5
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN", help="a run folder trained with training.keep_checkpoints")
    parser.add_argument("--last", type=int, default=None, metavar="K",
                        help="average the newest K kept checkpoints (default: all the run keeps)")
    parser.add_argument("--overwrite", action="store_true", help="replace RUN/averaged.pt if it exists")


def run(args: argparse.Namespace) -> int:
    from attnmt.errors import ConfigError
    from attnmt.runs.folder import AVERAGED, writer_lock
    from attnmt.runs.snapshots import write_average

    run_dir = args.run_dir
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run folder")
    out = run_dir / AVERAGED
    if out.exists() and not args.overwrite:
        raise ConfigError(f"{out} exists; pass --overwrite to replace it")
    with writer_lock(run_dir, "average"):  # not while a training writes into the run
        path, steps = write_average(run_dir, out, args.last)
    shown = ", ".join(map(str, steps))
    print(f"wrote {path}: the mean of {len(steps)} checkpoint{'' if len(steps) == 1 else 's'} (steps {shown}); "
          f"read it with --checkpoint averaged")
    return 0
