"""Write one self-contained HTML page of interactive attention heatmaps for a trained run.

Translates the first N sentences of a split and shows, for each, the source, the output, the
reference, its sentence BLEU and a heatmap: hover an output word to see where it looked. Subword
pieces are merged into words (--pieces keeps them). For multi-head models (the RNN's multihead
mechanism, Transformers) a menu picks "average" (what the search used) or one head ("head H", or
"layer L / head H"); per-head weights come from force-decoding the produced output. The page
needs no network and no other file. Default output: RUN/view-<split>.html.

Examples:
  attnmt view runs/sdp                                   # 50 sentences of test_2016_flickr, greedy
  attnmt view runs/transformer --beam 5 -n 20 --out transformer.html
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.commands.options import add_device_option, say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN", help="run folder (or a checkpoint file)")
    parser.add_argument("--split", default="test",
                        help="a Multi30k split name (test_2016_flickr, val, ...) or a name from the config's "
                             "data.test section; 'test' = the first test set (default)")
    parser.add_argument("-n", "--examples", type=int, default=50, metavar="N",
                        help="the first N sentences of the split (default 50)")
    parser.add_argument("--beam", type=int, default=None, metavar="K",
                        help="beam size (default: the run's search.beam, 1 = greedy)")
    parser.add_argument("--checkpoint", default="best", choices=["best", "last"], help="which checkpoint (default best)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="the HTML file (default RUN/view-<split>.html)")
    parser.add_argument("--overwrite", action="store_true", help="replace the HTML file if it exists")
    parser.add_argument("--pieces", action="store_true", help="show subword pieces instead of words")
    parser.add_argument("--batch-size", type=int, default=None, metavar="B", help="sentences decoded at once")
    add_device_option(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from attnmt.data import load_split
    from attnmt.errors import ConfigError
    from attnmt.plotting import write_attention_viewer
    from attnmt.runs import checkpoint_path
    from attnmt.translator import Translator
    from attnmt.viewing import view_examples

    if args.beam is not None and args.beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {args.beam}")
    if args.examples < 1:
        raise ConfigError(f"-n must be >= 1, got {args.examples}")
    path = checkpoint_path(args.run_dir, args.checkpoint)
    run_dir = path.parent
    translator = Translator.load(path, device=args.device)
    say("view", translator.describe())
    config = translator.run_config
    split, corpus = config.data.canonical_split(args.split), load_split(config.data, args.split)
    beam = translator.search.beam if args.beam is None else args.beam
    out = args.out or run_dir / f"view-{split}.html"
    if out.exists() and not args.overwrite:
        raise ConfigError(f"{out} already exists; pass --overwrite to replace it, or choose another --out")

    count = min(args.examples, len(corpus))
    examples = view_examples(
        translator, corpus.src[:count], corpus.tgt[:count], beam=beam, merge_pieces=not args.pieces,
        batch_size=args.batch_size, progress=not args.no_progress,
    )
    title = (f"{run_dir.name}: {config.model.type} {config.attention or ''}".rstrip()
             + f", {split}, {'greedy search' if beam == 1 else f'beam {beam}'}")
    write_attention_viewer(examples, out, title=title, overwrite=True)
    heads = len(examples[0].get("heads", {})) if examples else 0
    print(f"wrote {out}: {count} examples" + (f", {heads} attention matrices each" if heads else ""))
    return 0
