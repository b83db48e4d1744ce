"""The course handout's form of a mechanism (attnmt.attention.handout): the class a student writes
to the handout, constructor (enc_hid_dim, dec_hid_dim, ...), time-first encoder outputs and no mask,
is checked, trains and translates in attnmt unchanged."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnmt.attention import build_attention
from attnmt.attention.conformance import check_mechanism
from attnmt.attention.handout import HandoutAttention, is_handout_form
from attnmt.errors import ConfigError

from helpers import HANDOUT_CLASS, run_trainer, submission, tiny_run_config

PROJECT = Path(__file__).resolve().parents[1]
HOMEWORK = f"{PROJECT / 'examples' / 'homework_attention.py'}:SingleQueryScaledDotProductAttention"
ENV = {**os.environ, "PYTHONPATH": str(PROJECT)}


def padded_batch(generator: torch.Generator, lengths: list[int], dim: int, query_dim: int):
    source = max(lengths)
    keys = torch.randn(len(lengths), source, dim, generator=generator, dtype=torch.float64)
    mask = torch.arange(source)[None, :] < torch.tensor(lengths)[:, None]
    query = torch.randn(len(lengths), 5, query_dim, generator=generator, dtype=torch.float64)
    return query, keys, mask


def test_the_handout_form_is_recognised_by_its_constructor():
    from attnmt.attention.user_code import load_user_class

    assert is_handout_form(load_user_class(HOMEWORK))
    assert not is_handout_form(load_user_class(f"{PROJECT / 'examples' / 'my_attention.py'}:MyAttention"))


def test_a_handout_class_equals_the_builtin_scaled_dot_with_its_weights_copied_in():
    """float64, padded batches, one step and all steps at once: within 1e-6 (here ~1e-15)."""
    generator = torch.Generator().manual_seed(3)
    enc_hid_dim, dec_hid_dim, kq_dim = 6, 10, 7
    homework = build_attention(HOMEWORK, dec_hid_dim, 2 * enc_hid_dim, kq_dim=kq_dim).double()
    builtin = build_attention("scaled_dot", dec_hid_dim, 2 * enc_hid_dim, kq_dim=kq_dim).double()
    assert isinstance(homework, HandoutAttention)
    with torch.no_grad():
        builtin.query_proj.weight.copy_(homework.module.query_projection.weight)
        builtin.query_proj.bias.copy_(homework.module.query_projection.bias)
        builtin.key_proj.weight.copy_(homework.module.key_projection.weight)
        builtin.key_proj.bias.copy_(homework.module.key_projection.bias)
    for lengths in ([5, 3, 5, 1], [1], [7, 2, 2, 6, 7, 1, 4]):
        query, keys, mask = padded_batch(generator, lengths, 2 * enc_hid_dim, dec_hid_dim)
        ours, theirs = homework.prepare(keys, keys, mask), builtin.prepare(keys, keys, mask)
        for q in (query, query[:, 0]):
            context, weights = homework.attend(q, ours)
            expected_context, expected_weights = builtin.attend(q, theirs)
            torch.testing.assert_close(context, expected_context, rtol=0, atol=1e-6)
            torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-6)
            padding = ~mask.unsqueeze(1) if q.dim() == 3 else ~mask
            assert float(weights.detach().masked_select(padding).abs().sum()) == 0.0


def test_padding_never_reaches_the_class_and_batch_mates_do_not_matter():
    """The class sees only real positions: a sentence's answer is the same alone and in any batch."""
    seen = []

    class Spy(torch.nn.Module):
        def __init__(self, enc_hid_dim, dec_hid_dim):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(()))

        def forward(self, hidden, encoder_outputs):
            seen.append(tuple(encoder_outputs.shape))
            alpha = torch.softmax(encoder_outputs.sum(-1).t() * self.scale, dim=1)
            return torch.bmm(alpha.unsqueeze(1), encoder_outputs.transpose(0, 1)).squeeze(1), alpha

    attention = HandoutAttention(Spy(4, 5), 5, 8)
    generator = torch.Generator().manual_seed(0)
    query, keys, mask = padded_batch(generator, [6, 2, 6, 3], 8, 5)
    context, weights = attention.attend(query.float(), attention.prepare(keys.float(), keys.float(), mask))
    assert sorted(seen) == [(2, 5, 8), (3, 5, 8), (6, 10, 8)]  # one call per length, steps folded in, time first
    alone_context, alone_weights = attention.attend(
        query[1:2].float(), attention.prepare(keys[1:2, :2].float(), keys[1:2, :2].float(), mask[1:2, :2]))
    torch.testing.assert_close(context[1:2], alone_context, rtol=0, atol=1e-6)
    torch.testing.assert_close(weights[1:2, :, :2], alone_weights, rtol=0, atol=1e-6)
    assert float(weights[1:2, :, 2:].detach().abs().sum()) == 0.0
    empty = attention.prepare(keys[:1].float(), keys[:1].float(), torch.zeros_like(mask[:1]))
    empty_context, empty_weights = attention.attend(query[:1].float(), empty)  # a row without a position
    assert float(empty_context.detach().abs().sum()) == 0.0 and float(empty_weights.detach().abs().sum()) == 0.0


def test_check_passes_the_handout_class_as_it_is_written():
    report = check_mechanism(HOMEWORK, speed=False)
    assert report.form == "handout" and report.passed, [(r.name, r.status, r.detail) for r in report.results]


