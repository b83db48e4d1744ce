"""The HTML attention viewer in a real browser: the installed headless Chromium driven by Playwright.

The browser is ``tests/helpers.py``'s ``Browser`` (the ``browser`` fixture of ``conftest.py``):
pointer moves, clicks, typing and choices as a person makes them, after Playwright's actionability
checks; Playwright is pointed at the installed Chromium, so nothing is downloaded. The tests skip
with a reason when Chromium is not installed (Debian package ``chromium``), and fail under CI.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnmt.visual.viewer import write_attention_viewer

pytestmark = pytest.mark.slow  # starts headless Chromium


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def make_examples(count: int = 3) -> list[dict]:
    rng = np.random.default_rng(7)
    examples = []
    for index in range(count):
        src = ["ein", "<script>alert(1)</script>", "Hund", "läuft", f"w{index}", "</s>"]
        out = ["a", "dog", "</script><b>x</b>", "runs", "</s>"]
        layers = {f"layer {layer} / head {head}": softmax_rows(rng.normal(size=(len(out), len(src))) * 2)
                  for layer in (1, 2) for head in (1, 2)}
        layers["average"] = np.mean(list(layers.values()), axis=0)
        example = {
            "source": " ".join(src), "output": " ".join(out), "reference": "a dog is running",
            "src_tokens": src, "out_tokens": out, "meta": {"bleu": 12.5 + index, "index": index},
        }
        if index % 2:
            example["weights"] = layers["average"]
        else:
            example["heads"] = layers
        examples.append(example)
    # A long sentence: its readout wraps over several lines and its heatmap is taller than the window.
    src = [f"lang{i}" for i in range(45)]
    out = [f"long{i}" for i in range(40)]
    examples.append({"source": " ".join(src), "output": " ".join(out), "reference": None,
                     "src_tokens": src, "out_tokens": out,
                     "weights": softmax_rows(rng.normal(size=(len(out), len(src))) * 3)})
    return examples


@pytest.fixture(scope="module")
def viewer_page(browser, tmp_path_factory):
    examples = make_examples()
    path = write_attention_viewer(examples, tmp_path_factory.mktemp("viewer") / "viewer.html",
                                  title="<b>browser</b> test")
    browser.open(path.resolve().as_uri())
    assert browser.evaluate("document.documentElement.dataset.ready") == "true"
    return examples, path


def test_page_loads_without_console_errors_or_injected_markup(browser, viewer_page):
    assert browser.errors() == []
    assert browser.evaluate("document.title") == "<b>browser</b> test"
    # The '<script>' and '<b>' tokens are text, never elements.
    assert browser.evaluate("document.querySelectorAll('b').length") == 0
    assert browser.evaluate("document.querySelectorAll('script').length") == 2
    labels = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 th.col-label')).map(e => e.textContent)")
    assert labels[1] == "<script>alert(1)</script>"


def test_heatmap_has_one_cell_per_output_and_source_token(browser, viewer_page):
    examples, _ = viewer_page
    first = examples[0]
    count = browser.evaluate("document.querySelectorAll('#example-1 td.cell').length")
    assert count == len(first["src_tokens"]) * len(first["out_tokens"])
    # Examples build their heatmap when opened, and then have their own full grid too.
    browser.click("#expand-all")
    browser.wait_for("[...document.querySelectorAll('details.example')].every(d => d.querySelector('td.cell'))")
    for number, example in enumerate(examples, start=1):
        cells = browser.evaluate(f"document.querySelectorAll('#example-{number} td.cell').length")
        assert cells == len(example["src_tokens"]) * len(example["out_tokens"])
    assert browser.errors() == []


def test_hovering_a_cell_shows_its_weight(browser, viewer_page):
    examples, _ = viewer_page
    average = examples[0]["heads"]["average"]
    row, col = 2, 3
    browser.hover(f"#example-1 td.cell[data-row='{row}'][data-col='{col}']")
    shown = browser.evaluate("document.querySelector('#example-1 .readout-weight').textContent")
    cell = f"#example-1 td.cell[data-row='{row}'][data-col='{col}']"
    stored = browser.evaluate(f"document.querySelector(\"{cell}\").dataset.weight")
    assert float(stored) == pytest.approx(average[row, col], abs=1e-4)  # "average" is shown first
    assert shown == f"{float(stored):.3f}"
    title = browser.evaluate("document.querySelector('#example-1 .readout-title').textContent")
    assert examples[0]["out_tokens"][row] in title and examples[0]["src_tokens"][col] in title


def test_hovering_an_output_word_shades_the_source_words_by_weight(browser, viewer_page):
    examples, _ = viewer_page
    average = examples[0]["heads"]["average"]
    row = 1
    browser.hover(f"#example-1 th.row-label[data-row='{row}']")
    numbers = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 .src-token .src-weight')).map(e => e.textContent)")
    assert numbers == [f"{value:.3f}" for value in average[row]]
    opacities = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 .src-token'))"
        ".map(e => getComputedStyle(e).backgroundColor)")
    alphas = [float(colour.rsplit(",", 1)[1].rstrip(") ")) if colour.startswith("rgba") else 1.0
              for colour in opacities]
    np.testing.assert_allclose(alphas, average[row], atol=2e-3)
    active = browser.evaluate("document.querySelector('#example-1 th.row-label.active').dataset.row")
    assert active == str(row)


def test_choosing_a_head_repaints_the_heatmap(browser, viewer_page):
    examples, _ = viewer_page
    heads = examples[0]["heads"]
    names = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 select option')).map(o => o.textContent)")
    assert names == list(heads)
    chosen = names.index("layer 2 / head 1")
    browser.choose("#example-1 select", str(chosen))
    weights = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 td.cell')).map(c => Number(c.dataset.weight))")
    expected = heads["layer 2 / head 1"]
    np.testing.assert_allclose(np.reshape(weights, expected.shape), expected, atol=1e-4)
    browser.hover("#example-1 td.cell[data-row='0'][data-col='0']")
    shown = browser.evaluate("document.querySelector('#example-1 .readout-weight').textContent")
    assert shown == f"{heads['layer 2 / head 1'][0, 0]:.3f}"
    assert browser.errors() == []


def test_the_heads_grid_shows_every_head_small_and_a_click_shows_one_large(browser, viewer_page, tmp_path):
    """A multi-head example has a layers × heads grid of small heatmaps, one dot per weight; a click
    on one shows that head in the large heatmap and in the select box, and marks it."""
    examples, _ = viewer_page
    heads = examples[0]["heads"]
    minis = "#example-1 .heads-grid button.mini"
    assert browser.evaluate(f"document.querySelectorAll('{minis}').length") == 4  # 2 layers × 2 heads
    dots = browser.evaluate(f"document.querySelector('{minis}').querySelectorAll('span').length")
    assert dots == heads["layer 1 / head 1"].size
    assert browser.evaluate("document.querySelector('#example-2 .heads-grid')") is None  # one matrix only
    browser.click(f"{minis}[title='layer 2 / head 2']")
    weights = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 td.cell')).map(c => Number(c.dataset.weight))")
    expected = heads["layer 2 / head 2"]
    np.testing.assert_allclose(np.reshape(weights, expected.shape), expected, atol=1e-4)
    chosen = browser.evaluate("document.querySelector('#example-1 select').value")
    assert chosen == str(list(heads).index("layer 2 / head 2"))
    assert browser.evaluate(f"document.querySelector('{minis}.shown').title") == "layer 2 / head 2"
    browser.screenshot(tmp_path / "heads-grid.png")  # kept in pytest's temporary folder of this session
    assert browser.errors() == []


def test_filter_box_hides_examples_that_do_not_match(browser, viewer_page):
    browser.type_into("#filter", "w1")
    hidden = browser.evaluate("Array.from(document.querySelectorAll('details.example')).map(d => d.hidden)")
    assert hidden == [True, False, True, True]
    assert browser.evaluate("document.getElementById('count').textContent") == "1 of 4 examples"
    browser.type_into("#filter", "")
    hidden = "Array.from(document.querySelectorAll('details.example')).filter(d => d.hidden).length"
    assert browser.evaluate(hidden) == 0


def test_pointing_in_a_long_example_does_not_move_the_heatmap_under_the_pointer(browser, viewer_page):
    examples, _ = viewer_page
    long_example = examples[-1]
    number = len(examples)
    if not browser.evaluate(f"document.getElementById('example-{number}').open"):
        browser.click(f"#example-{number} > summary")  # opened as a person opens it
    assert browser.evaluate(f"document.getElementById('example-{number}').open")
    # the viewer builds an example's heatmap on its toggle event, which comes after the click
    browser.wait_for(f"document.querySelectorAll('#example-{number} td.cell').length > 0")
    cells = browser.evaluate(f"document.querySelectorAll('#example-{number} td.cell').length")
    assert cells == len(long_example["src_tokens"]) * len(long_example["out_tokens"])
    # The example's top in view, readout above the heatmap: the first hover fills in the readout's
    # numbers, and the cell under the pointer must stay the same cell.
    browser.evaluate(f"document.getElementById('example-{number}').scrollIntoView({{block: 'start'}})")
    for row, col in ((2, 20), (5, 44), (30, 20), (39, 0)):
        selector = f"#example-{number} td.cell[data-row='{row}'][data-col='{col}']"
        position = f"document.querySelector({json.dumps(selector)}).getBoundingClientRect().top + window.scrollY"
        browser.evaluate(f"document.querySelector({json.dumps(selector)}).scrollIntoView({{block: 'nearest'}})")
        before = browser.evaluate(position)
        x, y = browser.hover(selector, scroll="nearest")
        assert browser.evaluate(position) == pytest.approx(before, abs=0.5), "the heatmap moved"
        under_pointer = browser.evaluate(f"(() => {{ const e = document.elementFromPoint({x}, {y});"
                                         " return [e.dataset.row, e.dataset.col]; })()")
        assert under_pointer == [str(row), str(col)]
        active = browser.evaluate(f"document.querySelector('#example-{number} th.row-label.active').dataset.row")
        assert active == str(row)
        shown = browser.evaluate(f"document.querySelector('#example-{number} .readout-weight').textContent")
        assert shown == f"{long_example['weights'][row, col]:.3f}"
    browser.hover(f"#example-{number} th.row-label[data-row='12']")
    assert browser.evaluate(f"document.querySelector('#example-{number} th.row-label.active').dataset.row") == "12"
    assert browser.errors() == []


def test_screenshot_of_the_viewer_is_a_png(browser, viewer_page, tmp_path):
    browser.hover("#example-1 td.cell[data-row='1'][data-col='2']")
    shot = browser.screenshot(tmp_path / "viewer.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert browser.errors() == []


def test_the_error_check_sees_console_errors_and_blocked_scripts(browser, viewer_page):
    """The checks above would notice a broken page: console errors and refused scripts are seen."""
    seen_before = len(browser.events)
    browser.evaluate("console.error('deliberate test error')")
    # The page's Content-Security-Policy refuses a script that was not in the written file.
    browser.evaluate("(() => { const s = document.createElement('script');"
                     " s.textContent = 'window.injected = true'; document.body.appendChild(s); })()")
    browser.evaluate("1")  # one more round trip, so the browser's log messages have arrived
    errors = browser.errors()
    assert any("deliberate test error" in error for error in errors)
    assert any("Content Security Policy" in error for error in errors)
    assert browser.evaluate("window.injected === undefined")
    del browser.events[seen_before:]  # these errors were made on purpose


def test_saliency_stands_beside_the_attention_with_each_rows_agreement(browser, tmp_path):
    """With saliency, a second grid of the same shape; pointing at a row in either grid marks it in
    both, and the readout gives the word that moves the output most and the row's agreement, which
    equals scipy's Spearman over the source words but "</s>"."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(3)
    src, out = ["ein", "Hund", "läuft", "</s>"], ["a", "dog", "runs", "</s>"]
    attention = softmax_rows(rng.normal(size=(4, 4)) * 2)
    saliency = rng.normal(size=(4, 4))
    saliency[1] = [0.0, 2.0, -1.0, 0.1]  # "dog" moved most by "Hund" (the CSS adds the quotes)
    example = {"source": "ein Hund läuft", "output": "a dog runs", "src_tokens": src, "out_tokens": out,
               "weights": attention, "saliency": saliency, "saliency_method": "gradient × input"}
    path = write_attention_viewer([example], tmp_path / "saliency.html")
    browser.open(path.resolve().as_uri())
    assert browser.evaluate("document.documentElement.dataset.ready") == "true"
    assert browser.evaluate("document.querySelectorAll('#example-1 table.heatmap').length") == 2
    assert browser.evaluate("document.querySelectorAll('#example-1 td.saliency-cell').length") == 16
    assert browser.evaluate("document.querySelector('#example-1 table.saliency caption').textContent") == \
        "saliency (gradient × input)"
    stored = browser.evaluate("document.querySelector(\"#example-1 td.saliency-cell[data-row='1'][data-col='2']\")"
                              ".dataset.saliency")
    assert float(stored) == -1.0
    browser.hover("#example-1 table.saliency th.row-label[data-row='1']")
    active = browser.evaluate("Array.from(document.querySelectorAll('#example-1 th.row-label.active'))"
                              ".map(e => e.dataset.row)")
    assert active == ["1", "1"]  # the same row in both grids
    line = browser.evaluate("document.querySelector('#example-1 .saliency-title').textContent")
    expected = spearmanr(attention[1, :3], saliency[1, :3]).statistic
    same = np.argmax(attention[1, :3]) == np.argmax(saliency[1, :3])
    assert line == (f"saliency: Hund moves it most: 2.000; rank correlation with the attention {expected:.2f}, "
                    + ("the same top word" if same else "another top word"))
    numbers = browser.evaluate("Array.from(document.querySelectorAll('#example-1 .src-saliency'))"
                               ".map(e => e.textContent)")
    assert numbers == ["0.000", "2.000", "-1.000", "0.100"]
    browser.hover("#example-1 table.attention th.row-label[data-row='3']")
    assert browser.evaluate("document.querySelector('#example-1 .saliency-title').textContent").endswith(
        "; no agreement (nothing to rank)")  # the "</s>" row
    assert browser.errors() == []
