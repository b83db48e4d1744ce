"""Is the attention an explanation? Faithfulness of attention and of every attribution, for each run.

For each run (``NAME=RUN_FOLDER``), its greedy translations of the first --sentences sentences of
--split (validation by default: nothing here is a choice made on the test set) are explained by
``attnmt.evaluation.explain``: for attention and every attribution that applies to the model,

- comprehensiveness and sufficiency AOPC (k = 1-3 words, and 10-50% of the words), and the same
  for a random ranking (the mean of --random-orders seeded orders);
- Spearman's ρ with the attention over source words (top-1 agreement too);
- seconds per sentence, and its ratio to one forced decode of the same outputs in the same run;

and, for an RNN with one head, counterfactual attention (total variation, Jensen-Shannon, changed
words) for permuted, uniform and other-step weights. Means over sentences (counterfactuals over
output tokens). Prints one table per run and writes the JSON. ``--jobs N`` measures N runs at a
time, each in its own process (give ``--threads 1`` with ``--jobs 2`` on two cores), so the whole
benchmark is one command; the JSON keeps its wall-clock seconds:

    python benchmarks/faithfulness.py dot=runs/faith/dot general=runs/faith/general \\
        --jobs 2 --threads 1 --json benchmarks/results/saliency/faithfulness.json
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from attnmt.attribution.methods import why_not as not_applicable
from attnmt.data import load_split
from attnmt.decoding.interventions import can_intervene
from attnmt.decoding.translator import Translator
from attnmt.evaluation.counterfactual import Counterfactual
from attnmt.evaluation.explain import DEFAULT_METHODS, explain
from attnmt.evaluation.faithfulness import Faithfulness
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import machine, portable

ALL_METHODS = ("attention", "gradient", "smoothgrad", "integrated", "value_norm", "erasure", "alti", "rollout")


def measure(name: str, run: Path, args: argparse.Namespace) -> dict:
    """Every figure of one run."""
    translator = Translator.load(run, num_threads=args.threads)
    assert translator.run_config is not None
    sentences = [s for s in load_split(translator.run_config.data, args.split).src if s.strip()][: args.sentences]
    translations = translator.translate(sentences, beam=1, return_attention=True)
    start = time.perf_counter()
    translator.read_attention(translations)
    forced = (time.perf_counter() - start) / len(translations)
    methods = [m for m in args.methods if m == "attention" or not_applicable(translator.model, m) is None]
    skipped = {m: not_applicable(translator.model, m) for m in args.methods if m not in methods}
    start = time.perf_counter()
    explanations = explain(translator, translations, methods, random_orders=args.random_orders, seed=0)
    total = time.perf_counter() - start
    rows: dict[str, dict] = {}
    for method in [*methods, "random"]:
        figures = Faithfulness.mean([e.random if method == "random" else e.methods[method].faithfulness
                                     for e in explanations])
        row = {"comprehensiveness_aopc": figures.comprehensiveness_aopc, "sufficiency_aopc": figures.sufficiency_aopc,
               "comprehensiveness": figures.comprehensiveness, "sufficiency": figures.sufficiency}
        if method not in ("random", "attention"):
            rhos = [e.methods[method].rank_correlation for e in explanations if e.methods[method].rank_correlation
                    is not None]
            row["rank_correlation_with_attention"] = float(np.mean(rhos)) if rhos else None
        if method != "random":
            seconds = explanations[0].methods[method].seconds
            row["seconds_per_sentence"] = seconds
            row["ratio_to_forced_decode"] = seconds / forced if forced > 0 else None
        if method in ("alti", "rollout"):
            shares = [s for e in explanations for s in (e.methods[method].source_share or [])]
            row["source_share_mean"] = float(np.mean(shares)) if shares else None
        rows[method] = row
    counterfactual = None
    if can_intervene(translator.model):
        counterfactual = {kind: Counterfactual.mean([e.counterfactual[kind] for e in explanations
                                                     if e.counterfactual and kind in e.counterfactual]).to_dict()
                          for kind in ("permuted", "uniform", "other step")}
    return {"run": str(run), "mechanism": getattr(translator.run_config.model, "attention", None),
            "model": translator.run_config.model.type, "split": args.split, "sentences": len(translations),
            "forced_decode_seconds_per_sentence": forced, "explain_seconds_total": total,
            "methods": rows, "not_applicable": skipped, "counterfactual": counterfactual}


def measure_all(runs: dict[str, Path], args: argparse.Namespace) -> dict[str, dict]:
    """Every run measured, ``args.jobs`` at a time (each in its own process when more than one),
    each run's tables printed as it ends."""
    results = {}
    if args.jobs == 1:
        for name, folder in runs.items():
            results[name] = measure(name, folder, args)
            print_run(name, results[name])
        return results
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(measure, name, folder, args): name for name, folder in runs.items()}
        for future in as_completed(futures):
            name = futures[future]
            results[name] = future.result()
            print_run(name, results[name])
    return results


def print_run(name: str, result: dict) -> None:
    def number(value) -> str:
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"

    table = [[method, number(row["comprehensiveness_aopc"]["words"]), number(row["comprehensiveness_aopc"]["share"]),
              number(row["sufficiency_aopc"]["words"]), number(row["sufficiency_aopc"]["share"]),
              number(row.get("rank_correlation_with_attention")), number(row.get("ratio_to_forced_decode"))]
             for method, row in result["methods"].items()]
    print(f"\n{name} ({result['model']}, {result['mechanism']}), {result['sentences']} sentences of {result['split']}")
    print(format_table(["method", "compr. 1-3", "compr. %", "suff. 1-3", "suff. %", "ρ attention", "× forced"],
                       table))
    if result["counterfactual"]:
        print(format_table(["counterfactual", "TV", "JS (bits)", "changed"],
                           [[kind, number(f["total_variation"]), number(f["jensen_shannon"]), number(f["changed"])]
                            for kind, f in result["counterfactual"].items()]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="NAME=RUN", help="runs to measure, each named")
    parser.add_argument("--split", default="val", help="the sentences explained (default val)")
    parser.add_argument("--sentences", type=int, default=100, help="how many (default 100)")
    parser.add_argument("--methods", default=",".join(ALL_METHODS), help="comma-separated (default: every method)")
    parser.add_argument("--random-orders", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: follow the load)")
    parser.add_argument("--jobs", type=int, default=1, help="runs measured at a time, each in its own process")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more")
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in args.methods if m not in ALL_METHODS]
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}")
    runs = {}
    for item in args.runs:
        name, _, folder = item.partition("=")
        if not folder:
            parser.error(f"{item!r}: give NAME=RUN_FOLDER")
        runs[name] = Path(folder)
    started = time.perf_counter()
    results = measure_all(runs, args)
    wall = time.perf_counter() - started
    print(f"\n{len(results)} runs in {wall / 60:.1f} minutes ({args.jobs} at a time)")
    if args.json is not None:
        document = {"command": portable(" ".join(["python", "benchmarks/faithfulness.py", *sys.argv[1:]])),
                    "machine": machine("torch"), "default_methods_of_explain": list(DEFAULT_METHODS),
                    "jobs": args.jobs, "wall_seconds": wall,
                    "runs": portable({name: results[name] for name in runs})}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.json, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
