"""Which heads carry the translation? Every head of a translator switched off in turn.

Over the first N pairs of a split (default: the run's validation set, 200 pairs), for every head of
every attention (PART:LAYER:HEAD; PART encoder_self, decoder_self or cross; an RNN's heads are part
cross, layer 1): how much the teacher-forced loss per target piece rises when it is switched off
(Δ loss), how much the BLEU of the run's own search moves (Δ BLEU; --no-bleu skips the searches),
its gradient importance |∂L/∂ξ| normalised per layer (Michel et al. 2019), its confidence (the
mean largest weight, Voita et al. 2019), and its role: the relative position its largest weight
lands on most often (self-attention), the weight on EOS and punctuation (a sink), and for encoder
self-attention how often it looks at the sentence's rarest piece. --ablation mean puts each head's
mean output in its place instead of zero. The last line gives Spearman's ρ of importance with
Δ loss over all heads.

With --hf MODEL (a Hugging Face translation model) give the pairs with --src FILE --ref FILE.

Examples:
  attnmt heads runs/transformer
  attnmt heads runs/transformer --sentences 100 --no-bleu --json > heads.json
  attnmt heads runs/transformer --plot heads.png
  attnmt heads --hf Helsinki-NLP/opus-mt-de-en --src test.de --ref test.en --sentences 50
"""

from __future__ import annotations

import argparse
import json
import sys

from attnmt.commands.options import (
    add_checkpoint_option,
    add_device_option,
    add_hf_option,
    add_threads_option,
    add_trust_option,
    load_translator,
    say,
)

