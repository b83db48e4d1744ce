"""How well do translators guided by the teacher's links align, from their own attention?

Two translators (English → French and French → English) trained with guided alignment on
eflomal's links (``data.train_links``) read the gold pairs (``TranslatorAligner``, each with its
guided reading). Scored: each direction alone with every link method; both directions' argmax
links symmetrised; their soft combination (the geometric mean) with every link method or a
threshold (alignment by agreement); with ``--confident`` also agreement plus the links one
direction alone is confident of where a word is unlinked. Everything is chosen on the 37 trial
pairs (``attnmt.alignment.protocol``); the choice is paired with the teacher (the ``teacher``
section's test links) and with the sections ``--compare`` names, on the same bootstrap redraws, and
its test errors are counted by kind. Target: test AER ≤ 0.050. Several runs of one direction
(e.g. an RNN and a Transformer) combine by their geometric mean.

Prints a table and writes the ``students`` section of ``benchmarks/results/alignment/alignment.json`` (or
the one ``--section`` names; the other sections are kept).

    python benchmarks/alignment_students.py runs/hansards-align-en-fr runs/hansards-align-fr-en
        [--section students] [--compare students_prefix6_120] [--confident]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from attnmt.alignment import (
    LINK_METHODS,
    SYMMETRIZATIONS,
    add_confident_links,
    combine_weights,
    extract_links,
    src2tgt_links,
    symmetrize,
    tgt2src_links,
    threshold_links,
)
from attnmt.alignment.protocol import (
    GoldSplit,
    chosen_on_trial,
    error_analysis,
    frequent_words,
    paired,
    scored_row,
)
from attnmt.alignment.translator_attention import TranslatorAligner
from attnmt.data.corpus import read_parallel
from attnmt.data.link_files import format_pharaoh

from common import (
    HANSARDS,
    RESULTS,
    gold_splits,
    machine,
    print_rows,
    read_results,
    require_data,
    write_section,
)

#: the issue's target for the translators' own attention
STUDENT_TARGET_AER = 0.050
#: thresholds tried on the soft combination of both directions (link where the geometric mean of
#: p(source word | target word) and p(target word | source word) reaches τ)
AGREEMENT_THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
# agreement, then the pairs one direction alone links with at least this weight where a word is
# unlinked (attnmt.alignment.add_confident_links), on the agreement thresholds that trial prefers
CONFIDENT_LINKS = {"agreement": (0.3, 0.4, 0.5, 0.6), "confident": (0.7, 0.8, 0.9, 0.95)}
DIRECTIONS = ("en→fr", "fr→en")


def parse_pharaoh(line: str) -> set[tuple[int, int]]:
    """The links of one line that ``format_pharaoh`` wrote (sure links only, ``i-j``)."""
    return {(int(i), int(j)) for i, j in (item.split("-") for item in line.split())}


def direction_weights(args, trial: GoldSplit, test: GoldSplit) -> tuple[dict, dict, dict]:
    """Per direction, its runs' word weights of every trial and test pair (several runs: their
    geometric mean, equal shares), and each run's description and training figures."""
    weights, descriptions, training = {}, {}, {}
    for name, runs in zip(DIRECTIONS, (args.runs[0::2], args.runs[1::2])):
        per_run = []
        for run in runs:
            aligner = TranslatorAligner(run, args.checkpoint, src_lang="en", max_tokens=args.max_tokens,
                                        num_threads=args.threads)
            if aligner.reversed != (name == "fr→en"):
                raise SystemExit(f"{run} translates {'→'.join(aligner.run_languages)}; expected {name}")
            print(f"{run}: {aligner.describe()}")
            descriptions[str(run)] = aligner.describe()
            progress = aligner.translator.progress
            training[str(run)] = {
                **{key: progress.get(key) for key in ("step", "elapsed_seconds", "target_tokens", "stop_reason")},
                "minutes": round(progress.get("elapsed_seconds", 0.0) / 60, 1),
                **{key: progress.get("plateau", {}).get(key) for key in ("best_step", "best_loss")}}
            per_run.append({split.name: aligner.weights_many(split.src, split.tgt, progress=True)
                            for split in (trial, test)})
        weights[name] = {split: [combine_weights(list(matrices), [1 / len(runs)] * len(runs))
                                 for matrices in zip(*(part[split] for part in per_run))]
                         for split in ("trial", "test")}
    return weights, descriptions, training


