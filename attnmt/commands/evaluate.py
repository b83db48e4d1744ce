"""Score a trained run on a test split: perplexity, BLEU, chrF and lower-cased BLEU.

BLEU and chrF are sacrebleu's, on the detokenized cased output against the raw references (their
signatures are printed). Writes the outputs to RUN/hyps-<split>[-beamK].txt, the numbers to
RUN/eval-<split>[-beamK].json, and the attention of the first N sentences to
RUN/examples/<split>-NNN.png (source words as columns, output words as rows).

Examples:
  attnmt evaluate runs/sdp                       # test_2016_flickr, greedy, best.pt
  attnmt evaluate runs/sdp --beam 5 --checkpoint last -n 5
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN", help="run folder (or a checkpoint file)")
    parser.add_argument("--split", default="test",
                        help="split to score: a Multi30k split name (test_2016_flickr, val, ...), or a name "
                             "from the config's data.test section; 'test' = the first test set (default)")
    parser.add_argument("--checkpoint", default="best", choices=["best", "last"], help="which checkpoint (default best)")
    parser.add_argument("--beam", type=int, default=None, metavar="K", help="beam size (default: the run's search.beam, 1 = greedy)")
    parser.add_argument("-n", "--examples", type=int, default=3, metavar="N",
                        help="print N examples and plot the attention of the first N sentences (default 3)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="B", help="sentences decoded at once")
    parser.add_argument("--no-merge-pieces", action="store_true",
                        help="plot subword pieces instead of merging them into words")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    import json

    from attnmt.config import RunConfig
    from attnmt.data import load_split
    from attnmt.data.atomic import write_bytes_atomic
    from attnmt.errors import ConfigError
    from attnmt.evaluation import evaluate_corpus
    from attnmt.plotting import plot_attention
    from attnmt.translator import Translator, checkpoint_path

    if args.beam is not None and args.beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {args.beam}")
    if args.examples < 0:
        raise ConfigError(f"-n must be >= 0, got {args.examples}")
    path = checkpoint_path(args.run_dir, args.checkpoint)
    run_dir = path.parent
    translator = Translator.load(path)
    config = RunConfig.from_dict(translator.config, check_model=False)
    corpus = load_split(config.data, args.split)
    split = args.split
    if config.data.dataset == "multi30k" and split in ("test", "valid"):
        split = {"test": "test_2016_flickr", "valid": "val"}[split]
    elif split == "test" and config.data.test and "test" not in config.data.test:
        split = next(iter(config.data.test))
    beam = args.beam if args.beam is not None else translator.default_beam

    result = evaluate_corpus(
        translator, corpus, split=split, beam=beam, batch_size=args.batch_size,
        max_tokens=config.data.max_tokens, return_attention=args.examples > 0, progress=not args.no_progress,
    )
    suffix = f"{split}" + (f"-beam{beam}" if beam > 1 else "")
    hyps_path = run_dir / f"hyps-{suffix}.txt"
    json_path = run_dir / f"eval-{suffix}.json"
    write_bytes_atomic(hyps_path, "".join(h + "\n" for h in result.hypotheses).encode("utf-8"))
    report = {"run": str(run_dir), "checkpoint": path.name, **result.to_dict()}
    progress = translator.checkpoint_info.get("progress") or {}
    report["step"] = progress.get("step")
    write_bytes_atomic(json_path, (json.dumps(report, indent=2) + "\n").encode("utf-8"))

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
    step = f", step {progress['step']}" if progress.get("step") is not None else ""
    print(f"run:        {run_dir} ({path.name}{step})")
    print(f"split:      {split}, {len(result.sources)} sentences, {'greedy search' if beam == 1 else f'beam {beam}'}")
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
    print(f"\nwrote {hyps_path}, {json_path}" + (f" and {len(plots)} heatmaps in {run_dir / 'examples'}" if plots else ""))
    return 0
