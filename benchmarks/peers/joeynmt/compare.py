"""attnmt beside JoeyNMT 2.3 on one GPU: the table of docs/results.md ("On one GPU"), from the files
that ``race.sh`` brought back, every figure read from the toolkits' own logs.

Per model kind (RNN, Transformer):

- **precision and batches**, as each toolkit's log states them: attnmt's ``metrics.jsonl`` records
  its precision, JoeyNMT's ``train.log`` its "16-bits training" line; the target tokens a batch come
  from ``batches.json`` (each toolkit's own batching code over one epoch), checked against the
  target tokens JoeyNMT logs for its first epoch;
- **alone**: training target tokens/s, each toolkit alone on the GPU, the median over its logging
  windows (attnmt: ``metrics.jsonl``; JoeyNMT: its "Tokens per Sec" lines, ``summarize.py``), and
  attnmt's over JoeyNMT's;
- **side by side** for the same minutes: tokens/s, minutes to the best checkpoint, validation
  perplexity, and beam-5 BLEU and chrF (cased sacrebleu) on validation and once on test_2016_flickr,
  each side with the length penalty it chose on validation.

    python benchmarks/peers/joeynmt/compare.py --collect runs/race      # copy the race's files in
    python benchmarks/peers/joeynmt/compare.py --json benchmarks/results/gpu/gpu_peer.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
from pathlib import Path

from summarize import summarize

from attnmt.models import build_model
from attnmt.models.common import count_parameters
from attnmt.runs.run_config import load_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

PROJECT = Path(__file__).resolve().parents[3]
RACE = PROJECT / "benchmarks" / "results" / "gpu" / "race_joeynmt_fp16"
KINDS = {"rnn": "multi30k_rnn_gpu", "transformer": "multi30k_transformer_gpu"}
TEST = "test_2016_flickr"
SIXTEEN_BITS = re.compile(r"16-bits training: (True|False)")
DEVICE = re.compile(r"^device (\S+) \((.+?)\), precision (\w+)")


def collected_files(runs: Path, test: str) -> dict[str, Path]:
    """Where each file of the race folder comes from in race.sh's run tree."""
    files = {"session.log": runs.parent / "session.log", "batches.json": runs / "batches.json",
             "test_cuda.log": runs / "test_cuda.log"}
    for kind in KINDS:
        peer = runs / "peer"
        files |= {
            f"attnmt-speed-{kind}-metrics.jsonl": runs / f"speed-{kind}" / "metrics.jsonl",
            f"attnmt-speed-{kind}.log": runs / f"speed-{kind}.log",
            f"attnmt-{kind}-metrics.jsonl": runs / kind / "metrics.jsonl",
            f"attnmt-{kind}-config.yaml": runs / kind / "config.yaml",
            f"attnmt-{kind}.log": runs / f"{kind}.log",
            f"attnmt-alpha-{kind}-valid.json": runs / f"alpha-{kind}-valid.json",
            f"attnmt-chosen-{kind}-{TEST}.json": runs / f"chosen-{kind}-{test}.json",
            f"joey-speed-{kind}.log": peer / f"speed-joey-{kind}" / "train.log",
            f"joey-train-{kind}.log": peer / f"joey-{kind}" / "train.log",
            f"joey-{kind}-config.yaml": peer / f"joey-{kind}.yaml",
            f"joey-alpha-{kind}-valid.json": peer / f"joey-{kind}-alpha-valid.json",
            f"joey-chosen-{kind}-{TEST}.json": peer / f"joey-{kind}-chosen-{test}.json",
            f"joey-{kind}-hyps.{TEST}.txt": peer / f"joey-{kind}" / "hyps-chosen.test",
        }
    return files


def collect(runs: Path, race: Path, test: str) -> None:
    """Copy the race's files; ``test`` names the split race.sh scored once (``val`` in a smoke run)."""
    files = collected_files(runs, test)
    missing = [str(source) for source in files.values() if not source.is_file()]
    if missing:
        raise SystemExit(f"--collect {runs}: missing {', '.join(missing)}")
    race.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        shutil.copyfile(source, race / name)
    print(f"copied {len(files)} files into {race}")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def parameters(recipe: str) -> int:
    config = load_config(recipe)
    vocabulary = config.data.vocab_size  # joint: the same pieces on both sides
    return count_parameters(build_model(config.model, vocabulary, vocabulary), trainable_only=False)


