"""Contrastive explanations (Yin & Neubig, 2022): an output-dependent attribution explains
log p(y_t | y_<t, x) − log p(y′_t | y_<t, x) for a foil y′_t, and faithfulness is measured on that
contrast (``attnmt.attribution``, ``attnmt.evaluation.faithfulness``, ``attnmt explain --foil``)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attnmt.attribution.forced import NO_FOIL
from attnmt.attribution.reader import attribute
from attnmt.cli import main as cli_main
from attnmt.evaluation.faithfulness import RANDOM, faithfulness
from attnmt.models.readout import ATTNMT_SPECIALS, force_decode

VOCAB = 12
FIXTURE = Path(__file__).resolve().parent / "data" / "attributions-0.2.0"


class DecidingWordModel(nn.Module):
    """Two source words decide between two outputs at step 1: the logit of output A grows with the
    embedding of source token 4 (position 0), that of output B with token 5 (position 1); every
    other source token adds to both alike. So the contrast A vs B depends on positions 0 and 1
    only, with opposite signs, while log p(A) alone depends on every position."""

    A, B = 7, 8

    def __init__(self) -> None:
        super().__init__()
        self.source_token_embedding = nn.Embedding(VOCAB, 1)
        with torch.no_grad():
            self.source_token_embedding.weight.fill_(1.0)
            self.source_token_embedding.weight[ATTNMT_SPECIALS.unk] = 0.0

    def forward(self, src, src_mask, tgt_in, return_attention="heads"):
        e = self.source_token_embedding(src)[..., 0] * src_mask  # [B, S]
        batch, steps = src.shape[0], tgt_in.shape[1]
        logits = torch.zeros(batch, steps, VOCAB, dtype=e.dtype)
        logits[:, :, self.A] = 2.0 * e[:, 0:1] + e[:, 2:].sum(-1, keepdim=True)
        logits[:, :, self.B] = 1.5 * e[:, 1:2] + e[:, 2:].sum(-1, keepdim=True)
        return logits, torch.ones(batch, 1, 1, steps, src.shape[1], dtype=e.dtype) / src.shape[1]


SOURCE = [4, 5, 6, 9, 3]
OUTPUT = [DecidingWordModel.A, 3]
FOILS = [[DecidingWordModel.B, NO_FOIL]]


def test_the_contrastive_gradient_is_the_gradient_of_the_difference_in_float64():
    model = DecidingWordModel().double().eval()
    for method in ("gradient", "integrated"):
        plain = dict(attribute(model, [SOURCE], [OUTPUT], method=method, steps=200))[0]
        contrast = dict(attribute(model, [SOURCE], [OUTPUT], method=method, steps=200, foils=FOILS))[0]
        # by hand: f = log p(A) − log p(B) = z_A − z_B, ∂f/∂e = (2, −1.5, 0, 0, 0); gradient × input, e = 1
        np.testing.assert_allclose(contrast[0], [2.0, -1.5, 0.0, 0.0, 0.0], atol=1e-6)
        assert np.abs(plain[0, 2:4]).min() > 1e-3  # log p(A) alone also moves with the other words
        np.testing.assert_array_equal(contrast[1], plain[1])  # a step without a foil explains log p(y_t)


def test_erasure_of_the_deciding_word_shrinks_the_contrast_and_beats_random():
    model = DecidingWordModel().double().eval()
    contrast = dict(attribute(model, [SOURCE], [OUTPUT], method="erasure", foils=FOILS))[0].astype(np.float64)
    assert int(np.argmax(contrast[0])) == 0  # removing the word that pulls to A moves most
    translator = type("Planted", (), {"unk_id": ATTNMT_SPECIALS.unk, "force_decode": staticmethod(
        lambda sources, outputs, log_probs, foils=None: force_decode(model, sources, outputs, log_probs=log_probs,
                                                                     foils=foils))})()
    words = [(s, s + 1) for s in range(len(SOURCE) - 1)]
    figures = faithfulness(translator, SOURCE, OUTPUT, words, {"erasure": contrast}, random_orders=8,
                           foils=FOILS[0])
    assert figures["erasure"].comprehensiveness["1"] > figures[RANDOM].comprehensiveness["1"] + 0.5


def test_explain_foil_next_contrasts_every_step_and_says_which_methods_ignore_the_foil():
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        assert cli_main(["explain", str(FIXTURE / "rnn"), "der mann spielt .", "--json", "--foil", "next",
                         "--threads", "1", "--methods", "attention,gradient,value_norm,erasure"]) == 0
    record = json.loads(captured.getvalue())
    contrast = record["contrast"]
    assert contrast["steps"] == list(range(1, len(contrast["outputs"]) + 1))
    assert all(value > 0 for value in contrast["values"])  # the model's own piece beats its runner-up
    assert all(foil != output for foil, output in zip(contrast["foils"], contrast["outputs"]))
    assert contrast["unchanged"] == ["attention", "value_norm"]


def test_explain_refuses_a_foil_step_out_of_range_in_one_line(capsys):
    assert cli_main(["explain", str(FIXTURE / "rnn"), "der mann spielt .", "--foil", "cat", "--step", "99",
                     "--threads", "1"]) == 2
    error = capsys.readouterr().err
    assert "--step 99: sentence 1 has output pieces 1 to" in error and "Traceback" not in error
    assert cli_main(["explain", str(FIXTURE / "rnn"), "der mann spielt .", "--foil", "cat", "--threads", "1"]) == 2
    assert "give --step T" in capsys.readouterr().err
