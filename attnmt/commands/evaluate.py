"""Score a trained run on a test split: perplexity, BLEU, chrF and lower-cased BLEU.

BLEU and chrF are sacrebleu's, on the detokenized cased output against the raw references (their
signatures are printed). Writes the outputs to RUN/hyps-<split>[-beamK].txt, the numbers to
RUN/eval-<split>[-beamK].json, and the attention of the first N sentences to
RUN/examples/<split>-NNN.png (source words as columns, output words as rows).

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

from attnmt.config import PRECISIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN", help="run folder (or a checkpoint file)")
    parser.add_argument("--split", default="test",
                        help="split to score: a Multi30k split name (test_2016_flickr, val, ...), or a name "
                             "from the config's data.test section; 'test' = the first test set (default)")
    parser.add_argument("--checkpoint", default="best", choices=["best", "last"], help="which checkpoint (default best)")
    parser.add_argument("--beam", type=int, nargs="+", default=None, metavar="K",
                        help="beam size (default: the run's search.beam, 1 = greedy); several sizes give "
                             "the beam-size table")
    parser.add_argument("-n", "--examples", type=int, default=3, metavar="N",
                        help="print N examples and plot the attention of the first N sentences (default 3; "
                             "one beam size only)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="B", help="sentences decoded at once")
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="bf16: the search's matrix products in bfloat16 (faster on CPUs with AVX512-BF16; "
                             "outputs can differ from fp32); default: the run's search.precision, else fp32")
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
        return _beam_table(args, beams)
    return _single(args, beams[0])


def _single(args: argparse.Namespace, beam: int | None) -> int:
    from attnmt.comparison import evaluate_run
    from attnmt.plotting import plot_attention

    evaluation = evaluate_run(
        args.run_dir, split=args.split, beam=beam, checkpoint=args.checkpoint, batch_size=args.batch_size,
        return_attention=args.examples > 0, progress=not args.no_progress, precision=args.precision,
    )
    result, report = evaluation.result, evaluation.report
    run_dir = evaluation.json_path.parent
    split, beam = result.split, result.beam

    plots = []
    for k, translation in enumerate(result.translations[: args.examples], start=1):
        if translation.attention is None or translation.attention.size == 0:
            continue
        plots.append(plot_attention(
            translation.attention, translation.src_pieces, translation.out_pieces,
            run_dir / "examples" / f"{split}-{k:03d}.png", title=translation.output,
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
    import json

    from attnmt.comparison import beam_table, compare_beam_sizes, hyps_path, precision_suffix, resolve_split
    from attnmt.config import RunConfig
    from attnmt.data import batches_for_inference
    from attnmt.files import write_bytes_atomic
    from attnmt.evaluation import perplexity
    from attnmt.translator import Translator, checkpoint_path

    path = checkpoint_path(args.run_dir, args.checkpoint)
    run_dir = path.parent
    translator = Translator.load(path, precision=args.precision)
    config = RunConfig.from_dict(translator.config, check_model=False)
    split, corpus = resolve_split(config.data, args.split)
    src_ids = translator.tokenizers.src.encode_many(corpus.src)
    tgt_ids = translator.tokenizers.tgt.encode_many(corpus.tgt)
    ppl = perplexity(translator.model, batches_for_inference(src_ids, max_tokens=config.data.max_tokens,
                                                             tgt_ids=tgt_ids))
    results = compare_beam_sizes(translator, corpus, beams, batch_size=args.batch_size, progress=not args.no_progress)
    for result in results:
        write_bytes_atomic(hyps_path(run_dir, split, result.beam, translator.precision),
                           "".join(h + "\n" for h in result.hypotheses).encode("utf-8"))

    step = (translator.checkpoint_info.get("progress") or {}).get("step")
    table = beam_table(results)
    header = (f"{run_dir} ({path.name}{f', step {step}' if step is not None else ''}), {split}: "
              f"{len(corpus)} sentences, length penalty alpha {translator.alpha:g}, "
              f"perplexity {ppl.perplexity:.2f}" + ("" if translator.precision == "fp32" else f", {translator.precision} search"))
    report = {
        "run": str(run_dir), "checkpoint": path.name, "step": step, "split": split, "num_sentences": len(corpus),
        "alpha": translator.alpha, "max_len_a": translator.max_len_a, "max_len_b": translator.max_len_b,
        "perplexity": ppl.perplexity, "loss": ppl.loss, "num_tokens": ppl.num_tokens,
        "precision": translator.precision, "results": [result.to_dict() for result in results],
    }
    name = f"beam-{split}" + precision_suffix(translator.precision)
    json_path = write_bytes_atomic(run_dir / f"{name}.json", (json.dumps(report, indent=2) + "\n").encode("utf-8"))
    markdown = (f"# Beam sizes\n\n{header}. Lengths in words; seconds = decoding time; length ratio = output "
                f"words / reference words.\n\n{table}\n")
    md_path = write_bytes_atomic(run_dir / f"{name}.md", markdown.encode("utf-8"))
    print(header)
    print(table)
    print(f"\nwrote {json_path}, {md_path} and the hyps files")
    return 0