MAX_SENTENCES = 100_000


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_SENTENCES:,}, got {text!r}") from None
    if not 1 <= value <= MAX_SENTENCES:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_SENTENCES:,}, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from attnmt.runtime.choices import HEAD_ABLATIONS as ABLATIONS

    parser.add_argument("run_dir", nargs="?", default=None, metavar="RUN", help="run folder (or a checkpoint file)")
    add_hf_option(parser)
    parser.add_argument("--split", default="valid", help="the split whose first pairs are read (default: valid)")
    parser.add_argument("--sentences", type=_count, default=200, metavar="N", help="pairs read (default 200)")
    parser.add_argument("--src", default=None, metavar="FILE", help="source sentences, one a line (with --hf)")
    parser.add_argument("--ref", default=None, metavar="FILE", help="their reference translations (with --src)")
    parser.add_argument("--ablation", choices=ABLATIONS, default="zero",
                        help="what takes a switched-off head's place: zero (default) or its mean output")
    parser.add_argument("--beam", type=int, default=None, metavar="K", help="beam of the searches (default: the run's)")
    parser.add_argument("--no-bleu", action="store_true", help="skip Δ BLEU (one search per head)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--plot", default=None, metavar="FILE.png|svg",
                        help="draw a layers x heads grid per part, coloured by Δ loss")
    parser.add_argument("--gold", default=None, metavar="LINKS",
                        help="gold word alignments (NAACL .naacl/.wa, else Pharaoh): each cross-attention head's AER")
    parser.add_argument("--gold-src", default=None, metavar="FILE", help="the gold pairs' source words, a line each")
    parser.add_argument("--gold-tgt", default=None, metavar="FILE", help="the gold pairs' target words, a line each")
    parser.add_argument("--prune-curve", action="store_true",
                        help="also measure BLEU as heads are removed one by one, by ablation (re-measured after "
                             "each removal), importance, confidence and at random (3 orders), and say how many "
                             "heads of each part go within 0.5 BLEU")
    parser.add_argument("--curve-plot", default=None, metavar="FILE.png|svg", help="draw the pruning curves")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot or --curve-plot file")
    add_checkpoint_option(parser)
    add_device_option(parser)
    add_trust_option(parser)
    add_threads_option(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from attnmt.data.corpus import read_lines
    from attnmt.errors import ConfigError
    from attnmt.evaluation.heads import head_report, probe_of_run, prune_curve, removable_by_part
    from attnmt.runtime.outputs import check_output
    from attnmt.runtime.tables import format_table

    if (args.src is None) != (args.ref is None):
        raise ConfigError("give both --src and --ref, or neither")
    if args.beam is not None and not 1 <= args.beam <= 100:
        raise ConfigError(f"--beam must be an integer from 1 to 100, got {args.beam}")
    if (args.gold is None) != (args.gold_src is None) or (args.gold is None) != (args.gold_tgt is None):
        raise ConfigError("give --gold, --gold-src and --gold-tgt together, or none of them")
    if args.prune_curve and args.no_bleu:
        raise ConfigError("--prune-curve measures BLEU; it does not go with --no-bleu")
    if args.curve_plot and not args.prune_curve:
        raise ConfigError("--curve-plot: only with --prune-curve")
    plot = check_output(args.plot, "--plot", args.overwrite, suffixes=(".png", ".svg"),
                        inputs=[args.src, args.ref, args.run_dir]) if args.plot else None
    curve_plot = check_output(args.curve_plot, "--curve-plot", args.overwrite, suffixes=(".png", ".svg"),
                              inputs=[args.src, args.ref, args.run_dir, plot]) if args.curve_plot else None
    translator = load_translator(args)
    say("heads", translator.describe())
    pairs = (read_lines(args.src), read_lines(args.ref)) if args.src is not None else None
    probe = probe_of_run(translator, args.run_dir, args.split, args.sentences, pairs)
    name = args.hf or str(args.run_dir)
    report = head_report(translator, probe, name=name, split=args.split if pairs is None else str(args.src),
                         ablation=args.ablation, bleu=not args.no_bleu, beam=args.beam,
                         progress=not args.no_progress and sys.stderr.isatty())
    if args.gold is not None:
        _add_head_aers(report, translator, args)
    curves = prune_curve(translator, probe, report, beam=args.beam, progress=not args.no_progress
                         and sys.stderr.isatty()) if args.prune_curve else []
    base = curves[0].bleu[0] if curves else 0.0  # the BLEU with every head, in the curves' search
    if args.json:
        values = report.to_dict()
        if curves:
            values["prune_curves"] = [asdict(curve) for curve in curves]
            values["removable_within_half_bleu"] = {
                f"{curve.order}{'' if curve.seed is None else f'-{curve.seed}'}": removable_by_part(curve, base)
                for curve in curves}
        print(json.dumps(values, ensure_ascii=False))
    else:
        beam = "" if report.beam is None else f", BLEU {report.bleu:.2f} (beam {report.beam})"
        print(f"{name}: {report.sentences} pairs of {report.split}, loss {report.loss:.4f} per target piece{beam}; "
              f"each head switched off ({report.ablation}):")
        print(report.table())
        rho = report.importance_rank_correlation
        print(f"importance against Δ loss over {len(report.rows)} heads: Spearman ρ "
              f"{'–' if rho != rho else f'{rho:.3f}'}; {report.seconds:.1f} s")
        if curves:
            print(f"heads removed one by one (BLEU with all heads {base:.2f}; within 0.5 BLEU of it):")
            rows = [[curve.order + ("" if curve.seed is None else f" (seed {curve.seed})"), curve.removable(base),
                     *removable_by_part(curve, base).values(), f"{curve.bleu[-1]:.2f}"] for curve in curves]
            print(format_table(["order", "removable", "encoder_self", "decoder_self", "cross", "BLEU, all removed"],
                               rows))
    if plot is not None:
        from attnmt.visual.charts import heads_grid

        heads_grid(report, plot)
        say("heads", f"wrote {plot}")
    if curve_plot is not None:
        from attnmt.visual.charts import prune_curves_chart

        prune_curves_chart(curves, base, f"{name}: {report.sentences} pairs of {report.split}", curve_plot)
        say("heads", f"wrote {curve_plot}")
    return 0


def _add_head_aers(report, translator, args: argparse.Namespace) -> None:
    """Each cross-attention head's AER on the gold pairs, into its row."""
    from pathlib import Path

    from attnmt.alignment import read_gold
    from attnmt.alignment.links import read_word_pairs
    from attnmt.alignment.translator_attention import TranslatorAligner, head_aers

    src, tgt = read_word_pairs(args.gold_src, args.gold_tgt)
    gold_format = "naacl" if Path(args.gold).suffix.lower() in (".naacl", ".wa") else "pharaoh"
    gold = read_gold(args.gold, gold_format, [len(s) for s in src], [len(t) for t in tgt])
    aers = head_aers(TranslatorAligner(translator), src, tgt, gold.sure, gold.possible)
    for row in report.rows:
        if row.part == "cross":
            row.aer = aers.get((row.layer, row.head))