def attnmt_precision(log: Path, metrics: Path) -> dict:
    """The device and precision attnmt's first line names, checked against its metrics records."""
    match = next(filter(None, map(DEVICE.match, log.read_text(encoding="utf-8").splitlines())), None)
    if match is None:
        raise SystemExit(f"{log}: no 'device ..., precision ...' line")
    recorded = {r["precision"] for r in read_jsonl(metrics) if r["type"] == "train"}
    if recorded != {match.group(3)}:
        raise SystemExit(f"{metrics}: precision {sorted(recorded)} where the log says {match.group(3)}")
    return {"device": match.group(2), "precision": match.group(3)}


def joey_precision(log: Path) -> str:
    match = SIXTEEN_BITS.search(log.read_text(encoding="utf-8"))
    if match is None:
        raise SystemExit(f"{log}: no '16-bits training' line")
    return "fp16" if match.group(1) == "True" else "fp32"


def attnmt_speed(race: Path, kind: str) -> dict:
    trains = [r for r in read_jsonl(race / f"attnmt-speed-{kind}-metrics.jsonl") if r["type"] == "train"]
    return {"tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in trains),
            "tokens_per_s_first": trains[0]["tokens_per_s"], "log_windows": len(trains),
            **attnmt_precision(race / f"attnmt-speed-{kind}.log", race / f"attnmt-speed-{kind}-metrics.jsonl")}


def attnmt_training(race: Path, kind: str) -> dict:
    """From metrics.jsonl: the last validation marked best, and the minutes trained."""
    records = read_jsonl(race / f"attnmt-{kind}-metrics.jsonl")
    evaluations = [r for r in records if r["type"] in ("epoch", "valid") and "val_ppl" in r]
    best = [r for r in evaluations if r.get("best")][-1]
    trains = [r for r in records if r["type"] == "train"]
    summary = next((r for r in records if r["type"] == "summary"), None)
    return {"training_minutes": round(max(r["elapsed"] for r in records if "elapsed" in r) / 60, 2),
            "stopped": summary["stop_reason"] if summary else "stopped by the race's time limit",
            "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in trains),
            "minutes_to_best": round(best["elapsed"] / 60, 2), "best_val_ppl": best["val_ppl"],
            **attnmt_precision(race / f"attnmt-{kind}.log", race / f"attnmt-{kind}-metrics.jsonl")}


def attnmt_scores(race: Path, kind: str) -> dict:
    [swept] = json.loads((race / f"attnmt-alpha-{kind}-valid.json").read_text())["runs"]
    [tested] = json.loads((race / f"attnmt-chosen-{kind}-{TEST}.json").read_text())["runs"]
    [test] = tested["by_alpha"]
    [valid] = [a for a in swept["by_alpha"] if a["alpha"] == test["alpha"]]
    return {"alpha": test["alpha"], "val_bleu": valid["bleu"], "val_chrf": valid["chrf"],
            "val_bleu_by_alpha": {str(a["alpha"]): a["bleu"] for a in swept["by_alpha"]},
            "test_bleu": test["bleu"], "test_chrf": test["chrf"]}


def joey_scores(race: Path, kind: str) -> dict:
    swept = json.loads((race / f"joey-alpha-{kind}-valid.json").read_text())
    [test] = json.loads((race / f"joey-chosen-{kind}-{TEST}.json").read_text())["by_alpha"]
    [valid] = [a for a in swept["by_alpha"] if a["alpha"] == test["alpha"]]
    return {"alpha": test["alpha"], "val_bleu": valid["bleu"], "val_chrf": valid["chrf"],
            "val_bleu_by_alpha": {str(a["alpha"]): a["bleu"] for a in swept["by_alpha"]},
            "test_bleu": test["bleu"], "test_chrf": test["chrf"]}


def joey_summary(log: Path) -> dict:
    summary = summarize(log)
    return {key: summary[key] for key in ("parameters", "tokens_per_s_median", "tokens_per_s_first", "log_windows",
                                          "training_minutes", "minutes_to_best", "best_val_ppl",
                                          "epoch_target_tokens", "batch_size")} | {"precision": joey_precision(log)}


