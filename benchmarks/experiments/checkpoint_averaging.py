"""Checkpoint averaging against the moving average, on the same trajectory: for each finished run that
kept its checkpoints (``training.keep_checkpoints``), the validation BLEU (beam 5, the whole
validation set) of

    best.pt          what the recipe keeps: the moving average θ̄ of training.ema_decay at its best
                     validation perplexity (scored beforehand by ``attnmt evaluate RUN --split valid --beam 5``)
    newest           the newest kept snapshot alone: the weights being trained θ, no average
    mean of K        the mean of the newest K snapshots (``attnmt average RUN --last K``)

    PYTHONPATH=benchmarks python benchmarks/experiments/checkpoint_averaging.py \
        rnn15=runs/ab/rnn15-s1,runs/ab/rnn15-s2,runs/ab/rnn15-s3 --last 2 5 10 \
        --work runs/ab/averaging --json benchmarks/results/recipes/checkpoint_averaging.json

Each group's runs are one recipe over seeds; the table gives each way's mean ± std over them and
its difference from best.pt beside the larger spread. The averaged checkpoints are written under
``--work`` (one folder per run and K), never into the run folders. Prints a table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lever_seeds import spread

from attnmt.evaluation.evaluate import evaluate_run
from attnmt.runs.folder import eval_json_path, read_saved_config, training_finished
from attnmt.runs.snapshots import list_snapshots, write_average
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable


def scored_best(run: Path) -> float:
    """best.pt's validation BLEU with beam 5, as ``attnmt evaluate`` wrote it."""
    path = eval_json_path(run, "val", beam=5)
    if not path.is_file():
        raise SystemExit(f"checkpoint_averaging.py: {run}: not scored; run attnmt evaluate {run} --split valid --beam 5")
    report = json.loads(path.read_text(encoding="utf-8"))
    if report["checkpoint"] != "best.pt":
        raise SystemExit(f"checkpoint_averaging.py: {path} scored {report['checkpoint']}, not best.pt")
    return round(report["bleu"], 2)


def score_average(run: Path, last: int, work: Path) -> dict:
    """The mean of the newest ``last`` snapshots, written under ``work`` and scored on validation."""
    path, steps = write_average(run, work / f"{run.name}-mean{last}" / "averaged.pt", last)
    evaluation = evaluate_run(path, split="valid", beam=5)
    return {"last": last, "steps": steps, "bleu": round(evaluation.report["bleu"], 2),
            "perplexity": round(evaluation.report["perplexity"], 2)}


def read_run(run: Path, lasts: list[int], work: Path) -> dict:
    if not training_finished(run):
        raise SystemExit(f"checkpoint_averaging.py: {run}: the training has not finished")
    kept = list_snapshots(run)
    if len(kept) < max(lasts):
        raise SystemExit(f"checkpoint_averaging.py: {run}: keeps {len(kept)} snapshots, fewer than {max(lasts)}")
    config = read_saved_config(run)
    print(f"{run}: scoring the means of the newest {', '.join(map(str, [1, *lasts]))} snapshots", file=sys.stderr)
    return {"run": str(run), "seed": config["training"]["seed"], "ema_decay": config["training"]["ema_decay"],
            "checkpoint_every": config["training"]["checkpoint_every"], "best": scored_best(run),
            "means": [score_average(run, last, work) for last in [1, *lasts]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("groups", nargs="+", metavar="NAME=RUN,RUN,...")
    parser.add_argument("--last", type=int, nargs="+", default=[2, 5, 10], metavar="K")
    parser.add_argument("--work", type=Path, required=True, help="where the averaged checkpoints go")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    groups, rows = [], []
    for item in args.groups:
        name, _, paths = item.partition("=")
        runs = [read_run(Path(path), args.last, args.work) for path in paths.split(",")]
        # ways[0] is best.pt; ways[1 + i] the mean of the newest [1, *--last][i] snapshots
        ways = [{"weights": "best.pt (moving average)", "last": None, **spread([r["best"] for r in runs])}]
        for index, last in enumerate([1, *args.last]):
            label = "newest snapshot" if last == 1 else f"mean of the newest {last}"
            ways.append({"weights": label, "last": last, **spread([r["means"][index]["bleu"] for r in runs])})
        base = ways[0]
        for way in ways:
            way["difference"] = round(way["mean"] - base["mean"], 2)
            way["spread"] = max(way["std"], base["std"])
            rows.append([name, way["weights"], len(runs), f"{way['mean']:.2f} ± {way['std']:.2f}",
                         f"{way['difference']:+.2f}", f"{way['spread']:.2f}"])
        groups.append({"name": name, "runs": runs, "ways": ways})
    print(format_table(["runs", "weights", "seeds", "val BLEU, beam 5", "vs best.pt", "larger std"], rows))
    write_text_atomic(args.json, json.dumps(portable({"groups": groups}), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
