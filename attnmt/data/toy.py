"""A made-up German→English task for smoke tests and teaching: sentences of 3–7 words drawn from
a 20-word lexicon, each translated word by word. A translator learns it in seconds on a CPU, and
its attention should be diagonal: output word j looks at source word j.

    write_corpus(folder, "train", 200, seed=1)      # folder/train.de, folder/train.en
    toy_run_config(folder)                          # a run config (a dict) training a tiny RNN on it
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

__all__ = ["LEXICON", "make_pairs", "toy_run_config", "write_corpus"]

#: German word -> English word
LEXICON = {
    "ein": "a", "der": "the", "mann": "man", "frau": "woman", "hund": "dog", "katze": "cat",
    "kind": "child", "läuft": "runs", "springt": "jumps", "sitzt": "sits", "spielt": "plays",
    "auf": "on", "im": "in", "park": "park", "garten": "garden", "ball": "ball", "rot": "red",
    "blau": "blue", "groß": "big", "klein": "small",
}


def make_pairs(count: int, seed: int) -> tuple[list[str], list[str]]:
    """``count`` (German, English) sentence pairs, the same for the same seed."""
    rng = random.Random(seed)
    words = sorted(LEXICON)
    src, tgt = [], []
    for _ in range(count):
        sentence = rng.choices(words, k=rng.randint(3, 7))
        src.append(" ".join(sentence).capitalize() + ".")
        tgt.append(" ".join(LEXICON[w] for w in sentence).capitalize() + ".")
    return src, tgt


def write_corpus(folder: Path, name: str, count: int, seed: int) -> list[str]:
    """Write ``folder/name.de`` and ``folder/name.en``; returns the two file names."""
    src, tgt = make_pairs(count, seed)
    (folder / f"{name}.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (folder / f"{name}.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return [f"{name}.de", f"{name}.en"]


def toy_run_config(folder: Path, train_pairs: int = 200, valid_pairs: int = 20, **training: Any) -> dict:
    """A run config (a plain dict) for a ~20k-parameter RNN on the task, its files written into
    ``folder``; ``training`` options override those of the ``training:`` section."""
    return {
        "data": {
            "train": write_corpus(folder, "train", train_pairs, seed=1),
            "valid": write_corpus(folder, "valid", valid_pairs, seed=2),
            "vocab_size": 64,
            "max_tokens": 160,
        },
        "model": {"type": "rnn", "embed_dim": 16, "hidden_dim": 32, "dropout": 0.1, "attention": "scaled_dot"},
        "training": {
            "lr": 0.01, "max_epochs": 2, "log_every": 5, "checkpoint_every": 5, "num_threads": 1,
            "bleu_max_sentences": 5, "examples": 1, **training,
        },
    }