def test_a_class_of_neither_form_is_one_line_naming_both(tmp_path):
    (tmp_path / "neither.py").write_text("from torch import nn\n\n\nclass Neither(nn.Module):\n"
                                         "    def __init__(self, hidden_size):\n        super().__init__()\n")
    both = r"either form: \(query_dim, key_dim, value_dim\).*\(enc_hid_dim, dec_hid_dim\)"
    with pytest.raises(ConfigError, match=both):
        build_attention(f"{tmp_path / 'neither.py'}:Neither", 8, 8)


@pytest.mark.slow
def test_the_handout_class_trains_and_translates_unchanged(tmp_path):
    from attnmt.decoding.translator import Translator

    config = tiny_run_config(tmp_path, max_steps=6, examples=1, bleu_max_sentences=2)
    config["model"]["attention"] = HOMEWORK
    config["model"]["attention_options"] = {"kq_dim": 16}
    result = run_trainer(tmp_path, config)
    assert result.step == 6
    translator = Translator.load(tmp_path / "run", "last")
    translation = translator.translate(["ein hund läuft"], return_attention=True)[0]
    assert translation.attention.shape[1] == len(translation.src_pieces)
    done = subprocess.run([sys.executable, "-m", "attnmt", "check", HOMEWORK, "--no-speed"], capture_output=True,
                          text=True, env=ENV, timeout=120)
    assert done.returncode == 0 and "(rnn, handout form): all properties hold" in done.stdout


def failing(report) -> set[str]:
    return {result.name for result in report.results if result.status == "fail"}


@pytest.mark.parametrize("name, fails, equation, counterexample", [
    ("no_scale", {"scale"}, "Eq. 1", "without the 1/√d (d = 512"),
    ("softmax_over_batch", {"weights", "batch"}, "Eq. 1", "sum to"),
    ("projected_values", {"values"}, "Eq. 15", "must be that encoder output"),
    ("alpha_time_first", {"shapes", "weights"}, "the handout's shapes", "time first?"),
])
def test_each_planted_mistake_is_marked_by_the_equation_it_breaks(name, fails, equation, counterexample, tmp_path):
    report = check_mechanism(submission(name, tmp_path), speed=False)
    assert report.form == "handout" and not report.passed
    assert fails <= failing(report)
    if name in ("no_scale", "projected_values"):  # one mistake, one failure: the rest of the class is right
        assert failing(report) == fails
    first = report.broken_equations()[0]
    assert first.equation.startswith(equation) and counterexample in first.detail, (first.equation, first.detail)
    if equation == "the handout's shapes":
        assert len(report.broken_equations()) == 1  # nothing else can be judged without the shapes


def test_a_correct_submission_passes_every_equation_with_one_line(tmp_path):
    report = check_mechanism(submission("correct"), speed=False)
    assert report.passed and not report.broken_equations()
    assert {r.name: r.status for r in report.results}["scale"] == "pass"
    done = subprocess.run([sys.executable, "-m", "attnmt", "check", submission("projected_values", tmp_path),
                           "--no-speed"], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "breaks Eq. 15 (v_j = h̄_j, the encoder outputs themselves):" in done.stdout


def test_the_scale_is_checked_when_the_name_says_so_or_when_asked(tmp_path):
    text = Path(submission("no_scale", tmp_path).rpartition(":")[0]).read_text()
    (tmp_path / "mine.py").write_text(text.replace(HANDOUT_CLASS, "MyHomework"))
    spec = f"{tmp_path / 'mine.py'}:MyHomework"
    unnamed = check_mechanism(spec, speed=False)
    assert unnamed.passed and {r.name: r.status for r in unnamed.results}["scale"] == "n/a"
    asked = check_mechanism(spec, speed=False, expect="scaled_dot")
    assert failing(asked) == {"scale"}


def test_a_class_without_two_linear_projections_skips_the_scale_with_its_reason(tmp_path):
    (tmp_path / "params.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass SingleQueryScaledDotProductAttention(nn.Module):\n"
        "    def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=8):\n        super().__init__()\n"
        "        self.W = nn.Parameter(torch.randn(dec_hid_dim, 2 * enc_hid_dim) * 0.1)\n\n"
        "    def forward(self, hidden, encoder_outputs):\n"
        "        scores = torch.einsum('bd,de,sbe->bs', hidden, self.W, encoder_outputs)\n"
        "        alpha = torch.softmax(scores, dim=1)\n"
        "        return torch.einsum('bs,sbe->be', alpha, encoder_outputs), alpha\n")
    report = check_mechanism(f"{tmp_path / 'params.py'}:{HANDOUT_CLASS}", speed=False)
    scale = next(r for r in report.results if r.name == "scale")
    assert report.passed and scale.status == "n/a" and "has no such pair" in scale.detail


@pytest.mark.parametrize("name, message", [
    ("exits_at_import", "called sys.exit('bye')"),
    ("syntax_error", "syntax_error.py:6: syntax error"),
])
def test_a_submission_that_cannot_be_loaded_is_one_line(name, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_mechanism(submission(name), speed=False)


def test_a_submission_that_never_returns_fails_without_blaming_an_equation():
    report = check_mechanism(submission("endless_loop"), speed=False, seconds=1.0)
    assert not report.passed and not report.broken_equations()
    assert report.results[0].detail.startswith("did not return within 1 s")