def batches(race: Path) -> dict:
    """Target tokens a batch on each side, and JoeyNMT's logged epoch checked against its sampler's."""
    measured = json.loads((race / "batches.json").read_text())
    [chosen] = [r for r in measured["joeynmt"] if r["budget"] == measured["chosen_joeynmt_batch_size"]]
    logged = joey_summary(race / "joey-speed-rnn.log")["epoch_target_tokens"]
    for log in sorted(race.glob("joey-*.log")):
        if log.name.startswith(("joey-speed-", "joey-train-")) and summarize(log)["batch_size"] != chosen["budget"]:
            raise SystemExit(f"{log}: batch_size {summarize(log)['batch_size']}, not the {chosen['budget']} measured")
    if logged is not None and logged != chosen["target_tokens"]:
        raise SystemExit(f"JoeyNMT logged {logged} target tokens an epoch; its sampler gave {chosen['target_tokens']}")
    return {"attnmt_max_tokens": measured["attnmt"]["budget"],
            "attnmt_target_tokens_per_batch": measured["attnmt"]["target_tokens_per_batch_mean"],
            "joeynmt_batch_size": chosen["budget"],
            "joeynmt_target_tokens_per_batch": chosen["target_tokens_per_batch_mean"],
            "joeynmt_logged_epoch_target_tokens": logged, "ratio": measured["ratio_chosen"]}


def compare(race: Path) -> dict:
    where = race.relative_to(PROJECT) if race.is_relative_to(PROJECT) else race
    result: dict = {"race": str(where), "batches": batches(race), "kinds": {}}
    for kind, recipe in KINDS.items():
        ours, theirs = attnmt_speed(race, kind), joey_summary(race / f"joey-speed-{kind}.log")
        trained = joey_summary(race / f"joey-train-{kind}.log")
        result["kinds"][kind] = {
            "alone": {"attnmt": {**ours, "parameters": parameters(recipe)},
                      "joeynmt": {key: theirs[key] for key in ("tokens_per_s_median", "tokens_per_s_first",
                                                               "log_windows", "parameters", "precision")},
                      "tokens_per_s_ratio": ours["tokens_per_s_median"] / theirs["tokens_per_s_median"]},
            "side_by_side": {
                "attnmt": {"run": kind, **attnmt_training(race, kind), **attnmt_scores(race, kind)},
                "joeynmt": {key: trained[key] for key in ("training_minutes", "tokens_per_s_median",
                                                          "minutes_to_best", "best_val_ppl", "precision")}
                | {"stopped": "stopped by the race's time limit (JoeyNMT 2.3 has no early stopping that runs)"}
                | joey_scores(race, kind)},
        }
    return result


def print_tables(result: dict) -> None:
    speed_rows, training_rows = [], []
    for kind, entry in result["kinds"].items():
        alone = entry["alone"]
        speed_rows.append([kind, alone["attnmt"]["precision"], alone["joeynmt"]["precision"],
                           alone["attnmt"]["tokens_per_s_median"], alone["joeynmt"]["tokens_per_s_median"],
                           f"{alone['tokens_per_s_ratio']:.2f}×"])
        for name, side in entry["side_by_side"].items():
            training_rows.append([kind, name, side["precision"], side["training_minutes"], side["tokens_per_s_median"],
                                  side["minutes_to_best"], side["best_val_ppl"], side["alpha"], side["val_bleu"],
                                  side["test_bleu"], side["test_chrf"]])
    batch = result["batches"]
    print(f"target tokens a batch: attnmt {batch['attnmt_target_tokens_per_batch']:.0f} (max_tokens "
          f"{batch['attnmt_max_tokens']}), JoeyNMT {batch['joeynmt_target_tokens_per_batch']:.0f} (batch_size "
          f"{batch['joeynmt_batch_size']})")
    print(format_table(["model", "attnmt precision", "JoeyNMT precision", "attnmt tok/s", "JoeyNMT tok/s", "ratio"],
                       speed_rows))
    print(format_table(["model", "toolkit", "precision", "minutes", "tok/s", "to best", "val ppl", "alpha",
                        "val BLEU", "test BLEU", "test chrF"], training_rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--race", type=Path, default=RACE,
                        help=f"the race's files (default {RACE.relative_to(PROJECT)})")
    parser.add_argument("--collect", type=Path, metavar="RUNS",
                        help="first copy the files of race.sh's run folder (its RUNS) into --race")
    parser.add_argument("--collect-split", default=TEST, help="with --collect: the split race.sh scored once "
                        f"(default {TEST}; val in a SMOKE=1 run)")
    parser.add_argument("--json", help="where to write the comparison")
    args = parser.parse_args(argv)
    if args.collect:
        collect(args.collect, args.race, args.collect_split)
    result = compare(args.race.resolve())
    print_tables(result)
    if args.json:
        write_text_atomic(Path(args.json), json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
