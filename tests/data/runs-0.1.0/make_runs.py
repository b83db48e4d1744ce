"""How the run folders beside this file were made, and what they gave, with attnmt 0.1.0.

Run once at commit 52223b0 (before the layout of 0.2.0), from the project root:

    .venv/bin/python tests/data/runs-0.1.0/make_runs.py

It trains a tiny translator on the made-up word-by-word task of the tests (an RNN with two-head
attention and the 0.1.0 config key ``tie_embeddings``), copies its run folder here, and writes
``expected.json``: what 0.1.0 gave for it (greedy and beam-5 translations, their scores and
attention, the evaluation of the validation split, and the metric records of a resumed training). ``tests/test_legacy_runs.py``
checks that the current attnmt gives exactly the same. Do not run it again: its point is that the
files were written by the old code.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import yaml

from attnmt.config import load_config
from attnmt.evaluation import evaluate_run
from attnmt.training import Trainer
from attnmt.translator import Translator

HERE = Path(__file__).resolve().parent
WORK = Path("/tmp/attnmt-legacy-runs")  # the data paths the run configs record
LEXICON = {
    "ein": "a", "der": "the", "mann": "man", "frau": "woman", "hund": "dog", "katze": "cat",
    "kind": "child", "läuft": "runs", "springt": "jumps", "sitzt": "sits", "spielt": "plays",
    "auf": "on", "im": "in", "park": "park", "garten": "garden", "ball": "ball", "rot": "red",
    "blau": "blue", "groß": "big", "klein": "small",
}
SENTENCES = ["Ein hund läuft im park.", "Der mann spielt.", "Klein katze sitzt auf der ball.", ""]


def write_corpus(folder: Path, name: str, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = sorted(LEXICON)
    src, tgt = [], []
    for _ in range(count):
        sentence = rng.choices(words, k=rng.randint(3, 7))
        src.append(" ".join(sentence).capitalize() + ".")
        tgt.append(" ".join(LEXICON[w] for w in sentence).capitalize() + ".")
    (folder / f"{name}.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (folder / f"{name}.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return [str(folder / f"{name}.de"), str(folder / f"{name}.en")]


MODELS = {
    "rnn": {"type": "rnn", "embed_dim": 16, "hidden_dim": 32, "dropout": 0.1, "attention": "multihead",
            "attention_options": {"num_heads": 2}, "tie_embeddings": True},
}


def rounded(value, digits: int = 6):
    return [rounded(v, digits) for v in value] if isinstance(value, list) else round(float(value), digits)


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "data").mkdir(parents=True)
    data = {"train": write_corpus(WORK / "data", "train", 200, 1), "valid": write_corpus(WORK / "data", "valid", 20, 2),
            "vocab_size": 64, "max_tokens": 160}
    expected = {}
    for name, model in MODELS.items():
        config = {"data": data, "model": model,
                  "training": {"lr": 0.01, "max_epochs": 3, "max_steps": 12, "log_every": 3, "checkpoint_every": 5,
                               "num_threads": 1, "bleu_max_sentences": 5, "examples": 0},
                  "search": {"beam": 1, "max_len_a": 1.5, "max_len_b": 5}}
        path = WORK / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
        run = WORK / name
        Trainer(load_config(path), run, show_progress=False, verbose=False).run()
        shutil.rmtree(HERE / name, ignore_errors=True)
        shutil.copytree(run, HERE / name)

        translator = Translator.load(run)
        outputs = {}
        for beam in (1, 5):
            translations = translator.translate(SENTENCES, beam=beam, return_attention=True)
            outputs[f"beam{beam}"] = [
                {"output": t.output, "out_pieces": t.out_pieces, "score": t.score,
                 "attention": rounded(t.attention.tolist()),
                 "heads": rounded(translator.layer_head_attention(t).tolist())}
                for t in translations
            ]
        evaluation = {beam: evaluate_run(run, split="valid", beam=beam).report for beam in (1, 5)}
        resumed = WORK / f"{name}-resumed"
        shutil.copytree(run, resumed)
        resumed_config = load_config(path, {"max_steps": 20})
        result = Trainer(resumed_config, resumed, resume=True, show_progress=False, verbose=False).run()
        records = [{k: v for k, v in r.items() if k not in ("elapsed", "tokens_per_s")} for r in result.history]
        expected[name] = {
            "translations": outputs,
            "evaluation": {str(beam): {key: report[key] for key in ("perplexity", "loss", "num_tokens", "bleu", "chrf",
                                                                   "step")}
                           for beam, report in evaluation.items()},
            "resumed_records": records,
        }
    expected["sentences"] = SENTENCES
    expected["work_folder"] = str(WORK)
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for file in (WORK / "data").iterdir():
        shutil.copy(file, HERE / file.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
