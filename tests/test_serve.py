"""``attnmt serve``: the request handlers in-process, the server's safety rules over real HTTP on the
loopback address, a bounded load test, and the page in a real browser (the installed headless
Chromium driven by Playwright, ``tests/helpers.py``'s ``Browser``: typed and clicked as a person
does it; nothing downloaded)."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import attnmt
from attnmt.cli import main as cli_main
from attnmt.serve.models import load_models
from attnmt.serve.server import MAX_BODY, make_server, serve_in_thread
from attnmt.serve.views import MAX_BEAM, RequestError, Views

from helpers import TINY_MODELS, run_trainer, tiny_run_config, write_corpus

SENTENCE = "Ein hund läuft im park."


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """Two small runs: an RNN and a Transformer, with a test set."""
    folders = []
    for kind in ("sdp", "transformer"):
        folder = tmp_path_factory.mktemp(f"serve-{kind}")
        config = tiny_run_config(folder, train_pairs=80, valid_pairs=5, max_steps=30, bleu_max_sentences=0,
                                 examples=0)
        config["model"] = TINY_MODELS[kind]
        config["data"]["test"] = {"made_up": write_corpus(folder, "test", 6, seed=3)}
        config["search"] = {"max_len_a": 1.2, "max_len_b": 4}
        config["data"]["max_length"] = 30  # sentences of more than 300 pieces are refused
        run_trainer(folder, config)
        folders.append(folder / "run")
    return folders


@pytest.fixture(scope="module")
def views(runs) -> Views:
    from attnmt.serve.models import test_examples

    models = load_models(runs, say=lambda line: None)
    return Views(models, test_examples(models))


@pytest.fixture(scope="module")
def server(views):
    server = make_server(views, "127.0.0.1", 0)
    serve_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()


def request(server, method: str, path: str, body=None, headers=None) -> tuple[int, dict | str]:
    """One HTTP request to ``server``; (status, JSON or text)."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    sent = {"Host": f"127.0.0.1:{port}", **({"Content-Type": "application/json"} if data is not None else {}),
            **(headers or {})}
    connection.request(method, path, body=data, headers=sent)
    response = connection.getresponse()
    text = response.read().decode("utf-8")
    connection.close()
    kind = response.getheader("Content-Type", "")
    return response.status, json.loads(text) if kind.startswith("application/json") else text


# -- the handlers, in-process ------------------------------------------------------------------------


def test_every_model_translates_with_its_attention_per_layer_and_head_over_words(views, runs):
    answer = views.translate({"sentence": SENTENCE, "beam": 3, "n_best": 2})
    assert [model["model"] for model in answer["models"]] == ["run", "run-2"]
    rnn, transformer = answer["models"]
    translator = attnmt.Translator.load(runs[0])
    expected = translator.translate([SENTENCE], beam=3)[0]
    assert rnn["output"] == expected.output and rnn["score"] == pytest.approx(expected.score, abs=1e-3)
    assert len(rnn["layers"]) == 1 and len(transformer["layers"]) == 2 and len(transformer["layers"][0]) == 2
    for view in answer["models"]:
        for matrix in [view["search"], *(head for layer in view["layers"] for head in layer)]:
            weights = np.array(matrix)
            assert weights.shape == (len(view["out_words"]), len(view["src_words"]))
            np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=2e-3)  # rows stay distributions over words
        assert view["src_words"][-1] == "</s>" and view["source_positions"][:5] == [0, 1, 2, 3, 4]
        assert len(view["hypotheses"]) == 2 and view["hypotheses"][0]["score"] >= view["hypotheses"][1]["score"] - 1e-9
        assert view["seconds"] > 0


def test_a_prefix_is_kept_and_decoding_goes_on_from_it(views):
    answer = views.prefix({"sentence": SENTENCE, "model": "run", "prefix": "A cat"})
    assert answer["out_words"][:2] == ["A", "cat"] and answer["forced_words"] == 2
    again = views.prefix({"sentence": SENTENCE, "model": "run", "prefix": ""})
    assert again["output"] == views.translate({"sentence": SENTENCE, "models": ["run"]})["models"][0]["output"]


def test_pinning_one_steps_attention_changes_that_step_only_as_asked(views):
    own = views.translate({"sentence": SENTENCE, "models": ["run"]})["models"][0]
    pinned = views.pin({"sentence": SENTENCE, "model": "run", "step": 1, "source_word": 0})
    assert pinned["out_words"][:1] == own["out_words"][:1]  # the steps before are the model's own
    assert pinned["search"][1][0] == pytest.approx(1.0, abs=1e-3)  # all of step 1 on source word 0
    assert pinned["original_output"] == own["output"]
    with pytest.raises(RequestError, match="one attention head, cross:1:1"):
        views.pin({"sentence": SENTENCE, "model": "run", "step": 0, "source_word": 0, "head": "cross:1:2"})


