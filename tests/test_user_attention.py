"""Attention that users write: the three forms of the contract, the ways to name it, `attnmt check`
(a correct mechanism passes, each classic bug fails with its property named), and a run trained
with one: translate, evaluate, view, compare, and the trust check when its file changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import attnmt
from attnmt.alignment.translator_attention import TranslatorAligner
from attnmt.attention import build_attention, padding_mask
from attnmt.attention import user_code as user_module
from attnmt.attention.conformance import check_mechanism
from attnmt.attention.trusted_code import TRUST_FILE_VARIABLE
from attnmt.attention.user_code import UntrustedCodeError, UserCodeError, register_attention
from attnmt.decoding.translator import Translator
from attnmt.evaluation.evaluate import evaluate_run
from attnmt.visual.examples import view_examples
from attnmt.workflows import compare_mechanisms

from helpers import run_trainer, save_yaml, tiny_run_config, write_corpus

PROJECT = Path(__file__).resolve().parents[1]
EXAMPLE = f"{PROJECT / 'examples' / 'my_attention.py'}:MyAttention"
ENV = {**os.environ, "PYTHONPATH": str(PROJECT), "OMP_NUM_THREADS": "1"}

# A softmax over the allowed positions that is exactly 0 elsewhere and on a row with none.
SAFE_SOFTMAX = """
def safe_softmax(scores, mask):
    has_any = mask.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_any, 0.0)
    return torch.softmax(scores, dim=-1) * mask
"""

CORRECT = """
import torch
from torch import nn
{safe}

class Dot(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim):
        super().__init__()
        self.project = nn.Linear(query_dim, key_dim)

    def forward(self, query, keys, values, mask):
        scores = torch.einsum("bd,bsd->bs", self.project(query), keys) / key_dim_root(keys)
        weights = {weights}
        return torch.einsum("bs,bsv->bv", weights, values), weights

def key_dim_root(keys):
    return keys.shape[-1] ** 0.5
"""

BROKEN = {
    # the mask is ignored: padding positions get weight
    "weights": CORRECT.format(safe=SAFE_SOFTMAX, weights="torch.softmax(scores, dim=-1)"),
    # masked_fill(-inf) then softmax: a row with no allowed position is NaN
    "empty row": CORRECT.format(safe=SAFE_SOFTMAX,
                                weights="torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)"),
    # scores standardised over the whole batch: a sentence depends on the others
    "batch": CORRECT.format(safe=SAFE_SOFTMAX,
                            weights="safe_softmax((scores - scores.mean()) / (scores.std() + 1), mask)"),
    # exp without subtracting the maximum: overflows on large scores
    "large inputs": CORRECT.format(
        safe=SAFE_SOFTMAX,
        weights="torch.exp(scores) * mask / (torch.exp(scores) * mask).sum(-1, keepdim=True).clamp_min(1e-30)"),
}
WRONG_SHAPE = """
import torch
from torch import nn

class WrongShape(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim):
        super().__init__()

    def forward(self, query, keys, values, mask):
        weights = torch.softmax(torch.einsum("bd,bsd->bs", query, keys).masked_fill(~mask, -1e4), -1) * mask
        return torch.einsum("bs,bsd->bd", weights, keys), weights   # the keys, not the values
"""
STEPS_DISAGREE = """
import torch
from attnmt.attention import Attention

class FirstStepOnly(Attention):
    '''The prepared form, whose all-steps path uses the first query for every step.'''
    def score(self, query, prepared):
        query = query[:, :1].expand_as(query)
        return torch.bmm(query, prepared.keys.transpose(1, 2))
"""
SCORE_FORM = """
import torch
from torch import nn

class Bilinear(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(query_dim, key_dim) / key_dim ** 0.5)

    def score(self, query, keys):
        return torch.einsum("bq,qk,bsk->bs", query, self.weight, keys)
"""
TRANSFORMER_SCORE = """
import torch
from torch import nn

