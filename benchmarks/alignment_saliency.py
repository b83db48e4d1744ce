"""Does a translator's gradient saliency align words better than its attention? AER on the
HLT-NAACL 2003 English–French gold, from one trained translator (an English → French run).

Each gold pair is force-decoded (``attnmt.alignment.translator_attention``). The word weights come
from the attention, from the gradient saliency of each method (its positive part normalised per
row: ``saliency_weights``), or from both: (1 − λ) · attention + λ · saliency, both rows being
distributions over the source words. For each source of weights the link method, the reading
(layer, head, shift; shift alone for saliency) and λ are chosen on the 37 trial pairs only; the
447 test pairs are then scored once per source with that choice (so one test look per row).

    python benchmarks/alignment_saliency.py runs/hansards-rnn [--smoothgrad-samples 5] [--integrated-steps 10]

Prints a table and writes the ``saliency`` section of benchmarks/results/alignment.json (the other
sections are kept). ``--pairs N`` keeps the first N pairs of each split (a smoke test only).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import torch
from alignment_common import RESULTS, gold_splits, machine, require_data, write_section
from alignment_translator import describe_reading, readings

from attnmt.alignment import LINK_METHODS
from attnmt.alignment.protocol import GoldSplit, choose_on_trial, rounded, score_matrices
from attnmt.alignment.translator_attention import TranslatorAligner
from attnmt.data.link_files import GoldAlignment
from attnmt.models.saliency import SaliencyOptions
from attnmt.runtime.tables import format_table

SHARES = (0.25, 0.5, 0.75)  # λ, the saliency's share when combined with the attention


def word_weights(forced: list, split: GoldSplit, reading) -> list[np.ndarray]:
    """The word weights [T, S] of every pair for one reading (zeros for a pair with an empty side)."""
    return [np.zeros((len(tgt), len(src))) if pair is None else pair.word_weights(*reading)
            for pair, src, tgt in zip(forced, split.src, split.tgt)]


def choose_and_score(trial: GoldSplit, test: GoldSplit, candidates: dict, describe) -> dict:
    """``candidates``: setting -> (trial matrices, test matrices thunk). The (setting, link method)
    with the lowest trial AER; the test scored once with it."""
    trial_scores = {setting: score_matrices(trial, matrices) for setting, (matrices, _) in candidates.items()}
    pairs = list(itertools.product(candidates, LINK_METHODS))
    setting, method = choose_on_trial(pairs, lambda choice: trial_scores[choice[0]][choice[1]]["aer"])
    test_scores = score_matrices(test, candidates[setting][1](), [method])[method]
    return {"setting": describe(setting), "method": method, "trial_aer": round(trial_scores[setting][method]["aer"], 4),
            **rounded(test_scores)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a trained English → French translator run")
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--smoothgrad-samples", type=int, default=5)
    parser.add_argument("--integrated-steps", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=None, help="only the first N pairs of each split (smoke test)")
    parser.add_argument("--max-tokens", type=int, default=2000)
    parser.add_argument("--section", default="saliency")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    require_data()
    started = time.perf_counter()
    trial, test = gold_splits(lowercase=False)
    if args.pairs is not None:
        trial, test = (GoldSplit(split.name, split.src[: args.pairs], split.tgt[: args.pairs],
                                 GoldAlignment(split.gold.sure[: args.pairs], split.gold.possible[: args.pairs]))
                       for split in (trial, test))
    attention = TranslatorAligner(args.run, args.checkpoint, src_lang="en", max_tokens=args.max_tokens)
    translator = attention.translator
    print(f"{args.run}: {attention.describe()}", file=sys.stderr)

    forced, seconds = {}, {}
    sources = {"attention": attention}
    for options in (SaliencyOptions("gradient"), SaliencyOptions("smoothgrad", samples=args.smoothgrad_samples),
                    SaliencyOptions("integrated", steps=args.integrated_steps)):
        sources[options.describe()] = TranslatorAligner(translator, src_lang="en", max_tokens=args.max_tokens,
                                                        saliency=options)
    for name, aligner in sources.items():
        begun = time.perf_counter()
        forced[name] = (aligner.forced_attention(trial.src, trial.tgt), aligner.forced_attention(test.src, test.tgt))
        seconds[name] = round(time.perf_counter() - begun, 1)
        print(f"{name}: {seconds[name]} s for {len(trial) + len(test)} pairs", file=sys.stderr)

    attention_readings = readings(attention.layers, attention.heads)
    saliency_readings = [(1, None, False), (1, None, True)]
    rows = {}
    for name in sources:
        grid = attention_readings if name == "attention" else saliency_readings
        trial_forced, test_forced = forced[name]
        candidates = {reading: (word_weights(trial_forced, trial, reading),
                                lambda reading=reading, test_forced=test_forced: word_weights(test_forced, test,
                                                                                              reading))
                      for reading in grid}
        rows[name] = choose_and_score(trial, test, candidates, describe_reading if name == "attention" else
                                      lambda reading: "input reading (shift)" if reading[2] else "output reading")
    default = attention_readings[0]
    for name in list(sources)[1:]:
        candidates = {}
        for share in SHARES:
            def mixed(split, which, share=share, name=name):
                a = word_weights(forced["attention"][which], split, default)
                s = word_weights(forced[name][which], split, (1, None, False))
                return [(1 - share) * x + share * y for x, y in zip(a, s)]
            candidates[share] = (mixed(trial, 0), lambda mixed=mixed: mixed(test, 1))
        rows[f"attention + {name}"] = choose_and_score(trial, test, candidates, lambda share: f"λ = {share}")

    print()
    print(f"{len(test)} test pairs; link method and setting chosen on {len(trial)} trial pairs; one test look a row")
    print(format_table(["weights", "setting", "method", "trial AER", "AER", "precision", "recall"],
                       [[name, row["setting"], row["method"], row["trial_aer"], row["aer"], row["precision"],
                         row["recall"]] for name, row in rows.items()], digits=3))
    write_section(args.out, args.section, {
        "question": "AER of a translator's attention, its gradient saliency and both, force-decoding the gold pairs",
        "run": str(args.run), "checkpoint": args.checkpoint, "description": attention.describe(),
        "training": {key: value for key, value in translator.progress.items()
                     if key in ("step", "elapsed_seconds", "stop_reason")},
        "pairs": {"trial": len(trial), "test": len(test)},
        "saliency_settings": {"smoothgrad_samples": args.smoothgrad_samples,
                              "integrated_steps": args.integrated_steps},
        "tuning": "per row on trial: the link method, the reading (layer, head, shift; shift for saliency), λ",
        "shares": list(SHARES), "rows": rows, "seconds_per_source": seconds, "test_looks": len(rows),
        "seconds": round(time.perf_counter() - started, 1),
        "machine": f"{machine('torch')} threads {torch.get_num_threads()}",
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
