"""Is the attention an explanation? Faithfulness of attention and of every attribution, per sentence.

Translates each sentence, reads the attention and the attributions named by --methods on the
model's own output, and prints for each method its comprehensiveness and sufficiency (AOPC over
1-3 words and over 10-50% of the source words, DeYoung et al. 2020; removing a word means replacing
its pieces with the unknown piece), the same for a random ranking (the baseline a faithful method
must beat), its rank agreement with the attention, and its seconds per sentence. Higher
comprehensiveness and lower sufficiency are more faithful. ALTI+ and rollout add each output
word's source share; an RNN with one head adds counterfactual attention (Jain & Wallace 2019): how
far the next-word distribution moves when the weights are permuted, uniform or another step's; a
Transformer adds the same for each cross-attention head, one row per head.

Contrastive explanations (Yin & Neubig 2022): --foil WORD --step T explains why the model wrote
its T-th output piece and not WORD, --foil next why it wrote each piece and not its best other
one; every method that depends on the output then explains log p(y_t) - log p(foil), and
faithfulness is measured on that contrast. Attention, value norms, ALTI+ and rollout do not depend
on the output; the table says so.

Sentences come as arguments or one a line on standard input. --out FILE keeps the attention, the
attributions and the figures in the file attnmt.load_attention reads (.jsonl or .npz).

Examples:
  attnmt explain runs/sdp "Ein Mann fährt Fahrrad."
  attnmt explain runs/transformer --methods attention,alti,rollout,erasure "Zwei Hunde spielen."
  attnmt explain runs/sdp "Ein Mann fährt Fahrrad." --foil next
  attnmt explain runs/sdp "Ein Mann fährt Fahrrad." --foil car --step 4
  zcat test.de.gz | head -20 | attnmt explain runs/sdp --json > explained.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnmt.commands.options import (
    add_checkpoint_option,
    add_device_option,
    add_head_mask_options,
    add_threads_option,
    add_trust_option,
    heads_off,
    load_translator,
    say,
    seed_value,
)

MAX_SENTENCES = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from attnmt.attribution.methods import ATTENTION, NAMES, NOISE, SAMPLES, STEPS
    from attnmt.attribution.methods import DEFAULT_EXPLAINED as DEFAULT_METHODS

    EXPLAIN_METHODS = (ATTENTION, *NAMES)

    parser.add_argument("run_dir", metavar="RUN", help="run folder (or a checkpoint file)")
    parser.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to explain (default: stdin)")
    parser.add_argument("--methods", default=None, metavar="M1,M2",
                        help=f"comma-separated, from {', '.join(EXPLAIN_METHODS)} (default: "
                             f"{', '.join(DEFAULT_METHODS)}, those that apply to the model)")
    parser.add_argument("--beam", type=int, default=None, metavar="K", help="beam size (default: the run's)")
    parser.add_argument("--random-orders", type=int, default=3, metavar="N",
                        help="random rankings averaged for the baseline (default 3)")
    parser.add_argument("--seed", type=seed_value, default=0,
                        help="seed of the random rankings and SmoothGrad, from 0 to 2**63 - 1 (default 0)")
    parser.add_argument("--steps", type=int, default=STEPS, metavar="M",
                        help=f"integrated gradients' steps (default {STEPS}; attnmt serve uses 10 and says so)")
    parser.add_argument("--samples", type=int, default=SAMPLES, metavar="N",
                        help=f"SmoothGrad's noisy copies (default {SAMPLES})")
    parser.add_argument("--noise", type=float, default=NOISE, metavar="SIGMA",
                        help=f"SmoothGrad's noise, a share of the range of the source embeddings (default {NOISE})")
    parser.add_argument("--foil", default=None, metavar="WORD",
                        help="explain the contrast with WORD (one piece of the model's target vocabulary) at "
                             "--step T, or with 'next': the best other piece at every step")
    parser.add_argument("--step", type=int, default=None, metavar="T",
                        help="the output piece (1-based, as the table lists them) that --foil WORD stands against")
    parser.add_argument("--json", action="store_true", help="print one JSON object per sentence instead of tables")
    parser.add_argument("--out", type=Path, metavar="FILE",
                        help="also keep attention, attributions and figures in FILE (.jsonl or .npz; read it "
                             "with attnmt.load_attention)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    add_checkpoint_option(parser)
    add_device_option(parser)
    add_trust_option(parser)
    add_threads_option(parser)
    add_head_mask_options(parser)


def run(args: argparse.Namespace) -> int:
    from attnmt.errors import ConfigError
    from attnmt.evaluation.explain import DEFAULT_METHODS, check_methods, explain
    from attnmt.runtime.outputs import check_output
    from attnmt.visual.export import FORMATS

    labels, sentences = _checked_sentences(args)
    settings = _settings(args)
    if args.out is not None:
        check_output(args.out, "--out", args.overwrite, [args.run_dir], suffixes=list(FORMATS))
    translator = load_translator(args)
    say("explain", translator.describe())
    if args.methods is None:
        usable = translator.attribution_methods()
        methods = [m for m in DEFAULT_METHODS if m == "attention" or m in usable]
    else:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not methods or len(set(methods)) != len(methods):
            raise ConfigError(f"--methods {args.methods!r}: name each method once, separated by commas")
    check_methods(translator, methods)
    problem = next(((label, p) for label, s in zip(labels, sentences) if (p := translator.source_problem(s))), None)
    if problem is not None:
        raise ConfigError(f"{problem[0]}: {problem[1]}")
    with heads_off(args, translator, "explain"):
        translations = translator.translate(sentences, beam=args.beam, return_attention=True)
        explanations = explain(translator, translations, methods, settings=settings)
    for label, explanation in zip(labels, explanations):
        if args.json:
            print(json.dumps(explanation.to_dict(), ensure_ascii=False))
        else:
            print(_table(label, explanation))
    if args.out is not None:
        _save(translator, translations, explanations, args.out)
        say("explain", f"wrote {args.out}")
    return 0


def _checked_sentences(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The sentences to explain, each with the words that name it ("sentence 2", or "standard input
    line 5": blank input lines are skipped, and the number is still the line's), after the options'
    ranges; ConfigError naming the first problem."""
    from attnmt.errors import ConfigError

    if args.beam is not None and args.beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {args.beam}")
    if not 1 <= args.random_orders <= 100:
        raise ConfigError(f"--random-orders must be from 1 to 100, got {args.random_orders}")
    if not Path(args.run_dir).exists():
        raise ConfigError(f"RUN {args.run_dir!r}: no such run folder or checkpoint; give the run first, then the "
                          "sentences: attnmt explain RUN SENTENCE ...")
    if args.sentences:
        numbered = [(f"sentence {number}", sentence) for number, sentence in enumerate(args.sentences, start=1)]
    else:
        numbered = _stdin_sentences()
    if not numbered:
        raise ConfigError("no sentence to explain: give sentences as arguments or one a line on standard input")
    if len(numbered) > MAX_SENTENCES:
        raise ConfigError(f"{len(numbered)} sentences: explain takes at most {MAX_SENTENCES} at once")
    blank = next((label for label, sentence in numbered if not sentence.strip()), None)
    if blank is not None:
        raise ConfigError(f"{blank} is empty; give words to explain")
    return [label for label, _ in numbered], [sentence for _, sentence in numbered]