def test_a_transformer_is_pinned_stepped_through_and_replaced_in_the_cross_attention_head_asked(views):
    """run-2 is a Transformer: each intervention names one cross-attention head; the pinned head's
    matrix puts all of the pinned step on the source word, and the page is told to ask per head."""
    described = {model["name"]: model for model in views.models_page()["models"]}
    assert described["run-2"]["intervene"] and described["run-2"]["intervene_per_head"]
    assert described["run"]["intervene"] and not described["run"]["intervene_per_head"]
    own = views.translate({"sentence": SENTENCE, "models": ["run-2"]})["models"][0]
    last = len(own["layers"])
    pinned = views.pin({"sentence": SENTENCE, "model": "run-2", "step": 1, "source_word": 0,
                        "head": f"cross:{last}:2"})
    assert pinned["out_words"][:1] == own["out_words"][:1] and pinned["pinned"]["head"] == f"cross:{last}:2"
    assert pinned["search"][1][0] >= 0.5 - 1e-3  # the search's mean over the last layer's 2 heads: half pinned
    step = views.step({"sentence": SENTENCE, "model": "run-2", "step": 0, "head": "cross:1:1"})
    scores, weights = np.array(step["scores"]), np.array(step["weights"])
    expected = np.exp(scores - scores.max())
    np.testing.assert_allclose(weights, expected / expected.sum(), atol=2e-4)  # α = softmax(e) in that head
    assert "head cross:1:1" in step["mechanism"] and "√d_head" in step["equation"]
    assert step["context_size"] == 16 // 2  # d_head of the tiny Transformer
    uniform = views.counterfactual({"sentence": SENTENCE, "model": "run-2", "kind": "uniform", "head": "cross:1:1"})
    assert uniform["head"] == "cross:1:1" and uniform["original_output"] == own["output"]
    for payload, message in (({}, "name one cross-attention head"), ({"head": "cross:*:1"}, "must name one"),
                             ({"head": "decoder_self:1:1"}, "must name one cross-attention head"),
                             ({"head": "cross:9:1"}, "out of range")):
        with pytest.raises(RequestError, match=message):
            views.pin({"sentence": SENTENCE, "model": "run-2", "step": 0, "source_word": 0, **payload})


def test_one_decoder_step_shows_scores_softmax_and_context(views):
    answer = views.step({"sentence": SENTENCE, "model": "run", "step": 0})
    scores, weights = np.array(answer["scores"]), np.array(answer["weights"])
    expected = np.exp(scores - scores.max())
    np.testing.assert_allclose(weights, expected / expected.sum(), atol=2e-4)  # α = softmax(e)
    assert "scaled" in answer["equation"] and answer["context_size"] > 0 and len(answer["context"]) <= 16
    assert "<msqrt><mi>d</mi></msqrt>" in answer["equation_mathml"]  # e_s = qᵀ k_s / √d, from EQUATIONS
    assert answer["equation_mathml"].count("<mtr>") == 5


def test_saliency_and_its_agreement_with_the_attention(views):
    answer = views.saliency({"sentence": SENTENCE, "model": "run-2", "method": "integrated", "steps": 4})
    assert np.array(answer["saliency"]).ndim == 2 and answer["method"].startswith("integrated")
    assert answer["agreement"] is None or -1 <= answer["agreement"] <= 1


def test_each_model_offers_the_attributions_that_apply_with_this_sentences_faithfulness(views):
    """The RNN ("run") is offered value_norm but not ALTI+ or rollout; the Transformer ("run-2")
    all of them. A saliency answer carries this sentence's comprehensiveness and sufficiency for
    the attention, the method and a random ranking; a method that does not apply is a 400."""
    methods = {model["name"]: model["saliency_methods"] for model in views.models_page()["models"]}
    assert "value_norm" in methods["run"] and "alti" not in methods["run"] and "rollout" not in methods["run"]
    assert {"alti", "rollout", "value_norm", "erasure"} <= set(methods["run-2"])
    for model, method in (("run", "erasure"), ("run-2", "alti")):
        answer = views.saliency({"sentence": SENTENCE, "model": model, "method": method})
        assert set(answer["faithfulness"]) == {"attention", method, "random"}
        assert all(np.isfinite(list(figures.values())).all() for figures in answer["faithfulness"].values())
    with pytest.raises(RequestError) as refused:
        views.saliency({"sentence": SENTENCE, "model": "run", "method": "rollout"})
    assert refused.value.status == 400 and "use one of: gradient" in str(refused.value)


def test_counterfactual_attention_translates_with_every_steps_weights_replaced(views):
    own = views.translate({"sentence": SENTENCE, "models": ["run"]})["models"][0]["output"]
    for kind in ("uniform", "permuted"):
        answer = views.counterfactual({"sentence": SENTENCE, "model": "run", "kind": kind})
        assert answer["kind"] == kind and answer["original_output"] == own
        assert all(abs(sum(row) - 1) < 1e-3 for row in answer["search"])  # still a distribution per step
    uniform = views.counterfactual({"sentence": SENTENCE, "model": "run", "kind": "uniform"})["search"]
    assert np.ptp(np.array(uniform), axis=0).max() < 1e-3  # every step the same: each piece 1/S
    with pytest.raises(RequestError, match="name one cross-attention head"):
        views.counterfactual({"sentence": SENTENCE, "model": "run-2", "kind": "uniform"})  # a Transformer: which head?
    with pytest.raises(RequestError, match="kind: one of permuted, uniform"):
        views.counterfactual({"sentence": SENTENCE, "model": "run", "kind": "frob"})


