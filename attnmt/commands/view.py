"""Write one self-contained HTML page of interactive attention heatmaps for a trained run.

Translates the first N sentences of a split and shows, for each, the source, the output, the
reference, its sentence BLEU and a heatmap: hover an output word to see where it looked. Subword
pieces are merged into words (--pieces keeps them). For multi-head models (the RNN's multihead
mechanism, Transformers) a menu picks "average" (what the search used) or one head ("head H", or
"layer L / head H"); per-head weights come from force-decoding the produced output. The page
needs no network and no other file. Default output: RUN/view-<split>.html. With --attribution METHOD
each example also shows the output's gradient saliency beside the attention, and how the two
agree for each output word (rank correlation over the source words, the same top word or not).

With --hf MODEL instead of RUN, a Hugging Face translation model translates the first N lines of
--src (with --ref, their references) and every layer and head of its cross-attention is shown.

Examples:
  attnmt view runs/sdp                                   # 50 sentences of test_2016_flickr, greedy
  attnmt view runs/transformer --beam 5 -n 20 --out transformer.html
  attnmt view runs/sdp -n 20 --attribution integrated --out sdp-saliency.html
  attnmt view --hf Helsinki-NLP/opus-mt-de-en --src test.de --ref test.en --out opus.html
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.commands.options import (
    add_attribution_options,
    add_checkpoint_option,
    add_device_option,
    add_head_mask_options,
    add_hf_option,
    add_threads_option,
    add_trust_option,
    attribution_options,
    heads_off,
    load_translator,
    say,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, nargs="?", metavar="RUN", help="run folder (or a checkpoint file)")
    parser.add_argument("--split", default="test",
                        help="a Multi30k split name (test_2016_flickr, val, ...) or a name from the config's "
                             "data.test section; 'test' = the first test set (default)")
    parser.add_argument("-n", "--examples", type=int, default=50, metavar="N",
                        help="the first N sentences of the split (default 50)")
    parser.add_argument("--beam", type=int, default=None, metavar="K",
                        help="beam size (default: the run's search.beam, 1 = greedy)")
    add_checkpoint_option(parser)
    parser.add_argument("--out", type=Path, metavar="FILE", help="the HTML file (default RUN/view-<split>.html)")
    parser.add_argument("--overwrite", action="store_true", help="replace the HTML file if it exists")
    parser.add_argument("--pieces", action="store_true", help="show subword pieces instead of words")
    parser.add_argument("--batch-size", type=int, default=None, metavar="B", help="sentences decoded at once")
    add_device_option(parser)
    add_hf_option(parser)
    add_trust_option(parser)
    add_threads_option(parser)
    add_head_mask_options(parser)
    parser.add_argument("--src", type=Path, metavar="FILE", help="with --hf: source sentences, one a line")
    parser.add_argument("--ref", type=Path, metavar="FILE", help="with --hf: their reference translations")
    add_attribution_options(parser, "show beside each attention heatmap")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from attnmt.data import load_split
    from attnmt.decoding.translator import Translator
    from attnmt.errors import ConfigError
    from attnmt.runs.folder import checkpoint_path
    from attnmt.runtime.outputs import check_output
    from attnmt.visual.examples import view_examples
    from attnmt.visual.viewer import write_attention_viewer

    if args.beam is not None and args.beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {args.beam}")
    if args.examples < 1:
        raise ConfigError(f"-n must be >= 1, got {args.examples}")
    args.saliency_options = attribution_options(args)
    if args.hf is not None:
        return _view_hf(args)
    if args.src is not None or args.ref is not None:
        raise ConfigError("--src and --ref: only with --hf (a run shows a split of its own data: --split)")
    if args.run_dir is None:
        raise ConfigError("give a RUN folder, or a Hugging Face model with --hf MODEL and --src FILE")
    path = checkpoint_path(args.run_dir, args.checkpoint)
    run_dir = path.parent
    if args.out is not None:  # before the model is loaded
        check_output(args.out, "--out", args.overwrite, [run_dir], suffixes=[".html"])
    translator = Translator.load(path, device=args.device, trust_run_code=args.trust_run_code,
                                 num_threads=args.threads)
    say("view", translator.describe())
    config = translator.run_config
    assert config is not None  # loaded from a run
    split, corpus = config.data.canonical_split(args.split), load_split(config.data, args.split)
    beam = translator.search_config.beam if args.beam is None else args.beam
    out = check_output(args.out or run_dir / f"view-{split}.html", "--out", args.overwrite, [run_dir],
                       suffixes=[".html"])

    count = min(args.examples, len(corpus))
    with heads_off(args, translator, "view"):
        examples = view_examples(
            translator, corpus.src[:count], corpus.tgt[:count], beam=beam, merge_pieces=not args.pieces,
            batch_size=args.batch_size, progress=not args.no_progress, saliency=args.saliency_options,
        )
    title = (f"{run_dir.name}: {config.model.type} {config.attention or ''}".rstrip()
             + f", {split}, {'greedy search' if beam == 1 else f'beam {beam}'}"
             + (f", heads switched off: {args.mask_heads}" if args.mask_heads.strip() else ""))
    write_attention_viewer(examples, out, title=title, overwrite=True)
    heads = len(examples[0].get("heads", {})) if examples else 0
    print(f"wrote {out}: {count} examples" + (f", {heads} attention matrices each" if heads else ""))
    return 0


def _view_hf(args: argparse.Namespace) -> int:
    """``view --hf MODEL --src FILE [--ref FILE]``: the first N lines of FILE."""
    from attnmt.data.corpus import read_lines
    from attnmt.errors import ConfigError, DataError
    from attnmt.runtime.outputs import check_output
    from attnmt.visual.examples import view_examples
    from attnmt.visual.viewer import write_attention_viewer

    if args.run_dir is not None:
        raise ConfigError("give a RUN folder or --hf MODEL, not both")
    if args.src is None:
        raise ConfigError("--hf: give the sentences to show with --src FILE (and their references with --ref FILE)")
    out = check_output(args.out or Path("view-hf.html"), "--out", args.overwrite, inputs=[args.src, args.ref, args.hf],
                       suffixes=[".html"])
    sources = read_lines(args.src)[: args.examples]
    references = read_lines(args.ref)[: args.examples] if args.ref is not None else None
    if references is not None and len(references) < len(sources):
        raise DataError(f"{args.ref} has {len(references)} lines, fewer than the {len(sources)} of {args.src} shown")
    translator = load_translator(args)
    say("view", translator.describe())
    beam = 1 if args.beam is None else args.beam
    with heads_off(args, translator, "view"):
        examples = view_examples(translator, sources, references, beam=beam, merge_pieces=not args.pieces,
                                 batch_size=args.batch_size, progress=not args.no_progress,
                                 saliency=args.saliency_options)
    write_attention_viewer(examples, out, title=f"{args.hf}, {'greedy search' if beam == 1 else f'beam {beam}'}",
                           overwrite=True)
    heads = len(examples[0].get("heads", {})) if examples else 0
    print(f"wrote {out}: {len(examples)} examples" + (f", {heads} attention matrices each" if heads else ""))
    return 0
