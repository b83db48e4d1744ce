"""Levers of the fast CPU recipe, compared: the validation numbers of short runs that differ in one
or two settings, read from their run folders (no training here).

    PYTHONPATH=benchmarks python benchmarks/experiments/levers.py NAME=RUN[:what changed] ... --json benchmarks/results/recipes/fast_levers.json

For each run: parameters, steps, training target tokens, median target tokens/s, and at its best
checkpoint the validation perplexity and validation BLEU (greedy, on ``bleu_max_sentences``
sentences), with the minutes and tokens it took; and, when the run has been scored on the whole
validation set with ``attnmt evaluate RUN --split valid --beam 5``, that BLEU too. Prints a
table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnmt.runs.folder import eval_json_path, read_saved_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable


def summarize(run: Path, valid_split: str = "val") -> dict:
    """One run's figures; ``valid_split`` is the name ``attnmt evaluate RUN --split valid`` gave the
    validation set ("val" for Multi30k, "valid" for a data section's own files)."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    summary = [r for r in records if r["type"] == "summary"][-1]
    train = sorted(r["tokens_per_s"] for r in records if r["type"] == "train")
    resident = [r["resident_gib"] for r in records if r["type"] == "train" and r.get("resident_gib") is not None]
    config = read_saved_config(run)  # with the values of options a run saved before them ran with
    scored = eval_json_path(run, valid_split, beam=5)  # what `attnmt evaluate RUN --split valid --beam 5` wrote
    valid_beam5 = json.loads(scored.read_text(encoding="utf-8")) if scored.is_file() else None
    return {
        "model": {key: config["model"].get(key) for key in ("embed_dim", "hidden_dim", "dropout")},
        "dropout_mask": config["model"].get("dropout_mask", "bernoulli"),
        "adam": config["training"]["adam"],
        "vocab_size": config["data"]["vocab_size"], "max_tokens": config["data"]["max_tokens"],
        "pad_multiple": config["data"].get("pad_multiple", 1),
        "lr": config["training"]["lr"], "lr_schedule": config["training"].get("lr_schedule", "constant"),
        "precision": config["training"].get("precision", "fp32"),
        "steps": summary["step"], "minutes": round(summary["elapsed"] / 60, 2),
        "target_tokens": summary.get("target_tokens"), "tokens_per_s_median": round(train[len(train) // 2]),
        "best_val_ppl": round(summary["best_val_ppl"], 2), "best_val_bleu": round(summary["best_val_bleu"], 2),
        "minutes_to_best": round(summary["best_elapsed"] / 60, 2) if summary.get("best_elapsed") else None,
        "best_epoch": summary.get("best_epoch"), "stop_reason": summary.get("stop_reason"),
        "warmdown_share": (config["training"].get("warmdown_share")
                           if config["training"].get("lr_schedule") == "warmdown" else None),
        "ema_decay": config["training"].get("ema_decay"),
        "resident_gib_max": max(resident) if resident else None,  # read every log_every steps
        "valid_bleu_beam5": round(valid_beam5["bleu"], 2) if valid_beam5 else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="NAME=RUN[:WHAT]")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--note", default="", help="how the runs were made (recorded in the JSON)")
    args = parser.parse_args()
    rows, results = [], []
    for item in args.runs:
        name, rest = item.split("=", 1)
        path, _, what = rest.partition(":")
        result = {"name": name, "what": what, **summarize(Path(path))}
        results.append(result)
        rows.append([name, what, result["steps"], f"{result['target_tokens'] / 1e6:.2f}M",
                     result["tokens_per_s_median"], result["best_val_ppl"], result["best_val_bleu"],
                     "–" if result["valid_bleu_beam5"] is None else result["valid_bleu_beam5"]])
    print(format_table(["run", "what changed", "steps", "target tokens", "tokens/s", "val ppl", "val BLEU",
                        "val BLEU, all, beam 5"], rows))
    write_text_atomic(args.json, json.dumps(portable({"note": args.note, "runs": results}), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
