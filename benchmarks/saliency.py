"""What does gradient saliency cost? Seconds per 1,000 Multi30k sentences for each method, on a
run's own greedy translations of test_2016_flickr, beside reading the attention of the same
outputs by force decoding (what `attnmt view` and `--attention-out` already pay).

    python benchmarks/saliency.py results/user_attention/runs/scaled_dot-seed1   # idle machine

Every method reads the same first --sentences sentences (default 200): the attention, gradient ×
input, SmoothGrad (10 samples) and integrated gradients (50 steps), at attnmt's defaults; the
attention and gradient × input also read the whole test set (1,000 sentences), where batches fill
better. Seconds per 1,000 sentences = the wall time × 1000 / the sentences read. Prints a table;
writes benchmarks/results/saliency.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from portable import portable

from attnmt.data import load_split
from attnmt.decoding.translator import Translator
from attnmt.models.saliency import SaliencyOptions
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

PROJECT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a trained run folder")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--sentences", type=int, default=200, help="sentences every method reads (default 200)")
    parser.add_argument("--output", type=Path, default=PROJECT / "benchmarks" / "results" / "saliency.json")
    args = parser.parse_args()

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
    for options in (SaliencyOptions("gradient"), SaliencyOptions("smoothgrad"), SaliencyOptions("integrated")):
        def read(chosen, options=options):
            return translator.read_saliency(chosen, options)
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


if __name__ == "__main__":
    sys.exit(main())