class Cosine(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim, temperature=10.0):
        super().__init__()
        self.temperature = nn.Parameter(torch.tensor(float(temperature)))

    def score(self, q, k):
        q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        k = k / k.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        return self.temperature * q @ k.transpose(-2, -1)
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def statuses(report) -> dict[str, str]:
    return {result.name: result.status for result in report.results}


# ---------------------------------------------------------------------------- the contract


def test_the_docs_example_passes_every_property():
    report = check_mechanism(EXAMPLE, speed=False)
    assert report.passed, report.to_dict()
    assert report.form == "forward"
    assert statuses(report)["all steps"] == "n/a"


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_classic_bug_fails_and_the_report_names_it(tmp_path, broken):
    path = write(tmp_path, "broken.py", BROKEN[broken])
    report = check_mechanism(f"{path}:Dot", speed=False)
    assert not report.passed
    failed = [result for result in report.results if result.status == "fail"]
    assert failed[0].name == broken, report.to_dict()
    assert failed[0].detail  # the counterexample
    if broken in ("weights", "batch"):
        assert "row" in failed[0].detail


def test_a_wrong_output_shape_fails_shapes(tmp_path):
    report = check_mechanism(f"{write(tmp_path, 'shape.py', WRONG_SHAPE)}:WrongShape", dims=(16, 16, 12),
                             speed=False)
    result = next(r for r in report.results if r.name == "shapes")
    assert result.status == "fail" and "[4, 12]" in result.detail


def test_steps_that_disagree_with_all_steps_fail_all_steps(tmp_path):
    report = check_mechanism(f"{write(tmp_path, 'steps.py', STEPS_DISAGREE)}:FirstStepOnly", speed=False)
    assert statuses(report)["all steps"] == "fail"
    assert statuses(report)["weights"] == "pass"


def test_every_builtin_passes():
    for name in ("mean", "dot", "scaled_dot", "general", "additive", "local-m", "local-p", "multihead"):
        report = check_mechanism(name, speed=False)
        assert report.passed, (name, report.to_dict())


def test_the_score_form_is_masked_normalised_and_summed_by_attnmt(tmp_path):
    spec = f"{write(tmp_path, 'bilinear.py', SCORE_FORM)}:Bilinear"
    attention = build_attention(spec, 6, 5, 4)
    query, keys, values = torch.randn(3, 6), torch.randn(3, 7, 5), torch.randn(3, 7, 4)
    mask = padding_mask(torch.tensor([7, 2, 0]), 7)
    context, weights = attention(query, keys, values, mask)
    scores = torch.einsum("bq,qk,bsk->bs", query, attention.module.weight, keys)
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)[:2]
    torch.testing.assert_close(weights[:2], expected)
    torch.testing.assert_close(context[:2], torch.einsum("bs,bsv->bv", expected, values[:2]))
    assert (weights[2] == 0).all() and (context[2] == 0).all()
    assert check_mechanism(spec, speed=False).passed


def test_a_transformer_score_replaces_the_scaled_dot_product(tmp_path):
    spec = f"{write(tmp_path, 'cosine.py', TRANSFORMER_SCORE)}:Cosine"
    report = check_mechanism(spec, model="transformer", dims=(8, 8, 8), heads=2, speed=False)
    assert report.passed, report.to_dict()
    config = tiny_run_config(tmp_path, train_pairs=40, valid_pairs=4, max_steps=3)
    config["model"] = {"type": "transformer", "d_model": 16, "num_heads": 2, "ffn_dim": 16, "encoder_layers": 1,
                       "decoder_layers": 1, "attention": spec, "attention_options": {"temperature": 5.0}}
    run_trainer(tmp_path, config)
    translator = Translator.load(tmp_path / "run")
    layer = translator.model.decoder_layers[0].cross_attention
    assert type(layer.score).__name__ == "Cosine" and float(layer.score.temperature.detach()) != 0
    assert translator.translate(["Ein hund läuft."], return_attention=True)[0].attention is not None


# ---------------------------------------------------------------------------- names