def test_gold_links_give_precision_recall_and_aer_for_each_model(views):
    answer = views.gold({"sentence": "Ein hund läuft .", "reference": "A dog runs .", "links": "0-0 1-1 2-2 3-3"})
    assert answer["gold"] == [[0, 0], [1, 1], [2, 2], [3, 3]] and len(answer["models"]) == 2
    for model in answer["models"]:
        assert 0 <= model["aer"] <= 1 and 0 <= model["precision"] <= 1 and 0 <= model["recall"] <= 1
    with pytest.raises(RequestError, match="names a word the sentences do not have"):
        views.gold({"sentence": "Ein hund", "reference": "A dog", "links": "0-5"})


def test_export_is_an_attention_file_load_attention_reads(views, tmp_path):
    path = tmp_path / "exported.jsonl"
    path.write_text(views.export({"sentence": SENTENCE}), encoding="utf-8")
    records = attnmt.load_attention(path)
    assert len(records) == 2 and records[1].weights.shape[0] == 2  # the Transformer's two layers


@pytest.mark.parametrize("payload, status, words", [
    ({"sentence": ""}, 400, "sentence: give some words"),
    ({"sentence": 3}, 400, "sentence: give some words"),
    ({"sentence": "x" * 5000}, 413, "more than 1000"),
    ({"sentence": "Ein hund.", "beam": 0}, 400, f"beam: an integer from 1 to {MAX_BEAM}"),
    ({"sentence": "Ein hund.", "beam": 10**9}, 400, "beam: an integer"),
    ({"sentence": "Ein hund.", "models": ["../../etc/passwd"]}, 404, "no model named"),
    ({"sentence": ("hund " * 150).strip()}, 413, "subword pieces"),
])
def test_bad_requests_are_one_line_and_a_4xx(views, payload, status, words):
    with pytest.raises(RequestError) as refused:
        views.translate(payload)
    assert refused.value.status == status and words in str(refused.value) and "\n" not in str(refused.value)


# -- over HTTP -------------------------------------------------------------------------------------------


def test_the_page_and_its_files_are_served_with_a_strict_policy(server):
    status, page = request(server, "GET", "/")
    assert status == 200 and "<title>attnmt serve</title>" in page and "http" not in page.split("<body>")[0]
    for path in ("/static/app.js", "/static/app.css"):
        assert request(server, "GET", path)[0] == 200
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port)
    connection.request("GET", "/", headers={"Host": f"localhost:{port}"})
    response = connection.getresponse()
    response.read()
    assert response.status == 200 and "script-src 'self'" in response.getheader("Content-Security-Policy")


@pytest.mark.parametrize("method, path, body, headers, status", [
    ("GET", "/", None, {"Host": "evil.example:1"}, 421),  # DNS rebinding: another name for this address
    ("GET", "/static/../../etc/passwd", None, {}, 404),
    ("GET", "/static/app.js/../../../pyproject.toml", None, {}, 404),
    ("POST", "/api/translate", {"sentence": "Ein hund."}, {"Origin": "http://evil.example"}, 403),
    ("POST", "/api/translate", b"sentence=x", {"Content-Type": "application/x-www-form-urlencoded"}, 415),
    ("POST", "/api/translate", b"{not json", {}, 400),
    ("POST", "/api/translate", b"[1, 2]", {}, 400),
    ("POST", "/api/translate", b"x" * (MAX_BODY + 1), {}, 413),
    ("POST", "/api/nothing", {}, {}, 404),
    ("DELETE", "/", None, {}, 405),
])
def test_requests_from_elsewhere_or_out_of_bounds_are_refused(server, method, path, body, headers, status):
    assert request(server, method, path, body, headers)[0] == status


def test_fifty_concurrent_translations_and_a_burst_of_malformed_requests(server):
    """Every request is answered (200 or 4xx), and the page is still served afterwards."""
    good = {"sentence": SENTENCE, "models": ["run"]}
    bad = [b"{", b"[]", json.dumps({"sentence": ""}).encode(), json.dumps({"sentence": "a", "beam": -1}).encode()]

    def one(number: int) -> int:
        if number % 2:
            return request(server, "POST", "/api/translate", bad[number % len(bad)])[0]
        return request(server, "POST", "/api/translate", good)[0]

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        statuses = list(pool.map(one, range(100)))
    assert statuses.count(200) == 50 and all(400 <= status < 500 for status in statuses if status != 200)
    assert request(server, "GET", "/")[0] == 200


def test_serve_starts_prints_its_address_and_stops_on_ctrl_c(runs, capsys):
    """The command itself, in this process: it serves until interrupted, then ends with status 0."""
    import os
    import signal

    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        status = cli_main(["serve", str(runs[0]), "--port", "0"])
    finally:
        timer.cancel()
    captured = capsys.readouterr()
    assert status == 0 and "attnmt serve: http://127.0.0.1:" in captured.out and "stopped" in captured.err


