"""R-Drop (training.rdrop_weight): the symmetric KL against a float64 loop, the step's loss and
gradient against Liang et al.'s equation written out, nothing changed without dropout, and the range
of the option."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnmt.data import make_batches
from attnmt.errors import ConfigError
from attnmt.models import build_model
from attnmt.models.losses import symmetric_kl, token_losses
from attnmt.runs.run_config import RunConfig, TrainingConfig
from attnmt.training import backward_on_batch

from helpers import run_trainer, tiny_run_config


def reference_symmetric_kl(a: np.ndarray, b: np.ndarray) -> float:
    """½ Σ_n [KL(p_n‖q_n) + KL(q_n‖p_n)], one row and one entry at a time, in float64."""
    total = 0.0
    for row_a, row_b in zip(a, b):
        p = np.exp(row_a - row_a.max())
        p /= p.sum()
        q = np.exp(row_b - row_b.max())
        q /= q.sum()
        for pv, qv in zip(p, q):
            total += 0.5 * (pv * (np.log(pv) - np.log(qv)) + qv * (np.log(qv) - np.log(pv)))
    return total


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_symmetric_kl_equals_the_float64_loop(scale):
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(7, 11)) * scale, rng.normal(size=(7, 11)) * scale
    got = symmetric_kl(torch.tensor(a), torch.tensor(b))
    assert got.dtype == torch.float64
    assert float(got) == pytest.approx(reference_symmetric_kl(a, b), rel=1e-10)
    assert float(symmetric_kl(torch.tensor(b), torch.tensor(a))) == pytest.approx(float(got), rel=1e-12)
    assert float(symmetric_kl(torch.tensor(a), torch.tensor(a))) == 0.0
    huge = torch.tensor([[1e4, 0.0, -1e4]], dtype=torch.float64)
    assert torch.isfinite(symmetric_kl(huge, huge.flip(1)))
    with pytest.raises(ValueError, match=r"\[N, V\]"):
        symmetric_kl(torch.zeros(2, 3), torch.zeros(3, 3))


def _model_and_batch(dropout: float, **model_options):
    """A float64 model (an RNN unless ``model_options`` say otherwise) and one batch of three pairs."""
    options = model_options or {"type": "rnn", "embed_dim": 12, "hidden_dim": 16, "attention": "general"}
    config = RunConfig.from_dict({"data": {"train": ["a", "b"]}, "model": {**options, "dropout": dropout}}).model
    torch.manual_seed(0)
    model = build_model(config, 30, 30).double()
    rng = np.random.default_rng(0)
    src = [list(rng.integers(4, 30, size=n)) for n in (3, 5, 1)]
    tgt = [list(rng.integers(4, 30, size=n)) for n in (4, 2, 1)]
    [batch] = make_batches(src, tgt, max_tokens=1000, shuffle=False)
    return model, batch


def test_rdrop_step_gives_the_gradient_of_liang_et_al_loss_halved():
    model, batch = _model_and_batch(dropout=0.3)
    alpha, tokens = 2.0, batch.num_tgt_tokens
    torch.manual_seed(11)
    stats = backward_on_batch(model, batch, 0.1, global_tokens=tokens, rdrop_weight=alpha)
    got = [p.grad.clone() for p in model.parameters()]

    model.zero_grad(set_to_none=True)
    torch.manual_seed(11)  # the same dropout masks: the same two copies in one pass
    double = [torch.cat([t, t]) for t in (batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)]
    logits, _ = model(*double[:3], tgt_mask=double[3])  # the real tokens of the first copy, then the second's
    first, second = logits.chunk(2)
    ce_first, _, _ = token_losses(first, batch.tgt_out, batch.tgt_mask, 0.1)
    ce_second, _, _ = token_losses(second, batch.tgt_out, batch.tgt_mask, 0.1)
    p, q = first.softmax(-1), second.softmax(-1)
    kl = (p * (p.log() - q.log())).sum() + (q * (q.log() - p.log())).sum()
    liang = ce_first + ce_second + alpha * 0.5 * kl  # their loss, summed over the tokens
    (liang / 2 / tokens).backward()
    assert float(kl.detach()) > 1e-4  # the two copies did differ
    assert float(stats.loss_sum) == pytest.approx(float((ce_first + ce_second).detach() / 2), rel=1e-10)
    for mine, expected in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(mine, expected, rtol=1e-9, atol=1e-12)


def test_without_dropout_rdrop_changes_nothing():
    model, batch = _model_and_batch(dropout=0.0)
    plain = backward_on_batch(model, batch, 0.1, global_tokens=batch.num_tgt_tokens)
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    twice = backward_on_batch(model, batch, 0.1, global_tokens=batch.num_tgt_tokens, rdrop_weight=5.0)
    assert float(twice.loss_sum) == pytest.approx(float(plain.loss_sum), rel=1e-12)
    assert twice.num_tokens == plain.num_tokens
    for mine, reference in zip((p.grad for p in model.parameters()), expected):
        torch.testing.assert_close(mine, reference, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("value", [-0.5, 101, "strong", True, float("nan")])
def test_rdrop_weight_out_of_range_is_one_line(value):
    with pytest.raises(ConfigError, match=r"training\.rdrop_weight") as raised:
        TrainingConfig.from_dict({"rdrop_weight": value})
    assert "\n" not in str(raised.value)


@pytest.mark.slow
def test_a_run_with_rdrop_trains_and_differs(tmp_path):
    runs = {}
    for weight in (0.0, 1.0):
        config = tiny_run_config(tmp_path, train_pairs=80, max_steps=6, bleu_max_sentences=0, examples=0,
                                 rdrop_weight=weight)
        runs[weight] = run_trainer(tmp_path, config, out=f"w{weight}")
    losses = {w: [r["loss"] for r in result.history if r["type"] == "train"] for w, result in runs.items()}
    assert all(np.isfinite(losses[1.0])) and losses[1.0] != losses[0.0]


def test_with_a_guide_rdrop_guides_the_first_copy_only():
    """Without dropout the two copies are one: the guided R-Drop step equals the guided plain step."""
    from attnmt.training import GuideBatch

    model, batch = _model_and_batch(0.0, type="transformer", attention_dropout=0.0, d_model=16, num_heads=4,
                                    ffn_dim=32, encoder_layers=1, decoder_layers=2)
    raw = torch.rand(batch.tgt_in.shape[0], batch.tgt_in.shape[1], batch.src.shape[1], dtype=torch.float64)
    target = raw * batch.src_mask[:, None, :]
    guide = GuideBatch(target / target.sum(-1, keepdim=True), 0.5, 1, None)
    plain = backward_on_batch(model, batch, 0.1, batch.num_tgt_tokens, guide=guide)
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    twice = backward_on_batch(model, batch, 0.1, batch.num_tgt_tokens, guide=guide, rdrop_weight=3.0)
    assert float(twice.guide_sum) == pytest.approx(float(plain.guide_sum), rel=1e-12)
    for mine, reference in zip((p.grad for p in model.parameters()), expected):
        torch.testing.assert_close(mine, reference, rtol=1e-10, atol=1e-13)
