"""Does a translator's saliency or attribution align words better than its attention? AER on the
HLT-NAACL 2003 English–French gold, from one trained translator or from a pair of them.

Each gold pair is force-decoded (``attnmt.alignment.translator_attention``). The word weights come
from the attention, from each method of the saliency registry that can read the translator (the
three gradient methods, value norms and erasure; ALTI+ and rollout too for a Transformer; each
one's positive part normalised per row: ``saliency_weights``), or from both: (1 − λ) · attention
+ λ · saliency, both rows being distributions over the source words. For each source of weights
the link method, the reading (layer, head, shift; shift alone for saliency) and λ are chosen on
the 37 trial pairs only; the 447 test pairs are then scored once per source with that choice (so one test look per row).

A run trained with guided alignment (``data.train_links``) offers its guided reading too (its head,
its shift, the EOS weight kept as "unaligned"), and it is the attention the combinations use. Given
a second run, a French → English translator (the guided students of the word-alignment section),
each direction gets its rows, and the two directions together get one row per source of weights:
their geometric mean (``combine_weights``), links by a link method or by agreement ≥ τ, chosen on
trial as in ``alignment_students.py``.

    python benchmarks/alignment_saliency.py runs/hansards-rnn [--smoothgrad-samples 5] [--integrated-steps 10]
    python benchmarks/alignment_saliency.py runs/hansards-align-plustest-en-fr runs/hansards-align-plustest-fr-en \
        --section saliency_students

Prints a table and writes the ``saliency`` section of benchmarks/results/alignment/alignment.json (or the one
``--section`` names; the other sections are kept). ``--pairs N`` keeps the first N pairs of each
split (a smoke test only).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import torch
from alignment_students import AGREEMENT_THRESHOLDS, DIRECTIONS
from alignment_translator import readings

from attnmt.alignment import LINK_METHODS, combine_weights, extract_links, threshold_links
from attnmt.alignment.protocol import GoldSplit, choose_on_trial, rounded, score_links, score_matrices, scored_row
from attnmt.alignment.translator_attention import TranslatorAligner
from attnmt.attribution.methods import AttributionOptions
from attnmt.data.link_files import GoldAlignment
from attnmt.runtime.tables import format_table

from common import RESULTS, gold_splits, machine, require_data, write_section

SHARES = (0.25, 0.5, 0.75)  # λ, the saliency's share when combined with the attention
#: (layer, head or None = the mean, shift, renormalise without the source EOS)
Reading = tuple[int, int | None, bool, bool]
SALIENCY_READINGS: list[Reading] = [(1, None, False, True), (1, None, True, True)]


def word_weights(forced: list, split: GoldSplit, reading: Reading) -> list[np.ndarray]:
    """The word weights [T, S] of every pair for one reading (zeros for a pair with an empty side)."""
    return [np.zeros((len(tgt), len(src))) if pair is None else pair.word_weights(*reading)
            for pair, src, tgt in zip(forced, split.src, split.tgt)]


def mixed(attention: list[np.ndarray], saliency: list[np.ndarray], share: float) -> list[np.ndarray]:
    """(1 − λ) · attention + λ · saliency, pair by pair."""
    return [(1 - share) * a + share * s for a, s in zip(attention, saliency)]


def describe_reading(reading: Reading) -> str:
    layer, head, shift, renormalize = reading
    described = f"L{layer} {'mean' if head is None else f'h{head}'}{' shift' if shift else ''}"
    return described if renormalize else f"{described}, EOS kept (guided)"


def describe_saliency(reading: Reading) -> str:
    return "input reading (shift)" if reading[2] else "output reading"


def attention_readings(aligner: TranslatorAligner) -> list[Reading]:
    """Every reading tried; the aligner's own first (a guided run's guided reading), so ties keep it."""
    own = (aligner.layer, aligner.head, aligner.shift, aligner.renormalize)
    grid = [(layer, head, shift, True) for layer, head, shift in readings(aligner.layers, aligner.heads)]
    return [own] + [reading for reading in grid if reading != own]


def choose_and_score(trial: GoldSplit, test: GoldSplit, candidates: dict, describe) -> dict:
    """``candidates``: setting -> (trial matrices, test matrices thunk). The (setting, link method)
    with the lowest trial AER; the test scored once with it."""
    trial_scores = {setting: score_matrices(trial, matrices) for setting, (matrices, _) in candidates.items()}
    pairs = list(itertools.product(candidates, LINK_METHODS))
    setting, method = choose_on_trial(pairs, lambda choice: trial_scores[choice[0]][choice[1]]["aer"])
    test_scores = score_matrices(test, candidates[setting][1](), [method])[method]
    return {"setting": describe(setting), "method": method, "trial_aer": round(trial_scores[setting][method]["aer"], 4),
            **rounded(test_scores)}


def force_decode(run: str, args, trial: GoldSplit, test: GoldSplit) -> tuple[TranslatorAligner, dict, dict]:
    """The run's attention aligner; per source of weights ("attention", then each saliency method)
    its force-decoded (trial, test) pairs; and the seconds each source took."""
    attention = TranslatorAligner(run, args.checkpoint, src_lang="en", max_tokens=args.max_tokens)
    print(f"{run}: {attention.describe()}", file=sys.stderr)
    sources = {"attention": attention}
    settings = {"smoothgrad": {"samples": args.smoothgrad_samples}, "integrated": {"steps": args.integrated_steps}}
    for method in attention.translator.attribution_methods():  # the gradients, then the attributions that apply
        options = AttributionOptions(method, **settings.get(method, {}))
        sources[options.describe()] = TranslatorAligner(attention.translator, src_lang="en",
                                                        max_tokens=args.max_tokens, saliency=options)
    forced, seconds = {}, {}
    for name, aligner in sources.items():
        begun = time.perf_counter()
        forced[name] = (aligner.forced_attention(trial.src, trial.tgt), aligner.forced_attention(test.src, test.tgt))
        seconds[name] = round(time.perf_counter() - begun, 1)
        print(f"{name}: {seconds[name]} s for {len(trial) + len(test)} pairs", file=sys.stderr)
    return attention, forced, seconds


def direction_rows(attention: TranslatorAligner, forced: dict, trial: GoldSplit,
                   test: GoldSplit) -> tuple[dict, dict]:
    """One translator's rows: each source of weights alone (its reading chosen on trial), and the
    attention at its own reading mixed with each saliency (λ chosen on trial). Also the weights the
    pair rows take: per source, {"trial": [...], "test": [...]} at the attention's own reading
    and the saliency's output reading."""
    grid = attention_readings(attention)
    fixed = {name: {split.name: word_weights(forced[name][index], split, grid[0] if name == "attention"
                                             else SALIENCY_READINGS[0])
                    for index, split in enumerate((trial, test))} for name in forced}
    rows = {}
    for name in forced:
        trial_forced, test_forced = forced[name]
        candidates = {reading: (word_weights(trial_forced, trial, reading),
                                lambda reading=reading, test_forced=test_forced: word_weights(test_forced, test,
                                                                                              reading))
                      for reading in (grid if name == "attention" else SALIENCY_READINGS)}
        rows[name] = choose_and_score(trial, test, candidates,
                                      describe_reading if name == "attention" else describe_saliency)
    for name in list(forced)[1:]:
        candidates = {share: (mixed(fixed["attention"]["trial"], fixed[name]["trial"], share),
                              lambda share=share, name=name: mixed(fixed["attention"]["test"], fixed[name]["test"],
                                                                   share))
                      for share in SHARES}
        rows[f"attention + {name}"] = choose_and_score(trial, test, candidates, lambda share: f"λ = {share}")
    return rows, fixed


