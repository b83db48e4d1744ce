"""The length penalty of beam search, chosen on validation: BLEU and output length per ``alpha``.

Beam search ranks finished hypotheses by log P(y|x) / lp(y), with lp(y) = ((5 + |y|) / 6)^alpha
(Wu et al., 2016; ``attnmt.decoding.search.length_penalty``): alpha = 0 favours short outputs,
larger values longer ones. The recipes use alpha 0.6. This decodes a split of each run once per
alpha (beam ``--beam``) and prints BLEU, chrF and the output/reference length ratio, with the mean
over the runs, so that alpha is chosen on validation and a test set is scored with it once.

    PYTHONPATH=benchmarks python benchmarks/experiments/length_penalty.py runs/a runs/b --split valid --alphas 0.6 0.8 1.0 1.2 \\
        --json benchmarks/results/length_penalty.json
    PYTHONPATH=benchmarks python benchmarks/experiments/length_penalty.py runs/a runs/b --split test_2016_flickr --alphas 1.0 --json ...

The hypotheses of each (run, alpha) are not written; the run folders are left as they were.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

from attnmt.data.data_config import load_split
from attnmt.decoding.translator import Translator
from attnmt.evaluation.evaluate import compare_beam_sizes, data_of_run
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 0.8, 1.0, 1.2, 1.5])
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--json", required=True, help="where to write the results")
    args = parser.parse_args(argv)
    if any(alpha < 0 for alpha in args.alphas):
        parser.error(f"--alphas must be >= 0, got {args.alphas}")

    rows, by_run = [], []
    for run in map(Path, args.runs):
        translator = Translator.load(run)
        assert translator.run_config is not None
        data = data_of_run(run, translator.run_config.data)  # as `attnmt evaluate` finds the split
        name, corpus = data.canonical_split(args.split), load_split(data, args.split)
        stored = translator.search_config
        by_alpha = []
        for alpha in args.alphas:
            translator.search_config = dataclasses.replace(stored, alpha=alpha)
            [result] = compare_beam_sizes(translator, corpus, [args.beam])
            by_alpha.append({"alpha": alpha, **result.to_dict()})
            rows.append([str(run), alpha, result.bleu, result.chrf, result.length_ratio])
            print(f"{run} alpha {alpha:g}: BLEU {result.bleu:.2f}, length ratio {result.length_ratio:.3f}",
                  file=sys.stderr)
        by_run.append({"run": str(run), "split": name, "beam": args.beam, "alpha_of_the_run": stored.alpha,
                       "by_alpha": by_alpha})
    means = [{"alpha": alpha,
              "bleu": statistics.fmean(r["by_alpha"][i]["bleu"] for r in by_run),
              "length_ratio": statistics.fmean(r["by_alpha"][i]["length_ratio"] for r in by_run)}
             for i, alpha in enumerate(args.alphas)]
    best = max(means, key=lambda m: m["bleu"])
    result = {"split": args.split, "beam": args.beam, "runs": by_run, "mean_over_runs": means,
              "best_alpha_by_mean_bleu": best["alpha"]}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(args.json), json.dumps(portable(result), indent=2) + "\n")
    print(format_table(["run", "alpha", "BLEU", "chrF", "length ratio"], rows))
    print(format_table(["alpha", "mean BLEU", "mean length ratio"],
                       [[m["alpha"], m["bleu"], m["length_ratio"]] for m in means]))
    if len(args.alphas) > 1:
        print(f"best alpha by mean BLEU on {args.split}: {best['alpha']:g}")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
