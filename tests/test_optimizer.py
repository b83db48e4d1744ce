"""Adam's forms (attnmt.training.optimizer, ``training.adam``) and AdamW's decoupled weight decay
(``training.weight_decay``) against a float64 reference, and how a run keeps them across a resume."""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from attnmt.errors import ConfigError
from attnmt.runs.folder import read_saved_config, resolve_resume_config
from attnmt.runs.run_config import ADAM_FORMS, TrainingConfig
from attnmt.training.optimizer import build_adam, load_adam_state

from helpers import comparable, run_trainer, tiny_run_config, train_stopped_and_unbroken


def reference_adam(weights, gradients, lr, steps, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decays=()):
    """Kingma & Ba (2015), Algorithm 1, in float64: the weights after ``steps`` updates; the weights
    whose index is in ``decays`` first shrink by lr · weight_decay · w (Loshchilov & Hutter 2019)."""
    weights = [w.double().clone() for w in weights]
    first = [torch.zeros_like(w) for w in weights]
    second = [torch.zeros_like(w) for w in weights]
    for t in range(1, steps + 1):
        for i, w in enumerate(weights):
            g = gradients[t - 1][i].double()
            if i in decays:
                w -= lr * weight_decay * w
            first[i] = betas[0] * first[i] + (1 - betas[0]) * g
            second[i] = betas[1] * second[i] + (1 - betas[1]) * g * g
            corrected_first = first[i] / (1 - betas[0] ** t)
            corrected_second = second[i] / (1 - betas[1] ** t)
            w -= lr * corrected_first / (corrected_second.sqrt() + eps)
    return weights


@pytest.mark.parametrize("form", ADAM_FORMS)
def test_every_form_is_adam_to_float32_rounding(form):
    generator = torch.Generator().manual_seed(11)
    shapes = [(7, 5), (1,), (3, 1, 4)]
    weights = [torch.randn(shape, generator=generator) for shape in shapes]
    # gradients of very different sizes, a zero one among them (its update is 0 / (0 + ε))
    gradients = [[torch.randn(shape, generator=generator) * 10.0 ** (step % 5 - 3) for shape in shapes]
                 for step in range(20)]
    gradients[4][1].zero_()
    model = torch.nn.ParameterList([torch.nn.Parameter(w.clone()) for w in weights])
    optimizer = build_adam(model, 0.01, form)
    for step in range(20):
        for parameter, gradient in zip(model, gradients[step]):
            parameter.grad = gradient.clone()
        optimizer.step()
    expected = reference_adam(weights, gradients, 0.01, 20)
    for parameter, reference in zip(model, expected):
        assert torch.allclose(parameter.detach().double(), reference, rtol=0, atol=2e-6)


def test_a_loaded_state_keeps_the_form_asked_for_not_the_saved_one():
    model = torch.nn.Linear(4, 3)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    fused = build_adam(model, 0.1, "fused")
    fused.step()
    loop = build_adam(model, 0.1, "for_loop")
    load_adam_state(loop, fused.state_dict(), "for_loop")
    assert {(g["foreach"], g["fused"]) for g in loop.param_groups} == {(False, None)}
    assert torch.equal(loop.state_dict()["state"][0]["exp_avg"], fused.state_dict()["state"][0]["exp_avg"])
    plain = torch.optim.Adam(model.parameters(), lr=0.1)  # what load_state_dict alone does
    plain.load_state_dict(fused.state_dict())
    assert plain.param_groups[0]["fused"] is True
    with pytest.raises(ValueError, match="form must be one of fused, foreach, for_loop, pytorch"):
        build_adam(model, 0.1, "lamb")


def test_a_run_saved_before_the_option_resumes_with_pytorchs_own_adam(tmp_path):
    old = {"data": {"dataset": "multi30k"}, "model": {"type": "rnn"}, "training": {"seed": 1, "lr": 0.01}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    saved = read_saved_config(tmp_path)
    assert saved["training"]["adam"] == "pytorch"
    assert resolve_resume_config(saved, None, {}, tmp_path).training.adam == "pytorch"
    new = {**old, "training": {**old["training"], "adam": "foreach"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(new))
    assert read_saved_config(tmp_path)["training"]["adam"] == "foreach"


@pytest.mark.parametrize("form", ADAM_FORMS)
def test_weight_decay_is_adamw_on_the_matrices_only_to_float32_rounding(form):
    generator = torch.Generator().manual_seed(12)
    shapes = [(7, 5), (1,), (3, 1, 4), (6,)]
    weights = [torch.randn(shape, generator=generator) for shape in shapes]
    gradients = [[torch.randn(shape, generator=generator) * 10.0 ** (step % 4 - 2) for shape in shapes]
                 for step in range(20)]
    gradients[3][0].zero_()
    model = torch.nn.ParameterList([torch.nn.Parameter(w.clone()) for w in weights])
    optimizer = build_adam(model, 0.01, form, weight_decay=0.3)
    assert isinstance(optimizer, torch.optim.AdamW)
    for step in range(20):
        for parameter, gradient in zip(model, gradients[step]):
            parameter.grad = gradient.clone()
        optimizer.step()
    expected = reference_adam(weights, gradients, 0.01, 20, weight_decay=0.3, decays=(0, 2))
    plain = reference_adam(weights, gradients, 0.01, 20)
    for index, (parameter, reference) in enumerate(zip(model, expected)):
        assert torch.allclose(parameter.detach().double(), reference, rtol=0, atol=2e-6)
        # the decay moves the matrices by far more than the rounding; the vectors not at all
        moved = (reference - plain[index]).abs().max().item()
        assert (moved > 1e-3) if index in (0, 2) else moved == 0.0


def test_without_weight_decay_the_optimizer_is_plain_adam_with_one_group():
    model = torch.nn.Linear(4, 3)
    optimizer = build_adam(model, 0.1, "fused")
    assert type(optimizer) is torch.optim.Adam and len(optimizer.param_groups) == 1
    assert optimizer.param_groups[0]["weight_decay"] == 0
    assert TrainingConfig().weight_decay == 0.0


@pytest.mark.parametrize("value", [-0.1, 1, 1.5, "strong", True, math.nan])
def test_weight_decay_out_of_range_is_one_line(value):
    with pytest.raises(ConfigError, match=r"training\.weight_decay") as raised:
        TrainingConfig.from_dict({"weight_decay": value})
    assert "\n" not in str(raised.value)


@pytest.mark.slow
def test_a_run_with_weight_decay_differs_and_resumes_exactly(tmp_path):
    config = tiny_run_config(tmp_path, train_pairs=120, max_epochs=4, weight_decay=0.1, bleu_max_sentences=0,
                             examples=0, checkpoint_every=1000)
    resumed, unbroken, _, b = train_stopped_and_unbroken(tmp_path, config, first_epochs=2)
    assert comparable(resumed.history) == comparable(unbroken.history)
    assert [group["weight_decay"] for group in b["optimizer"]["param_groups"]] == [0.1, 0.0]
    plain = run_trainer(tmp_path, {**config, "training": {**config["training"], "weight_decay": 0.0}}, out="plain")
    assert [r["loss"] for r in plain.history if r["type"] == "train"] != \
        [r["loss"] for r in unbroken.history if r["type"] == "train"]
