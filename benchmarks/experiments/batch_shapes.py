"""How many batch shapes does an epoch hold, and how much padding, for each ``data.pad_multiple``?

Reads a run's training data with its own tokenizers (its ``data`` section: the split, max_length,
max_tokens) and batches epochs as the trainer does (``attnmt.data.batch_indices``, the run's
seed), for each multiple: the batches per epoch, the distinct (B, S, T) shapes per epoch and over
all the epochs asked, the distinct (S, T) width pairs and batch sizes B among them, the share of target positions that are padding, the
real target tokens per batch, and the distinct counts N of real target tokens (the rows of the
output layer) over the epochs, as they are and on the token ladder (``--token-ladder``, the extra
rows as a share of the real ones). With ``--row-ladders``, each multiple is batched once per row
ladder too (``data.row_ladder``: each batch's row count on R sizes per doubling; 0 is off): its key
in the JSON is "M" for R = 0 and "M, rows R" otherwise. No training: the shapes are those the
training would see.

    PYTHONPATH=benchmarks python benchmarks/experiments/batch_shapes.py runs/fast --multiples 1 2 4 8 16 \\
        --row-ladders 0 4 --epochs 3 --json benchmarks/results/speed/batch_shapes_rnn5.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnmt.data import batch_indices, load_split
from attnmt.data.batching import ladder_size, padded_width
from attnmt.decoding.translator import Translator
from attnmt.runs.folder import data_of_run
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import machine, portable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder (its tokenizers and data section)")
    parser.add_argument("--multiples", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--token-ladder", type=int, default=16, help="sizes per doubling (data.token_ladder)")
    parser.add_argument("--row-ladders", type=int, nargs="+", default=[0],
                        help="sizes per doubling of a batch's rows (data.row_ladder; 0: off); default 0")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    translator = Translator.load(args.run, num_threads=1)
    config = translator.run_config
    data = data_of_run(args.run, config.data)
    train = load_split(data, "train")
    src = translator.tokenizers.src.encode_many(list(train.src))
    tgt = translator.tokenizers.tgt.encode_many(list(train.tgt))
    limit = data.max_length or 10**9
    kept = [k for k in range(len(src)) if len(src[k]) <= limit and len(tgt[k]) <= limit]
    src_lengths, tgt_lengths = [len(src[k]) for k in kept], [len(tgt[k]) for k in kept]
    rows, results = [], {}
    arms = [(multiple, row_ladder) for multiple in args.multiples for row_ladder in args.row_ladders]
    for multiple, row_ladder in arms:
        key = f"{multiple}, rows {row_ladder}" if row_ladder else str(multiple)
        every, per_epoch, batches_per_epoch, sizes = set(), [], [], set()
        real = padding = extra_rows = 0
        counts, ladder_counts, width_pairs = set(), set(), set()
        for epoch in range(args.epochs):
            shapes = set()
            batches = batch_indices(src_lengths, tgt_lengths, max_tokens=data.max_tokens, shuffle=True,
                                    seed=config.training.seed, epoch=epoch, pad_multiple=multiple,
                                    row_ladder=row_ladder)
            for batch in batches:
                width_s = padded_width(max(src_lengths[k] for k in batch) + 1, multiple)
                width_t = padded_width(max(tgt_lengths[k] for k in batch) + 1, multiple)
                shapes.add((len(batch), width_s, width_t))
                width_pairs.add((width_s, width_t))
                sizes.add(len(batch))
                tokens = sum(tgt_lengths[k] + 1 for k in batch)
                scored_rows = min(ladder_size(tokens, args.token_ladder), len(batch) * width_t)
                counts.add(tokens)
                ladder_counts.add(scored_rows)
                extra_rows += scored_rows - tokens
                real += tokens
                padding += len(batch) * width_t - tokens
            every |= shapes
            per_epoch.append(len(shapes))
            batches_per_epoch.append(len(batches))
        results[key] = {"row_ladder": row_ladder, "shapes_per_epoch": per_epoch, "shapes_over_epochs": len(every),
                                  "batch_sizes": len(sizes), "batches_per_epoch": batches_per_epoch,
                                  "target_padding_share": padding / (real + padding),
                                  "target_tokens_per_batch": real / sum(batches_per_epoch),
                                  "width_pairs_over_epochs": len(width_pairs),
                                  "token_counts_over_epochs": len(counts),
                                  "token_ladder": args.token_ladder,
                                  "token_ladder_sizes_over_epochs": len(ladder_counts),
                                  "token_ladder_extra_rows_share": extra_rows / real}
        rows.append([multiple, row_ladder, "/".join(map(str, per_epoch)), len(every), len(width_pairs), len(sizes),
                     batches_per_epoch[0],
                     f"{results[key]['target_padding_share']:.3f}",
                     f"{results[key]['target_tokens_per_batch']:.0f}", len(counts), len(ladder_counts),
                     f"{extra_rows / real:.3f}"])
    print(f"{args.run}: {len(kept):,} training pairs, max_tokens {data.max_tokens}, {args.epochs} epochs")
    print(format_table(["pad_multiple", "row_ladder", "shapes per epoch", "over the epochs", "width pairs", "batch sizes", "batches",
                        "target padding", "target tokens / batch", "token counts",
                        f"on the ladder ({args.token_ladder})", "extra rows"], rows))
    if args.json is not None:
        document = {"command": portable(" ".join(["PYTHONPATH=benchmarks python",
                                                  "benchmarks/experiments/batch_shapes.py", *sys.argv[1:]])),
                    "machine": machine("torch"), "run": portable(str(args.run)), "pairs": len(kept),
                    "max_tokens": data.max_tokens, "epochs": args.epochs, "multiples": results}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.json, json.dumps(document, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
