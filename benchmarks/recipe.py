"""A recipe's numbers: train a config under its time budget, score it, write one JSON.

    python benchmarks/recipe.py configs/multi30k_rnn.yaml --out runs/rnn-recipe \
        --json benchmarks/results/recipes/multi30k_rnn.json
    python benchmarks/recipe.py --run runs/rnn-recipe --json ...   # score a run trained already

Reports parameters, training tokens/s, minutes per epoch, epochs, training wall time, and on the
test split (test_2016_flickr for Multi30k) perplexity, sacrebleu BLEU (cased and lower-cased) and
chrF for greedy search and beam 5, with the seconds each evaluation took
(decoding, perplexity and scoring). Prints a table; writes the JSON.
The training is real (minutes to an hour): this is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic

from common import portable


def read_metrics(run: Path) -> list[dict]:
    with open(run / "metrics.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def training_summary(run: Path) -> dict:
    """Epochs, wall time and throughput from RUN/metrics.jsonl."""
    records = read_metrics(run)
    epochs = [r for r in records if r["type"] == "epoch"]
    trains = [r for r in records if r["type"] == "train"]
    summary = [r for r in records if r["type"] == "summary"][-1]
    elapsed = summary["elapsed"]
    return {
        "epochs_completed": len(epochs),
        "steps": summary["step"],
        "training_minutes": round(elapsed / 60, 2),
        "minutes_per_epoch": round(epochs[-1]["elapsed"] / 60 / len(epochs), 2) if epochs else None,
        "tokens_per_s_median": sorted(r["tokens_per_s"] for r in trains)[len(trains) // 2],
        "stop_reason": summary.get("stop_reason"),
        "best_step": summary.get("best_step"),
        # To the best checkpoint: minutes (this machine) and target tokens (any machine: divide by its tokens/s).
        "minutes_to_best": round(summary["best_elapsed"] / 60, 2) if summary.get("best_elapsed") is not None else None,
        "target_tokens_to_best": summary.get("best_target_tokens"),
        "target_tokens": summary.get("target_tokens"),
        "best_val_ppl": summary.get("best_val_ppl"),
        "best_val_bleu_greedy": summary.get("best_val_bleu"),
        "val_bleu_by_epoch": [round(r["val_bleu"], 2) for r in epochs],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", help="YAML recipe to train (omit with --run)")
    parser.add_argument("--out", help="run folder for the training")
    parser.add_argument("--run", help="score this finished run instead of training")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--json", required=True, help="where to write the results")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="passed to attnmt train, e.g. --set training.seed=2 (repeatable)")
    args = parser.parse_args(argv)

    import time

    from attnmt.cli import main as attnmt
    from attnmt.evaluation.evaluate import evaluate_run
    from attnmt.models import count_parameters

    if args.run:
        run = Path(args.run)
    else:
        if not (args.config and args.out):
            parser.error("give a config and --out to train, or --run RUN to score a trained run")
        run = Path(args.out)
        code = attnmt(["train", "--config", args.config, "--out", str(run), "--no-progress",
                       *[item for setting in args.set for item in ("--set", setting)]])
        if code:
            return code

    by_beam, evaluation = [], None
    for beam in args.beams:
        started = time.perf_counter()
        evaluation = evaluate_run(run, split=args.split, beam=beam)
        report = dict(evaluation.report)
        report["seconds"] = round(time.perf_counter() - started, 2)  # decoding + perplexity + scoring
        by_beam.append(report)
    result = {
        "run": str(run),
        "config": evaluation.translator.run_config.to_dict(),
        "parameters": count_parameters(evaluation.translator.model),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_scoring": os.getloadavg()},
        "training": training_summary(run),
        "test": {key: by_beam[0][key] for key in ("split", "num_sentences", "perplexity", "bleu_signature")},
        "by_beam": [
            {key: r[key] for key in ("beam", "bleu", "bleu_lowercase", "chrf", "seconds")} for r in by_beam
        ],
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    plain = json.loads(json.dumps(result, default=str))
    write_text_atomic(Path(args.json), json.dumps(portable(plain), indent=2) + "\n")

    t = result["training"]
    print(f"{run}: {result['parameters']:,} parameters; {t['epochs_completed']} epochs, {t['steps']} steps in "
          f"{t['training_minutes']} min ({t['minutes_per_epoch']} min/epoch, median {t['tokens_per_s_median']:.0f} "
          f"target tokens/s); stopped: {t['stop_reason']}")
    test = result["test"]
    print(f"{test['split']}, {test['num_sentences']} sentences: perplexity {test['perplexity']:.2f}; "
          f"BLEU signature {test['bleu_signature']}")
    print(f"{'beam':>4} {'BLEU':>6} {'BLEU lc':>7} {'chrF':>6} {'seconds':>8}")
    for b in result["by_beam"]:
        print(f"{b['beam']:>4} {b['bleu']:6.2f} {b['bleu_lowercase']:7.2f} {b['chrf']:6.2f} {b['seconds']:8.1f}")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
