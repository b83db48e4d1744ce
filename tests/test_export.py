"""Exported attention: ``attnmt translate --attention-out FILE`` (.npz, .jsonl) and
``attnmt.load_attention``, on tiny runs of a single-head RNN, a multi-head RNN and a Transformer."""

from __future__ import annotations

import io
import json
import re
import sys

import numpy as np
import pytest

import attnmt
from attnmt.attribution.methods import AttributionOptions
from attnmt.cli import main as cli_main
from attnmt.decoding.translator import Translator
from attnmt.errors import DataError
from attnmt.visual.export import attention_records

pytestmark = pytest.mark.slow  # tiny trained runs

SENTENCES = ["Ein Hund läuft.", "Eine Frau sitzt im Park.", "Ein Mann."]
SHAPES = {"sdp": (1, 1), "multihead": (1, 2), "transformer": (2, 2)}  # (L, h)


@pytest.mark.parametrize("suffix", [".npz", ".jsonl"])
def test_attention_out_round_trips_and_every_row_is_a_distribution(tiny_run, tmp_path, capsys, suffix):
    name, run = tiny_run
    path = tmp_path / f"attention{suffix}"
    assert cli_main(["translate", str(run), *SENTENCES, "--beam", "2", "--attention-out", str(path)]) == 0
    outputs = capsys.readouterr().out.splitlines()
    records = attnmt.load_attention(path)
    assert [r.index for r in records] == [0, 1, 2] and [r.source for r in records] == SENTENCES
    assert [r.output for r in records] == outputs
    translator = Translator.load(run)
    translations = translator.translate(SENTENCES, beam=2, return_attention=True)
    expected = attention_records(translator, translations)
    for record, again, translation in zip(records, expected, translations):
        layers, heads = SHAPES[name]
        assert record.weights.shape == (layers, heads, len(record.out_pieces), len(record.src_pieces))
        assert record.weights.dtype == np.float32 and np.array_equal(record.weights, again.weights)  # exact
        assert record.src_pieces == translation.src_pieces and record.out_pieces[-1] == "</s>"
        np.testing.assert_allclose(record.weights.sum(axis=-1), 1.0, atol=1e-5)  # over the real source positions
        # The search's own matrix is the mean over the heads of the last layer: force-decoding reproduces it.
        np.testing.assert_allclose(record.weights[-1].mean(axis=0), translation.attention, atol=1e-5)
        assert len(record.src_word_of_piece) == len(record.src_pieces)
        assert record.src_word_of_piece[-1] == len(record.src_words) - 1 and record.src_words[-1] == "</s>"
        assert sorted(set(record.out_word_of_piece)) == list(range(len(record.out_words)))
        words = record.word_weights()
        assert words.shape == (len(record.out_words), len(record.src_words))
        np.testing.assert_allclose(words.sum(axis=1), 1.0, atol=1e-5)


def test_attention_out_from_standard_input_numbers_records_by_line(tiny_run, tmp_path, capsys, monkeypatch):
    _, run = tiny_run
    path = tmp_path / "stdin.jsonl"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Ein Hund.\n\nZwei \xff.\nEin Mann.\n")))
    assert cli_main(["translate", str(run), "--attention-out", str(path)]) == 2  # line 3 is not UTF-8
    captured = capsys.readouterr()
    assert len(captured.out.split("\n")) == 5 and "2 sentences" in captured.err
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["index"] for line in lines] == [0, 3]
    assert lines[0]["axes"] == ["layer", "head", "output piece", "source piece"]
    assert lines[0]["shape"] == list(np.asarray(lines[0]["weights"]).shape)


def test_attention_out_refuses_bad_targets_before_any_work(tiny_run, tmp_path, capsys):
    _, run = tiny_run
    assert cli_main(["translate", str(run), "Ein Hund.", "--attention-out", str(tmp_path / "a.csv")]) == 2
    assert "a.csv: the file name must end in .npz or .jsonl, got '.csv'" in capsys.readouterr().err
    (tmp_path / "old.npz").write_bytes(b"mine")
    assert cli_main(["translate", str(run), "Ein Hund.", "--attention-out", str(tmp_path / "old.npz")]) == 2
    assert "old.npz exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert (tmp_path / "old.npz").read_bytes() == b"mine"
    assert cli_main(["translate", str(run), "Ein Hund.", "--attention-out", str(tmp_path / "old.npz"),
                     "--overwrite"]) == 0
    assert len(attnmt.load_attention(tmp_path / "old.npz")) == 1


