"""Target tokens per training batch, measured with each toolkit's own batching code, and the JoeyNMT
``batch_size`` whose batches hold as many target tokens as attnmt's.

The two toolkits fill a batch differently. attnmt sorts pairs by length before cutting batches, so a
batch of ``max_tokens`` 4,096 holds little padding (``attnmt.data.batching``). JoeyNMT 2.3's
``TokenBatchSampler`` takes shuffled pairs as they come, and counts ``len(batch) · max(|x|+1, |y|+1)``
padding included, so the same 4,096 holds about half the target tokens. A race at equal
``batch_size`` would give JoeyNMT half the work per step; this script finds the JoeyNMT value that
gives both the same target tokens per step, over one whole epoch of each toolkit's own batches.

Target tokens are counted as both toolkits count them: each reference's pieces and its
end-of-sentence token. Needs JoeyNMT 2.3 importable (``PYTHONPATH``) and ``prepare.py``'s folder.

    PYTHONPATH=benchmarks:/path/to/joeynmt-site python benchmarks/peers/joeynmt/batches.py \\
        --recipe multi30k_rnn_gpu --joey-config runs/peer/rnn.yaml --json batches-rnn.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from attnmt.data import batch_indices
from attnmt.runs.run_config import load_config
from attnmt.runtime.atomic_files import write_text_atomic

TRAIN_SPLIT = "train"


def attnmt_batches(recipe: str, tokenizer: Path, data: Path) -> dict:
    """Target tokens of each batch of attnmt's first epoch, with the recipe's ``max_tokens`` and seed."""
    import sentencepiece  # noqa: PLC0415 (the pieces JoeyNMT sees: the same model file)

    config = load_config(recipe)
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer))
    src, tgt = ([len(ids) for ids in pieces.encode(read_lines(data / f"{TRAIN_SPLIT}.{lang}"))]
                for lang in (config.data.src_lang, config.data.tgt_lang))
    kept = [k for k in range(len(src)) if src[k] <= config.data.max_length and tgt[k] <= config.data.max_length]
    src, tgt = [src[k] for k in kept], [tgt[k] for k in kept]
    batches = batch_indices(src, tgt, max_tokens=config.data.max_tokens, shuffle=True,
                            seed=config.training.seed, epoch=0)
    return summary([sum(tgt[k] + 1 for k in batch) for batch in batches], config.data.max_tokens)


def joeynmt_batches(config_file: Path, batch_size: int) -> dict:
    """Target tokens of each batch of JoeyNMT's first epoch, from its own data loader at ``batch_size``."""
    from joeynmt.config import load_config as joey_load_config  # noqa: PLC0415 (optional: the peer)
    from joeynmt.config import parse_global_args  # noqa: PLC0415
    from joeynmt.data import load_data  # noqa: PLC0415

    config = parse_global_args(joey_load_config(config_file), rank=0, mode="train")
    _, target_vocab, train_data, _, _ = load_data(config.data, datasets=["train"])
    loader = train_data.make_iter(batch_size=batch_size, batch_type=config.train.batch_type, seed=config.seed,
                                  shuffle=True, pad_index=target_vocab.pad_index, eos_index=target_vocab.eos_index)
    sizes = [int(batch.ntokens) for batch in loader]
    return summary(sizes, batch_size)


def summary(sizes: list[int], budget: int) -> dict:
    return {"budget": budget, "batches": len(sizes), "target_tokens": sum(sizes),
            "target_tokens_per_batch_mean": statistics.fmean(sizes),
            "target_tokens_per_batch_median": statistics.median(sizes)}


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True, help="attnmt recipe or config file (its max_tokens and seed)")
    parser.add_argument("--joey-config", required=True, type=Path, help="JoeyNMT config (its data and seed)")
    parser.add_argument("--data", type=Path, default=Path("runs/peer/data"), help="prepare.py's folder")
    parser.add_argument("--candidates", type=int, nargs="+",
                        default=[4096, 6144, 7168, 7680, 8192, 8704, 9216, 10240],
                        help="JoeyNMT batch_size values to measure")
    parser.add_argument("--json", type=Path, required=True, help="where to write the measurement")
    args = parser.parse_args(argv)
    ours = attnmt_batches(args.recipe, args.data / "spm.joint.model", args.data)
    theirs = [joeynmt_batches(args.joey_config, size) for size in args.candidates]
    goal = ours["target_tokens_per_batch_mean"]
    chosen = min(theirs, key=lambda row: abs(row["target_tokens_per_batch_mean"] - goal))
    result = {"question": "JoeyNMT batch_size giving attnmt's target tokens per batch", "recipe": args.recipe,
              "attnmt": ours, "joeynmt": theirs, "chosen_joeynmt_batch_size": chosen["budget"],
              "ratio_chosen": chosen["target_tokens_per_batch_mean"] / goal}
    write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    print(f"attnmt max_tokens {ours['budget']}: {ours['batches']} batches, {goal:.0f} target tokens a batch")
    for row in theirs:
        print(f"JoeyNMT batch_size {row['budget']}: {row['batches']} batches, "
              f"{row['target_tokens_per_batch_mean']:.0f} target tokens a batch")
    print(f"chosen: JoeyNMT batch_size {chosen['budget']} ({result['ratio_chosen']:.3f} of attnmt's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