def test_register_attention_names_a_class_and_never_a_builtin(tmp_path):
    module = {}
    exec(textwrap.dedent(SCORE_FORM), module)

    with pytest.raises(ValueError, match="built-in"):
        register_attention("SDP")(module["Bilinear"])
    register_attention("test-bilinear")(module["Bilinear"])
    try:
        assert "test-bilinear" in attnmt.attention.registry.registered_names()
        assert build_attention("test-bilinear", 4, 4).module.weight.shape == (4, 4)
        with pytest.raises(ValueError, match="already names"):
            register_attention("test-bilinear")(torch.nn.Linear)
    finally:
        user_module._REGISTERED.pop("test-bilinear")


def test_an_entry_point_adds_a_name_and_cannot_shadow_a_builtin(tmp_path, monkeypatch):
    write(tmp_path, "plugin_scores.py", SCORE_FORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [
        __import__("importlib.metadata").metadata.EntryPoint("plugin-bilinear", "plugin_scores:Bilinear",
                                                              user_module.ENTRY_POINT_GROUP),
        __import__("importlib.metadata").metadata.EntryPoint("additive", "plugin_scores:Bilinear",
                                                              user_module.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(user_module, "entry_points", lambda group: points)
    monkeypatch.setattr(user_module, "_ENTRY_POINTS_READ", False)
    monkeypatch.setattr(user_module, "_ENTRY_POINT_NAMES", {})
    monkeypatch.setattr(user_module, "_REGISTERED", {})
    with pytest.warns(UserWarning, match="built-in"):
        assert user_module.is_user_name("plugin-bilinear")
    assert type(build_attention("plugin-bilinear", 4, 4).module).__name__ == "Bilinear"
    assert type(build_attention("additive", 4, 4)).__name__ == "AdditiveAttention"


def test_specs_that_cannot_be_loaded_say_why_in_one_line(tmp_path, attnmt_cli):
    no_keywords = write(tmp_path, "positional.py", """
        from torch import nn
        class Positional(nn.Module):
            def __init__(self, size):
                super().__init__()
    """)
    raising = write(tmp_path, "raising.py", "raise RuntimeError('no GPU here')\n")
    cases = {
        f"{tmp_path}/missing.py:A": "no such file",
        f"{no_keywords}:Nope": "has no class 'Nope'",
        f"{no_keywords}:Positional": "does not fit its constructor",
        f"{raising}:A": "RuntimeError: no GPU here",
        "no_such_package.module:A": "no module 'no_such_package'",
    }
    for spec, words in cases.items():  # in this process: an exception that escaped would fail the test
        done = attnmt_cli("check", spec)
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        assert done.returncode == 2, (spec, done.stderr)
        assert len(errors) == 1 and words in errors[0], (spec, done.stderr)
        assert "Traceback" not in done.stderr


def test_check_exits_1_on_a_failure_and_writes_the_json(tmp_path, attnmt_cli):
    path = write(tmp_path, "broken.py", BROKEN["weights"])
    report = tmp_path / "check.json"
    done = attnmt_cli("check", EXAMPLE, f"{path}:Dot", "--no-speed", "--json", report)
    assert done.returncode == 1, done.stderr
    assert "FAILS" in done.stdout and "where the mask is False" in done.stdout
    written = json.loads(report.read_text())
    assert [entry["passed"] for entry in written] == [True, False]
    again = attnmt_cli("check", EXAMPLE, "--json", report)
    assert again.returncode == 2 and "--overwrite" in again.stderr


# ---------------------------------------------------------------------------- a run trained with one


@pytest.fixture(scope="module")
def user_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user_run")
    code = write(folder, "mine.py", Path(EXAMPLE.rpartition(":")[0]).read_text())
    config = tiny_run_config(folder, train_pairs=60, valid_pairs=5, max_steps=4)
    config["model"]["attention"] = f"{code}:MyAttention"
    config["model"]["attention_options"] = {"attention_dim": 16}
    config["data"]["test"] = {"made_up": write_corpus(folder, "test", 6, seed=3)}
    run_trainer(folder, config)
    return folder, code


@pytest.mark.slow
def test_a_user_run_keeps_its_code_and_translates_evaluates_and_views(user_run):
    folder, code = user_run
    run = folder / "run"
    assert (run / "user_attention.py").read_bytes() == code.read_bytes()
    record = json.loads((run / "user_attention.json").read_text())
    assert record["path"] == str(code) and len(record["sha256"]) == 64
    translator = Translator.load(run)
    assert type(translator.model.attention.module).__name__ == "MyAttention"
    translation = translator.translate(["Ein hund läuft."], beam=3, return_attention=True)[0]
    assert translation.attention.shape[-1] == len(translation.src_pieces)
    evaluation = evaluate_run(run, split="made_up", beam=2)
    assert evaluation.json_path.is_file() and evaluation.report["bleu"] >= 0
    examples = view_examples(translator, ["Ein hund läuft."], beam=2)
    assert examples[0]["meta"]["beam"] == 2
    assert "<" in attnmt.show(translator, "Ein hund läuft.")._repr_html_()  # the notebook view
    links = TranslatorAligner(translator).align([["Ein", "hund", "läuft", "."]], [["A", "dog", "runs", "."]])
    assert links and all(0 <= i < 4 and 0 <= j < 4 for i, j in links[0])
    page = folder / "view.html"
    done = subprocess.run([sys.executable, "-m", "attnmt", "view", str(run), "--split", "made_up", "-n", "2",
                           "--out", str(page), "--no-progress"], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0 and page.is_file(), done.stderr
    records = folder / "attention.npz"
    done = subprocess.run([sys.executable, "-m", "attnmt", "translate", str(run), "--attention-out", str(records)],
                          input="Ein hund läuft.\n", capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    record = attnmt.load_attention(records)[0]
    assert record.weights.shape[-1] == len(record.src_pieces)


@contextmanager
def copied_run_with_edited_code(user_run, folder: Path, appended: str):
    """A copy of the user run in ``folder``, while its mechanism's file has ``appended`` at its end."""
    source, code = user_run
    copy = shutil.copytree(source / "run", folder / "run")
    original = code.read_text()
    code.write_text(original + appended)
    try:
        yield copy, code
    finally:
        code.write_text(original)


@pytest.fixture
def another_machine(tmp_path, monkeypatch):
    """A machine that never trained with the user run's code: an empty list of trusted code."""
    monkeypatch.setenv(TRUST_FILE_VARIABLE, str(tmp_path / "trusted-elsewhere.txt"))
    return {**ENV, TRUST_FILE_VARIABLE: str(tmp_path / "trusted-elsewhere.txt")}


@pytest.mark.slow
def test_a_run_trained_here_runs_the_code_it_keeps_whatever_its_file_holds_now(user_run, tmp_path):
    with copied_run_with_edited_code(user_run, tmp_path, "\nraise SystemExit('this must not run')\n") as (run, code):
        translator = Translator.load(run)  # the kept copy: this machine trained with it
        assert translator.translate(["Ein hund."])[0].output is not None
        code.unlink()
        assert Translator.load(run).translate(["Ein hund."])[0].output is not None


@pytest.mark.slow
def test_a_run_from_elsewhere_runs_no_code_without_consent(user_run, tmp_path, another_machine):
    source = user_run[0]
    with pytest.raises(UntrustedCodeError, match="has not trained with that code.*trust_run_code=True"):
        Translator.load(source / "run")
    assert Translator.load(source / "run", attention=str(user_run_spec(user_run))).translate(["Ein hund."])
    done = subprocess.run([sys.executable, "-m", "attnmt", "translate", str(source / "run")], input="Ein hund.\n",
                          capture_output=True, text=True, env=another_machine, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") <= 2 and "--trust-run-code" in done.stderr
    with copied_run_with_edited_code(user_run, tmp_path / "named", "\n# edited\n") as (run, _):
        with pytest.raises(UntrustedCodeError, match="has changed since.*trust_run_code=True runs the copy"):
            Translator.load(run, attention=user_run_spec(user_run))  # named, but no longer the run's code
    with copied_run_with_edited_code(user_run, tmp_path, "\nraise SystemExit('this must not run')\n") as (run, _):
        assert Translator.load(run, trust_run_code=True).translate(["Ein hund."])[0].output is not None
        trusted = subprocess.run([sys.executable, "-m", "attnmt", "translate", str(run), "--trust-run-code"],
                                 input="Ein hund.\n", capture_output=True, text=True, env=another_machine, timeout=120)
        assert trusted.returncode == 0 and trusted.stdout.count("\n") == 1, trusted.stderr


def user_run_spec(user_run) -> str:
    return f"{user_run[1]}:MyAttention"


@pytest.mark.slow
def test_resuming_a_user_run_asks_for_consent_too(user_run, tmp_path, another_machine):
    with copied_run_with_edited_code(user_run, tmp_path, "\n# edited\n") as (run, _):
        config = attnmt.load_config(run / "config.yaml", {"max_steps": 6})
        with pytest.raises(UntrustedCodeError):
            attnmt.train(config, run, resume=True, show_progress=False, verbose=False)
        with pytest.raises(UntrustedCodeError, match="has changed since"):
            attnmt.train(config, run, resume=True, show_progress=False, verbose=False,
                         named_attention=user_run_spec(user_run))
        result = attnmt.train(config, run, resume=True, show_progress=False, verbose=False, trust_run_code=True)
        assert result.step == 6


@pytest.mark.slow
def test_compare_puts_a_user_mechanism_beside_the_builtins(tmp_path):
    code = write(tmp_path, "mine.py", Path(EXAMPLE.rpartition(":")[0]).read_text())
    config = tiny_run_config(tmp_path, train_pairs=40, valid_pairs=4)
    config["data"]["test"] = {"made_up": write_corpus(tmp_path, "test", 4, seed=3)}
    config["search"] = {"max_len_a": 1.0, "max_len_b": 3}
    path = save_yaml(tmp_path, config, "tiny.yaml")
    spec = f"{code}:MyAttention"
    comparison = compare_mechanisms(path, ["mean", spec], 1, tmp_path / "out", limits={"max_steps": 2},
                                    show_progress=False, log=lambda line: None)
    assert (tmp_path / "out" / "runs" / "mine.py-MyAttention-seed1" / "best.pt").is_file()
    assert spec in comparison.summary_table()
    with pytest.raises(attnmt.ConfigError, match="same mechanism"):
        compare_mechanisms(path, ["sdp", "scaled_dot"], 1, tmp_path / "out2", show_progress=False)


def test_a_config_naming_user_code_is_read_without_importing_it(tmp_path):
    marker = tmp_path / "imported"
    code = write(tmp_path, "loud.py", f"open({str(marker)!r}, 'w').close()\n")
    config = tiny_run_config(tmp_path)
    config["model"]["attention"] = f"{code}:Loud"
    attnmt.load_config(save_yaml(tmp_path, config))
    assert not marker.exists()
    with pytest.raises(UserCodeError, match="has no class 'Loud'"):
        build_attention(f"{code}:Loud", 4, 4)
    assert marker.exists()  # naming it to build_attention is asking for it


def test_the_old_module_path_still_gives_every_name_and_warns():
    """``attnmt.attention.user`` was split in three in 0.3.1; importing it warns and gives the same
    objects as the new modules, until 0.4."""
    import importlib
    import sys

    from attnmt.attention import provenance, user_adapter, user_code

    sys.modules.pop("attnmt.attention.user", None)
    with pytest.warns(DeprecationWarning, match="attnmt.attention.user is deprecated"):
        old = importlib.import_module("attnmt.attention.user")
    for module in (user_code, user_adapter, provenance):
        for name in module.__all__:
            assert getattr(old, name) is getattr(module, name), name