def _settings(args: argparse.Namespace):
    """The ExplainSettings of the options; ConfigError naming the option out of range."""
    from attnmt.attribution.methods import check_options
    from attnmt.errors import ConfigError
    from attnmt.evaluation.explain import ExplainSettings, Foil

    check_options("integrated", args.samples, args.noise, args.steps)  # "attribution_steps=0" -> the option's words
    foil = None
    if args.foil is not None:
        word = args.foil.strip()
        if not word:
            raise ConfigError("--foil is empty; give a word, or 'next'")
        if word == Foil.NEXT and args.step is not None:
            raise ConfigError("--step: --foil next contrasts every step; give --step only with --foil WORD")
        if word != Foil.NEXT and args.step is None:
            raise ConfigError(f"--foil {word!r:.40}: give --step T, the output piece it stands against (1-based)")
        foil = Foil(word, args.step)
    elif args.step is not None:
        raise ConfigError("--step: give --foil WORD too (the word the T-th output piece stands against)")
    return ExplainSettings(steps=args.steps, samples=args.samples, noise=args.noise, seed=args.seed,
                           random_orders=args.random_orders, foil=foil)


def _stdin_sentences() -> list[tuple[str, str]]:
    """The non-blank lines of standard input, each with "standard input line N" (none from a terminal)."""
    from attnmt.errors import ConfigError
    from attnmt.runtime.stdin import stdin_lines, undecodable

    if sys.stdin is None or sys.stdin.isatty():
        return []
    numbered = []
    for number, line in enumerate(stdin_lines(), start=1):
        if isinstance(line, UnicodeDecodeError):
            raise ConfigError(f"standard input line {number}: {undecodable(line)}")
        if line.strip():
            numbered.append((f"standard input line {number}", line))
        if len(numbered) > MAX_SENTENCES:  # stop reading: there is no use for the rest
            raise ConfigError(f"more than {MAX_SENTENCES} sentences on standard input: explain takes at most "
                              f"{MAX_SENTENCES} at once")
    return numbered


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _table(label: str, explanation) -> str:
    """One sentence's figures as a plain-text table, under its ``label`` ("sentence 2")."""
    from attnmt.evaluation.faithfulness import RANDOM

    lines = [f"{label}: {explanation.translation.source}",
             f"  output: {explanation.translation.output}",
             "  output pieces: " + " ".join(f"{t}:{piece}" for t, piece in
                                            enumerate(explanation.translation.out_pieces, start=1))]
    contrast = explanation.contrast
    if contrast is not None:
        lines.append("  explained: the contrast log p(output piece) - log p(foil); faithfulness on that contrast")
        if contrast.unchanged:
            lines.append(f"  {', '.join(contrast.unchanged)}: do not depend on the output, the same for any foil")
    lines += [
             f"  {'method':<12} {'compr. 1-3':>10} {'compr. %':>9} {'suff. 1-3':>10} {'suff. %':>8} "
             f"{'ρ attention':>11} {'s/sentence':>10}"]
    rows = [(method, report.faithfulness, report.rank_correlation, report.seconds)
            for method, report in explanation.methods.items()]
    rows.append((RANDOM, explanation.random, None, None))
    for method, figures, rho, seconds in rows:
        comprehensiveness, sufficiency = figures.comprehensiveness_aopc, figures.sufficiency_aopc
        lines.append(f"  {method:<12} {comprehensiveness['words']:>10.3f} {comprehensiveness['share']:>9.3f} "
                     f"{sufficiency['words']:>10.3f} {sufficiency['share']:>8.3f} {_number(rho):>11} "
                     f"{_number(seconds):>10}")
    for method, report in explanation.methods.items():
        if report.source_share is not None:
            shares = " ".join(f"{piece}:{share:.2f}" for piece, share in
                              zip(explanation.translation.out_pieces, report.source_share))
            lines.append(f"  {method} source share per output piece: {shares}")
    if explanation.counterfactual is not None:
        lines.append("  counterfactual attention (mean over output pieces): TV / JS (bits) / changed word")
        for kind, figure in explanation.counterfactual.items():
            lines.append(f"    {kind:<11} {figure.total_variation:.3f} / {figure.jensen_shannon:.3f} / "
                         f"{figure.changed:.2f}")
    if explanation.head_counterfactuals:
        kinds = list(next(iter(explanation.head_counterfactuals.values())))
        lines.append("  counterfactual attention per cross-attention head (its weights replaced at one step at a "
                     "time, the other heads as they are): TV / JS (bits) / changed word")
        lines.append("    " + f"{'head':<11}" + "".join(f" {kind:>22}" for kind in kinds))
        for head, figures in explanation.head_counterfactuals.items():
            cells = "".join(f" {figures[kind].total_variation:>6.3f} / {figures[kind].jensen_shannon:.3f} / "
                            f"{figures[kind].changed:.2f}" for kind in kinds)
            lines.append(f"    {head:<11}{cells}")
    if contrast is not None:
        lines.extend(_contrast_lines(explanation))
    lines.extend(f"  {note}" for note in explanation.notes)
    return "\n".join(lines) + "\n"