def test_serve_refuses_a_port_in_use_in_one_line(runs, server, capsys):
    assert cli_main(["serve", str(runs[0]), "--port", str(server.server_address[1])]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cannot listen there" in error


# -- in a real browser ------------------------------------------------------------------------------------


HEATMAPS = "document.querySelectorAll('.panel svg.heatmap').length"


def type_and_translate(browser, url: str) -> None:
    """Open the page, type SENTENCE into its box, click Translate and wait until both panels show
    their heatmaps (each appears when its model has answered), as a person does."""
    browser.open(url)
    browser.wait_for("document.documentElement.dataset.ready === 'true'")
    browser.type_into("#sentence", SENTENCE)
    browser.click("#translate")
    browser.wait_for(f"{HEATMAPS} >= 2")


@pytest.mark.slow
def test_a_person_types_a_sentence_and_sees_every_model_attend(server, browser, tmp_path):
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    type_and_translate(browser, url)
    browser.hover(".panel[data-model='run'] .out-word[data-row='0']")
    shaded = browser.evaluate(
        "[...document.querySelectorAll('.panel')].map(p => [...p.querySelectorAll('.src-word')]"
        ".some(w => w.style.background && !w.style.background.endsWith(', 0)')))")
    assert shaded == [True, True]  # both panels show where their model looked
    assert browser.evaluate("document.querySelector(\".panel[data-model='run-2'] .out-word.linked\") !== null")
    panel = ".panel[data-model='run']"
    browser.type_into(f"{panel} form.controls input", "A cat")
    browser.click(f"{panel} form.controls button")
    browser.wait_for("document.querySelector(\".panel[data-model='run'] .result svg\") !== null")
    assert "A cat" in browser.evaluate("document.querySelector(\".panel[data-model='run'] .result\").textContent")
    browser.click_button("step through", within=panel)
    browser.wait_for("document.querySelector(\".panel[data-model='run'] .step-table\") !== null")
    assert browser.evaluate("document.querySelectorAll(\".panel[data-model='run'] .step-table .bar\").length") > 0
    # the mechanism's equations as MathML the browser lays out itself, not a docstring
    assert browser.evaluate("document.querySelector(\".panel[data-model='run'] .result .equation math\")"
                            ".getBoundingClientRect().height") > 20
    browser.hover(".panel[data-model='run'] .result .equation", scroll="center")
    browser.screenshot(tmp_path / "step.png")  # kept in pytest's temporary folder of this session
    # An attribution made for attention, with this sentence's faithfulness, and a counterfactual.
    method = "document.querySelector(\".panel[data-model='run'] select[aria-label='saliency method']\")"
    assert "value_norm" in browser.evaluate(f"[...{method}.options].map(o => o.value).join(' ')")
    browser.choose(f"{panel} select[aria-label='saliency method']", "erasure")
    browser.click_button("saliency", within=panel)
    faithful = "document.querySelector(\".panel[data-model='run'] .faithfulness\")"
    browser.wait_for(f"{faithful} !== null")
    assert "erasure" in browser.evaluate(f"{faithful}.textContent")
    assert "random" in browser.evaluate(f"{faithful}.textContent")
    browser.click_button("uniform attention", within=panel)
    result = "document.querySelector(\".panel[data-model='run'] .result\").textContent"
    browser.wait_for(f"{result}.includes('made uniform')")
    assert "the model's own" in browser.evaluate(result)
    shot = browser.screenshot(tmp_path / "serve.png")  # kept in pytest's temporary folder of this session
    assert shot.stat().st_size > 10_000
    # The link restores the view: the sentence, and the matrix each panel shows.
    select = "document.querySelector(\".panel[data-model='run-2'] select.matrix-select\")"
    browser.choose(".panel[data-model='run-2'] select.matrix-select", "2")
    browser.open(f"{url}?again{browser.evaluate('location.hash')}")
    browser.wait_for(f"{HEATMAPS} >= 2")
    assert browser.evaluate(f"{select}.value") == "2"
    assert browser.evaluate("document.getElementById('sentence').value") == SENTENCE
    assert not browser.errors()


@pytest.mark.slow
def test_a_person_asks_why_the_translation_has_its_word_and_not_an_alternatives(server, browser):
    """The n-best list's "why ... and not ...?" button, clicked in Chromium: a contrastive
    explanation of the first piece where the alternative differs, with its faithfulness."""
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    browser.open(url)
    browser.wait_for("document.documentElement.dataset.ready === 'true'")
    browser.choose("#beam", "4")
    browser.choose("#n-best", "4")
    browser.type_into("#sentence", SENTENCE)
    browser.click("#translate")
    panel = ".panel[data-model='run']"
    browser.wait_for(f"document.querySelector(\"{panel} .why-not\") !== null")
    asked = browser.evaluate(f"document.querySelector(\"{panel} .why-not\").textContent")
    browser.click(f"{panel} .why-not")
    browser.wait_for(f"document.querySelector(\"{panel} .contrast\") !== null")
    shown = browser.evaluate(f"document.querySelector(\"{panel} .contrast\").textContent")
    assert asked.split("?")[0] in shown and " − log p(" in shown, (asked, shown)
    assert "on the contrast" in shown and "random" in shown
    assert browser.evaluate(f"document.querySelectorAll(\"{panel} .contrast svg\").length") == 1
    assert not browser.errors()


def test_a_translation_with_heads_switched_off_is_the_masked_models_and_names_them(views):
    """``mask_heads`` in a translate request: the model decodes with those heads off (as
    ``attnmt translate --mask-heads`` does), the answer names them, and a SPEC that names no head of
    the model is a 400 naming its ranges."""
    from attnmt.models.head_gates import masked_heads, parse_heads

    served = views.models["run-2"]
    page = {model["name"]: model for model in views.models_page()["models"]}
    from attnmt.models.head_gates import head_count

    assert page["run-2"]["head_parts"] == {part: list(shape) for part, shape in
                                           head_count(served.translator.attributed_model).items()}
    assert set(page["run-2"]["head_parts"]) == {"encoder_self", "decoder_self", "cross"}
    assert page["run"]["head_parts"] == {"cross": [1, 1]}
    answer = views.translate({"sentence": SENTENCE, "models": ["run-2"], "mask_heads": "cross:*:*"})["models"][0]
    model = served.translator.attributed_model
    with masked_heads(model, parse_heads("cross:*:*", model)):
        expected = served.translator.translate([SENTENCE])[0].output
    assert answer["output"] == expected and answer["mask_heads"][0] == "cross:1:1"
    plain = views.translate({"sentence": SENTENCE, "models": ["run-2"]})["models"][0]
    assert plain["mask_heads"] == [] and plain["output"] == served.translator.translate([SENTENCE])[0].output
    with pytest.raises(RequestError) as refused:
        views.translate({"sentence": SENTENCE, "models": ["run"], "mask_heads": "encoder_self:1:1"})
    assert refused.value.status == 400 and "this model has cross: layers 1-1, heads 1-1" in str(refused.value)


@pytest.mark.slow
def test_a_person_switches_a_transformer_head_off_in_its_panel(server, browser):
    """The heads grid of a Transformer's panel, clicked in Chromium: the head is marked off, the
    panel translates again with it off, and a second click switches it on again."""
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    type_and_translate(browser, url)
    panel = ".panel[data-model='run-2']"
    assert browser.evaluate(f"document.querySelector(\"{panel} .head-grid\") !== null")
    assert browser.evaluate("document.querySelector(\".panel[data-model='run'] .head-grid\") === null")  # 1 head
    browser.evaluate(f"document.querySelector(\"{panel} details.heads\").open = true")
    browser.click(f"{panel} button.head[data-head='cross:1:1']")
    browser.wait_for(f"document.querySelector(\"{panel} .heads .masked\") !== null")
    assert "cross:1:1" in browser.evaluate(f"document.querySelector(\"{panel} .heads .masked\").textContent")
    assert browser.evaluate(f"document.querySelector(\"{panel} button.head[data-head='cross:1:1']\")"
                            ".getAttribute('aria-pressed')") == "true"
    browser.click(f"{panel} button.head[data-head='cross:1:1']")
    browser.wait_for(f"document.querySelector(\"{panel} .heads .masked\") === null")
    assert not browser.errors()


@pytest.mark.slow
def test_a_person_steps_through_and_replaces_the_transformer_head_whose_matrix_is_shown(server, browser, tmp_path):
    """A Transformer's panel, in Chromium: with the search's matrix shown, "step through" asks for
    one head's matrix; with "layer 1 / head 1" chosen, it shows that head's step, its uniform
    attention, and with pin on a click on a cell pins that head."""
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    type_and_translate(browser, url)
    panel = ".panel[data-model='run-2']"
    result = f"document.querySelector(\"{panel} .result\").textContent"
    browser.click_button("step through", within=panel)
    browser.wait_for(f"{result}.includes(\"choose one head's matrix\")")
    options = browser.evaluate(f"[...document.querySelector(\"{panel} select.matrix-select\").options]"
                               ".map(o => o.textContent)")
    browser.choose(f"{panel} select.matrix-select", str(options.index("layer 1 / head 1")))
    browser.click_button("step through", within=panel)
    browser.wait_for(f"document.querySelector(\"{panel} .step-table\") !== null")
    assert "head cross:1:1" in browser.evaluate(result)
    browser.hover(f"{panel} .step-table", scroll="center")
    browser.screenshot(tmp_path / "transformer-step.png")  # kept in pytest's temporary folder of this session
    browser.click_button("uniform attention", within=panel)
    browser.wait_for(f"{result}.includes('made uniform')")
    assert "in head cross:1:1" in browser.evaluate(result)
    # with pin on, a click on a cell of the shown head's matrix pins that head at that word
    browser.click(f"{panel} input[aria-label='pin attention']")
    browser.click(f"{panel} .figures rect.cell[data-row='1'][data-col='0']")
    browser.wait_for(f"{result}.includes('pinned on')")
    assert "attention in head cross:1:1 of" in browser.evaluate(result)
    browser.hover(f"{panel} .result", scroll="center")
    browser.screenshot(tmp_path / "transformer-pin.png")
    assert not browser.errors()


def test_tracing_a_word_on_the_page_is_attnmt_trace_of_that_word(views):
    """``POST /api/trace``: the grids of ``attnmt.evaluation.tracing.trace_word`` for the model's
    translation, rounded; a word beyond the output is a 400."""
    from attnmt.evaluation.tracing import trace_word

    served = views.models["run-2"]
    answer = views.trace({"sentence": SENTENCE, "model": "run-2", "word": 1})
    expected = trace_word(served.translator, SENTENCE, 1, samples=10)
    assert answer["clean"] == expected.clean and answer["corrupted"] == expected.corrupted
    assert answer["encoder"] == [[round(v, 4) for v in row] for row in expected.encoder]
    with pytest.raises(RequestError) as refused:
        views.trace({"sentence": SENTENCE, "model": "run", "word": 999})
    assert refused.value.status == 400 and "words (its end </s> counted)" in str(refused.value)


@pytest.mark.slow
def test_a_person_clicks_an_output_word_and_sees_which_states_decide_it(server, browser):
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    type_and_translate(browser, url)
    panel = ".panel[data-model='run-2']"
    browser.click(f"{panel} .out-word[data-row='0']")
    browser.wait_for(f"document.querySelector(\"{panel} .trace-title\") !== null")
    assert browser.evaluate(f"document.querySelectorAll(\"{panel} .result svg.heatmap\").length") == 2
    assert "clean" in browser.evaluate(f"document.querySelector(\"{panel} .trace-title\").textContent")
    assert not browser.errors()


def test_a_gold_split_gives_examples_with_their_links(runs, tmp_path):
    from attnmt.serve.models import gold_examples

    gold = tmp_path / "gold"
    (tmp_path / "gold.de-en.de").write_text("ein hund läuft\nder ball\n", encoding="utf-8")
    (tmp_path / "gold.de-en.en").write_text("a dog runs\nthe ball\n", encoding="utf-8")
    (tmp_path / "gold.de-en.naacl").write_text("1 1 1 S\n1 2 2 S\n1 3 3 P\n2 1 1 S\n2 2 2 S\n", encoding="utf-8")
    models = load_models(runs[:1], say=lambda line: None)
    examples = gold_examples(gold, models)
    assert examples[0] == {"source": "ein hund läuft", "reference": "a dog runs", "links": "0-0 1-1", "possible": "2-2"}
    views = Views(models, examples)
    answer = views.gold({"sentence": examples[0]["source"], "reference": examples[0]["reference"],
                         "links": examples[0]["links"], "possible": examples[0]["possible"]})
    assert answer["gold"] == [[0, 0], [1, 1]] and 0 <= answer["models"][0]["aer"] <= 1


def test_each_model_works_on_its_own_thread_and_stopping_refuses_new_work(views):
    from attnmt.serve.jobs import ModelWorkers

    workers = ModelWorkers(list(views.models))
    threaded = Views(list(views.models.values()), jobs=workers)
    same = threaded.translate({"sentence": SENTENCE, "models": ["run"]})["models"][0]
    assert same["output"] == views.translate({"sentence": SENTENCE, "models": ["run"]})["models"][0]["output"]
    workers.stop()
    with pytest.raises(RequestError) as refused:
        threaded.translate({"sentence": SENTENCE})
    assert refused.value.status == 503


@pytest.mark.slow
def test_ctrl_c_while_a_model_works_waits_for_it_and_exits_cleanly(runs):
    """SIGINT during a saliency request: the server stops taking work, waits for the worker and
    ends with status 0; it used to abort in the middle of a PyTorch operator (SIGABRT,
    "terminate called without an active exception"; issue 63, item 6)."""
    import os
    import signal
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", str(runs[1]), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(Path(attnmt.__file__).parents[1])})
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[2]  # "attnmt serve: http://127.0.0.1:PORT/ (...)"
        host, port = url.split("//")[1].rstrip("/").split(":")
        body = json.dumps({"sentence": " ".join([SENTENCE] * 4), "model": "run", "method": "integrated",
                           "steps": 16}).encode()
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.request("POST", "/api/saliency", body=body,
                           headers={"Content-Type": "application/json", "Host": f"{host}:{port}"})
        time.sleep(0.5)  # the worker is inside the saliency now
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "terminate called" not in err and "Traceback" not in err
    assert "stopped" in err.strip().splitlines()[-1]


# -- what a new user's probe found (issue 63, items 2, 7, 8, 9) -------------------------------------


def raw_exchange(server, data: bytes, wait: float = 5.0) -> bytes:
    """Send ``data`` on one connection and read until the server closes it (or ``wait`` passes)."""
    import socket

    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=wait) as connection:
        connection.sendall(data)
        received = b""
        try:
            while chunk := connection.recv(65536):
                received += chunk
        except TimeoutError:
            pass
    return received


