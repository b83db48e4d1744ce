"""``attnmt view``: one self-contained HTML page of translations and their attention, per head for
multi-head models, on tiny runs trained here on made-up data (test_training's helpers)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from attnmt.cli import main as cli_main
from attnmt.data.pieces import merge_subwords
from attnmt.decoding.translator import Translator
from attnmt.models.readout import force_decode
from attnmt.visual.examples import named_heads, view_examples

from helpers import tolerance

pytestmark = pytest.mark.slow  # tiny trained runs


def _viewer_data(page: str) -> dict:
    """The JSON the page's script reads (every example with its matrices)."""
    match = re.search(r'<script type="application/json" id="attnmt-data">(.*?)</script>', page, re.DOTALL)
    assert match is not None, "no embedded example data found in the page"
    return json.loads(match.group(1))


def test_view_writes_one_page_with_n_examples_of_the_right_sizes(tiny_run, capsys):
    name, run = tiny_run
    assert cli_main(["view", str(run), "-n", "5", "--no-progress"]) == 0
    page_path = run / "view-made_up.html"
    assert f"wrote {page_path}: 5 examples" in capsys.readouterr().out
    page = page_path.read_text(encoding="utf-8")
    assert page.count('class="example"') == 5
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page  # self-contained
    data = _viewer_data(page)["examples"]
    assert len(data) == 5
    expected_names = {
        "sdp": ["weights"],
        "multihead": ["average", "head 1", "head 2"],
        "transformer": ["average"] + [f"layer {layer} / head {head}" for layer in (1, 2) for head in (1, 2)],
    }[name]
    for example in data:
        assert [matrix_name for matrix_name, _ in example["matrices"]] == expected_names
        assert example["src"][-1] == "</s>" and example["out"][-1] == "</s>"
        # Words: no piece marker left, except a bare "▁" piece that stands alone.
        assert not any(token.startswith("\u2581") and token != "\u2581" for token in example["src"] + example["out"])
        for _, matrix in example["matrices"]:
            assert np.asarray(matrix).shape == (len(example["out"]), len(example["src"]))
            np.testing.assert_allclose(np.asarray(matrix).sum(axis=1), 1.0, atol=2e-3)  # rows: distributions
        assert dict(example["meta"])["beam"] == "1" and "BLEU" in dict(example["meta"])
        assert example["reference"]

    # Refuses to overwrite; --pieces keeps subword pieces; --out and --beam.
    assert cli_main(["view", str(run), "-n", "2", "--no-progress"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    other = run.parent / "pieces.html"
    assert cli_main(["view", str(run), "-n", "2", "--pieces", "--beam", "3", "--out", str(other),
                     "--split", "made_up", "--no-progress"]) == 0
    pieces = _viewer_data(other.read_text(encoding="utf-8"))["examples"]
    assert len(pieces) == 2 and dict(pieces[0]["meta"])["beam"] == "3"
    assert any(token.startswith("\u2581") for token in pieces[0]["src"])


def test_per_head_weights_reproduce_the_search_attention(tiny_run):
    """Force-decoding the output gives per-head weights whose mean (over the last layer's heads)
    is the attention the search reported, and merging pieces is merge_subwords on each matrix."""
    name, run = tiny_run
    translator = Translator.load(run)
    noise = tolerance(1e-6, translator.device)  # a sentence alone, in a batch, or read out: float noise
    sources = ["Ein hund läuft im park.", "Der mann spielt ball auf rot."]
    examples = view_examples(translator, sources, merge_pieces=False, beam=2)
    translations = translator.translate(sources, beam=2, return_attention=True)
    for example, translation in zip(examples, translations):
        assert example["src_tokens"] == translation.src_pieces and example["out_tokens"] == translation.out_pieces
        if name == "sdp":
            np.testing.assert_allclose(example["weights"], translation.attention, atol=noise)
            continue
        heads = example["heads"]
        np.testing.assert_allclose(heads["average"], translation.attention, atol=noise)
        if name == "multihead":
            mean = np.mean([heads["head 1"], heads["head 2"]], axis=0)
        else:
            mean = np.mean([heads["layer 2 / head 1"], heads["layer 2 / head 2"]], axis=0)
        np.testing.assert_allclose(mean, translation.attention, atol=max(noise, 1e-5))
    merged = view_examples(translator, sources[:1], merge_pieces=True, beam=2)[0]
    for matrix_name, matrix in (merged.get("heads") or {"weights": merged.get("weights")}).items():
        source = examples[0]["heads"][matrix_name] if "heads" in examples[0] else examples[0]["weights"]
        expected, src_words, out_words = merge_subwords(source, examples[0]["src_tokens"], examples[0]["out_tokens"])
        np.testing.assert_allclose(matrix, expected, atol=noise)  # one sentence decoded alone: float noise
        assert merged["src_tokens"] == src_words and merged["out_tokens"] == out_words


def test_single_head_models_have_no_per_head_matrices(tiny_run):
    name, run = tiny_run
    translator = Translator.load(run)
    [(_, reading)] = force_decode(translator.model, [[5, 6, 3]], [[7, 3]])
    heads = named_heads(reading.weights)
    if name == "sdp":
        assert heads is None
    else:
        assert all(matrix.shape == (2, 3) for matrix in heads.values())
        assert len(heads) == {"multihead": 2, "transformer": 4}[name]
    assert torch.is_grad_enabled()


def test_view_with_saliency_shows_it_merged_into_words_with_each_rows_agreement(tiny_run, capsys):
    """--saliency: each example carries the translator's saliency of its output, merged into words
    (an output word's pieces summed, as its log-probability is their sum), the agreement of every
    word's row, and the example's mean in its badges."""
    from attnmt.evaluation.agreement import row_agreement

    _, run = tiny_run
    out = run.parent / "saliency.html"
    assert cli_main(["view", str(run), "-n", "3", "--no-progress", "--attribution", "gradient", "--out", str(out)]) == 0
    data = _viewer_data(out.read_text(encoding="utf-8"))["examples"]
    translator = Translator.load(run)
    translations = translator.translate([example["source"] for example in data], return_attention=True)
    scores = translator.read_attributions(translations)
    for example, translation, matrix in zip(data, translations, scores):
        merged, src_words, out_words = merge_subwords(matrix, translation.src_pieces, translation.out_pieces,
                                                      output_words="sum")
        assert (example["src"], example["out"]) == (src_words, out_words)
        np.testing.assert_allclose(example["saliency"], merged, atol=1e-4)
        assert example["saliency_method"] == "gradient × input"
        attention = merge_subwords(translation.attention, translation.src_pieces, translation.out_pieces)[0]
        for row, (correlation, same_top) in enumerate(example["agreement"]):
            rows, tops, _ = row_agreement(attention[None, row, :-1], merged[None, row, :-1])
            if out_words[row] == "</s>" or not rows:
                assert (correlation, same_top) == (None, None)
            else:
                assert correlation == pytest.approx(rows[0], abs=1e-3) and same_top == tops[0]
    assert cli_main(["view", str(run), "-n", "1", "--no-progress", "--attribution", "integrated", "--attribution-steps",
                     "0", "--out", str(run.parent / "x.html")]) == 2
    assert "--attribution-steps 0: must be an integer from 1 to 10000" in capsys.readouterr().err
    assert not (run.parent / "x.html").exists()


def test_view_with_an_attribution_shows_this_sentences_faithfulness(tiny_run):
    """Any method of the registry (here erasure, and ALTI+ on the Transformer) goes beside the
    attention, and each example's readout gives comprehensiveness and sufficiency for the
    attention, the method and a random ranking."""
    name, run = tiny_run
    method = "alti" if name == "transformer" else "erasure"
    out = run.parent / f"faithful-{method}.html"
    assert cli_main(["view", str(run), "-n", "2", "--no-progress", "--attribution", method, "--out", str(out),
                     "--overwrite"]) == 0
    for example in _viewer_data(out.read_text(encoding="utf-8"))["examples"]:
        meta = dict(example["meta"])
        key = f"comprehensiveness (attention / {method} / random)"
        assert key in meta and len(meta[key].split(" / ")) == 3, meta
        assert f"sufficiency (attention / {method} / random)" in meta
