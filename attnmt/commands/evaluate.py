"""Score a trained run on a test split: perplexity, BLEU, chrF and lower-cased BLEU.

BLEU and chrF are sacrebleu's, on the detokenized cased output against the raw references (their
signatures are printed). Writes the outputs to RUN/hyps-<split>[-beamK].txt, the numbers to
RUN/eval-<split>[-beamK].json, and the attention of the first N sentences to
RUN/examples/<split>-NNN.png (source words as columns, output words as rows).

The split's files are those of the data section of RUN/config.yaml, relative paths from RUN
(after moving a run and its data, point them there), else those stored in the checkpoint.

With several beam sizes (--beam 1 5 10 20 50) it decodes the split once per beam size and prints
a table of BLEU, chrF, average output length (words), output/reference length ratio and decoding
time per beam size, written to RUN/beam-<split>.json and RUN/beam-<split>.md (plus the hyps file
of each beam size); perplexity does not depend on the beam and is computed once.

Examples:
  attnmt evaluate runs/sdp                       # test_2016_flickr, greedy, best.pt
  attnmt evaluate runs/sdp --beam 5 --checkpoint last -n 5
  attnmt evaluate runs/sdp --beam 1 5 10 20 50   # the beam-size table
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.commands.options import (
    add_checkpoint_option,
    add_device_option,
    add_head_mask_options,
    add_precision_option,
    add_threads_option,
    add_trust_option,
    say,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN", help="run folder (or a checkpoint file)")
    parser.add_argument("--split", default="test",
                        help="split to score: a Multi30k split name (test_2016_flickr, val, ...), or a name "
                             "from the config's data.test section; 'test' = the first test set (default)")
    add_checkpoint_option(parser)
    parser.add_argument("--beam", type=int, nargs="+", default=None, metavar="K",
                        help="beam size (default: the run's search.beam, 1 = greedy); several sizes give "
                             "the beam-size table")
    parser.add_argument("-n", "--examples", type=int, default=3, metavar="N",
                        help="print N examples and plot the attention of the first N sentences (default 3; "
                             "one beam size only)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="B", help="sentences decoded at once")
    add_precision_option(parser)
    add_device_option(parser)
    add_trust_option(parser)
    add_threads_option(parser)
    add_head_mask_options(parser)
    parser.add_argument("--no-merge-pieces", action="store_true",
                        help="plot subword pieces instead of merging them into words")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from attnmt.errors import ConfigError

    beams = list(dict.fromkeys(args.beam)) if args.beam else [None]
    if any(beam is not None and beam < 1 for beam in beams):
        raise ConfigError(f"--beam must be >= 1, got {' '.join(map(str, args.beam))}")
    if args.examples < 0:
        raise ConfigError(f"-n must be >= 0, got {args.examples}")
    if len(beams) > 1:
        if args.mask_heads.strip():
            raise ConfigError("--mask-heads: with one beam size (the beam-size table runs the whole model)")
        return _beam_table(args, [beam for beam in beams if beam is not None])
    return _single(args, beams[0])


def _single(args: argparse.Namespace, beam: int | None) -> int:
    from attnmt.evaluation.evaluate import evaluate_run
    from attnmt.visual.heatmap import plot_attention

    evaluation = evaluate_run(
        args.run_dir, split=args.split, beam=beam, checkpoint=args.checkpoint, batch_size=args.batch_size,
        return_attention=args.examples > 0, progress=not args.no_progress, precision=args.precision,
        device=args.device, on_load=lambda translator: say("evaluate", translator.describe()),
        trust_run_code=args.trust_run_code, num_threads=args.threads, mask_heads=args.mask_heads,
        ablation=args.ablation,
    )
    result, report = evaluation.result, evaluation.report
    run_dir = evaluation.json_path.parent
    split, beam = result.split, result.beam
    masked = evaluation.json_path.stem.rpartition("-heads-")[2] if report.get("mask_heads") else ""
    if masked:
        print(f"heads switched off ({report['ablation']}): {', '.join(report['mask_heads'])}")

    plots = []
    for k, translation in enumerate(result.translations[: args.examples], start=1):
        if translation.attention is None or translation.attention.size == 0:
            continue
        plots.append(plot_attention(
            translation.attention, translation.src_pieces, translation.out_pieces,
            run_dir / "examples" / f"{split}{f'-heads-{masked}' if masked else ''}-{k:03d}.png",
            title=translation.output,
            merge_pieces=not args.no_merge_pieces,
        ))

    scores, ppl = result.scores, result.perplexity
    step = f", step {report['step']}" if report.get("step") is not None else ""
    print(f"run:        {run_dir} ({report['checkpoint']}{step})")
    precision = evaluation.translator.precision
    print(f"split:      {split}, {len(result.sources)} sentences, {'greedy search' if beam == 1 else f'beam {beam}'}"
          + ("" if precision == "fp32" else f" ({precision} products)"))
    print(f"perplexity: {ppl.perplexity:.2f} (loss {ppl.loss:.4f} nats per subword token, {ppl.num_tokens} tokens)")
    print(f"BLEU:       {scores.bleu:.2f}  {scores.bleu_signature}")
    print(f"            {scores.bleu_details}")
    print(f"chrF:       {scores.chrf:.2f}  {scores.chrf_signature}")
    print(f"BLEU (lc):  {scores.bleu_lowercase:.2f}  {scores.bleu_lowercase_signature}")
    for k in range(min(args.examples, len(result.sources))):
        print(f"\nexample {k + 1}")
        print(f"  source:    {result.sources[k]}")
        print(f"  reference: {result.references[k]}")
        print(f"  output:    {result.hypotheses[k]}")
    print(f"\nwrote {evaluation.hyps_path}, {evaluation.json_path}"
          + (f" and {len(plots)} heatmaps in {run_dir / 'examples'}" if plots else ""))
    return 0


def _beam_table(args: argparse.Namespace, beams: list[int]) -> int:
    from attnmt.evaluation.evaluate import evaluate_beam_sizes

    evaluation = evaluate_beam_sizes(
        args.run_dir, beams, split=args.split, checkpoint=args.checkpoint, batch_size=args.batch_size,
        progress=not args.no_progress, precision=args.precision, device=args.device,
        on_load=lambda translator: say("evaluate", translator.describe()), trust_run_code=args.trust_run_code,
        num_threads=args.threads,
    )
    print(evaluation.header)
    print(evaluation.table)
    print(f"\nwrote {evaluation.json_path}, {evaluation.markdown_path} and the hyps files")
    return 0