def smuggled(port: int, outer_headers: str) -> bytes:
    inner_body = json.dumps({"sentence": SENTENCE}).encode()
    inner = (f"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(inner_body)}\r\n\r\n").encode() + inner_body
    return (f"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{outer_headers}"
            f"Content-Length: {len(inner)}\r\n\r\n").encode() + inner


@pytest.mark.parametrize("outer", ["Content-Type: text/plain\r\n",
                                   "Content-Type: application/json\r\nOrigin: http://evil.example\r\n",
                                   "Content-Type: text/plain\r\nOrigin: http://evil.example\r\n"])
def test_a_refused_requests_body_is_never_read_as_the_next_request(server, outer):
    """A page on another site sends a text/plain POST (no preflight) whose body is a whole JSON
    request: the refusal closes the connection, so the inner request is never answered."""
    answer = raw_exchange(server, smuggled(server.server_address[1], outer))
    assert answer.count(b"HTTP/1.1 ") == 1, answer[:400]
    assert answer.startswith((b"HTTP/1.1 415", b"HTTP/1.1 403")) and b"Connection: close" in answer


def test_a_client_that_trickles_a_request_is_cut_off_at_the_deadline(server, monkeypatch):
    import socket

    monkeypatch.setattr("attnmt.serve.server.REQUEST_DEADLINE", 1.0)
    host, port = server.server_address[:2]
    start = time.monotonic()
    with socket.create_connection((host, port), timeout=10) as connection:
        request = f"GET /api/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: {'a' * 40}\r\n\r\n".encode()
        closed = False
        for byte in request:
            try:
                connection.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)  # each read well within READ_TIMEOUT, the whole far beyond the deadline
            if time.monotonic() - start > 3:
                break
        if not closed:
            try:
                closed = connection.recv(1) == b""
            except OSError:
                closed = True
    assert closed and time.monotonic() - start < 4


