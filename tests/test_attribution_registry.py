"""The attributions give the numbers they gave before they moved to ``attnmt.attribution``:
``tests/data/attributions-0.2.0/expected.json``, written by attnmt 0.2.0's code (its
``make_expected.py``), for a tiny trained RNN run and a seeded tiny Transformer."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnmt.attribution.reader import attribute
from attnmt.cli import main as cli_main
from attnmt.decoding.translator import Translator
from attnmt.models import build_model

from helpers import tiny_transformer_config

FIXTURE = Path(__file__).resolve().parent / "data" / "attributions-0.2.0"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
#: another processor's vector units round otherwise; the figures are sums of float32 products
RTOL, ATOL = 1e-4, 1e-6


def assert_close(found, wanted, where: str = "") -> None:
    """The same structure, its floats to RTOL/ATOL; the seconds an attribution took are not compared."""
    if isinstance(wanted, dict):
        assert isinstance(found, dict) and set(found) == set(wanted), where
        for key in wanted:
            if key != "seconds":
                assert_close(found[key], wanted[key], f"{where}.{key}")
    elif isinstance(wanted, list) and wanted and isinstance(wanted[0], (list, dict, str)):
        assert isinstance(found, list) and len(found) == len(wanted), where
        for index, (item, expected) in enumerate(zip(found, wanted)):
            assert_close(item, expected, f"{where}[{index}]")
    elif isinstance(wanted, (list, float)):
        np.testing.assert_allclose(np.asarray(found, dtype=np.float64), np.asarray(wanted, dtype=np.float64),
                                   rtol=RTOL, atol=ATOL, err_msg=where)
    else:
        assert found == wanted, where


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_explain_json_gives_the_figures_of_0_2_0(one_thread):
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        assert cli_main(["explain", str(FIXTURE / "rnn"), *EXPECTED["sentences"], "--json", "--device", "cpu",
                         "--threads", "1"]) == 0
    explained = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert_close(explained, EXPECTED["explain_json"], "explain")


def test_every_attribution_of_the_rnn_gives_the_matrices_of_0_2_0(one_thread):
    translator = Translator.load(FIXTURE / "rnn", device="cpu")
    translations = translator.translate(EXPECTED["sentences"], return_attention=True)
    for method, wanted in EXPECTED["rnn"].items():
        found = [matrix.tolist() for matrix in translator.read_attributions(translations, method)]
        assert_close(found, wanted, method)


def test_every_attribution_of_the_transformer_gives_the_matrices_of_0_2_0(one_thread):
    torch.manual_seed(0)
    model = build_model(tiny_transformer_config(), 20, 20).double().eval()
    sources, outputs = EXPECTED["transformer_sources"], EXPECTED["transformer_outputs"]
    for method, wanted in EXPECTED["transformer"].items():
        found = dict(attribute(model, sources, outputs, method=method))
        assert_close([found[k].tolist() for k in range(len(sources))], wanted, method)


def test_the_old_names_of_a_translator_still_work_and_warn(one_thread):
    translator = Translator.load(FIXTURE / "rnn", device="cpu")
    translations = translator.translate(EXPECTED["sentences"][:1])
    with pytest.warns(DeprecationWarning, match="read_attributions"):
        old = translator.read_saliency(translations, "erasure")
    with pytest.warns(DeprecationWarning, match="attribution_methods"):
        assert translator.saliency_methods() == translator.attribution_methods()
    np.testing.assert_array_equal(old[0], translator.read_attributions(translations, "erasure")[0])
