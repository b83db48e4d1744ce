"""How well does vector attention align words? AER on the HLT-NAACL 2003 English–French gold.

Question: with English and French vectors built by ``attnmt embed`` from the 220k Hansards pairs,
what alignment error rate does vector attention reach with each way of turning
weights into links, and how much do the scoring choices (cosine + temperature + distortion prior)
add over the seed's plain formula softmax(F Eᵀ/√d)?

Protocol
- Vectors: built here from ``../shared/data/hansards-en-fr`` (or loaded with ``--vectors DIR``).
  No gold link is used to build them; the training text is unsupervised.
- Tuning: the temperature τ and the distortion κ are chosen per link method on the 37-pair
  *trial* set only (grid below); the 447-pair *test* set is scored once per configuration.
- Baselines measured in the same run: the seed's formula (no tuning) and a *position-only*
  aligner (all vectors zero, so only the distortion prior speaks) with the same tuning.
- English is the source side, as in the NAACL files (``sent en_pos fr_pos``).

With ``--run RUN`` the question is the same for a trained translator's attention instead
(``attnmt.alignment.translator_attention``): each gold pair is force-decoded (teacher forcing on the given
French), the attention merged from pieces to words with EOS dropped, and the links extracted with
every method. The reading — decoder layer, head (or the mean over heads) and output/input row
(``shift``) — is chosen per method on the 37 trial pairs only; the test set is scored once per
method with that choice, and also with the default reading (penultimate layer, mean of heads,
output row) for comparison. Baseline measured in the same run: the position-only aligner (the
distortion prior alone, tuned on trial). Target: test AER ≤ 0.15. The vector section is not
recomputed then; its best test AER is quoted from the file.

Combinations (``--run`` with ``--reverse-run RUN`` and/or ``--vectors DIR``), each a separate,
labelled row set, never mixed into the single translator's numbers: the weighted geometric mean
(``attnmt.alignment.combine``) of the translator's attention with that of a translator trained the
other way round (fr → en, its weights transposed; equal shares), with vector attention (the
vector share and the vector scoring τ, κ chosen per method on trial), or with both.

With ``--teacher`` the question is eflomal's own AER (``attnmt align --eflomal``), the teacher of
the guided translators: the 220k training pairs, the 37 trial and the 447 test pairs aligned
together in both directions, as statistical aligners are used; every symmetrisation is scored, the
one with the lowest trial AER is the teacher's figure (section ``"teacher"``). With
``--eflomal-samplers``, ``--eflomal-iterations`` and/or ``--eflomal-prefix`` (lists) every
combination of eflomal's settings is run and scored on trial with every symmetrisation; only the
trial's choice and eflomal's defaults (rerun as the baseline) are scored on test, and paired
(section ``"teacher_settings"``). ``--eflomal-vote`` adds the links those runs agree on
(``attnmt.alignment.eflomal.voted_directions``: a link of each direction kept when at least V of the
runs found it, every V, every symmetrisation) to the trial's choices; the best single setting is then
also scored on test and paired with the choice.

With ``--students EN_FR_RUN FR_EN_RUN`` (two translators guided by the teacher's links) the
question is the issue's target, test AER <= 0.050 from the translators' own attention: each
direction alone (its guided reading), both directions' argmax links symmetrised, and their soft
combination (geometric mean) read with every link method or a threshold (``--confident`` adds
agreement plus one direction's confident links); everything is chosen on
the 37 trial pairs (section ``"students"``, or ``--section``). More runs in pairs (e.g. RNNs and
Transformers) combine per direction by their geometric mean.

Prints a table and writes ``benchmarks/results/alignment.json`` (the ``"vector"`` section, or the
``"translator"`` section with ``--run``, or the one ``--section`` names; the other sections already
in the file are kept). A run trained with guided alignment (``data.train_links``) records its guide
settings there (``alignment_guide``).
Run: ``.venv/bin/python benchmarks/alignment.py [--vectors DIR] [--max-lines N]``
or   ``.venv/bin/python benchmarks/alignment.py --teacher [--eflomal-samplers 3 8 --eflomal-prefix 0 5]
     [--eflomal-vote]``
or   ``.venv/bin/python benchmarks/alignment.py --students runs/hansards-align-en-fr runs/hansards-align-fr-en
     [--section students]``
or   ``.venv/bin/python benchmarks/alignment.py --run runs/hansards-rnn [--checkpoint best]
     [--reverse-run runs/hansards-rnn-fr-en] [--vectors DIR] [--section translator_guided]``
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from portable import portable  # noqa: E402

from attnmt.alignment import (  # noqa: E402
    LINK_METHODS,
    SYMMETRIZATIONS,
    VectorScoring,
    aer_interval,
    alignment_error_rate,
    extract_links,
    load_vector_dir,
    paired_bootstrap,
    read_naacl_alignments,
    save_vector_dir,
    tokenize,
    train_cross_lingual_vectors,
    vector_attention,
)
from attnmt.data.corpus import read_lines, read_parallel  # noqa: E402
from attnmt.data.link_files import format_pharaoh  # noqa: E402
from attnmt.errors import ConfigError  # noqa: E402
from attnmt.runtime.atomic_files import write_text_atomic  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
HANSARDS = DATA / "hansards-en-fr"
GOLD = DATA / "alignment-gold" / "hansards-en-fr"
RESULTS = ROOT / "benchmarks" / "results" / "alignment.json"

TEMPERATURES = (0.02, 0.05, 0.1, 0.2, 0.5)
DISTORTIONS = (0.0, 2.0, 5.0, 10.0, 20.0, 50.0)
PUBLISHED = {  # AER on this test set, for orientation (see the report for sources)
    "fast_align": "0.105-0.153",
    "static-embedding similarity aligner (SimAlign, fastText)": "0.22",
    "eflomal": "0.081",
}


def read_gold_split(split: str, lowercase: bool = True):
    """(English sentences, French sentences, gold) of a split; words lower-cased for vectors, kept
    as they are for a translator (its tokenizer learned the training text's case)."""
    split_words = tokenize if lowercase else str.split
    src = [split_words(line) for line in read_lines(GOLD / f"{split}.en-fr.en")]
    tgt = [split_words(line) for line in read_lines(GOLD / f"{split}.en-fr.fr")]
    gold = read_naacl_alignments(GOLD / f"{split}.en-fr.naacl", [len(s) for s in src], [len(t) for t in tgt])
    return src, tgt, gold


def looked_up(split, src_vectors, tgt_vectors):
    """Vectors of every sentence of a split, looked up once: [(src [S, d], tgt [T, d])]."""
    src, tgt, _ = split
    return [(src_vectors.lookup(s)[0], tgt_vectors.lookup(t)[0]) for s, t in zip(src, tgt)]


def score(split, vectors, scoring: VectorScoring, methods=LINK_METHODS) -> dict[str, dict[str, float]]:
    """AER, precision, recall, F1 of every link method under one scoring."""
    _, _, gold = split
    predicted = {method: [] for method in methods}
    for src_matrix, tgt_matrix in vectors:
        weights, _ = vector_attention(src_matrix, tgt_matrix, scoring)
        for method in methods:
            predicted[method].append(extract_links(weights, method))
    return {method: alignment_error_rate(predicted[method], gold.sure, gold.possible) for method in methods}


def tune(trial, trial_vectors) -> dict[str, tuple[VectorScoring, float]]:
    """Per method, the cosine scoring (τ, κ) with the lowest trial AER (ties: first in grid order)."""
    best: dict[str, tuple[VectorScoring, float]] = {}
    for temperature in TEMPERATURES:
        for distortion in DISTORTIONS:
            scoring = VectorScoring("cosine", temperature, distortion)
            for method, result in score(trial, trial_vectors, scoring).items():
                if method not in best or result["aer"] < best[method][1] - 1e-12:
                    best[method] = (scoring, result["aer"])
    return best


def data_checks(src_sentences, tgt_sentences, raw_training_src, test, src_vectors, tgt_vectors) -> dict:
    """Tokenization/casing agreement and overlap of the test pairs with the training text."""
    test_src, test_tgt, _ = test
    training_pairs = {(" ".join(s), " ".join(t)) for s, t in zip(src_sentences, tgt_sentences)}
    training_src = {" ".join(s) for s in src_sentences}
    pairs_in_training = sum((" ".join(s), " ".join(t)) in training_pairs for s, t in zip(test_src, test_tgt))
    src_in_training = sum(" ".join(s) in training_src for s in test_src)
    src_tokens = [token for sentence in test_src for token in sentence]
    tgt_tokens = [token for sentence in test_tgt for token in sentence]
    return {
        "test_pairs": len(test_src),
        "test_pairs_also_in_training_text": pairs_in_training,
        "test_english_sentences_in_training_text": src_in_training,
        "test_src_tokens_known": round(sum(t in src_vectors for t in src_tokens) / len(src_tokens), 4),
        "test_tgt_tokens_known": round(sum(t in tgt_vectors for t in tgt_tokens) / len(tgt_tokens), 4),
        "longest_test_pair_in_training_text": max(
            (len(s) for s, t in zip(test_src, test_tgt) if (" ".join(s), " ".join(t)) in training_pairs), default=0
        ),
        "uppercase_token_share": {"training_en": uppercase_share(raw_training_src),
                                  "test_en": uppercase_share(read_lines(GOLD / "test.en-fr.en"))},
        "note": "gold and training text share the ISI Hansards tokenization (elisions written out, e.g. "
        "'le Orateur'); both keep some capitals (sentence starts lower-cased, names capitalised), so "
        "both are lower-cased by attnmt's tokenization",
    }


def uppercase_share(lines) -> float:
    """Share of whitespace tokens that contain an upper-case letter."""
    tokens = [token for line in lines for token in line.split()]
    return round(sum(any(character.isupper() for character in token) for token in tokens) / len(tokens), 4)


def write_section(out: Path, name: str, section: dict) -> None:
    """Set ``results[name]`` in the JSON file ``out``, keeping its other sections; atomic."""
    results = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    results[name] = portable(section)
    write_text_atomic(out, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}")


def vector_main(args) -> int:
    """The vector section: build (or load) the vectors, tune on trial, score the test set."""
    started = time.perf_counter()
    corpus = read_parallel(HANSARDS / "train.en.gz", HANSARDS / "train.fr.gz")
    src_lines, tgt_lines = corpus.src[: args.max_lines], corpus.tgt[: args.max_lines]
    src_sentences = [tokenize(line) for line in src_lines]
    tgt_sentences = [tokenize(line) for line in tgt_lines]
    vector_dir = Path(args.vectors) if args.vectors else None
    if vector_dir is not None and (vector_dir / "vectors.json").is_file():
        src_vectors, tgt_vectors, info = load_vector_dir(vector_dir)
        print(f"loaded vectors from {vector_dir} ({info.get('pairs')} pairs, d={src_vectors.dim})")
    else:
        src_vectors, tgt_vectors, info = train_cross_lingual_vectors(
            src_sentences, tgt_sentences, dim=args.dim, min_count=args.min_count, seed=0, progress=True
        )
        print(f"built vectors from {len(src_sentences)} pairs in {info['seconds']:.0f} s")
        if vector_dir is not None:
            save_vector_dir(vector_dir, src_vectors, tgt_vectors, info)
            print(f"saved them to {vector_dir}")

    trial, test = read_gold_split("trial"), read_gold_split("test")
    checks = data_checks(src_sentences, tgt_sentences, src_lines, test, src_vectors, tgt_vectors)
    trial_vectors = looked_up(trial, src_vectors, tgt_vectors)
    test_vectors = looked_up(test, src_vectors, tgt_vectors)
    zero_trial = [(np.zeros_like(s), np.zeros_like(t)) for s, t in trial_vectors]
    zero_test = [(np.zeros_like(s), np.zeros_like(t)) for s, t in test_vectors]

    seed_scoring = VectorScoring.scaled_dot()
    seed_test = score(test, test_vectors, seed_scoring)
    tuned = tune(trial, trial_vectors)
    position_tuned = tune(trial, zero_trial)
    rows = {}
    for method in LINK_METHODS:
        scoring, trial_aer = tuned[method]
        position_scoring, _ = position_tuned[method]
        test_result = score(test, test_vectors, scoring, [method])[method]
        position_result = score(test, zero_test, position_scoring, [method])[method]
        rows[method] = {
            "temperature": scoring.temperature,
            "distortion": scoring.distortion,
            "trial_aer": round(trial_aer, 4),
            **{key: round(value, 4) for key, value in test_result.items()},
            "seed_formula": {key: round(value, 4) for key, value in seed_test[method].items()},
            "position_only": {key: round(value, 4) for key, value in position_result.items()},
        }
    best_method = min(rows, key=lambda method: rows[method]["trial_aer"])

    print()
    print(f"vector attention on the Hansards test set ({checks['test_pairs']} pairs); tuned on trial (37 pairs)")
    header = (f"{'method':<16} {'τ':>5} {'κ':>5} {'trial':>6} | {'AER':>6} {'prec':>6} {'recall':>6} {'F1':>6} | "
              f"{'seed AER':>8} {'pos AER':>8} {'AER/seed':>8}")
    print(header)
    print("-" * len(header))
    for method, row in rows.items():
        ratio = row["aer"] / row["seed_formula"]["aer"] if row["seed_formula"]["aer"] else float("nan")
        print(f"{method:<16} {row['temperature']:>5g} {row['distortion']:>5g} {row['trial_aer']:>6.3f} | "
              f"{row['aer']:>6.3f} {row['precision']:>6.3f} {row['recall']:>6.3f} {row['f1']:>6.3f} | "
              f"{row['seed_formula']['aer']:>8.3f} {row['position_only']['aer']:>8.3f} {ratio:>8.2f}")
    print(f"best on trial: {best_method} (test AER {rows[best_method]['aer']:.3f}); published: "
          + "; ".join(f"{name} {value}" for name, value in PUBLISHED.items()))
    print(f"data: {json.dumps(checks)}")

    write_section(Path(args.out), "vector", {
        "question": "AER of vector attention with vectors from `attnmt embed` on the Hansards",
        "embedding": {
            **{key: value for key, value in info.items()
               if key not in ("src_corpus", "tgt_corpus", "singular_values", "src_file", "tgt_file")},
            "largest_singular_values": info.get("singular_values", [])[:10],
        },
        "tuning": {"set": "trial (37 pairs)", "temperatures": TEMPERATURES, "distortions": DISTORTIONS,
                   "criterion": "lowest trial AER per method"},
        "test_set": "HLT-NAACL 2003 English-French test (447 pairs), English = source",
        "methods": rows,
        "best_method_on_trial": best_method,
        "data_checks": checks,
        "published_aer": PUBLISHED,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": f"{platform.machine()} {platform.python_version()} numpy {np.__version__}",
    })
    return 0


# ---- translator attention ------------------------------------------------------------------------

TARGET_AER = 0.15
VECTOR_SHARES = (0.3, 0.4, 0.5, 0.6, 0.7)
COMBINED_TEMPERATURES = (0.05, 0.1, 0.2)
COMBINED_DISTORTIONS = (0.0, 5.0, 10.0)


def readings(layers: int, heads: int) -> list[tuple[int, int | None, bool]]:
    """Every (layer, head or None = mean, shift) to try; the default reading first, so ties keep it."""
    from attnmt.models.common import default_layer

    default = (default_layer(layers), None, False)
    grid = [(layer, head, shift) for layer in range(1, layers + 1) for head in [None, *range(1, heads + 1)]
            for shift in (False, True)]
    return [default] + [reading for reading in grid if reading != default]


def score_reading(split, forced, reading, methods=LINK_METHODS) -> dict[str, dict[str, float]]:
    """AER, precision, recall, F1 of every link method for one reading of the force-decoded pairs."""
    return score_matrices(split, [pair.word_weights(*reading) for pair in forced], methods)


def describe_reading(reading) -> str:
    layer, head, shift = reading
    return f"L{layer} {'mean' if head is None else f'h{head}'}{' shift' if shift else ''}"


def score_matrices(split, matrices, methods=LINK_METHODS) -> dict[str, dict[str, float]]:
    """AER, precision, recall, F1 of every link method for given word weights (one matrix per pair)."""
    _, _, gold = split
    return {method: alignment_error_rate([extract_links(matrix, method) for matrix in matrices], gold.sure,
                                         gold.possible)
            for method in methods}


def result_rows(trial_results, test_results, settings=None) -> dict:
    """Per link method: its settings (if any), the trial AER and the test scores, rounded to 4 places."""
    return {method: {**(settings or {}).get(method, {}), "trial_aer": round(trial_results[method]["aer"], 4),
                     **{key: round(value, 4) for key, value in test_results[method].items()}}
            for method in LINK_METHODS}


def combinations(trial, test, translators: dict[str, dict], vectors) -> dict[str, dict]:
    """The geometric-mean combinations of the translators' default readings and vector attention.

    translators: name -> {"trial": [W], "test": [W]} (alignment orientation); vectors: a
    (src WordVectors, tgt WordVectors) pair or None. Shares: translators equal; with vectors, the
    vector share and the scoring (τ, κ) are chosen per method on trial from the grid above.
    """
    from attnmt.alignment import VectorAligner, combine_weights, translator_vector_shares

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
                split_name: [aligner(s, t) for s, t in zip(split[0], split[1])]
                for split_name, split in (("trial", trial), ("test", test))}
    groups = [[names[0]]] + ([names] if len(names) == 2 else [])
    for group in groups:
        label = ("translator" if len(group) == 1 else "both directions") + " + vectors"
        best: dict[str, tuple[float, tuple]] = {}
        for key, weights in vector_weights.items():
            for vector_share in VECTOR_SHARES:
                shares = translator_vector_shares(len(group), vector_share)
                parts = [translators[name]["trial"] for name in group] + [weights["trial"]]
                for method, result in score_matrices(trial, mean_of(parts, shares)).items():
                    if method not in best or result["aer"] < best[method][0] - 1e-12:
                        best[method] = (result["aer"], (*key, vector_share))
        settings, test_scores, trial_scores = {}, {}, {}
        for method, (trial_aer, (temperature, distortion, vector_share)) in best.items():
            shares = translator_vector_shares(len(group), vector_share)
            parts = [translators[name]["test"] for name in group] + [vector_weights[temperature, distortion]["test"]]
            test_scores[method] = score_matrices(test, mean_of(parts, shares), [method])[method]
            trial_scores[method] = {"aer": trial_aer}
            settings[method] = {"vector_share": vector_share, "temperature": temperature, "distortion": distortion}
        results[label] = {
            "parts": [*group, "vector attention"],
            "tuning": {"set": "trial (37 pairs)", "vector_shares": VECTOR_SHARES,
                       "temperatures": COMBINED_TEMPERATURES, "distortions": COMBINED_DISTORTIONS,
                       "translator_shares": "equal, (1 - vector_share) each / number of translators"},
            "methods": result_rows(trial_scores, test_scores, settings)}
    return results