@pytest.mark.parametrize(("body", "words"), [
    (b"[" * 30000 + b"]" * 30000, "nested too deep"),
    (b'{"sentence": ' + b"9" * 5000 + b"}", "out of range"),
    (b'{"sentence": "ein \\ud800 hund"}', "lone surrogate"),
])
def test_odd_json_gets_a_one_line_400(server, body, words):
    status, answer = request(server, "POST", "/api/translate", body)
    assert status == 400 and words in answer["error"]


def test_a_gold_link_of_other_digits_is_a_400(views):
    with pytest.raises(RequestError) as refused:
        views.gold({"sentence": "Ein hund", "reference": "A dog", "links": "\u00b2-1"})
    assert refused.value.status == 400


# -- issue 77, items 11 and 12 ----------------------------------------------------------------------


def test_a_gold_link_index_of_thousands_of_digits_is_a_400_not_a_500(views):
    with pytest.raises(RequestError) as refused:
        views.gold({"sentence": "Ein hund", "reference": "A dog", "links": "9" * 5000 + "-1"})
    assert refused.value.status == 400 and "names a word the sentences do not have" in str(refused.value)
    assert len(str(refused.value)) < 200


@pytest.mark.parametrize("length", ["\u00b2", "\u00b3", "\u00b9", "12 3", "-5", "0x10", "9" * 30])
def test_a_content_length_of_other_digits_is_refused_not_a_500(server, length):
    """Headers are read as Latin-1, so the byte 0xB2 is "²", which str.isdigit() accepts."""
    port = server.server_address[1]
    head = (f"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n")
    answer = raw_exchange(server, head.encode("latin-1") + b'{"sentence": "x"}')
    assert answer.startswith((b"HTTP/1.1 411", b"HTTP/1.1 413", b"HTTP/1.1 400")), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_the_body_of_a_get_or_head_is_never_read_as_the_next_request(server, method):
    """A GET carrying a whole POST as its body got two 200s; now the GET is refused and the
    connection closed, so the POST inside is never answered."""
    port = server.server_address[1]
    inner_body = json.dumps({"sentence": SENTENCE}).encode()
    inner = (f"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(inner_body)}\r\n\r\n").encode() + inner_body
    outer = f"{method} /api/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(inner)}\r\n\r\n"
    answer = raw_exchange(server, outer.encode() + inner)
    assert answer.count(b"HTTP/1.1 ") == 1 and answer.startswith(b"HTTP/1.1 400"), answer[:300]
    assert b"Connection: close" in answer
    chunked = f"GET /api/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert raw_exchange(server, chunked.encode()).startswith(b"HTTP/1.1 400")
    status, _ = request(server, "GET", "/api/models")  # without a body, as before
    assert status == 200


