"""Levers over seeds: each lever is a group of runs that differ from the base only in that lever and
the seed, read from their run folders (no training here), as mean ± standard deviation.

    PYTHONPATH=benchmarks python benchmarks/experiments/lever_seeds.py \
        base=runs/ab/rnn5-base-s1,runs/ab/rnn5-base-s2,runs/ab/rnn5-base-s3:the recipe \
        sampling=runs/ab/rnn5-a0.5-s1,...:data.sampling_alpha 0.5 \
        --json benchmarks/results/recipes/rnn5_lever_seeds.json

The first group is the baseline. For each group: the seeds, steps, target tokens trained, median
training target tokens/s, training minutes, the largest resident memory the trainer logged
(``resident_gib``, read every ``log_every`` steps) and, at the best checkpoint, validation perplexity; and validation BLEU with beam 5
on the whole validation set, as ``attnmt evaluate RUN --split valid --beam 5`` wrote it (each run
must have been scored so). The difference of each group's mean BLEU from the baseline's is given
beside the larger of the two groups' standard deviations: a difference smaller than that spread is
not an improvement. Prints a table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from levers import summarize

from attnmt.runs.folder import eval_json_path, read_saved_config, training_finished
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable


def spread(values: list[float], digits: int = 2) -> dict:
    return {"mean": round(statistics.mean(values), digits),
            "std": round(statistics.stdev(values), digits) if len(values) > 1 else 0.0,
            "values": [round(v, digits) for v in values]}


def read_run(run: Path, valid_split: str = "val") -> dict:
    """One run's figures (``levers.summarize``, with its seed); SystemExit naming the run when it
    has not finished or not been scored on the whole validation set."""
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise SystemExit(f"lever_seeds.py: {run}: no metrics.jsonl (not a run folder)")
    if not training_finished(run):
        raise SystemExit(f"lever_seeds.py: {run}: the training has not finished")
    if not eval_json_path(run, valid_split, beam=5).is_file():
        raise SystemExit(f"lever_seeds.py: {run}: not scored; run attnmt evaluate {run} --split valid --beam 5")
    return {"run": str(run), "seed": read_saved_config(run)["training"]["seed"], **summarize(run, valid_split)}


def test_bleu(runs: list[dict], split: str | None) -> dict | None:
    """Mean ± std of the runs' test BLEU (beam 5) on ``split``, when every run has been scored on it."""
    if split is None:
        return None
    paths = [eval_json_path(Path(r["run"]), split, beam=5) for r in runs]
    if not all(path.is_file() for path in paths):
        return None
    return spread([json.loads(path.read_text(encoding="utf-8"))["bleu"] for path in paths])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("groups", nargs="+", metavar="NAME=RUN,RUN,...[:WHAT]")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--note", default="", help="how the runs were made (recorded in the JSON)")
    parser.add_argument("--valid-split", default="val", metavar="NAME",
                        help="the validation set's name in the runs' eval files: val (Multi30k, the default) or "
                             "valid (a data section's own files)")
    parser.add_argument("--test-split", default=None, metavar="SPLIT",
                        help="also read each run's test BLEU with beam 5 on SPLIT (attnmt evaluate RUN --split "
                             "SPLIT --beam 5), for the groups whose every run was scored so: the kept choice only")
    args = parser.parse_args()
    groups = []
    for item in args.groups:
        name, _, rest = item.partition("=")
        paths, _, what = rest.partition(":")
        if not name or not paths:
            parser.error(f"{item!r}: expected NAME=RUN,RUN,...[:WHAT]")
        runs = [read_run(Path(path), args.valid_split) for path in paths.split(",")]
        groups.append({
            "name": name, "what": what, "seeds": [r["seed"] for r in runs], "runs": runs,
            "steps": spread([r["steps"] for r in runs], 0),
            "tokens_per_s": spread([r["tokens_per_s_median"] for r in runs], 0),
            "minutes": spread([r["minutes"] for r in runs]),
            "best_val_ppl": spread([r["best_val_ppl"] for r in runs]),
            "target_tokens_millions": spread([r["target_tokens"] / 1e6 for r in runs]),
            "resident_gib_max": (spread([r["resident_gib_max"] for r in runs])
                                 if all(r["resident_gib_max"] is not None for r in runs) else None),
            "valid_bleu_beam5": spread([r["valid_bleu_beam5"] for r in runs]),
            **({"test_split": args.test_split, "test_bleu_beam5": test} if (test := test_bleu(runs, args.test_split))
               else {}),
        })
    base = groups[0]["valid_bleu_beam5"]
    rows = []
    for group in groups:
        bleu = group["valid_bleu_beam5"]
        group["difference"] = round(bleu["mean"] - base["mean"], 2)
        group["spread"] = max(bleu["std"], base["std"])
        group["beyond_spread"] = group is not groups[0] and abs(group["difference"]) > group["spread"]
        rows.append([group["name"], group["what"], ",".join(map(str, group["seeds"])),
                     f"{group['steps']['mean']:,.0f}", f"{group['tokens_per_s']['mean']:,.0f}",
                     f"{group['best_val_ppl']['mean']:.2f} ± {group['best_val_ppl']['std']:.2f}",
                     f"{bleu['mean']:.2f} ± {bleu['std']:.2f}", f"{group['difference']:+.2f}",
                     "–" if group["resident_gib_max"] is None else f"{group['resident_gib_max']['mean']:.2f}"])
    print(format_table(["lever", "what changed", "seeds", "steps", "tokens/s", "val ppl", "val BLEU, beam 5",
                        "vs first", "resident GiB"], rows))
    write_text_atomic(args.json, json.dumps(portable({"note": args.note, "groups": groups}), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