def test_load_attention_names_the_file_and_line_it_cannot_read(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        attnmt.load_attention(tmp_path / "missing.npz")
    (tmp_path / "bad.jsonl").write_text('{"format": "attnmt-attention/1"}\nnot json\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.jsonl, line 1: not an attention record of attnmt \(no index"):
        attnmt.load_attention(tmp_path / "bad.jsonl")
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n', encoding="utf-8")
    with pytest.raises(DataError, match="other.jsonl, line 1: not an attention record of attnmt"):
        attnmt.load_attention(tmp_path / "other.jsonl")
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 broken")
    with pytest.raises(DataError, match="broken.npz: not a readable .npz attention file"):
        attnmt.load_attention(tmp_path / "broken.npz")
    np.savez(tmp_path / "foreign.npz", x=np.zeros(3))
    with pytest.raises(DataError, match="foreign.npz: not an attention file of attnmt"):
        attnmt.load_attention(tmp_path / "foreign.npz")


@pytest.mark.parametrize("edit, words", [
    (lambda r: r.update(weights=[[[[float("nan")] * len(r["src_pieces"])] * len(r["out_pieces"])]]), "not finite"),
    (lambda r: r["weights"][0][0][0].__setitem__(0, -0.5), "must lie in [0, 1]"),
    (lambda r: r.update(weights="many"), "must be real numbers"),
    (lambda r: r.update(src_pieces="abc"), "src_pieces must be a list of strings"),
    (lambda r: r.update(out_word_of_piece=[99] * len(r["out_pieces"])), "out_word_of_piece must give"),
    (lambda r: r.update(index=-1), "index must be an integer >= 0"),
    (lambda r: r.update(source=None), "source must be a string"),
])
def test_a_hand_edited_attention_record_is_refused_naming_its_line(tiny_run, tmp_path, capsys, edit, words):
    """Malformed, non-finite, negative or complex weights are a DataError naming the file and line."""
    _, run = tiny_run
    path = tmp_path / "attention.jsonl"
    assert cli_main(["translate", str(run), SENTENCES[0], "--attention-out", str(path)]) == 0
    record = json.loads(path.read_text(encoding="utf-8"))
    edit(record)
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"attention.jsonl, line 1: .*{re.escape(words)}"):
        attnmt.load_attention(path)


def test_complex_weights_in_an_npz_are_refused(tmp_path):
    path = tmp_path / "complex.npz"
    record = {"index": 0, "source": "a", "output": "b", "src_pieces": ["a"], "out_pieces": ["b"], "src_words": ["a"],
              "out_words": ["b"], "src_word_of_piece": [0], "out_word_of_piece": [0]}
    np.savez(path, format=np.array("attnmt-attention/1"), records=np.array(json.dumps([record])),
             weights_0=np.ones((1, 1, 1, 1), dtype=np.complex64))
    with pytest.raises(DataError, match="record 0: the weights must be real numbers"):
        attnmt.load_attention(path)


def test_an_attribution_is_stored_beside_the_attention_and_merges_into_words_like_it(tiny_run, tmp_path, capsys):
    name, run = tiny_run
    suffix = ".jsonl" if name == "multihead" else ".npz"  # both formats, one run each
    path = tmp_path / f"saliency{suffix}"
    # one thread on both sides: "exact" holds for one fixed thread count (two threads split the
    # products by the batch's shape, and the command batches otherwise than this call)
    assert cli_main(["translate", str(run), *SENTENCES, "--attention-out", str(path), "--attribution", "integrated",
                     "--attribution-steps", "8", "--threads", "1"]) == 0
    records = attnmt.load_attention(path)
    translator = Translator.load(run, num_threads=1)
    expected = translator.read_attributions(translator.translate(SENTENCES), AttributionOptions("integrated", steps=8))
    for record, scores in zip(records, expected):
        assert record.attribution_method == "integrated gradients (8 steps)"
        assert record.attribution.dtype == np.float32 and np.array_equal(record.attribution, scores)  # exact
        words = record.word_attribution()  # summed over a source word's pieces and over an output word's
        src_words = np.eye(len(record.src_words))[record.src_word_of_piece]  # [S, S']
        out_words = np.eye(len(record.out_words))[record.out_word_of_piece]  # [T, T']
        np.testing.assert_allclose(words, out_words.T @ record.attribution @ src_words, atol=1e-5)
    plain = tmp_path / f"plain{suffix}"
    assert cli_main(["translate", str(run), "Ein Hund.", "--attention-out", str(plain)]) == 0
    [record] = attnmt.load_attention(plain)
    assert record.attribution is None and record.attribution_method is None
    with pytest.raises(ValueError, match="no attribution"):
        record.word_attribution()


def test_saliency_options_are_checked_before_any_work(tiny_run, tmp_path, capsys):
    _, run = tiny_run
    assert cli_main(["translate", str(run), "Ein Hund.", "--attribution", "gradient"]) == 2
    assert "--attribution is stored with the attention: give --attention-out FILE too" in capsys.readouterr().err
    out = tmp_path / "a.npz"
    assert cli_main(["translate", str(run), "Ein Hund.", "--attention-out", str(out), "--attribution", "smoothgrad",
                     "--attribution-noise", "-1"]) == 2
    assert "error: --attribution-noise -1.0: must be a number from 0 to 10" in capsys.readouterr().err
    assert not out.exists()


def test_the_old_names_of_the_attribution_options_still_work_and_warn(tiny_run, tmp_path, capsys):
    """--saliency and its settings (0.2) are --attribution and its settings now: the same file, a warning."""
    run = tiny_run[1]
    old, new = tmp_path / "old.npz", tmp_path / "new.npz"
    assert cli_main(["translate", str(run), "Ein Hund.", "--attention-out", str(old), "--saliency", "integrated",
                     "--saliency-steps", "3", "--threads", "1"]) == 0
    assert "--saliency-steps is deprecated; use --attribution-steps" in capsys.readouterr().err
    assert cli_main(["translate", str(run), "Ein Hund.", "--attention-out", str(new), "--attribution", "integrated",
                     "--attribution-steps", "3", "--threads", "1"]) == 0
    assert np.array_equal(attnmt.load_attention(old)[0].attribution, attnmt.load_attention(new)[0].attribution)


@pytest.mark.parametrize("suffix", [".npz", ".jsonl"])
def test_a_file_of_format_1_loads_and_its_record_answers_to_the_old_names_with_a_warning(tiny_run, tmp_path, suffix):
    """Up to 0.3.0 the attribution was stored as "saliency" (saliency_K in an archive) under format
    1: such a file loads into the same record, and record.saliency still answers, and warns."""
    import json
    import zipfile

    run = tiny_run[1]
    new = tmp_path / f"new{suffix}"
    assert cli_main(["translate", str(run), "Ein Hund.", "--attention-out", str(new), "--attribution", "gradient",
                     "--threads", "1"]) == 0
    old = tmp_path / f"old{suffix}"
    if suffix == ".jsonl":
        values = json.loads(new.read_text(encoding="utf-8"))
        values["format"] = "attnmt-attention/1"
        values["saliency"], values["saliency_method"] = values.pop("attribution"), values.pop("attribution_method")
        old.write_text(json.dumps(values) + "\n", encoding="utf-8")
    else:
        with np.load(new, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
        arrays["format"] = np.array("attnmt-attention/1")
        arrays["saliency_0"] = arrays.pop("attribution_0")
        described = json.loads(str(arrays["records"]))
        for record in described:
            record["saliency_method"] = record.pop("attribution_method")
        arrays["records"] = np.array(json.dumps(described))
        np.savez_compressed(old, **arrays)
        assert zipfile.is_zipfile(old)
    [then], [now] = attnmt.load_attention(old), attnmt.load_attention(new)
    assert np.array_equal(then.attribution, now.attribution) and then.attribution_method == now.attribution_method
    with pytest.warns(DeprecationWarning, match="AttentionRecord.saliency is deprecated"):
        assert np.array_equal(then.saliency, now.attribution)
    with pytest.warns(DeprecationWarning, match="word_saliency"):
        assert np.array_equal(then.word_saliency(), now.word_attribution())