def test_unknown_methods_and_doubled_slashes_get_json_not_pages(server):
    answer = raw_exchange(server, f"FROB / HTTP/1.1\r\nHost: 127.0.0.1:{server.server_address[1]}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 501") and b'{"error"' in answer and b"<html" not in answer.lower()
    status, _ = request(server, "GET", "//api/models")
    assert status == 404


def test_a_client_that_hangs_up_is_not_a_traceback(server, capsys):
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_tab_and_arrow_keys_move_the_linked_word_to_the_nearest_equal_one(server, browser):
    """Issue 63, item 5: typed, clicked and moved with the keyboard as a person does. Tab reaches the
    first output word of the first panel; each arrow moves the focus one word on, and the other
    panel links the occurrence of that word nearest in relative position, not its first one."""
    type_and_translate(browser, f"http://127.0.0.1:{server.server_address[1]}/")
    first = ".panel[data-model='run'] .out-word"
    for _ in range(200):
        browser.press("Tab")
        if browser.evaluate(f"document.activeElement.matches({json.dumps(first)})"):
            break
    assert browser.evaluate("document.activeElement.dataset.row") == "0"
    mine = browser.evaluate(f"[...document.querySelectorAll({json.dumps(first)})].map(w => w.textContent)")
    theirs = browser.evaluate("[...document.querySelectorAll(\".panel[data-model='run-2'] .out-word\")]"
                              ".map(w => w.textContent)")
    for row in range(1, min(len(mine), 8)):
        browser.press("ArrowRight")
        assert browser.evaluate("document.activeElement.dataset.row") == str(row)
        linked = int(browser.evaluate("document.querySelector(\".panel[data-model='run-2'] .out-word.linked\")"
                                      ".dataset.row"))
        equal = [i for i, word in enumerate(theirs) if word.lower() == mine[row].lower()]
        if equal:
            place = row / max(1, len(mine) - 1)
            nearest = min(equal, key=lambda i: (abs(i / max(1, len(theirs) - 1) - place), i))
            assert linked == nearest, (row, mine, theirs)
    browser.press("ArrowLeft")
    assert browser.evaluate("document.activeElement.dataset.row") == str(min(len(mine), 8) - 2)
    assert not browser.errors()


