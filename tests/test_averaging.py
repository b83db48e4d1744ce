"""training.ema_decay: the moving average of the weights against a float64 reference, its swap in
and out of the model, and a run that validates, saves and resumes with it."""

from __future__ import annotations

import pytest
import torch

from attnmt.errors import ConfigError
from attnmt.runs.checkpoint import load_checkpoint
from attnmt.runs.run_config import TrainingConfig
from attnmt.training import WeightAverage
from attnmt.training.averaging import WARM_UP

from helpers import comparable, run_trainer, tiny_run_config, train_stopped_and_unbroken


def _model() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))
    model[1].weight.requires_grad_(False)  # a frozen parameter is not averaged
    return model


@pytest.mark.parametrize("decay", [0.5, 0.99, 0.9999])
def test_the_average_follows_its_recurrence_in_float64(decay):
    torch.manual_seed(0)
    model = _model()
    average = WeightAverage(model, decay)
    assert "1.weight" not in average.names
    reference = {name: p.detach().double().clone() for name, p in model.named_parameters() if p.requires_grad}
    for t in range(1, 60):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * (1e3 if t == 30 else 1.0))  # one huge jump
        d = min(decay, (1 + t) / (WARM_UP + t))
        for name, p in model.named_parameters():
            if name in reference:
                reference[name] = d * reference[name] + (1 - d) * p.detach().double()
        average.update()
    assert average.updates == 59
    for name, value in zip(average.names, average.average):
        torch.testing.assert_close(value.double(), reference[name], rtol=1e-5, atol=1e-4)


def test_the_model_holds_the_average_only_inside_the_block():
    torch.manual_seed(1)
    model = _model()
    average = WeightAverage(model, 0.9)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    average.update()
    trained = {name: p.detach().clone() for name, p in model.named_parameters()}
    with pytest.raises(RuntimeError, match="inside"):
        with average.applied():
            for name, value in zip(average.names, average.average):
                assert torch.equal(dict(model.named_parameters())[name], value)
            assert torch.equal(model[1].weight, trained["1.weight"])  # not averaged: left alone
            raise RuntimeError("an error inside the block")
    for name, p in model.named_parameters():
        assert torch.equal(p, trained[name]), name


@pytest.mark.parametrize("value", [0, 1, 1.5, -0.1, "0.9"])
def test_ema_decay_must_lie_between_0_and_1(value):
    with pytest.raises(ConfigError, match="training.ema_decay"):
        TrainingConfig.from_dict({"ema_decay": value})


@pytest.mark.slow
def test_a_run_validates_and_saves_the_average_and_resumes_exactly(tmp_path):
    config = tiny_run_config(tmp_path, train_pairs=120, max_epochs=4, ema_decay=0.9, bleu_max_sentences=0,
                             examples=0, checkpoint_every=1000)
    resumed, unbroken, _, b = train_stopped_and_unbroken(tmp_path, config, first_epochs=2)
    assert comparable(resumed.history) == comparable(unbroken.history)
    trained = b["weight_average"]["training_weights"]
    assert b["weight_average"]["updates"] == unbroken.step
    assert any(not torch.equal(trained[name], b["model"][name]) for name in trained)  # model: the average

    # The validation loss recorded is the average's: a model without the average scores otherwise.
    plain = run_trainer(tmp_path, {**config, "training": {**config["training"], "ema_decay": None}}, out="plain")
    assert [r["val_loss"] for r in plain.history if r["type"] == "epoch"] != \
        [r["val_loss"] for r in unbroken.history if r["type"] == "epoch"]
    best = load_checkpoint(tmp_path / "unbroken" / "best.pt")
    assert "weight_average" not in best and best["progress"]["step"] == unbroken.best_step
