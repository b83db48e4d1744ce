"""Train and evaluate several attention mechanisms over several seeds, and summarise.

Trains every mechanism with seeds 1..N from one config (run folders OUT/runs/<mechanism>-seed<N>,
seed 1 of every mechanism first), scores each run's best checkpoint on the test split (perplexity,
BLEU, chrF) and writes OUT/summary.md, .csv, .json and a bar chart OUT/summary.png: per mechanism
the mean, sample standard deviation and variance over the seeds. Prints one line per run started
and finished, and the table at the end.

Run the same command again to continue an interrupted comparison: finished runs with scores are
reused, a finished run without scores is evaluated, an interrupted run resumes from its last
checkpoint. Limits (--max-minutes/--max-epochs/--max-steps) apply to each run. With --attribution
METHOD, each run's attention is also compared with its gradient saliency on its own outputs: two
more columns, kept in the run folder (agreement-*.json) and reused.

Examples:
  attnmt compare --config multi30k_rnn --attention none mean sdp --runs 3 --out results/baselines
  attnmt compare --config tiny --attention dot additive --runs 2 --max-steps 50 --out results/smoke
  attnmt compare --config multi30k_rnn --attention dot sdp --out results/sal --attribution gradient
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.commands.options import (
    add_attribution_options,
    add_device_option,
    add_trust_option,
    attribution_options,
    say,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE|RECIPE", required=True,
                        help="the run config shared by every run: a YAML file, or a recipe's name "
                             "(attnmt recipes lists them)")
    parser.add_argument("--attention", nargs="+", required=True, metavar="NAME",
                        help="mechanisms to compare (none, mean, dot, sdp, general, additive, local-m, ...) "
                             "and your own as path/to/file.py:ClassName")
    parser.add_argument("--runs", type=int, default=3, metavar="N", help="seeds 1..N per mechanism (default 3)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="comparison folder, e.g. results/NAME")
    parser.add_argument("--max-minutes", type=float, metavar="M", help="training time limit of each run")
    parser.add_argument("--max-epochs", type=int, metavar="N", help="epoch limit of each run")
    parser.add_argument("--max-steps", type=int, metavar="N", help="step limit of each run")
    parser.add_argument("--split", default="test", help="test split (default: the first test set, "
                                                        "test_2016_flickr for Multi30k)")
    parser.add_argument("--beam", type=int, default=1, metavar="K",
                        help="beam size of the evaluation (default 1 = greedy)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override any config value, e.g. --set training.lr=5e-4 (repeatable)")
    add_device_option(parser, default_from="the config's training.device")
    add_trust_option(parser)
    add_attribution_options(parser, "add columns of how each run's attention agrees with its gradients on its own "
                                 "outputs of --split (rank correlation and top-1 over source words)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace summary files in --out that no comparison wrote")
    parser.add_argument("--verbose", action="store_true", help="print the trainer's per-epoch lines too")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from attnmt.runs.recipes import config_path
    from attnmt.runtime.outputs import check_not_run_folder
    from attnmt.workflows import compare_mechanisms

    check_not_run_folder(args.out, "--out")
    comparison = compare_mechanisms(
        config_path(args.config), args.attention, args.runs, args.out, split=args.split, beam=args.beam,
        limits={"max_minutes": args.max_minutes, "max_epochs": args.max_epochs, "max_steps": args.max_steps},
        set_options=args.set, show_progress=not args.no_progress, verbose=args.verbose, device=args.device,
        trust_run_code=args.trust_run_code, overwrite=args.overwrite, say=lambda line: say("compare", line),
        log=lambda line: print(line, flush=True), saliency=attribution_options(args),
    )
    print()
    print(comparison.summary_table())
    print(f"\nwrote {args.out / 'summary.md'}, summary.csv, summary.json and summary.png")
    return 0