def _contrast_lines(explanation) -> list[str]:
    """Per contrasted step: the output piece, the foil, the contrast, and the source word each
    output-dependent method ranks first for it."""
    import numpy as np

    from attnmt.data.pieces import group_pieces
    from attnmt.evaluation.faithfulness import source_words, word_scores

    contrast, translation = explanation.contrast, explanation.translation
    groups = group_pieces(translation.src_pieces)
    words = source_words(translation.src_pieces, groups)
    spans = set(words)
    names = [word for word, start, stop in groups if (start, stop) in spans]
    methods = [m for m in explanation.attributions if m not in contrast.unchanged]
    lines = ["  why this piece and not the foil: step, output / foil, log p(output) - log p(foil), "
             "the source word each method ranks first"]
    for step, output, foil, value in zip(contrast.steps, contrast.outputs, contrast.foils, contrast.values):
        tops = []
        for method in methods:
            row = word_scores(explanation.attributions[method][step:step + 1], words)[0] if words else np.zeros(0)
            tops.append(f"{method} {names[int(np.argmax(row))]}" if len(row) else f"{method} -")
        lines.append(f"    {step + 1:>3} {output} / {foil}  {value:+.3f}  {'; '.join(tops)}")
    return lines


def _save(translator, translations, explanations, path: Path) -> None:
    from attnmt.visual.export import attention_records, save_attention

    records = attention_records(translator, translations)
    for record, explanation in zip(records, explanations):
        record.attributions = {method: matrix.astype("float32") for method, matrix in explanation.attributions.items()
                               if method != "attention"}
        record.explanation = explanation.to_dict()
    save_attention(records, path)
