"""What attnmt 0.2.0 computed for the attributions, before they moved to ``attnmt.attribution``.

Run once at commit 3a1f06c, from the project root, with one thread:

    OMP_NUM_THREADS=1 .venv/bin/python tests/data/attributions-0.2.0/make_expected.py

It trains a tiny RNN (one-head scaled dot-product attention) on the made-up word-by-word task of
the tests and keeps its run folder here as ``rnn/`` (the weights are fixed from then on, so the
figures below do not depend on the processor that trained them), then writes ``expected.json``:
for that run, ``attnmt explain --json`` of three sentences (every method that applies) and every
attribution's [T, S] matrices; for a tiny Transformer made from a seed (not trained: no other processor would
train the same numbers), the matrices of value norms, ALTI+ and rollout. ``tests/test_attribution_registry.py``
checks that the current attnmt gives the same numbers. Do not run it again: its point is that the
figures were computed by the old code.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/, for helpers

from attnmt.cli import main as cli_main  # noqa: E402
from attnmt.decoding.translator import Translator  # noqa: E402
from attnmt.models import build_model  # noqa: E402
from attnmt.models.saliency import saliency  # noqa: E402

from helpers import run_trainer, tiny_run_config, tiny_transformer_config  # noqa: E402

RUN = HERE / "rnn"
KEPT = ("best.pt", "config.yaml", "tokenizers.json")
SENTENCES = ["ein hund läuft im park .", "der mann spielt .", "klein katze sitzt auf der ball ."]
RNN_METHODS = ("gradient", "smoothgrad", "integrated", "value_norm", "erasure")
TRANSFORMER_METHODS = ("value_norm", "alti", "rollout", "erasure", "gradient")
SOURCES = [[5, 9, 7, 11, 3], [6, 12, 3], [8, 4, 14, 10, 13, 9, 3]]
OUTPUTS = [[7, 6, 15, 3], [9, 10, 11, 16, 12, 3], [4, 3]]


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        config = tiny_run_config(Path(work), train_pairs=400, max_epochs=25)
        run_trainer(Path(work), config)
        if RUN.exists():
            shutil.rmtree(RUN)
        RUN.mkdir()
        for path in Path(work, "run").iterdir():
            if path.name in KEPT or path.suffix == ".model":
                shutil.copy(path, RUN / path.name)
        config_file = RUN / "config.yaml"  # the training data's folder is gone: say so, not where it was
        config_file.write_text(config_file.read_text(encoding="utf-8").replace(work, "toy-data"), encoding="utf-8")
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        cli_main(["explain", str(RUN), *SENTENCES, "--json", "--device", "cpu", "--trust"])
    explained = [json.loads(line) for line in captured.getvalue().splitlines()]
    translator = Translator.load(RUN, device="cpu")
    translations = translator.translate(SENTENCES, return_attention=True)
    rnn = {method: [matrix.tolist() for matrix in translator.read_saliency(translations, method)]
           for method in RNN_METHODS}
    torch.manual_seed(0)
    model = build_model(tiny_transformer_config(), 20, 20).double().eval()
    transformer = {method: [dict(saliency(model, SOURCES, OUTPUTS, method=method))[k].tolist()
                            for k in range(len(SOURCES))] for method in TRANSFORMER_METHODS}
    expected = {"commit": "3a1f06c", "sentences": SENTENCES, "explain_json": explained, "rnn": rnn,
                "transformer_sources": SOURCES, "transformer_outputs": OUTPUTS, "transformer": transformer}
    text = json.dumps(expected, ensure_ascii=False, separators=(",", ":"))
    (HERE / "expected.json").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