def test_a_models_queue_is_bounded_and_abandoned_jobs_never_start():
    """Issue 63, item 9: after ten abandoned 64-step saliency requests the next one waited for all
    of them. A waiting job whose client left is cancelled before it starts, and at most
    MAX_WAITING heavy jobs wait per model (then 503). Issue 77, item 10: a translation has a bound
    of its own, so a queue full of saliency does not refuse it, and it runs before them."""
    from attnmt.serve.jobs import BUSY, MAX_WAITING, MAX_WAITING_TRANSLATIONS, ClientGone, ModelWorkers, watching

    workers = ModelWorkers(["m"])
    release, started, ran = threading.Event(), threading.Event(), []
    blocker = threading.Thread(target=workers.run, args=("m", lambda: (started.set(), release.wait(10))))
    blocker.start()
    assert started.wait(10)
    with watching(lambda: True), pytest.raises(ClientGone):
        workers.run("m", lambda: ran.append("abandoned"), priority=1)
    heavy = [threading.Thread(target=workers.run, args=("m", lambda: ran.append("heavy"), 1))
             for _ in range(MAX_WAITING)]
    for thread in heavy:
        thread.start()
    deadline = time.monotonic() + 10
    while workers._queues["m"].qsize() < MAX_WAITING and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match=BUSY.split(";")[0]):
        workers.run("m", lambda: ran.append("one too many"), priority=1)
    translations = [threading.Thread(target=workers.run, args=("m", lambda: ran.append("translation")))
                    for _ in range(MAX_WAITING_TRANSLATIONS)]
    for thread in translations:
        thread.start()
    while workers._queues["m"].qsize() < MAX_WAITING + MAX_WAITING_TRANSLATIONS and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match=BUSY.split(";")[0]):
        workers.run("m", lambda: ran.append("one translation too many"))
    release.set()
    for thread in [blocker, *heavy, *translations]:
        thread.join(10)
    # the translations queued last ran first; the abandoned and the refused jobs never ran
    assert ran == ["translation"] * MAX_WAITING_TRANSLATIONS + ["heavy"] * MAX_WAITING
    assert workers.stop()


def test_every_mechanism_that_can_be_stepped_through_has_its_equations_as_mathml():
    import xml.etree.ElementTree as ElementTree

    from attnmt.attention.mechanisms import BUILTIN_BUILDERS
    from attnmt.serve.equations import equation_mathml

    for name in BUILTIN_BUILDERS:
        mathml = equation_mathml(name)
        root = ElementTree.fromstring(mathml)  # well-formed, in the MathML namespace
        assert root.tag == "{http://www.w3.org/1998/Math/MathML}math", name
        assert "``" not in mathml and "_" not in mathml and "^" not in mathml, name  # every mark drawn


def test_why_this_and_not_the_alternative_contrasts_the_first_piece_that_differs(views):
    """An n-best alternative's pieces make the explanation contrastive at the first piece where they
    differ from the translation: the page's "why ... and not ...?" button."""
    best = views.translate({"sentence": SENTENCE, "models": ["run"]})["models"][0]
    alternative = list(best["out_pieces"])
    alternative[0] = next(piece for piece in ("▁a", "▁the", "▁dog", "a") if piece != alternative[0])
    answer = views.saliency({"sentence": SENTENCE, "model": "run", "method": "gradient", "alternative": alternative})
    contrast = answer["contrast"]
    assert contrast["step"] == 1 and contrast["foil"] == alternative[0] and contrast["depends_on_output"]
    assert len(contrast["scores"]) == len(contrast["src_words"]) and set(answer["faithfulness"]) == {
        "attention", "gradient", "random"}
    with pytest.raises(RequestError) as refused:
        views.saliency({"sentence": SENTENCE, "model": "run", "method": "gradient", "alternative": best["out_pieces"]})
    assert refused.value.status == 400 and "does not differ" in str(refused.value)


def explain_json(run: Path, capsys, *options: str) -> dict:
    """What ``attnmt explain RUN --json ...`` prints for SENTENCE."""
    capsys.readouterr()
    assert cli_main(["explain", str(run), "--json", "--threads", "1", *options, SENTENCE]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("method", ["integrated", "smoothgrad"])
def test_the_page_and_attnmt_explain_give_the_same_figures_for_the_same_settings(views, runs, capsys, method):
    """serve's explanation of a sentence is the one ``attnmt explain --steps 10 --samples 10`` prints,
    plain and contrastive (an alternative's first differing piece as the foil, ``--foil WORD --step T``)."""
    best = views.translate({"sentence": SENTENCE, "models": ["run"]})["models"][0]
    alternative = list(best["out_pieces"])
    alternative[0] = next(piece for piece in ("▁a", "▁the", "▁dog") if piece != alternative[0])
    settings = ["--methods", f"attention,{method}", "--steps", "10", "--samples", "10"]
    for payload, options in (({}, []), ({"alternative": alternative}, ["--foil", alternative[0][1:], "--step", "1"])):
        page = views.saliency({"sentence": SENTENCE, "model": "run", "method": method, **payload})
        printed = explain_json(runs[0], capsys, *settings, *options)
        assert printed["output"] == best["output"]
        for name, figures in page["faithfulness"].items():
            found = printed["random"] if name == "random" else printed["methods"][name]
            assert figures == {"comprehensiveness": round(found["comprehensiveness_aopc"]["words"], 3),
                               "sufficiency": round(found["sufficiency_aopc"]["words"], 3)}, (name, options)
        assert page["agreement"] == round(printed["methods"][method]["rank_correlation"], 3)
        assert page["top1"] == round(printed["methods"][method]["top1"], 3)
        assert ("contrast" in page) == bool(options)