def configurations(weights: dict, confident: bool) -> dict[str, tuple[dict[str, list], dict]]:
    """Every configuration scored: name -> ({"trial": links, "test": links}, its settings)."""
    splits = ("trial", "test")
    # both directions' soft combination, sqrt(p(i | j) p(j | i)) per pair, computed once
    agreement = {split: [combine_weights([f, b], [0.5, 0.5]) for f, b in
                         zip(weights["en→fr"][split], weights["fr→en"][split])] for split in splits}
    found: dict[str, tuple[dict[str, list], dict]] = {}
    for name in DIRECTIONS:
        for method in LINK_METHODS:
            found[f"{name} alone, {method}"] = (
                {split: [extract_links(w, method) for w in weights[name][split]] for split in splits},
                {"kind": "one direction", "direction": name, "method": method})
    # each direction's own reading: every target word of the translator to its most-attended source word
    for method in SYMMETRIZATIONS:
        found[f"both, argmax links, {method}"] = (
            {split: [symmetrize(tgt2src_links(f), src2tgt_links(b), method)
                     for f, b in zip(weights["en→fr"][split], weights["fr→en"][split])] for split in splits},
            {"kind": "symmetrised links", "method": method})
    for method in LINK_METHODS:
        found[f"both, geometric mean, {method}"] = (
            {split: [extract_links(c, method) for c in agreement[split]] for split in splits},
            {"kind": "soft combination", "method": method})
    for threshold in AGREEMENT_THRESHOLDS:
        found[f"both, agreement >= {threshold:g}"] = (
            {split: [threshold_links(c, threshold) for c in agreement[split]] for split in splits},
            {"kind": "agreement threshold", "threshold": threshold})
    for threshold in CONFIDENT_LINKS["agreement"] if confident else ():
        for level in CONFIDENT_LINKS["confident"]:
            found[f"both, agreement >= {threshold:g}, + one direction >= {level:g}"] = (
                {split: [add_confident_links(threshold_links(c, threshold), f, b, level)
                         for c, f, b in zip(agreement[split], weights["en→fr"][split], weights["fr→en"][split])]
                 for split in splits},
                {"kind": "agreement and confident links", "threshold": threshold, "confident": level})
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="EN_FR_RUN FR_EN_RUN [EN_FR_RUN FR_EN_RUN ...]: translators guided by the teacher's links")
    parser.add_argument("--checkpoint", default="best", help="best (default) or last")
    parser.add_argument("--max-tokens", type=int, default=4000, help="padded tokens per force-decoding call")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--section", default="students", help="the JSON section to write")
    parser.add_argument("--compare", nargs="+", metavar="SECTION", default=None,
                        help="pair the chosen links with those of other students sections of --out, on the same "
                        "bootstrap redraws (paired_with_sections)")
    parser.add_argument("--confident", action="store_true",
                        help="also agreement plus the links one direction alone is confident of where a word is "
                        "unlinked (add_confident_links; 16 more configurations)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if len(args.runs) % 2:
        parser.error("the runs come in pairs: EN_FR_RUN FR_EN_RUN [EN_FR_RUN FR_EN_RUN ...]")
    require_data()
    started = time.perf_counter()
    trial, test = gold_splits(lowercase=False)
    earlier = read_results(args.out)
    for name in args.compare or []:  # checked before the force-decoding, not after it
        if "chosen_test_links" not in earlier.get(name, {}):
            raise SystemExit(f"--compare {name}: {args.out} has no section {name} with chosen_test_links")
    weights, descriptions, training = direction_weights(args, trial, test)

    rows: dict[str, dict] = {}
    test_links: dict[str, list] = {}  # of every row, for the error analysis of the one chosen
    for name, (links, settings) in configurations(weights, args.confident).items():
        rows[name] = scored_row(links["trial"], links["test"], trial, test, **settings)
        test_links[name] = links["test"]
    print_rows(f"the guided translators on the Hansards test set ({len(test)} pairs); choices on trial", rows)
    groups = {"en→fr alone": ("one direction", "en→fr"), "fr→en alone": ("one direction", "fr→en"),
              "symmetrised links": ("symmetrised links", None), "soft combination": ("soft combination", None),
              "agreement threshold": ("agreement threshold", None),
              **({"agreement and confident links": ("agreement and confident links", None)} if args.confident else {})}
    chosen = {label: chosen_on_trial({name: row for name, row in rows.items()
                                      if row["kind"] == kind and row.get("direction") == direction})
              for label, (kind, direction) in groups.items()}
    best = chosen_on_trial(rows)
    print(f"chosen on trial: {best}, test AER {rows[best]['aer']:.4f} (target <= {STUDENT_TARGET_AER}: "
          f"{'met' if rows[best]['aer'] <= STUDENT_TARGET_AER else 'not met'})")
    corpus = read_parallel(HANSARDS / "train.en.gz", HANSARDS / "train.fr.gz")
    errors = error_analysis(test_links[best], test, frequent_words(corpus.src), frequent_words(corpus.tgt))
    print(f"errors of the chosen configuration on test: {json.dumps(errors)}")
    teacher = earlier.get("teacher", {})
    with_teacher = None
    if "chosen_test_links" in teacher:  # both on the same redraws of the test sentences
        with_teacher = paired(test_links[best], [parse_pharaoh(line) for line in teacher["chosen_test_links"]], test)
        print(f"against the teacher, paired over 2,000 redraws of the test sentences: AER difference "
              f"{with_teacher['difference']:+.4f} (95% interval {with_teacher['low']:+.4f} to "
              f"{with_teacher['high']:+.4f}), the students better in {with_teacher['a_better']:.1%} of redraws")
    compared = {}
    for name in args.compare or []:  # other students' chosen links, on the same redraws
        other = [parse_pharaoh(line) for line in earlier[name]["chosen_test_links"]]
        compared[name] = {"test_aer": earlier[name]["test_aer"], **paired(test_links[best], other, test)}
        print(f"against {name} (test AER {earlier[name]['test_aer']:.4f}), paired: AER difference "
              f"{compared[name]['difference']:+.4f} (95% interval {compared[name]['low']:+.4f} to "
              f"{compared[name]['high']:+.4f}), this one better in {compared[name]['a_better']:.1%} of redraws")
    write_section(args.out, args.section, {
        "question": "AER of two translators guided by eflomal's links, from their own attention (no teacher "
                    "link at test time)",
        "translators": descriptions,
        "gold": {f"{split.name}_{what}": count for split in (trial, test)
                 for what, count in (("pairs", len(split)), ("sure_links", sum(map(len, split.gold.sure))))},
        "training": training,
        "rows": rows,
        "chosen_on_trial": {"overall": best, **chosen},
        "test_aer": rows[best]["aer"],
        "teacher_test_aer": teacher.get("test_aer"),
        "paired_with_teacher": with_teacher,
        "paired_with_sections": compared or None,
        "chosen_test_links": [format_pharaoh(links) for links in test_links[best]],
        "target_aer": STUDENT_TARGET_AER,
        "meets_target": rows[best]["aer"] <= STUDENT_TARGET_AER,
        "configurations_scored_on_test": len(rows),
        "aer_95_interval": {"method": "percentile bootstrap over test sentences (attnmt.alignment.aer_interval)",
                            "samples": 2000, "level": 0.95, "seed": 0},
        "errors_of_the_chosen_configuration": errors,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": f"{machine('torch')} threads {torch.get_num_threads()}",
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
