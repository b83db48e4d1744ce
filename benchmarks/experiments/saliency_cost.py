"""What does gradient saliency cost? Seconds per 1,000 Multi30k sentences for each method, on a
run's own greedy translations of test_2016_flickr, beside reading the attention of the same
outputs by force decoding (what `attnmt view` and `--attention-out` already pay).

    PYTHONPATH=benchmarks python benchmarks/experiments/saliency_cost.py results/user_attention/runs/scaled_dot-seed1   # idle machine

Every method reads the same first --sentences sentences (default 200): the attention, gradient ×
input, SmoothGrad (10 samples) and integrated gradients (50 steps), at attnmt's defaults; the
attention and gradient × input also read the whole test set (1,000 sentences), where batches fill
better. Seconds per 1,000 sentences = the wall time × 1000 / the sentences read. Prints a table;
writes benchmarks/results/saliency.json.

How complete are integrated gradients on a trained run? With ``--completeness`` the script instead
measures, on the run's first --sentences greedy translations, each pair's gap
max_t |Σ_s a[t, s] − (f_t(e) − f_t(0))| / max_t |f_t(e) − f_t(0)| at 50 steps (the default) and at
200, and writes the quantiles to ``--output``:

    PYTHONPATH=benchmarks python benchmarks/experiments/saliency_cost.py RUN --completeness --sentences 100 --output benchmarks/results/ig_completeness.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from attnmt.attribution.gradient import source_embedding
from attnmt.attribution.methods import AttributionOptions
from attnmt.data import load_split
from attnmt.decoding.translator import Translator
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable

PROJECT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a trained run folder")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--sentences", type=int, default=200, help="sentences every method reads (default 200)")
    parser.add_argument("--output", type=Path,
                        default=PROJECT / "benchmarks" / "results" / "saliency" / "saliency.json")
    parser.add_argument("--completeness", action="store_true",
                        help="measure integrated gradients' completeness gap instead of the time")
    args = parser.parse_args()
    if args.completeness:
        return completeness(args)

    translator = Translator.load(args.run)
    assert translator.run_config is not None
    sources = load_split(translator.run_config.data, args.split).src
    translations = translator.translate(sources, beam=1)
    output_pieces = sum(len(t.out_pieces) for t in translations[: args.sentences])
    print(f"{translator.describe()}; {len(translations)} outputs, {output_pieces} pieces in the first "
          f"{args.sentences}", file=sys.stderr)

    def timed(read, count: int) -> float:
        started = time.perf_counter()
        read(translations[:count])
        return time.perf_counter() - started

    every = len(translations)
    readings = [("attention (force-decoded)", translator.read_attention, every),
                ("attention (force-decoded)", translator.read_attention, args.sentences)]
    for options in (AttributionOptions("gradient"), AttributionOptions("smoothgrad"), AttributionOptions("integrated")):
        def read(chosen, options=options):
            return translator.read_attributions(chosen, options)
        if options.method == "gradient":
            readings.append((options.describe(), read, every))
        readings.append((options.describe(), read, args.sentences))
    measured = {}
    for name, read, count in readings:
        measured[f"{name}, {count} sentences"] = (timed(read, count), count)
        print(f"{name}: {measured[f'{name}, {count} sentences'][0]:.1f} s for {count} sentences", file=sys.stderr)

    results, rows = {}, []
    for name, (seconds, count) in measured.items():
        per_thousand = seconds * 1000 / count
        baseline = measured[f"attention (force-decoded), {count} sentences"]
        ratio = seconds / baseline[0]
        results[name] = {"seconds": seconds, "sentences": count, "seconds_per_1000": per_thousand,
                         "against_attention": ratio}
        rows.append([name, count, f"{seconds:.1f}", f"{per_thousand:,.0f}", f"{ratio:,.0f}×"])
    print(format_table(["reading", "sentences", "seconds", "seconds per 1,000 sentences",
                        "against the attention of the same sentences"], rows))
    report = {"benchmark": "saliency", "run": portable(str(args.run)), "split": args.split,
              "model": translator.describe(), "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
              "output_pieces_first": output_pieces, "readings": results}
    write_text_atomic(args.output, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


def log_probabilities_at(translator: Translator, sources, outputs, zero_source: bool) -> list[np.ndarray]:
    """f_t for every output position of each pair, with the source embeddings as they are or all 0."""
    table = source_embedding(translator.model)
    calls: list[int] = []

    def zero(module, inputs, output):
        calls.append(1)
        return torch.zeros_like(output) if len(calls) == 1 else None  # the source side's call only

    scores: list[np.ndarray] = [np.empty(0)] * len(sources)
    for index in range(len(sources)):  # one pair a call: the hook knows which call is the source's
        calls.clear()
        handle = table.register_forward_hook(zero) if zero_source else None
        try:
            for _, reading in translator.force_decode([sources[index]], [outputs[index]], log_probs=True):
                scores[index] = reading.log_probs.astype(np.float64)
        finally:
            if handle is not None:
                handle.remove()
    return scores


def completeness(args: argparse.Namespace) -> int:
    """Integrated gradients' completeness gap on the run's own translations (module docstring)."""
    translator = Translator.load(args.run)
    assert translator.run_config is not None
    sources_text = load_split(translator.run_config.data, args.split).src[: args.sentences]
    translations = translator.translate(sources_text, beam=1)
    src_tok, tgt_tok = translator.tokenizers.src, translator.tokenizers.tgt
    sources = [[src_tok.piece_to_id(piece) for piece in t.src_pieces] for t in translations]
    outputs = [[tgt_tok.piece_to_id(piece) for piece in t.out_pieces] for t in translations]
    at_e = log_probabilities_at(translator, sources, outputs, zero_source=False)
    at_zero = log_probabilities_at(translator, sources, outputs, zero_source=True)
    model = translator.run_config.model
    report: dict = {"benchmark": "integrated gradients' completeness", "run": args.run.name,  # no machine path
                    "model_type": model.type, "attention": getattr(model, "attention", None),
                    "split": args.split, "sentences": len(translations), "model": translator.describe(), "steps": {}}
    rows = []
    for steps in (50, 200):
        options = AttributionOptions("integrated", steps=steps)
        gaps = []
        for index, scores in translator.attribute(sources, outputs, options):
            difference = at_e[index] - at_zero[index]
            gaps.append(float(np.abs(scores.sum(1) - difference).max() / (np.abs(difference).max() + 1e-12)))
        quantiles = {"median": float(np.median(gaps)), "p90": float(np.quantile(gaps, 0.9)), "max": max(gaps)}
        report["steps"][str(steps)] = quantiles
        rows.append([steps, f"{quantiles['median']:.2e}", f"{quantiles['p90']:.2e}", f"{quantiles['max']:.2e}"])
    print(format_table(["steps", "median gap", "90th percentile", "largest"], rows))
    write_text_atomic(args.output, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
