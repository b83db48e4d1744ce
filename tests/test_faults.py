"""Faults: a full disk while writing, and two writers into one folder.

A write that fails with ENOSPC (simulated: ``os.fsync`` raises it) keeps the previous file intact,
leaves no temporary file, and ends the command with one line that says so. A second ``attnmt
train`` into a run folder being trained into, or a second ``attnmt compare`` into the same output
folder, is refused in one line."""

from __future__ import annotations

import errno
import os

import pytest

import attnmt.files
from attnmt.cli import main as cli_main
from attnmt.errors import OutputError
from attnmt.files import write_text_atomic
from attnmt.runs import writer_lock
from tests.test_training import run_trainer, save_yaml, tiny_config


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_keeps_the_previous_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    write_text_atomic(path, "old\n")
    monkeypatch.setattr(attnmt.files.os, "fsync", _disk_full)
    with pytest.raises(OutputError, match=rf"{path}: could not write it \(No space left on device\); "
                                          r"its previous version is unchanged"):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    with pytest.raises(OutputError, match="nothing was written"):
        write_text_atomic(tmp_path / "fresh.txt", "new\n")
    assert not (tmp_path / "fresh.txt").exists()


def test_a_command_hitting_a_full_disk_ends_in_one_line(tmp_path, monkeypatch, capsys):
    run_trainer(tmp_path, tiny_config(tmp_path, max_epochs=1, max_steps=4))
    run = tmp_path / "run"
    assert cli_main(["evaluate", str(run), "--split", "valid", "-n", "0", "--no-progress"]) == 0
    before = (run / "hyps-valid.txt").read_text()
    capsys.readouterr()
    monkeypatch.setattr(attnmt.files.os, "fsync", _disk_full)
    assert cli_main(["evaluate", str(run), "--split", "valid", "-n", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"attnmt evaluate: error: {run / 'hyps-valid.txt'}: could not write it (No space left on "
                       f"device); its previous version is unchanged")
    assert (run / "hyps-valid.txt").read_text() == before
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


def test_a_second_train_into_a_folder_being_trained_is_refused(tmp_path, capsys):
    config_path = save_yaml(tmp_path, tiny_config(tmp_path, max_epochs=1, max_steps=2))
    run = tmp_path / "run"
    with writer_lock(run, "train"):  # as a training in another process holds it
        assert cli_main(["train", "--config", str(config_path), "--out", str(run), "--no-progress"]) == 2
        assert "another attnmt train is writing into this folder right now" in capsys.readouterr().err
        assert cli_main(["train", "--out", str(run), "--resume", "--no-progress"]) == 2
    # Once it is released the folder is usable, and the lock file alone does not count as a run.
    assert cli_main(["train", "--config", str(config_path), "--out", str(run), "--no-progress"]) == 0


def test_a_second_compare_into_the_same_folder_is_refused(tmp_path, capsys):
    config_path = save_yaml(tmp_path, tiny_config(tmp_path, max_epochs=1, max_steps=2))
    with writer_lock(tmp_path / "results", "compare"):
        assert cli_main(["compare", "--config", str(config_path), "--attention", "dot", "--runs", "1",
                         "--split", "valid", "--out", str(tmp_path / "results"), "--no-progress"]) == 2
    assert "another attnmt compare is writing into this folder right now" in capsys.readouterr().err


def test_a_resumed_run_removes_what_a_killed_write_left(tmp_path):
    config = tiny_config(tmp_path, max_epochs=1, max_steps=4)
    run_trainer(tmp_path, config)
    stale = tmp_path / "run" / ".last.pt.0123abcd.tmp"  # as a SIGKILL in the middle of a checkpoint leaves it
    stale.write_bytes(b"half a checkpoint")
    keep = tmp_path / "run" / ".notes.tmp"  # not the writer's pattern: not ours to delete
    keep.write_text("mine")
    run_trainer(tmp_path, {**config, "training": {**config["training"], "max_steps": 6}}, resume=True)
    assert not stale.exists() and keep.exists()


def test_resuming_a_run_that_lost_its_last_checkpoint_is_refused(tmp_path, capsys):
    config_path = save_yaml(tmp_path, tiny_config(tmp_path, max_epochs=1, max_steps=4))
    run = tmp_path / "run"
    assert cli_main(["train", "--config", str(config_path), "--out", str(run), "--no-progress"]) == 0
    (run / "last.pt").unlink()
    before = (run / "best.pt").read_bytes()
    assert cli_main(["train", "--out", str(run), "--resume", "--no-progress"]) == 2
    assert f"{run / 'last.pt'}: missing, but the run has a best.pt" in capsys.readouterr().err
    assert (run / "best.pt").read_bytes() == before


def test_what_the_fuzzer_found_ends_in_one_line(tmp_path, capsys):
    """Found by benchmarks/faults.py: a negative batch size, and a model too large to allocate."""
    config = tiny_config(tmp_path, max_epochs=1, max_steps=2)
    run_trainer(tmp_path, config)
    assert cli_main(["translate", str(tmp_path / "run"), "Ein Hund.", "--batch-size", "-1"]) == 2
    assert "batch size must be an integer >= 1, got -1" in capsys.readouterr().err
    path = save_yaml(tmp_path, config, "huge.yaml")
    assert cli_main(["train", "--config", str(path), "--out", str(tmp_path / "huge"), "--no-progress",
                     "--set", "model.hidden_dim=99999999999"]) == 2
    assert "does not fit in the memory of cpu" in capsys.readouterr().err
