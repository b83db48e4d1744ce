"""examples/tour.ipynb runs headless in a real Jupyter kernel (nbclient) on tiny runs made here,
and its rendered outputs work in headless Chromium: heatmap cells in every viewer, no console
error. Also: the HTML of translations (what IPython shows for them) and ``attnmt.show``."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest

import attnmt
from attnmt.visual.notebook import AttentionView, translations_html

from helpers import LEXICON, execute_notebook, make_pairs, run_trainer, streamed_text, tiny_run_config

pytestmark = pytest.mark.slow  # tiny runs, a Jupyter kernel and a browser

TOUR = Path(__file__).resolve().parents[1] / "examples" / "tour.ipynb"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Two mechanisms on the made-up task, and an alignment test set whose gold links are known:
    the task translates word by word, so word i of a source aligns with word i of its target."""
    folder = tmp_path_factory.mktemp("tour")
    for attention in ("scaled_dot", "additive"):
        config = tiny_run_config(folder, max_epochs=3, max_steps=60, examples=0, bleu_max_sentences=0)
        config["model"]["attention"] = attention
        run_trainer(folder, config, out=attention)
    src, tgt = make_pairs(12, seed=5)
    (folder / "align.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (folder / "align.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    (folder / "align.gold").write_text(
        "".join(" ".join(f"{i}-{i}" for i in range(len(s.split()))) + "\n" for s in src), encoding="utf-8")
    assert all(word in LEXICON for word in src[0].lower().rstrip(".").split())
    return folder


def test_translations_and_show_render_as_the_viewer(runs):
    translator = attnmt.Translator.load(runs / "additive")
    translations = translator.translate(["Ein hund läuft.", "Der mann."], return_attention=True)
    page = translations_html(translations)
    assert page.startswith('<iframe class="attnmt-viewer" srcdoc="') and "data-example" in html.unescape(page)
    assert html.unescape(page).count('class="example"') == 2
    assert translations_html(translations[0]).count("&lt;details class=&quot;example&quot;") == 1
    plain = translations_html(translator.translate(["Ein hund läuft."]))  # no attention: a table of texts
    assert plain.startswith("<table>") and "Ein hund läuft." in plain
    view = attnmt.show(translator, "Ein hund läuft.", beam=2)
    assert isinstance(view, AttentionView) and len(view.examples) == 1 and view.examples[0]["meta"]["beam"] == 2
    both = attnmt.show(translator, "Ein hund läuft.", saliency="smoothgrad")  # saliency beside the attention
    [example] = both.examples
    assert example["saliency_method"] == "SmoothGrad (10 samples, noise 0.15)"
    assert np.shape(example["saliency"]) == np.shape(example["weights"])
    assert '"saliency_method":"SmoothGrad (10 samples, noise 0.15)"' in html.unescape(both._repr_html_())


def test_the_tour_notebook_runs_in_a_kernel_and_renders_in_a_browser(runs, tmp_path, monkeypatch, browser):
    code = execute_notebook(TOUR, tmp_path, monkeypatch, "ATTNMT_TOUR", {
        "RUN": runs / "scaled_dot", "OTHER_RUN": runs / "additive", "ALIGN_RUN": runs / "additive",
        "ALIGN_SRC": runs / "align.de", "ALIGN_TGT": runs / "align.en", "ALIGN_GOLD": runs / "align.gold"})
    text = [streamed_text(cell) for cell in code]
    pages = ["".join(output.get("data", {}).get("text/html", "") for output in cell.outputs)
             for cell in code]
    assert "a query along k_0 copies v_0" in text[1]                         # 1. explore
    assert "SearchConfig(" in "".join(o.get("data", {}).get("text/plain", "") for o in code[2].outputs)  # 2. load
    assert all('<iframe class="attnmt-viewer"' in pages[k] for k in (3, 4, 5))  # 3-5: viewers inline
    assert "mechanism" in html.unescape(pages[5]) and "additive" in html.unescape(pages[5])
    match = re.search(r"AER ([0-9.]+)", text[6])                               # 6. align, scored
    assert match is not None, text[6]
    assert (tmp_path / "tour-links.txt").is_file()

    # The outputs as a notebook front end shows them: the HTML of each cell, one after the other.
    page = tmp_path / "outputs.html"
    page.write_text("<!doctype html><html><body>" + "".join(f"<div>{p}</div>" for p in pages) + "</body></html>",
                    encoding="utf-8")
    browser.open(page.as_uri())
    cells = browser.evaluate(
        "Array.from(document.querySelectorAll('iframe.attnmt-viewer'))"
        ".map(frame => frame.contentDocument.querySelectorAll('.cell').length)")
    assert len(cells) == 3 and all(count > 0 for count in cells), cells
    assert browser.errors() == []


@pytest.mark.parametrize("method", ["value_norm", "erasure"])
def test_show_with_an_attribution_renders_it_and_this_sentences_faithfulness_in_a_browser(runs, tmp_path, browser,
                                                                                           method):
    """Issue 62: ``attnmt.show(..., saliency=METHOD)`` for an attribution made for attention, as a
    notebook front end renders it: the attribution's heatmap beside the attention's, and badges
    with this sentence's comprehensiveness and sufficiency for the attention, the method and random."""
    translator = attnmt.Translator.load(runs / "additive")
    view = attnmt.show(translator, ["Ein hund läuft.", "Der mann sieht die katze."], saliency=method)
    page = tmp_path / f"show-{method}.html"
    page.write_text(f"<!doctype html><html><body>{view._repr_html_()}</body></html>", encoding="utf-8")
    browser.open(page.as_uri())
    frame = "document.querySelector('iframe.attnmt-viewer').contentDocument"
    cells = {kind: browser.evaluate(f"{frame}.querySelectorAll('#example-1 table.{kind} td.cell').length")
             for kind in ("attention", "saliency")}  # the first example opens with its heatmaps built
    assert cells["attention"] > 0 and cells["saliency"] == cells["attention"], cells
    badges = browser.evaluate(f"[...{frame}.querySelectorAll('#example-1 .badge')].map(b => b.textContent)")
    for measure in ("comprehensiveness", "sufficiency"):
        [badge] = [text for text in badges if text.startswith(f"{measure} (attention / {method} / random)")]
        figures = badge.rsplit(")", 1)[1].split(" / ")
        assert len(figures) == 3 and all(np.isfinite(float(figure)) for figure in figures), badge
    assert browser.errors() == []