def translator_main(args) -> int:
    """The translator section: force-decode trial and test, tune the reading on trial, score test."""
    import math

    import torch

    from attnmt.alignment.translator_attention import TranslatorAligner

    started = time.perf_counter()
    aligner = TranslatorAligner(args.run, args.checkpoint, src_lang="en", max_tokens=args.max_tokens,
                                num_threads=args.threads)
    print(f"{args.run}: {aligner.describe()}")
    trial, test = read_gold_split("trial", lowercase=False), read_gold_split("test", lowercase=False)
    trial_forced = aligner.forced_attention(trial[0], trial[1], progress=True)
    decoding_started = time.perf_counter()
    test_forced = aligner.forced_attention(test[0], test[1], progress=True)
    decoding_seconds = time.perf_counter() - decoding_started

    grid = readings(aligner.layers, aligner.heads)
    default = grid[0]
    trial_results = {reading: score_reading(trial, trial_forced, reading) for reading in grid}
    best_reading = {method: min(grid, key=lambda reading: trial_results[reading][method]["aer"])
                    for method in LINK_METHODS}  # min keeps the first of equal values: the default
    default_test = score_reading(test, test_forced, default)
    position_trial = [(np.zeros((len(s), 1)), np.zeros((len(t), 1))) for s, t in zip(trial[0], trial[1])]
    position_test = [(np.zeros((len(s), 1)), np.zeros((len(t), 1))) for s, t in zip(test[0], test[1])]
    position_tuned = tune(trial, position_trial)

    rows = {}
    for method in LINK_METHODS:
        reading = best_reading[method]
        layer, head, shift = reading
        result = score_reading(test, test_forced, reading, [method])[method]
        position = score(test, position_test, position_tuned[method][0], [method])[method]
        rows[method] = {
            "layer": layer, "head": "mean" if head is None else head, "shift": shift,
            "trial_aer": round(trial_results[reading][method]["aer"], 4),
            **{key: round(value, 4) for key, value in result.items()},
            "default_reading": {key: round(value, 4) for key, value in default_test[method].items()},
            "position_only": {key: round(value, 4) for key, value in position.items()},
        }
    best_method = min(rows, key=lambda method: rows[method]["trial_aer"])
    best_aer = rows[best_method]["aer"]
    out = Path(args.out)
    existing = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    vector_methods = existing.get("vector", {}).get("methods", {})
    vector_best = existing.get("vector", {}).get("best_method_on_trial")

    print()
    print(f"translator attention on the Hansards test set ({len(test[0])} pairs); reading tuned on trial (37 pairs)")
    header = (f"{'method':<16} {'reading':<14} {'trial':>6} | {'AER':>6} {'prec':>6} {'recall':>6} {'F1':>6} | "
              f"{'default':>7} {'pos AER':>7} {'AER/pos':>7}")
    print(header)
    print("-" * len(header))
    for method, row in rows.items():
        ratio = row["aer"] / row["position_only"]["aer"] if row["position_only"]["aer"] else float("nan")
        print(f"{method:<16} {describe_reading(best_reading[method]):<14} {row['trial_aer']:>6.3f} | "
              f"{row['aer']:>6.3f} {row['precision']:>6.3f} {row['recall']:>6.3f} {row['f1']:>6.3f} | "
              f"{row['default_reading']['aer']:>7.3f} {row['position_only']['aer']:>7.3f} {ratio:>7.2f}")
    print(f"best on trial: {best_method} (test AER {best_aer:.3f}; target <= {TARGET_AER}: "
          f"{'met' if best_aer <= TARGET_AER else 'not met'})"
          + (f"; vector attention ({vector_best}, from the file): {vector_methods[vector_best]['aer']:.3f}"
             if vector_best in vector_methods else ""))
    print(f"force-decoding: {len(test[0])} pairs in {decoding_seconds:.1f} s")

    combined = combination_section(args, aligner, trial, test, trial_forced, test_forced, default)

    translator = aligner.translator
    progress = translator.progress
    training_config = translator.run_config.to_dict().get("training") or {}
    write_section(out, args.section or "translator", {
        "question": "AER of a trained translator's attention, read while force-decoding the gold pairs",
        "run": str(args.run),
        "checkpoint": args.checkpoint,
        "description": aligner.describe(),
        "model": dict(translator.run_config.to_dict().get("model") or {}),
        "data": {key: value for key, value in (translator.run_config.to_dict().get("data") or {}).items()
                 if key in ("src_lang", "tgt_lang", "train", "valid", "vocab_size", "joint_vocab", "max_length",
                            "train_links")},
        "alignment_guide": ({key: training_config.get(key) for key in
                             ("guide_weight", "guide_layer", "guide_head", "guide_shift")}
                            if (translator.run_config.to_dict().get("data") or {}).get("train_links") else None),
        "training": {key: (value if not isinstance(value, float) or math.isfinite(value) else None)
                     for key, value in progress.items()
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
        "machine": f"{platform.machine()} {platform.python_version()} numpy {np.__version__} torch "
                   f"{torch.__version__} threads {torch.get_num_threads()}",
    })
    return 0


def combination_section(args, aligner, trial, test, trial_forced, test_forced, default) -> dict:
    """Force-decode with ``--reverse-run``, load ``--vectors``, score the combinations, print a table."""
    from attnmt.alignment.translator_attention import TranslatorAligner

    if args.reverse_run is None and args.vectors is None:
        return {}
    layer, head, shift = default

    def word_weights(forced, split):  # a pair with an empty side: zeros, as TranslatorAligner.weights_many
        return [pair.word_weights(layer, head, shift) if pair is not None else np.zeros((len(t), len(s)))
                for pair, s, t in zip(forced, split[0], split[1])]

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
        translators[name] = {split_name: reverse.weights_many(split[0], split[1], progress=True)
                             for split_name, split in (("trial", trial), ("test", test))}
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
    header = f"{'combination':<34} " + " ".join(f"{method:>9}" for method in LINK_METHODS)
    print(header)
    print("-" * len(header))
    for label, section in combined.items():
        print(f"{label:<34} " + " ".join(f"{section['methods'][method]['aer']:>9.3f}" for method in LINK_METHODS))
    for label, section in combined.items():
        best = min(section["methods"], key=lambda method: section["methods"][method]["trial_aer"])
        section["best_method_on_trial"] = best
        section["best_test_aer"] = section["methods"][best]["aer"]
        print(f"{label}: best on trial {best}, test AER {section['best_test_aer']:.3f} "
              f"({json.dumps({k: v for k, v in section['methods'][best].items() if k not in ('f1',)})})")
    return combined


# ---- the teacher (eflomal) and its students (two guided translators) -----------------------------

#: the issue's target for the translators' own attention
STUDENT_TARGET_AER = 0.050
#: thresholds tried on the soft combination of both directions (link where the geometric mean of
#: p(source word | target word) and p(target word | source word) reaches τ)
AGREEMENT_THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
# agreement, then the pairs one direction alone links with at least this weight where a word is
# unlinked (attnmt.alignment.add_confident_links), on the agreement thresholds that trial prefers
CONFIDENT_LINKS = {"agreement": (0.3, 0.4, 0.5, 0.6), "confident": (0.7, 0.8, 0.9, 0.95)}


def scored_row(trial_links, test_links, trial, test, **settings) -> dict:
    """Settings, trial AER and the test AER, precision, recall and F1 of one configuration, with the
    95% bootstrap interval of the test AER (test sentences redrawn 2,000 times, seed 0)."""
    trial_result = alignment_error_rate(trial_links, trial[2].sure, trial[2].possible)
    test_result = alignment_error_rate(test_links, test[2].sure, test[2].possible)
    interval = aer_interval(test_links, test[2].sure, test[2].possible)
    return {**settings, "trial_aer": round(trial_result["aer"], 4),
            **{key: round(value, 4) for key, value in test_result.items()},
            "aer_95_interval": [round(bound, 4) for bound in interval]}


def parse_pharaoh(line: str) -> set[tuple[int, int]]:
    """The links of one line that ``format_pharaoh`` wrote (sure links only, ``i-j``)."""
    return {(int(i), int(j)) for i, j in (item.split("-") for item in line.split())}


def chosen_on_trial(rows: dict[str, dict]) -> str:
    """The row with the lowest trial AER (ties: the first)."""
    return min(rows, key=lambda name: rows[name]["trial_aer"])


def print_rows(title: str, rows: dict[str, dict]) -> None:
    print()
    print(title)
    header = f"{'configuration':<40} {'trial':>6} | {'AER':>6} {'95% interval':>13} {'prec':>6} {'recall':>6}"
    print(header)
    print("-" * len(header))
    for name, row in rows.items():
        low, high = row["aer_95_interval"]
        print(f"{name:<40} {row['trial_aer']:>6.3f} | {row['aer']:>6.3f} {low:>6.3f}-{high:<6.3f} "
              f"{row['precision']:>6.3f} {row['recall']:>6.3f}")


def teacher_inputs():
    """The trial and test gold splits (words keep their case) and the training pairs as word lists:
    what eflomal aligns together as the teacher."""
    corpus = read_parallel(HANSARDS / "train.en.gz", HANSARDS / "train.fr.gz")
    trial, test = read_gold_split("trial", lowercase=False), read_gold_split("test", lowercase=False)
    return trial, test, ([line.split() for line in corpus.src], [line.split() for line in corpus.tgt])


def teacher_main(args) -> int:
    """eflomal over training + trial + test pairs, every symmetrisation scored, one chosen on trial."""
    from attnmt.alignment.eflomal import EFLOMAL_METHODS, directional_links, eflomal_directions

    started = time.perf_counter()
    trial, test, training = teacher_inputs()
    forward, backward = eflomal_directions(trial[0] + test[0], trial[1] + test[1], also=training, quiet=False)
    seconds = time.perf_counter() - started
    cut = len(trial[0])
    rows, test_links = {}, {}
    for method in EFLOMAL_METHODS:
        links = [directional_links(f, b, method) for f, b in zip(forward, backward)]
        rows[method] = scored_row(links[:cut], links[cut:], trial, test)
        test_links[method] = links[cut:]
    best = chosen_on_trial(rows)
    print_rows(f"eflomal on the Hansards test set ({len(test[0])} pairs), aligned with the {len(training[0])} "
               "training and the trial pairs", rows)
    print(f"chosen on trial: {best}, test AER {rows[best]['aer']:.4f}")
    write_section(Path(args.out), "teacher", {
        "question": "AER of eflomal, the guided translators' teacher (`attnmt align --eflomal`)",
        "aligner": "eflomal (Östling & Tiedemann, 2016), default settings, both directions",
        "aligned_together": {"training_pairs": len(training[0]), "trial_pairs": cut, "test_pairs": len(test[0])},
        "words": "split on spaces and lower-cased",
        "methods": rows,
        "chosen_on_trial": best,
        "test_aer": rows[best]["aer"],
        "configurations_scored_on_test": len(rows),
        "note": "eflomal samples without a seed: a second run differs slightly",
        "chosen_test_links": [format_pharaoh(links) for links in test_links[best]],
        "seconds": round(seconds, 1),
        "machine": f"{platform.machine()} {platform.python_version()} eflomal {_version('eflomal')}",
    })
    return 0


def teacher_settings_main(args) -> int:
    """eflomal sampled otherwise: every combination of --eflomal-samplers/-iterations/-prefix and every
    symmetrisation scored on trial; the trial's choice and eflomal's defaults (the baseline, in the
    same run, since eflomal is unseeded) scored on test and paired. With --eflomal-vote also the vote
    of all the settings' runs (attnmt.alignment.eflomal.voted_directions), at every number of votes;
    then the best single setting is scored on test too, and paired with the choice."""
    from attnmt.alignment.eflomal import (
        EFLOMAL_METHODS,
        EflomalSettings,
        directional_links,
        eflomal_directions,
        voted_directions,
    )

    started = time.perf_counter()
    default = EflomalSettings()
    try:  # out-of-range settings fail before the corpus is read
        grid = [EflomalSettings(samplers=samplers, iterations=iterations, prefix=prefix)
                for samplers in args.eflomal_samplers or [default.samplers]
                for iterations in args.eflomal_iterations or [default.iterations]
                for prefix in args.eflomal_prefix or [default.prefix]]
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    trial, test, training = teacher_inputs()
    cut = len(trial[0])
    grid = [default] + [settings for settings in dict.fromkeys(grid) if settings != default]
    rows, all_links, seconds, runs = {}, {}, {}, []

    def add_rows(forward, backward, prefix_name: str, **fields) -> None:
        for method in EFLOMAL_METHODS:
            links = [directional_links(f, b, method) for f, b in zip(forward, backward)]
            trial_aer = alignment_error_rate(links[:cut], trial[2].sure, trial[2].possible)["aer"]
            rows[f"{prefix_name}, {method}"] = {**fields, "method": method, "trial_aer": round(trial_aer, 4)}
            all_links[f"{prefix_name}, {method}"] = links

    for number, settings in enumerate(grid, 1):
        began = time.perf_counter()
        forward, backward = eflomal_directions(trial[0] + test[0], trial[1] + test[1], also=training,
                                               settings=settings)
        seconds[settings.describe()] = round(time.perf_counter() - began, 1)
        runs.append((forward, backward))
        add_rows(forward, backward, settings.describe(), samplers=settings.samplers, iterations=settings.iterations,
                 prefix=settings.prefix)
        best_here = chosen_on_trial(rows_of(rows, settings))
        print(f"[{number}/{len(grid)}] {settings.describe()}: {seconds[settings.describe()]:.0f} s, best on trial "
              f"{rows[best_here]['method']} {rows[best_here]['trial_aer']:.4f}", flush=True)
    single = chosen_on_trial(rows)
    if args.eflomal_vote:
        for votes in range(1, len(grid) + 1):
            add_rows(*voted_directions(runs, votes), f"vote of the {len(grid)} runs, links >= {votes} of them found",
                     runs=[settings.describe() for settings in grid], votes=votes)
    best = chosen_on_trial(rows)
    baseline = chosen_on_trial(rows_of(rows, default))
    tested = list(dict.fromkeys([best, baseline, *([single] if args.eflomal_vote else [])]))
    for name in tested:  # the only rows scored on test
        rows[name] = {**rows[name], **scored_row(all_links[name][:cut], all_links[name][cut:], trial, test)}
    test_links = {name: links[cut:] for name, links in all_links.items()}
    print()
    print(f"eflomal's settings, every symmetrisation on the {cut} trial pairs; test only for the trial's choice, "
          f"eflomal's defaults{' and the best single setting' if args.eflomal_vote else ''}")
    header = f"{'configuration':<72} {'trial':>6} | {'test AER':>8} {'prec':>6} {'recall':>6}"
    print(header)
    print("-" * len(header))
    for name, row in rows.items():
        scored = (f"{row['aer']:>8.4f} {row['precision']:>6.3f} {row['recall']:>6.3f}" if "aer" in row else "")
        print(f"{name:<72} {row['trial_aer']:>6.4f} | {scored}")

    def paired_with(other: str) -> dict | None:
        if best == other:
            return None
        paired = {key: round(value, 4) for key, value in
                  paired_bootstrap(test_links[best], test_links[other], test[2].sure, test[2].possible).items()}
        print(f"chosen on trial: {best}, test AER {rows[best]['aer']:.4f}; against {other} {rows[other]['aer']:.4f}: "
              f"paired difference {paired['difference']:+.4f} (95% interval {paired['low']:+.4f} to "
              f"{paired['high']:+.4f}), the choice better in {paired['a_better']:.1%} of redraws")
        return paired

    print(f"chosen on trial: {best}, test AER {rows[best]['aer']:.4f}")
    paired = paired_with(baseline)
    vote_fields = {}
    if args.eflomal_vote:
        vote_fields = {"best_single_setting": single, "best_single_setting_test_aer": rows[single]["aer"],
                       "paired_with_best_single_setting": paired_with(single)}
    write_section(Path(args.out), args.section or "teacher_settings", {
        "question": ("Do the links that several eflomal runs agree on (a vote over the settings' runs) make a "
                     "better teacher than any one run?" if args.eflomal_vote else
                     "Does eflomal, the students' teacher, align better when it samples otherwise (more samplers, "
                     "more iterations, words cut to a prefix)?"),
        "aligner": "eflomal (Östling & Tiedemann, 2016), both directions, EflomalSettings per row"
                   + ("; vote rows: attnmt.alignment.eflomal.voted_directions over the runs" if args.eflomal_vote
                      else ""),
        "aligned_together": {"training_pairs": len(training[0]), "trial_pairs": cut, "test_pairs": len(test[0])},
        "words": "split on spaces and lower-cased",
        "rows": rows,
        "chosen_on_trial": best,
        "baseline": baseline,
        "test_aer": rows[best]["aer"],
        "baseline_test_aer": rows[baseline]["aer"],
        "paired_with_baseline": paired,
        **vote_fields,
        "configurations_scored_on_test": len(tested),
        "note": "eflomal samples without a seed: a second run of the same settings gives other links and "
                "other trial AERs, so compare settings within one run",
        "chosen_test_links": [format_pharaoh(links) for links in test_links[best]],
        "seconds_per_setting": seconds,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": f"{platform.machine()} {platform.python_version()} eflomal {_version('eflomal')}",
    })
    return 0


def rows_of(rows: dict[str, dict], settings) -> dict[str, dict]:
    """The rows of one EflomalSettings (every symmetrisation; vote rows belong to no one setting)."""
    return {name: row for name, row in rows.items()
            if (row.get("samplers"), row.get("iterations"), row.get("prefix")) == (settings.samplers,
                                                                                   settings.iterations,
                                                                                   settings.prefix)}


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def error_analysis(links, split, frequent_src: set[str], frequent_tgt: set[str]) -> dict:
    """Where one configuration's test errors lie.

    Wrong links (predicted, not even possible in the gold) split by whether a word of the link has
    no gold link at all (it should have stayed unaligned) or has gold links elsewhere (a wrong
    partner); missed sure links split by whether a word of the link has several sure links in the
    gold (many-to-one, a phrase) or one (one-to-one). Each also counts the links that touch a
    frequent word (the 100 most frequent words of its side of the training text, mostly function
    words).
    """
    src_sentences, tgt_sentences, gold = split
    counts = {"wrong_links": 0, "wrong_word_unaligned_in_gold": 0, "wrong_partner": 0, "wrong_frequent_word": 0,
              "missed_sure_links": 0, "missed_many_to_one": 0, "missed_one_to_one": 0, "missed_frequent_word": 0,
              "predicted_links": 0, "sure_links": 0}
    for predicted, sure, possible, src, tgt in zip(links, gold.sure, gold.possible, src_sentences, tgt_sentences):
        linked_src = {i for i, _ in possible}
        linked_tgt = {j for _, j in possible}
        sure_per_src: dict[int, int] = {}
        sure_per_tgt: dict[int, int] = {}
        for i, j in sure:
            sure_per_src[i] = sure_per_src.get(i, 0) + 1
            sure_per_tgt[j] = sure_per_tgt.get(j, 0) + 1
        counts["predicted_links"] += len(predicted)
        counts["sure_links"] += len(sure)
        for i, j in predicted - possible:
            counts["wrong_links"] += 1
            unaligned = i not in linked_src or j not in linked_tgt
            counts["wrong_word_unaligned_in_gold" if unaligned else "wrong_partner"] += 1
            counts["wrong_frequent_word"] += src[i].lower() in frequent_src or tgt[j].lower() in frequent_tgt
        for i, j in sure - predicted:
            counts["missed_sure_links"] += 1
            many = sure_per_src[i] > 1 or sure_per_tgt[j] > 1
            counts["missed_many_to_one" if many else "missed_one_to_one"] += 1
            counts["missed_frequent_word"] += src[i].lower() in frequent_src or tgt[j].lower() in frequent_tgt
    return counts


def frequent_words(lines, count: int = 100) -> set[str]:
    """The ``count`` most frequent lower-cased words of some text."""
    from collections import Counter

    return {word for word, _ in Counter(word.lower() for line in lines for word in line.split()).most_common(count)}


def students_main(args) -> int:
    """Both guided directions alone, symmetrised by links, and combined softly; chosen on trial."""
    import torch

    from attnmt.alignment import (
        add_confident_links,
        combine_weights,
        src2tgt_links,
        symmetrize,
        tgt2src_links,
        threshold_links,
    )
    from attnmt.alignment.translator_attention import TranslatorAligner

    started = time.perf_counter()
    trial, test = read_gold_split("trial", lowercase=False), read_gold_split("test", lowercase=False)
    if len(args.students) % 2:
        raise SystemExit("--students takes runs in pairs: EN_FR_RUN FR_EN_RUN [EN_FR_RUN FR_EN_RUN ...]")
    earlier = json.loads(Path(args.out).read_text(encoding="utf-8")) if Path(args.out).is_file() else {}
    for name in args.compare or []:  # checked before the force-decoding, not after it
        if "chosen_test_links" not in earlier.get(name, {}):
            raise SystemExit(f"--compare {name}: {args.out} has no section {name} with chosen_test_links")
    weights, descriptions, training = {}, {}, {}
    for name, runs in (("en→fr", args.students[0::2]), ("fr→en", args.students[1::2])):
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
            per_run.append({split_name: aligner.weights_many(split[0], split[1], progress=True)
                            for split_name, split in (("trial", trial), ("test", test))})
        # several translators of one direction: their geometric mean, equal shares
        weights[name] = {split_name: [combine_weights(list(matrices), [1 / len(runs)] * len(runs))
                                      for matrices in zip(*(part[split_name] for part in per_run))]
                         for split_name in ("trial", "test")}

    def links_of(make):
        return {split_name: [make(f, b) for f, b in zip(weights["en→fr"][split_name], weights["fr→en"][split_name])]
                for split_name in ("trial", "test")}

    # both directions' soft combination, sqrt(p(i | j) p(j | i)) per pair, computed once
    agreement = {split_name: [combine_weights([f, b], [0.5, 0.5]) for f, b in
                              zip(weights["en→fr"][split_name], weights["fr→en"][split_name])]
                 for split_name in ("trial", "test")}

    rows: dict[str, dict] = {}
    test_links: dict[str, list] = {}  # of every row, for the error analysis of the one chosen

    def add(name: str, made: dict[str, list], **settings) -> None:
        rows[name] = scored_row(made["trial"], made["test"], trial, test, **settings)
        test_links[name] = made["test"]

    for name in ("en→fr", "fr→en"):
        for method in LINK_METHODS:
            add(f"{name} alone, {method}", {split_name: [extract_links(w, method) for w in weights[name][split_name]]
                                            for split_name in ("trial", "test")},
                kind="one direction", direction=name, method=method)
    # each direction's own reading: every target word of the translator to its most-attended source word
    for method in SYMMETRIZATIONS:
        add(f"both, argmax links, {method}",
            links_of(lambda f, b, method=method: symmetrize(tgt2src_links(f), src2tgt_links(b), method)),
            kind="symmetrised links", method=method)
    for method in LINK_METHODS:
        add(f"both, geometric mean, {method}",
            {split_name: [extract_links(c, method) for c in agreement[split_name]] for split_name in ("trial", "test")},
            kind="soft combination", method=method)
    for threshold in AGREEMENT_THRESHOLDS:
        add(f"both, agreement >= {threshold:g}",
            {split_name: [threshold_links(c, threshold) for c in agreement[split_name]]
             for split_name in ("trial", "test")},
            kind="agreement threshold", threshold=threshold)
    for threshold in CONFIDENT_LINKS["agreement"] if args.confident else ():
        for confident in CONFIDENT_LINKS["confident"]:
            add(f"both, agreement >= {threshold:g}, + one direction >= {confident:g}",
                {split_name: [add_confident_links(threshold_links(c, threshold), f, b, confident)
                              for c, f, b in zip(agreement[split_name], weights["en→fr"][split_name],
                                                 weights["fr→en"][split_name])]
                 for split_name in ("trial", "test")},
                kind="agreement and confident links", threshold=threshold, confident=confident)
    print_rows(f"the guided translators on the Hansards test set ({len(test[0])} pairs); choices on trial", rows)
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
    frequent_src, frequent_tgt = frequent_words(corpus.src), frequent_words(corpus.tgt)
    errors = error_analysis(test_links[best], test, frequent_src, frequent_tgt)
    print(f"errors of the chosen configuration on test: {json.dumps(errors)}")
    teacher = earlier.get("teacher", {})
    paired = None
    if "chosen_test_links" in teacher:  # both on the same redraws of the test sentences
        teacher_links = [parse_pharaoh(line) for line in teacher["chosen_test_links"]]
        paired = {key: round(value, 4) for key, value in
                  paired_bootstrap(test_links[best], teacher_links, test[2].sure, test[2].possible).items()}
        print(f"against the teacher, paired over 2,000 redraws of the test sentences: AER difference "
              f"{paired['difference']:+.4f} (95% interval {paired['low']:+.4f} to {paired['high']:+.4f}), "
              f"the students better in {paired['a_better']:.1%} of redraws")
    compared = {}
    for name in args.compare or []:  # other students' chosen links, on the same redraws
        other = [parse_pharaoh(line) for line in earlier[name]["chosen_test_links"]]
        compared[name] = {"test_aer": earlier[name]["test_aer"], **{
            key: round(value, 4) for key, value in
            paired_bootstrap(test_links[best], other, test[2].sure, test[2].possible).items()}}
        print(f"against {name} (test AER {earlier[name]['test_aer']:.4f}), paired: AER difference "
              f"{compared[name]['difference']:+.4f} (95% interval {compared[name]['low']:+.4f} to "
              f"{compared[name]['high']:+.4f}), this one better in {compared[name]['a_better']:.1%} of redraws")
    write_section(Path(args.out), args.section or "students", {
        "question": "AER of two translators guided by eflomal's links, from their own attention (no teacher "
                    "link at test time)",
        "translators": descriptions,
        "gold": {f"{name}_{what}": count for name, split in (("trial", trial), ("test", test))
                 for what, count in (("pairs", len(split[0])), ("sure_links", sum(map(len, split[2].sure))))},
        "training": training,
        "rows": rows,
        "chosen_on_trial": {"overall": best, **chosen},
        "test_aer": rows[best]["aer"],
        "teacher_test_aer": teacher.get("test_aer"),
        "paired_with_teacher": paired,
        "paired_with_sections": compared or None,
        "chosen_test_links": [format_pharaoh(links) for links in test_links[best]],
        "target_aer": STUDENT_TARGET_AER,
        "meets_target": rows[best]["aer"] <= STUDENT_TARGET_AER,
        "configurations_scored_on_test": len(rows),
        "aer_95_interval": {"method": "percentile bootstrap over test sentences (attnmt.alignment.aer_interval)",
                            "samples": 2000, "level": 0.95, "seed": 0},
        "errors_of_the_chosen_configuration": errors,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": f"{platform.machine()} {platform.python_version()} numpy {np.__version__} torch "
                   f"{torch.__version__} threads {torch.get_num_threads()}",
    })
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vectors", default=None,
                        help="folder with vectors from `attnmt embed`; built (and saved there) when absent; "
                        "with --run: the vectors combined with the translator's attention (must exist)")
    parser.add_argument("--max-lines", type=int, default=None, help="build the vectors from the first N pairs only")
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--min-count", type=int, default=2)
    parser.add_argument("--run", default=None,
                        help="a trained translator run: compute the translator section instead of the vector one")
    parser.add_argument("--checkpoint", default="best", help="checkpoint of --run: best (default) or last")
    parser.add_argument("--reverse-run", default=None,
                        help="with --run: a fr→en translator; its attention (transposed) is combined with --run's")
    parser.add_argument("--max-tokens", type=int, default=4000, help="padded tokens per force-decoding call")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--section", default=None,
                        help="with --run, --students or --teacher's settings grid: the JSON section to write (default "
                        "translator, students or teacher_settings; e.g. translator_guided for a run trained with "
                        "data.train_links, so both stay in the file)")
    parser.add_argument("--teacher", action="store_true",
                        help="eflomal's own AER (needs attnmt[align]): the teacher section")
    parser.add_argument("--eflomal-samplers", nargs="+", type=int, default=None, metavar="N",
                        help="with --teacher: eflomal's numbers of samplers to try (EflomalSettings; with any of "
                        "these three, the teacher_settings section: every combination, chosen on trial)")
    parser.add_argument("--eflomal-iterations", nargs="+", type=float, default=None, metavar="X",
                        help="with --teacher: factors on eflomal's numbers of iterations to try")
    parser.add_argument("--eflomal-prefix", nargs="+", type=int, default=None, metavar="K",
                        help="with --teacher: prefix lengths to try (0 = whole words)")
    parser.add_argument("--eflomal-vote", action="store_true",
                        help="with --teacher's settings grid: also the links the grid's runs agree on, at every "
                        "number of votes (voted_directions); the best single setting is then scored on test too")
    parser.add_argument("--students", nargs="+", metavar="RUN", default=None,
                        help="EN_FR_RUN FR_EN_RUN [EN_FR_RUN FR_EN_RUN ...]: translators guided by the teacher's "
                        "links, both directions (several of one direction: their geometric mean); the students section")
    parser.add_argument("--compare", nargs="+", metavar="SECTION", default=None,
                        help="with --students: score the chosen links against those of other students sections "
                        "of --out on the same bootstrap redraws (paired_with_sections)")
    parser.add_argument("--confident", action="store_true",
                        help="with --students: also score agreement plus the links one direction alone is confident "
                        "of where a word is unlinked (add_confident_links; 16 more configurations)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if not GOLD.is_dir() or not HANSARDS.is_dir():
        print(f"needs {HANSARDS} and {GOLD} (the shared data folder beside the project)", file=sys.stderr)
        return 1
    if args.compare and args.students is None:
        print("--compare: only with --students", file=sys.stderr)
        return 2
    if args.confident and args.students is None:
        print("--confident: only with --students", file=sys.stderr)
        return 2
    settings_given = any(value is not None for value in
                         (args.eflomal_samplers, args.eflomal_iterations, args.eflomal_prefix))
    if args.eflomal_vote and not settings_given:
        print("--eflomal-vote: only with --teacher and --eflomal-samplers/--eflomal-iterations/--eflomal-prefix",
              file=sys.stderr)
        return 2
    if settings_given and not args.teacher:
        print("--eflomal-samplers/--eflomal-iterations/--eflomal-prefix: only with --teacher", file=sys.stderr)
        return 2
    if args.teacher:
        return teacher_settings_main(args) if settings_given else teacher_main(args)
    if args.students is not None:
        return students_main(args)
    if args.run is not None:
        return translator_main(args)
    return vector_main(args)


if __name__ == "__main__":
    sys.exit(main())
