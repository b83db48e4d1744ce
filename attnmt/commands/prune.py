"""Write a run whose Transformer no longer holds some heads: their rows of W^Q, W^K, W^V and columns
of W^O removed, not masked. The new run translates as the original does with those heads switched
off (--mask-heads SPEC), with fewer products; every command and serve read it. It has best.pt, its
config.yaml and pruned.json (the run it came from, the heads removed), and no last.pt: it is not
trained further. --out must not exist; nothing is written over a run.

Examples:
  attnmt heads runs/transformer                        # which heads matter least
  attnmt prune runs/transformer --heads encoder_self:1:2,cross:2:4 --out runs/transformer-pruned
  attnmt evaluate runs/transformer-pruned --beam 5
"""

from __future__ import annotations

import argparse

from attnmt.commands.options import add_checkpoint_option, say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a run of attnmt's Transformer (or a checkpoint file)")
    parser.add_argument("--heads", required=True, metavar="SPEC",
                        help="the heads to remove: a comma list of PART:LAYER:HEAD (PART encoder_self, decoder_self "
                             "or cross; LAYER and HEAD from 1, or *)")
    parser.add_argument("--out", required=True, metavar="NEW_RUN", help="the new run folder (must not exist)")
    add_checkpoint_option(parser)


def run(args: argparse.Namespace) -> int:
    from attnmt.runs.pruned import write_pruned_run

    out, labels = write_pruned_run(args.run_dir, args.heads, args.out, args.checkpoint)
    say("prune", f"{len(labels)} heads removed in all ({', '.join(labels)})")
    print(f"wrote {out}")
    return 0
