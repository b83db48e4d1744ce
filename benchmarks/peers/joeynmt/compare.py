"""attnmt beside JoeyNMT 2.3 on one GPU: the table of docs/results.md ("On one GPU"), from the files
that ``benchmarks/gpu_peer_session.sh`` brought back (kept in ``benchmarks/results/gpu/race_joeynmt``).

Per model kind (RNN, Transformer):

- **alone**: training target tokens/s, each toolkit alone on the GPU in its 16-bit mode (attnmt
  bf16, JoeyNMT fp16), the median over its logging windows (attnmt: ``metrics.jsonl``; JoeyNMT:
  its "Tokens per Sec" lines, ``summarize.py``), and attnmt's over JoeyNMT's;
- **side by side** for the same minutes: tokens/s, minutes to the best checkpoint, validation
  perplexity, and beam-5 BLEU and chrF (cased sacrebleu) on validation and on test_2016_flickr.
  attnmt's search uses the length penalty chosen on validation; JoeyNMT's hypotheses (its own beam
  search, alpha 1.0) are scored here by the same sacrebleu against the raw references.

    python benchmarks/peers/joeynmt/compare.py --json benchmarks/results/gpu/gpu_peer.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
from pathlib import Path

import sacrebleu

from attnmt.models import build_model
from attnmt.models.common import count_parameters
from attnmt.runs.run_config import load_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

PROJECT = Path(__file__).resolve().parents[3]
RACE = PROJECT / "benchmarks" / "results" / "gpu" / "race_joeynmt"
KINDS = {"rnn": ("configs/multi30k_rnn_gpu.yaml", "rnn"),  # config, the run trained side by side
         "transformer": ("configs/multi30k_transformer_gpu.yaml", "transformer-drop")}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def parameters(config_path: str) -> int:
    config = load_config(PROJECT / config_path)
    vocabulary = config.data.vocab_size  # joint: the same pieces on both sides
    return count_parameters(build_model(config.model, vocabulary, vocabulary), trainable_only=False)


def attnmt_speed(kind: str) -> dict:
    trains = [r for r in read_jsonl(RACE / f"attnmt-speed-{kind}-metrics.jsonl") if r["type"] == "train"]
    return {"tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in trains),
            "tokens_per_s_first": trains[0]["tokens_per_s"], "log_windows": len(trains),
            "precision": trains[0]["precision"]}


def attnmt_training(run: str) -> dict:
    """From metrics.jsonl: the last validation marked best, and the minutes trained."""
    records = read_jsonl(RACE / f"attnmt-{run}-metrics.jsonl")
    evaluations = [r for r in records if r["type"] in ("epoch", "valid") and "val_ppl" in r]
    best = [r for r in evaluations if r.get("best")][-1]
    trains = [r for r in records if r["type"] == "train"]
    summary = next((r for r in records if r["type"] == "summary"), None)
    return {"training_minutes": round(max(r["elapsed"] for r in records if "elapsed" in r) / 60, 2),
            "stopped": summary["stop_reason"] if summary else "stopped by the session's time limit",
            "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in trains),
            "minutes_to_best": round(best["elapsed"] / 60, 2), "best_val_ppl": best["val_ppl"]}


def attnmt_scores(kind: str, run: str) -> dict:
    sweep = json.loads((RACE / f"attnmt-alpha-{kind}-valid.json").read_text())
    [tested] = json.loads((RACE / f"attnmt-chosen-{kind}-test_2016_flickr.json").read_text())["runs"]
    [test] = tested["by_alpha"]
    [of_run] = [r for r in sweep["runs"] if r["run"].endswith("/" + run)]
    [valid] = [a for a in of_run["by_alpha"] if a["alpha"] == test["alpha"]]
    return {"alpha": test["alpha"], "val_bleu": valid["bleu"], "val_chrf": valid["chrf"],
            "test_bleu": test["bleu"], "test_chrf": test["chrf"]}


def joey_scores(kind: str, data: Path) -> dict:
    scores = {"alpha": 1.0}
    for split, name in (("val", "val"), ("test_2016_flickr", "test")):
        with gzip.open(data / f"{split}.en.gz", "rt", encoding="utf-8") as handle:
            references = handle.read().splitlines()
        hypotheses = (RACE / f"joey-{kind}-hyps.{split}.txt").read_text(encoding="utf-8").splitlines()
        if len(hypotheses) != len(references):
            raise SystemExit(f"joey-{kind}-hyps.{split}.txt: {len(hypotheses)} lines, {len(references)} references")
        scores[f"{name}_bleu"] = sacrebleu.corpus_bleu(hypotheses, [references]).score
        scores[f"{name}_chrf"] = sacrebleu.corpus_chrf(hypotheses, [references]).score
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", required=True, help="where to write the comparison")
    data_dir = Path(os.environ.get("ATTNMT_DATA_DIR", PROJECT.parent / "shared" / "data"))
    parser.add_argument("--data", type=Path, default=data_dir / "multi30k",
                        help="the Multi30k .gz files, for the references (default $ATTNMT_DATA_DIR/multi30k)")
    args = parser.parse_args(argv)
    machine = json.loads((RACE / "decode.json").read_text())["machine"]
    result: dict = {"machine": machine, "kinds": {}}
    speed_rows, training_rows = [], []
    for kind, (config, run) in KINDS.items():
        joey_speed = json.loads((RACE / f"joey-speed-{kind}.json").read_text())
        joey_train = json.loads((RACE / f"joey-train-{kind}.json").read_text())
        ours = attnmt_speed(kind)
        theirs = {key: joey_speed[key] for key in ("tokens_per_s_median", "tokens_per_s_first", "log_windows",
                                                   "parameters")}
        entry = {
            "alone": {"attnmt": {**ours, "parameters": parameters(config)},
                      "joeynmt": {**theirs, "precision": "fp16"},
                      "tokens_per_s_ratio": ours["tokens_per_s_median"] / joey_speed["tokens_per_s_median"]},
            "side_by_side": {
                "attnmt": {"run": run, **attnmt_training(run), **attnmt_scores(kind, run)},
                "joeynmt": {key: joey_train[key] for key in ("training_minutes", "tokens_per_s_median",
                                                              "minutes_to_best", "best_val_ppl")}
                | {"stopped": "stopped by the session's time limit"} | joey_scores(kind, args.data)},
        }
        result["kinds"][kind] = entry
        alone = entry["alone"]
        speed_rows.append([kind, alone["attnmt"]["parameters"], alone["joeynmt"]["parameters"],
                           alone["attnmt"]["tokens_per_s_median"], alone["joeynmt"]["tokens_per_s_median"],
                           f"{alone['tokens_per_s_ratio']:.1f}×"])
        for name, side in entry["side_by_side"].items():
            training_rows.append([kind, name, side["training_minutes"], side["tokens_per_s_median"],
                                  side["minutes_to_best"], side["best_val_ppl"], side["alpha"], side["val_bleu"],
                                  side["test_bleu"], side["test_chrf"]])
    print(format_table(["model", "attnmt params", "JoeyNMT params", "attnmt tok/s", "JoeyNMT tok/s", "ratio"],
                       speed_rows))
    print(format_table(["model", "toolkit", "minutes", "tok/s", "to best", "val ppl", "alpha", "val BLEU",
                        "test BLEU", "test chrF"], training_rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(args.json), json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
