"""How well does a trained translator's attention align words? AER on the HLT-NAACL 2003 gold.

Each gold pair is force-decoded by the translator (teacher forcing on the given French,
``attnmt.alignment.translator_attention``), its attention merged from pieces to words with EOS
dropped, and the links extracted with every method. The reading (decoder layer, head or the mean
over heads, and the output or input row: ``shift``) is chosen per method on the 37 trial pairs
only; the test set is scored once per method with that choice, and also with the default reading
(penultimate layer, mean of heads, output row) for comparison. Baseline measured in the same run:
the position-only aligner (the distortion prior alone, tuned on trial). Target: test AER ≤ 0.15.

Combinations (``--reverse-run RUN`` and/or ``--vectors DIR``), each a separate, labelled row set,
never mixed into the single translator's numbers: the weighted geometric mean
(``attnmt.alignment.combine``) of the translator's attention with that of a translator trained
the other way round (fr → en, its weights transposed; equal shares), with vector attention (the
vector share and the vector scoring τ, κ chosen per method on trial), or with both.

Prints tables and writes the ``translator`` section of ``benchmarks/results/alignment/alignment.json`` (or
the one ``--section`` names; the other sections are kept). A run trained with guided alignment
(``data.train_links``) records its guide settings there (``alignment_guide``).

    python benchmarks/alignment_translator.py runs/hansards-rnn [--checkpoint best]
        [--reverse-run runs/hansards-rnn-fr-en] [--vectors DIR] [--section translator_guided]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from alignment_vectors import score, tune

from attnmt.alignment import LINK_METHODS, VectorAligner, VectorScoring, combine_weights, load_vector_dir
from attnmt.alignment.combine import translator_vector_shares
from attnmt.alignment.protocol import GoldSplit, choose_on_trial, rounded, score_matrices
from attnmt.alignment.translator_attention import TranslatorAligner
from attnmt.models.common import default_layer
from attnmt.runtime.tables import format_table

from common import PUBLISHED, RESULTS, gold_splits, machine, read_results, require_data, write_section

TARGET_AER = 0.15
VECTOR_SHARES = (0.3, 0.4, 0.5, 0.6, 0.7)
COMBINED_TEMPERATURES = (0.05, 0.1, 0.2)
COMBINED_DISTORTIONS = (0.0, 5.0, 10.0)

Reading = tuple[int, int | None, bool]  # (layer, head or None = the mean, shift)


def readings(layers: int, heads: int) -> list[Reading]:
    """Every (layer, head or None = mean, shift) to try; the default reading first, so ties keep it."""
    default = (default_layer(layers), None, False)
    grid = [(layer, head, shift) for layer in range(1, layers + 1) for head in [None, *range(1, heads + 1)]
            for shift in (False, True)]
    return [default] + [reading for reading in grid if reading != default]


def describe_reading(reading: Reading) -> str:
    layer, head, shift = reading
    return f"L{layer} {'mean' if head is None else f'h{head}'}{' shift' if shift else ''}"


def score_reading(split: GoldSplit, forced, reading: Reading, methods=LINK_METHODS) -> dict[str, dict[str, float]]:
    """AER, precision, recall, F1 of every link method for one reading of the force-decoded pairs."""
    return score_matrices(split, [pair.word_weights(*reading) for pair in forced], methods)


def result_rows(trial_results, test_results, settings=None) -> dict:
    """Per link method: its settings (if any), the trial AER and the test scores, rounded to 4 places."""
    return {method: {**(settings or {}).get(method, {}), "trial_aer": round(trial_results[method]["aer"], 4),
                     **rounded(test_results[method])}
            for method in LINK_METHODS}


def combinations(trial: GoldSplit, test: GoldSplit, translators: dict[str, dict], vectors) -> dict[str, dict]:
    """The geometric-mean combinations of the translators' default readings and vector attention.

    translators: name -> {"trial": [W], "test": [W]} (alignment orientation); vectors: a
    (src WordVectors, tgt WordVectors) pair or None. Shares: translators equal; with vectors, the
    vector share and the scoring (τ, κ) are chosen per method on trial from the grids above.
    """
    def mean_of(parts: list[list[np.ndarray]], shares) -> list[np.ndarray]:
        return [combine_weights(list(pair), shares) for pair in zip(*parts)]

    names = list(translators)
    results = {}
    if len(names) == 2:
        shares = [0.5, 0.5]
        trial_scores = score_matrices(trial, mean_of([translators[n]["trial"] for n in names], shares))
        test_scores = score_matrices(test, mean_of([translators[n]["test"] for n in names], shares))
        results["both directions"] = {
            "parts": names, "shares": shares, "tuning": "none (default readings, equal shares)",
            "methods": result_rows(trial_scores, test_scores)}
    if vectors is None:
        return results
    src_vectors, tgt_vectors = vectors
    vector_weights = {}
    for temperature in COMBINED_TEMPERATURES:
        for distortion in COMBINED_DISTORTIONS:
            aligner = VectorAligner(src_vectors, tgt_vectors, VectorScoring("cosine", temperature, distortion),
                                    lowercase=True)
            vector_weights[temperature, distortion] = {
                split.name: [aligner(s, t) for s, t in zip(split.src, split.tgt)] for split in (trial, test)}
    groups = [[names[0]]] + ([names] if len(names) == 2 else [])
    for group in groups:
        label = ("translator" if len(group) == 1 else "both directions") + " + vectors"
        candidates = [(key, share) for key in vector_weights for share in VECTOR_SHARES]
        trial_scores = {}
        for key, vector_share in candidates:
            parts = [translators[name]["trial"] for name in group] + [vector_weights[key]["trial"]]
            trial_scores[key, vector_share] = score_matrices(
                trial, mean_of(parts, translator_vector_shares(len(group), vector_share)))
        settings, test_scores, chosen_trial = {}, {}, {}
        for method in LINK_METHODS:
            key, vector_share = choose_on_trial(
                candidates, lambda c, method=method, scores=trial_scores: scores[c][method]["aer"])
            temperature, distortion = key
            shares = translator_vector_shares(len(group), vector_share)
            parts = [translators[name]["test"] for name in group] + [vector_weights[key]["test"]]
            test_scores[method] = score_matrices(test, mean_of(parts, shares), [method])[method]
            chosen_trial[method] = {"aer": trial_scores[key, vector_share][method]["aer"]}
            settings[method] = {"vector_share": vector_share, "temperature": temperature, "distortion": distortion}
        results[label] = {
            "parts": [*group, "vector attention"],
            "tuning": {"set": "trial (37 pairs)", "vector_shares": VECTOR_SHARES,
                       "temperatures": COMBINED_TEMPERATURES, "distortions": COMBINED_DISTORTIONS,
                       "translator_shares": "equal, (1 - vector_share) each / number of translators"},
            "methods": result_rows(chosen_trial, test_scores, settings)}
    return results


def combination_section(args, aligner, trial: GoldSplit, test: GoldSplit, trial_forced, test_forced,
                        default: Reading) -> dict:
    """Force-decode with ``--reverse-run``, load ``--vectors``, score the combinations, print a table."""
    if args.reverse_run is None and args.vectors is None:
        return {}

    def word_weights(forced, split: GoldSplit):  # a pair with an empty side: zeros, as TranslatorAligner
        return [pair.word_weights(*default) if pair is not None else np.zeros((len(t), len(s)))
                for pair, s, t in zip(forced, split.src, split.tgt)]

    forward = f"{args.run} ({'→'.join(aligner.run_languages)})"
    translators = {forward: {"trial": word_weights(trial_forced, trial), "test": word_weights(test_forced, test)}}
    combined: dict[str, dict] = {}
    if args.reverse_run is not None:
        reverse = TranslatorAligner(args.reverse_run, args.checkpoint, src_lang="en", max_tokens=args.max_tokens,
                                    num_threads=args.threads)
        if not reverse.reversed:
            raise SystemExit(f"--reverse-run {args.reverse_run} translates {'→'.join(reverse.run_languages)}; "
                             "expected fr→en")
        print(f"{args.reverse_run}: {reverse.describe()}")
        name = f"{args.reverse_run} ({'→'.join(reverse.run_languages)})"
        translators[name] = {split.name: reverse.weights_many(split.src, split.tgt, progress=True)
                             for split in (trial, test)}
        progress = reverse.translator.progress
        combined["reverse direction alone"] = {
            "parts": [name], "description": reverse.describe(),
            "training": {key: progress.get(key) for key in ("step", "epoch", "elapsed_seconds", "stop_reason")},
            "methods": result_rows(score_matrices(trial, translators[name]["trial"]),
                                   score_matrices(test, translators[name]["test"]))}
    vectors = None
    if args.vectors is not None:
        src_vectors, tgt_vectors, info = load_vector_dir(args.vectors)
        vectors = (src_vectors, tgt_vectors)
        print(f"vectors: {args.vectors} ({info.get('method', 'unknown method')}, d={src_vectors.dim})")
    combined.update(combinations(trial, test, translators, vectors))

    print()
    print("combinations (weighted geometric mean; shares and vector scoring chosen on trial), test AER by method")
    print(format_table(["combination", *LINK_METHODS],
                       [[label, *(section["methods"][method]["aer"] for method in LINK_METHODS)]
                        for label, section in combined.items()], digits=3))
    for label, section in combined.items():
        best = min(section["methods"], key=lambda method: section["methods"][method]["trial_aer"])
        section["best_method_on_trial"] = best
        section["best_test_aer"] = section["methods"][best]["aer"]
        print(f"{label}: best on trial {best}, test AER {section['best_test_aer']:.3f} "
              f"({json.dumps({k: v for k, v in section['methods'][best].items() if k not in ('f1',)})})")
    return combined


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a trained translator run (English → French, or French → English)")
    parser.add_argument("--checkpoint", default="best", help="best (default) or last")
    parser.add_argument("--reverse-run", default=None,
                        help="a fr→en translator; its attention (transposed) is combined with RUN's")
    parser.add_argument("--vectors", default=None, help="vectors from `attnmt embed` to combine with the attention")
    parser.add_argument("--max-tokens", type=int, default=4000, help="padded tokens per force-decoding call")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--section", default="translator",
                        help="the JSON section to write (default translator; e.g. translator_guided for a run "
                        "trained with data.train_links, so both stay in the file)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    require_data()
    started = time.perf_counter()
    aligner = TranslatorAligner(args.run, args.checkpoint, src_lang="en", max_tokens=args.max_tokens,
                                num_threads=args.threads)
    print(f"{args.run}: {aligner.describe()}")
    trial, test = gold_splits(lowercase=False)
    trial_forced = aligner.forced_attention(trial.src, trial.tgt, progress=True)
    decoding_started = time.perf_counter()
    test_forced = aligner.forced_attention(test.src, test.tgt, progress=True)
    decoding_seconds = time.perf_counter() - decoding_started

    grid = readings(aligner.layers, aligner.heads)
    default = grid[0]
    trial_results = {reading: score_reading(trial, trial_forced, reading) for reading in grid}
    best_reading = {method: choose_on_trial(grid, lambda reading, method=method: trial_results[reading][method]["aer"])
                    for method in LINK_METHODS}  # ties keep the first: the default reading
    default_test = score_reading(test, test_forced, default)
    position_trial = [(np.zeros((len(s), 1)), np.zeros((len(t), 1))) for s, t in zip(trial.src, trial.tgt)]
    position_test = [(np.zeros((len(s), 1)), np.zeros((len(t), 1))) for s, t in zip(test.src, test.tgt)]
    position_tuned = tune(trial, position_trial)

    rows = {}
    for method in LINK_METHODS:
        reading = best_reading[method]
        layer, head, shift = reading
        rows[method] = {
            "layer": layer, "head": "mean" if head is None else head, "shift": shift,
            "trial_aer": round(trial_results[reading][method]["aer"], 4),
            **rounded(score_reading(test, test_forced, reading, [method])[method]),
            "default_reading": rounded(default_test[method]),
            "position_only": rounded(score(test, position_test, position_tuned[method][0], [method])[method]),
        }
    best_method = min(rows, key=lambda method: rows[method]["trial_aer"])
    best_aer = rows[best_method]["aer"]
    existing = read_results(args.out)
    vector_methods = existing.get("vector", {}).get("methods", {})
    vector_best = existing.get("vector", {}).get("best_method_on_trial")

    print()
    print(f"translator attention on the Hansards test set ({len(test)} pairs); reading tuned on trial (37 pairs)")
    print(format_table(
        ["method", "reading", "trial", "AER", "precision", "recall", "F1", "default reading", "position AER",
         "AER / position"],
        [[method, describe_reading(best_reading[method]), row["trial_aer"], row["aer"], row["precision"],
          row["recall"], row["f1"], row["default_reading"]["aer"], row["position_only"]["aer"],
          row["aer"] / row["position_only"]["aer"] if row["position_only"]["aer"] else float("nan")]
         for method, row in rows.items()], digits=3))
    print(f"best on trial: {best_method} (test AER {best_aer:.3f}; target <= {TARGET_AER}: "
          f"{'met' if best_aer <= TARGET_AER else 'not met'})"
          + (f"; vector attention ({vector_best}, from the file): {vector_methods[vector_best]['aer']:.3f}"
             if vector_best in vector_methods else ""))
    print(f"force-decoding: {len(test)} pairs in {decoding_seconds:.1f} s")

    combined = combination_section(args, aligner, trial, test, trial_forced, test_forced, default)
    translator = aligner.translator
    run_config = translator.run_config.to_dict()
    training_config = run_config.get("training") or {}
    write_section(args.out, args.section, {
        "question": "AER of a trained translator's attention, read while force-decoding the gold pairs",
        "run": str(args.run),
        "checkpoint": args.checkpoint,
        "description": aligner.describe(),
        "model": dict(run_config.get("model") or {}),
        "data": {key: value for key, value in (run_config.get("data") or {}).items()
                 if key in ("src_lang", "tgt_lang", "train", "valid", "vocab_size", "joint_vocab", "max_length",
                            "train_links")},
        "alignment_guide": ({key: training_config.get(key) for key in
                             ("guide_weight", "guide_layer", "guide_head", "guide_shift")}
                            if (run_config.get("data") or {}).get("train_links") else None),
        "training": {key: (value if not isinstance(value, float) or math.isfinite(value) else None)
                     for key, value in translator.progress.items()
                     if key in ("step", "epoch", "elapsed_seconds", "best_val_loss", "best_val_bleu", "best_step",
                                "stop_reason")},
        "tuning": {"set": "trial (37 pairs)", "layers": list(range(1, aligner.layers + 1)),
                   "heads": ["mean", *range(1, aligner.heads + 1)], "shift": [False, True],
                   "criterion": "lowest trial AER per method (ties: the default reading)",
                   "default_reading": {"layer": default[0], "head": "mean", "shift": False}},
        "test_set": "HLT-NAACL 2003 English-French test (447 pairs), English = source",
        "methods": rows,
        "best_method_on_trial": best_method,
        "best_test_aer": best_aer,
        "target_aer": TARGET_AER,
        "meets_target": best_aer <= TARGET_AER,
        "vector_best_test_aer_from_file": vector_methods[vector_best]["aer"] if vector_best in vector_methods else None,
        "published_aer": PUBLISHED,
        "force_decoding_seconds_test": round(decoding_seconds, 2),
        "combinations": combined,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": f"{machine('torch')} threads {torch.get_num_threads()}",
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
