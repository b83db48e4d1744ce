"""Kept checkpoints (training.keep_checkpoints) and their average (attnmt average): the trainer keeps
the newest snapshots of the weights being trained, the average equals a float64 mean of the files,
every command reads it as --checkpoint averaged, and bad requests get one-line errors."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import torch

from attnmt.cli import main as cli_main
from attnmt.decoding.translator import Translator
from attnmt.errors import CheckpointError, ConfigError
from attnmt.runs.checkpoint import load_checkpoint
from attnmt.runs.run_config import TrainingConfig
from attnmt.runs.snapshots import average_snapshots, list_snapshots, prune_snapshots, snapshot_path

from helpers import run_trainer, toy_run_config


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    """A toy run with a moving average that kept its last 3 snapshots (every 5 steps, 20 steps)."""
    folder = tmp_path_factory.mktemp("kept")
    config = toy_run_config(folder, max_epochs=10, max_steps=20, keep_checkpoints=3, ema_decay=0.9)
    run_trainer(folder, config)
    return folder / "run"


def test_the_trainer_keeps_the_newest_snapshots_of_the_trained_weights(kept_run):
    assert [step for step, _ in list_snapshots(kept_run)] == [10, 15, 20]
    newest = load_checkpoint(snapshot_path(kept_run, 20))
    last = load_checkpoint(kept_run / "last.pt")
    trained = last["weight_average"]["training_weights"]  # θ at step 20; last.pt's model is the average θ̄
    assert set(trained) <= set(newest["model"])
    assert all(torch.equal(newest["model"][name], value) for name, value in trained.items())
    assert not all(torch.equal(last["model"][name], value) for name, value in trained.items())


def test_the_average_is_the_float64_mean_of_the_snapshots(kept_run):
    averaged, steps = average_snapshots(kept_run, last=2)
    assert steps == [15, 20]
    files = [load_checkpoint(snapshot_path(kept_run, step))["model"] for step in steps]
    for name, value in averaged["model"].items():
        expected = np.mean([state[name].double().numpy() for state in files], axis=0)
        assert value.dtype == files[-1][name].dtype
        np.testing.assert_allclose(value.double().numpy(), expected, rtol=1e-6, atol=1e-7)
    assert averaged["averaged_steps"] == [15, 20]
    everything, all_steps = average_snapshots(kept_run)
    assert all_steps == [10, 15, 20]
    assert not torch.equal(everything["model"]["src_embedding.weight"], averaged["model"]["src_embedding.weight"])


def test_attnmt_average_writes_a_checkpoint_every_command_reads(kept_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    assert cli_main(["evaluate", str(run), "--checkpoint", "averaged"]) == 2
    assert f"attnmt average {run}" in capsys.readouterr().err
    assert cli_main(["average", str(run), "--last", "2"]) == 0
    assert "the mean of 2 checkpoints (steps 15, 20)" in capsys.readouterr().out
    translator = Translator.load(run, "averaged")
    expected, _ = average_snapshots(run, last=2)
    assert all(torch.equal(translator.model.state_dict()[name], value) for name, value in expected["model"].items())
    assert cli_main(["translate", str(run), "--checkpoint", "averaged", "ein hund"]) == 0  # 20 steps: maybe empty
    capsys.readouterr()
    before = (run / "averaged.pt").read_bytes()
    assert cli_main(["average", str(run)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert (run / "averaged.pt").read_bytes() == before
    assert cli_main(["average", str(run), "--overwrite"]) == 0
    assert "steps 10, 15, 20" in capsys.readouterr().out
    assert sorted(path.name for path in run.iterdir() if path.name.startswith(".")) == []  # no temporary left


@pytest.mark.parametrize(("arguments", "message"), [
    (["--last", "5"], "--last 5: .* keeps only 3 \\(steps 10, 15, 20\\)"),
    (["--last", "0"], "--last 0: average at least 1"),
])
def test_attnmt_average_refuses_what_the_run_does_not_keep(kept_run, tmp_path, capsys, arguments, message):
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    assert cli_main(["average", str(run), *arguments]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert not (run / "averaged.pt").exists()


def test_a_run_without_snapshots_says_how_to_keep_them(tmp_path, capsys):
    run_trainer(tmp_path, toy_run_config(tmp_path, max_steps=5))
    assert cli_main(["average", str(tmp_path / "run")]) == 2
    assert "training.keep_checkpoints" in capsys.readouterr().err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_snapshot_of_another_model_is_refused_by_name(kept_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    other = tmp_path / "other"
    other.mkdir()
    config = toy_run_config(other, max_steps=5, keep_checkpoints=1)
    config["model"]["hidden_dim"] = 24
    run_trainer(other, config)
    intruder = snapshot_path(run, 12)
    shutil.copyfile(snapshot_path(other / "run", 5), intruder)
    with pytest.raises(CheckpointError, match=f"{intruder}: another model"):
        average_snapshots(run)


def test_prune_keeps_the_newest_and_drops_steps_a_resume_trains_again(tmp_path):
    for step in (5, 10, 15, 20, 25):
        snapshot_path(tmp_path, step).parent.mkdir(exist_ok=True)
        snapshot_path(tmp_path, step).write_bytes(b"x")
    (tmp_path / "checkpoints" / "notes.txt").write_text("mine")
    assert prune_snapshots(tmp_path, keep=2, after_step=15) == [5, 20, 25]
    assert [step for step, _ in list_snapshots(tmp_path)] == [10, 15]
    assert prune_snapshots(tmp_path, keep=None) == []
    assert prune_snapshots(tmp_path, keep=0) == [10, 15]
    assert (tmp_path / "checkpoints" / "notes.txt").read_text() == "mine"


def test_a_run_resumed_with_fewer_kept_checkpoints_deletes_none_before_its_next(kept_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    config = toy_run_config(tmp_path, max_epochs=10, max_steps=22, keep_checkpoints=0, ema_decay=0.9)
    run_trainer(tmp_path, config, resume=True)
    assert [step for step, _ in list_snapshots(run)] == [10, 15, 20]


def test_a_resumed_run_drops_the_snapshots_of_steps_it_trains_again(kept_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    stale = snapshot_path(run, 25)  # as if a run had gone past last.pt before it was killed
    shutil.copyfile(snapshot_path(run, 20), stale)
    config = toy_run_config(tmp_path, max_epochs=10, max_steps=22, keep_checkpoints=3, ema_decay=0.9)
    run_trainer(tmp_path, config, resume=True)
    assert [step for step, _ in list_snapshots(run)] == [10, 15, 20]


@pytest.mark.parametrize("value", [-1, 101, 2.5])
def test_keep_checkpoints_range(value):
    with pytest.raises(ConfigError, match="training.keep_checkpoints"):
        TrainingConfig(keep_checkpoints=value)