def links_of(weights: np.ndarray, linker: str | float) -> set:
    """Links by a link method (its name) or by agreement ≥ τ (a number)."""
    return threshold_links(weights, linker) if isinstance(linker, float) else extract_links(weights, linker)


def pair_rows(forward: dict, backward: dict, trial: GoldSplit, test: GoldSplit) -> dict:
    """Both directions, per source of weights: the geometric mean of the English → French and the
    (transposed) French → English weights, then links by a link method or by agreement ≥ τ; that
    choice, and λ for a mix, made on trial; the test scored once (with its 95% interval)."""

    def agreement(split: str, share: float | None, name: str) -> list[np.ndarray]:
        def weights(direction: dict) -> list[np.ndarray]:
            if share is None:
                return direction[name][split]
            return mixed(direction["attention"][split], direction[name][split], share)
        return [combine_weights([f, b], [0.5, 0.5]) for f, b in zip(weights(forward), weights(backward))]

    rows = {}
    saliencies = list(forward)[1:]
    sources = [(name, [None]) for name in forward] + [(f"attention + {name}", list(SHARES)) for name in saliencies]
    for label, shares in sources:
        name = label.removeprefix("attention + ")
        trial_weights = {share: agreement("trial", share, name) for share in shares}
        choices = list(itertools.product(shares, [*LINK_METHODS, *AGREEMENT_THRESHOLDS]))
        share, linker = choose_on_trial(choices, lambda choice, trial_weights=trial_weights: score_links(
            [links_of(w, choice[1]) for w in trial_weights[choice[0]]], trial)["aer"])
        rows[label] = scored_row([links_of(w, linker) for w in trial_weights[share]],
                                 [links_of(w, linker) for w in agreement("test", share, name)], trial, test,
                                 setting="geometric mean" if share is None else f"λ = {share}, geometric mean",
                                 method=linker if isinstance(linker, str) else f"agreement >= {linker:g}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", metavar="run",
                        help="a trained English → French translator run; optionally a French → English one after it")
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--smoothgrad-samples", type=int, default=5)
    parser.add_argument("--integrated-steps", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=None, help="only the first N pairs of each split (smoke test)")
    parser.add_argument("--max-tokens", type=int, default=2000)
    parser.add_argument("--section", default="saliency")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if len(args.runs) > 2:
        parser.error("give one English → French run, or it and a French → English run")
    require_data()
    started = time.perf_counter()
    trial, test = gold_splits(lowercase=False)
    if args.pairs is not None:
        trial, test = (GoldSplit(split.name, split.src[: args.pairs], split.tgt[: args.pairs],
                                 GoldAlignment(split.gold.sure[: args.pairs], split.gold.possible[: args.pairs]))
                       for split in (trial, test))

    rows, fixed, runs, seconds = {}, {}, {}, {}
    for direction, run in zip(DIRECTIONS, args.runs):
        attention, forced, seconds[direction] = force_decode(run, args, trial, test)
        if attention.reversed != (direction == "fr→en"):
            raise SystemExit(f"{run} translates {'→'.join(map(str, attention.run_languages))}; expected {direction}")
        direction_table, fixed[direction] = direction_rows(attention, forced, trial, test)
        prefix = f"{direction}: " if len(args.runs) == 2 else ""
        rows.update({f"{prefix}{name}": row for name, row in direction_table.items()})
        runs[str(run)] = {"direction": direction, "description": attention.describe(),
                          "training": {key: value for key, value in attention.translator.progress.items()
                                       if key in ("step", "elapsed_seconds", "stop_reason")}}
    if len(args.runs) == 2:
        rows.update({f"both: {name}": row for name, row in pair_rows(*fixed.values(), trial, test).items()})

    print()
    print(f"{len(test)} test pairs; link method and setting chosen on {len(trial)} trial pairs; one test look a row")
    print(format_table(["weights", "setting", "method", "trial AER", "AER", "precision", "recall"],
                       [[name, row["setting"], row["method"], row["trial_aer"], row["aer"], row["precision"],
                         row["recall"]] for name, row in rows.items()], digits=3))
    write_section(args.out, args.section, {
        "question": "AER of a translator's attention, its gradient saliency and both, force-decoding the gold pairs",
        "runs": runs, "checkpoint": args.checkpoint,
        "pairs": {"trial": len(trial), "test": len(test)},
        "saliency_settings": {"smoothgrad_samples": args.smoothgrad_samples,
                              "integrated_steps": args.integrated_steps},
        "tuning": "per row on trial: the link method (or agreement threshold for both directions), the reading "
                  "(layer, head, shift, the guided reading; shift for saliency), λ",
        "shares": list(SHARES), "agreement_thresholds": list(AGREEMENT_THRESHOLDS), "rows": rows,
        "seconds_per_source": seconds, "test_looks": len(rows),
        "seconds": round(time.perf_counter() - started, 1),
        "machine": f"{machine('torch')} threads {torch.get_num_threads()}",
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
