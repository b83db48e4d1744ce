"""Heatmaps and the HTML viewer: subword merging by hand, valid files, escaping, no network."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

from attnmt.data.pieces import group_pieces, merge_subwords
from attnmt.visual.heatmap import plot_attention
from attnmt.visual.viewer import write_attention_viewer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Hand-made: source pieces Der | Hund e | bell t | </s>, output pieces The | dog s | bark | </s>.
SRC_PIECES = ["▁Der", "▁Hund", "e", "▁bell", "t", "</s>"]
TGT_PIECES = ["▁The", "▁dog", "s", "▁bark", "</s>"]
PIECE_WEIGHTS = np.array([
    [0.7, 0.1, 0.0, 0.1, 0.0, 0.1],
    [0.1, 0.5, 0.2, 0.1, 0.1, 0.0],
    [0.0, 0.3, 0.5, 0.0, 0.0, 0.2],
    [0.0, 0.0, 0.1, 0.6, 0.3, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.2, 0.8],
])


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------- merge_subwords


def test_merge_subwords_sums_source_pieces_and_averages_output_pieces():
    merged, src_words, tgt_words = merge_subwords(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES)
    assert src_words == ["Der", "Hunde", "bellt", "</s>"]
    assert tgt_words == ["The", "dogs", "bark", "</s>"]
    # Columns: Hunde = Hund + e, bellt = bell + t.  Row "dogs" = mean of rows "dog" and "s":
    # dog -> [0.1, 0.7, 0.2, 0.0], s -> [0.0, 0.8, 0.0, 0.2], mean [0.05, 0.75, 0.1, 0.1].
    expected = np.array([
        [0.7, 0.1, 0.1, 0.1],
        [0.05, 0.75, 0.1, 0.1],
        [0.0, 0.1, 0.9, 0.0],
        [0.0, 0.0, 0.2, 0.8],
    ])
    np.testing.assert_allclose(merged, expected, atol=1e-12)
    np.testing.assert_allclose(merged.sum(axis=1), 1.0)


def test_merged_rows_sum_to_the_mean_of_their_pieces_row_sums():
    rng = np.random.default_rng(3)
    src = ["▁a", "b", "c", "▁d", "</s>", "▁e", "f"]
    tgt = ["▁x", "y", "▁z", "<eos>", "w", "▁v"]
    weights = rng.random((len(tgt), len(src)))
    weights[2] = 0.0  # a row that attended to nothing stays zero
    merged, _, tgt_words = merge_subwords(weights, src, tgt)
    assert tgt_words == ["xy", "z", "<eos>", "w", "v"]
    piece_rows = [[0, 1], [2], [3], [4], [5]]
    expected_sums = [weights[rows].sum(axis=1).mean() for rows in piece_rows]
    np.testing.assert_allclose(merged.sum(axis=1), expected_sums, rtol=1e-12)
    assert merged.sum() == pytest.approx(sum(expected_sums))


def test_group_pieces_keeps_special_tokens_alone_and_handles_plain_words():
    assert group_pieces(["<s>", "a", "▁b", "c", "</s>", "d"]) == [
        ("<s>", 0, 1), ("a", 1, 2), ("bc", 2, 4), ("</s>", 4, 5), ("d", 5, 6)]
    # sentencepiece emits a bare marker before some symbols: it joins the following piece.
    assert group_pieces(["▁Hallo", "▁", "(", "x", ")"]) == [("Hallo", 0, 1), ("(x)", 1, 5)]
    # Tokens without any marker are not pieces: each is its own word, not one long word.
    assert [word for word, _, _ in group_pieces(["a", "dog", "runs"])] == ["a", "dog", "runs"]


def test_merge_subwords_rejects_a_shape_that_does_not_match_the_pieces():
    with pytest.raises(ValueError, match=r"\(5, 6\).*4 output tokens.*6 source tokens"):
        merge_subwords(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES[:4])


# --------------------------------------------------------------------------- plot_attention


def test_plot_attention_writes_a_png(tmp_path):
    path = plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES, tmp_path / "attention.png", title="example 1")
    assert path == tmp_path / "attention.png"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention.png"]  # no temporary file left


def test_plot_attention_svg_holds_the_labels_as_text(tmp_path):
    src = ["ein", "<script>", "$5", "Hund"]
    tgt = ["a", "dog", "&"]
    path = plot_attention(softmax_rows(np.eye(3, 4) * 3), src, tgt, tmp_path / "attention.svg", title="a <title>")
    svg = path.read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    for label in ("ein", "&lt;script&gt;", "$5", "Hund", "dog", "&amp;", "a &lt;title&gt;"):
        assert f">{label}</text>" in svg, label
    assert "<script>" not in svg


def test_format_argument_overrides_the_suffix(tmp_path):
    path = plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES, tmp_path / "picture.img", fmt="png")
    assert path.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="'jpeg'"):
        plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES, tmp_path / "picture.jpeg")


def test_merge_pieces_draws_words(tmp_path):
    path = plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES, tmp_path / "words.svg", merge_pieces=True)
    svg = path.read_text(encoding="utf-8")
    assert ">Hunde</text>" in svg and ">dogs</text>" in svg
    assert ">▁Hund</text>" not in svg


@pytest.mark.slow
def test_long_sentences_of_80_tokens_are_plotted(tmp_path):
    rng = np.random.default_rng(0)
    src = [f"▁source{i}" for i in range(80)]
    tgt = [f"▁output{i}" for i in range(75)]
    path = plot_attention(softmax_rows(rng.normal(size=(75, 80))), src, tgt, tmp_path / "long.svg")
    svg = path.read_text(encoding="utf-8")
    assert ">▁source79</text>" in svg and ">▁output74</text>" in svg
    width, height = (float(v) for v in re.search(r'width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    assert width > 700 and height > 700  # the figure grew with the sentence instead of squeezing cells


def test_shape_mismatch_names_the_shapes(tmp_path):
    with pytest.raises(ValueError, match=r"shape \(5, 6\).*3 output tokens and 6 source tokens.*\(3, 6\)"):
        plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES[:3], tmp_path / "x.png")
    with pytest.raises(ValueError, match="2-D"):
        plot_attention(PIECE_WEIGHTS[None], SRC_PIECES, TGT_PIECES, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_an_existing_file_is_kept_when_overwrite_is_false(tmp_path):
    target = tmp_path / "mine.png"
    target.write_bytes(b"not yours")
    with pytest.raises(FileExistsError, match="mine.png"):
        plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES, target, overwrite=False)
    assert target.read_bytes() == b"not yours"


def test_torch_tensors_with_gradients_are_accepted(tmp_path):
    torch = pytest.importorskip("torch")
    weights = torch.tensor(PIECE_WEIGHTS, dtype=torch.float32, requires_grad=True)
    path = plot_attention(weights, SRC_PIECES, TGT_PIECES, tmp_path / "tensor.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_plots_drawn_in_threads_equal_plots_drawn_alone(tmp_path):
    alone = plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES, tmp_path / "alone.png").read_bytes()
    failures = []

    def draw(number: int) -> None:
        try:
            plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES, tmp_path / f"thread{number}.png")
            plot_attention(PIECE_WEIGHTS, SRC_PIECES, TGT_PIECES, tmp_path / f"thread{number}.svg")
        except Exception as error:  # any failure of a thread, reported below
            failures.append(error)

    threads = [threading.Thread(target=draw, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for number in range(3):
        assert (tmp_path / f"thread{number}.png").read_bytes() == alone


@pytest.mark.slow
def test_plotting_never_imports_pyplot(tmp_path):
    script = (
        "import sys, numpy as np\n"
        "from attnmt.visual.heatmap import plot_attention\n"
        f"plot_attention(np.eye(2), ['a', 'b'], ['c', 'd'], {str(tmp_path / 'p.png')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


# --------------------------------------------------------------------------- HTML viewer


def viewer_examples() -> list[dict]:
    rng = np.random.default_rng(1)
    src = ["ein", "<script>alert('x')</script>", "Hund", "</s>"]
    out = ["a", "dog", "</script>", "</s>"]
    heads = {f"layer 1 / head {h}": softmax_rows(rng.normal(size=(4, 4))) for h in (1, 2)}
    heads["average"] = (heads["layer 1 / head 1"] + heads["layer 1 / head 2"]) / 2
    return [
        {"source": "ein <script>alert('x')</script> Hund", "output": "a dog </script>",
         "reference": "a dog & a <b>cat</b>", "src_tokens": src, "out_tokens": out,
         "heads": heads, "meta": {"bleu": 12.345678, "note": "<i>"}},
        {"source": "zwei Katzen", "output": "two cats", "reference": None,
         "src_tokens": ["zwei", "Katzen"], "out_tokens": ["two", "cats", "</s>"],
         "weights": [[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]]},
    ]


def embedded_data(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="attnmt-data">(.*?)</script>', page, re.DOTALL)
    assert match, "the page has no embedded data"
    return json.loads(match.group(1))


def test_viewer_is_self_contained(tmp_path):
    page = write_attention_viewer(viewer_examples(), tmp_path / "viewer.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?://", page), "the page refers to the network"
    assert not re.search(r"\b(src|href)\s*=", page, re.IGNORECASE), "the page loads an external resource"
    assert "<style>" in page and "<link" not in page
    # A policy forbids loading anything and running any script but the page's own.
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]


def test_viewer_contains_every_example(tmp_path):
    page = write_attention_viewer(viewer_examples(), tmp_path / "viewer.html").read_text(encoding="utf-8")
    assert page.count('<details class="example"') == 2
    assert "zwei Katzen" in page and "two cats" in page
    assert "bleu</span> 12.35" in page
    data = embedded_data(page)["examples"]
    assert [example["src"] for example in data] == [viewer_examples()[0]["src_tokens"], ["zwei", "Katzen"]]
    first = data[0]
    assert [name for name, _ in first["matrices"]] == ["layer 1 / head 1", "layer 1 / head 2", "average"]
    assert first["matrices"][first["default"]][0] == "average"
    np.testing.assert_allclose(first["matrices"][2][1], viewer_examples()[0]["heads"]["average"], atol=5e-5)
    assert data[1]["matrices"] == [["weights", [[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]]]]
    assert '<option value="2" selected>average</option>' in page


def test_viewer_escapes_markup_in_text_and_data(tmp_path):
    page = write_attention_viewer(viewer_examples(), tmp_path / "viewer.html",
                                  title="</title><script>bad()</script>").read_text(encoding="utf-8")
    # Exactly the page's two script elements: the data and the code.
    assert len(re.findall(r"<script\b", page)) == 2
    assert "bad()</script>" not in page and "alert('x')</script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "a dog &amp; a &lt;b&gt;cat&lt;/b&gt;" in page and "&lt;i&gt;" in page
    assert "<b>" not in page and "<i>" not in page
    tokens = embedded_data(page)["examples"][0]
    assert tokens["src"][1] == "<script>alert('x')</script>" and tokens["out"][2] == "</script>"


def test_viewer_rejects_matrices_of_the_wrong_shape(tmp_path):
    examples = viewer_examples()
    examples[1]["weights"] = [[0.5, 0.5]]
    with pytest.raises(ValueError, match=r"examples\[1\]\['weights'\] has shape \(1, 2\).*3 output tokens"):
        write_attention_viewer(examples, tmp_path / "viewer.html")
    examples = viewer_examples()
    examples[0]["heads"]["layer 1 / head 2"] = np.zeros((4, 3))
    with pytest.raises(ValueError, match=r"'layer 1 / head 2'\] has shape \(4, 3\)"):
        write_attention_viewer(examples, tmp_path / "viewer.html")
    examples = viewer_examples()
    del examples[1]["weights"]
    with pytest.raises(ValueError, match=r"examples\[1\] has neither 'weights' nor 'heads'"):
        write_attention_viewer(examples, tmp_path / "viewer.html")
    assert not (tmp_path / "viewer.html").exists()


def test_viewer_of_many_examples_stays_compact(tmp_path):
    rng = np.random.default_rng(2)
    examples = [{"source": f"satz {i}", "output": f"sentence {i}", "src_tokens": ["satz", str(i), "</s>"],
                 "out_tokens": ["sentence", str(i), "</s>"], "weights": softmax_rows(rng.normal(size=(3, 3)))}
                for i in range(60)]
    path = write_attention_viewer(examples, tmp_path / "many.html")
    page = path.read_text(encoding="utf-8")
    assert page.count('<details class="example"') == 60
    assert page.count(" open>") == 1  # only the first example starts unfolded
    assert 'id="filter"' in page
    assert path.stat().st_size < 120_000
