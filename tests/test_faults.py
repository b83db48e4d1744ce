"""Faults: a full disk while writing, and two writers into one folder.

A write that fails with ENOSPC (simulated by ``full_disk``: the writes into a folder fail once a
byte budget is spent, as a full file system fails them) keeps the previous file intact, leaves no
temporary file, and ends the command with one line that says so. A second ``attnmt train`` into a
run folder being trained into, or a second ``attnmt compare`` into the same output folder, is
refused in one line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnmt.runtime.atomic_files
from attnmt.cli import main as cli_main
from attnmt.errors import OutputError
from attnmt.runs.checkpoint import load_checkpoint, make_checkpoint, save_checkpoint
from attnmt.runs.folder import writer_lock
from attnmt.runtime.atomic_files import write_text_atomic

from helpers import FullDisk, disk_full, run_trainer, save_yaml, tiny_run_config

pytestmark = pytest.mark.slow  # trains runs that fail


def test_a_checkpoint_write_that_fills_the_disk_is_an_output_error_not_a_zip_error(tmp_path):
    """Found by benchmarks/faults.py: torch.save into a file turned the file's ENOSPC into a
    RuntimeError ("unexpected pos ..."), a traceback on a real full disk."""
    checkpoint = make_checkpoint(config={"model": {"type": "rnn"}}, model_state={"w": torch.arange(5000.0)},
                                 tokenizers={})
    path = save_checkpoint(checkpoint, tmp_path / "last.pt")
    before = path.read_bytes()
    changed = make_checkpoint(config={"model": {"type": "rnn"}}, model_state={"w": torch.zeros(5000)}, tokenizers={})
    for budget in (0, 700, len(before) // 2, len(before) - 1):
        with FullDisk(tmp_path, budget), pytest.raises(OutputError, match="No space left on device"):
            save_checkpoint(changed, path)
        assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
    with FullDisk(tmp_path, len(before)) as disk:
        save_checkpoint(changed, path)
    assert disk.written == len(before) and torch.equal(load_checkpoint(path)["model"]["w"], torch.zeros(5000))


def test_a_full_disk_keeps_the_previous_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    write_text_atomic(path, "old\n")
    monkeypatch.setattr(attnmt.runtime.atomic_files.os, "fsync", disk_full)
    with pytest.raises(OutputError, match=rf"{path}: could not write it \(No space left on device\); "
                                          r"its previous version is unchanged"):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    with pytest.raises(OutputError, match="nothing was written"):
        write_text_atomic(tmp_path / "fresh.txt", "new\n")
    assert not (tmp_path / "fresh.txt").exists()


def test_a_command_hitting_a_full_disk_ends_in_one_line(tmp_path, monkeypatch, capsys):
    run_trainer(tmp_path, tiny_run_config(tmp_path, max_epochs=1, max_steps=4))
    run = tmp_path / "run"
    assert cli_main(["evaluate", str(run), "--split", "valid", "-n", "0", "--no-progress"]) == 0
    before = (run / "hyps-valid.txt").read_text()
    capsys.readouterr()
    monkeypatch.setattr(attnmt.runtime.atomic_files.os, "fsync", disk_full)
    assert cli_main(["evaluate", str(run), "--split", "valid", "-n", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"attnmt evaluate: error: {run / 'hyps-valid.txt'}: could not write it (No space left on "
                       f"device); its previous version is unchanged")
    assert (run / "hyps-valid.txt").read_text() == before
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


def test_a_second_train_into_a_folder_being_trained_is_refused(tmp_path, capsys):
    config_path = save_yaml(tmp_path, tiny_run_config(tmp_path, max_epochs=1, max_steps=2))
    run = tmp_path / "run"
    with writer_lock(run, "train"):  # as a training in another process holds it
        assert cli_main(["train", "--config", str(config_path), "--out", str(run), "--no-progress"]) == 2
        assert "another attnmt train is writing into this folder right now" in capsys.readouterr().err
        assert cli_main(["train", "--out", str(run), "--resume", "--no-progress"]) == 2
    # Once it is released the folder is usable, and the lock file alone does not count as a run.
    assert cli_main(["train", "--config", str(config_path), "--out", str(run), "--no-progress"]) == 0


def test_a_second_compare_into_the_same_folder_is_refused(tmp_path, capsys):
    config_path = save_yaml(tmp_path, tiny_run_config(tmp_path, max_epochs=1, max_steps=2))
    with writer_lock(tmp_path / "results", "compare"):
        assert cli_main(["compare", "--config", str(config_path), "--attention", "dot", "--runs", "1",
                         "--split", "valid", "--out", str(tmp_path / "results"), "--no-progress"]) == 2
    assert "another attnmt compare is writing into this folder right now" in capsys.readouterr().err


def test_a_resumed_run_removes_what_a_killed_write_left(tmp_path):
    config = tiny_run_config(tmp_path, max_epochs=1, max_steps=4)
    run_trainer(tmp_path, config)
    stale = tmp_path / "run" / ".last.pt.0123abcd.tmp"  # as a SIGKILL in the middle of a checkpoint leaves it
    stale.write_bytes(b"half a checkpoint")
    keep = tmp_path / "run" / ".notes.tmp"  # not the writer's pattern: not ours to delete
    keep.write_text("mine")
    run_trainer(tmp_path, {**config, "training": {**config["training"], "max_steps": 6}}, resume=True)
    assert not stale.exists() and keep.exists()


def test_resuming_a_run_that_lost_its_last_checkpoint_is_refused(tmp_path, capsys):
    config_path = save_yaml(tmp_path, tiny_run_config(tmp_path, max_epochs=1, max_steps=4))
    run = tmp_path / "run"
    assert cli_main(["train", "--config", str(config_path), "--out", str(run), "--no-progress"]) == 0
    (run / "last.pt").unlink()
    before = (run / "best.pt").read_bytes()
    assert cli_main(["train", "--out", str(run), "--resume", "--no-progress"]) == 2
    assert f"{run / 'last.pt'}: missing, but the run has a best.pt" in capsys.readouterr().err
    assert (run / "best.pt").read_bytes() == before


def test_what_the_fuzzer_found_ends_in_one_line(tmp_path, capsys):
    """Found by benchmarks/faults.py: a negative batch size, and a model too large to allocate."""
    config = tiny_run_config(tmp_path, max_epochs=1, max_steps=2)
    run_trainer(tmp_path, config)
    assert cli_main(["translate", str(tmp_path / "run"), "Ein Hund.", "--batch-size", "-1"]) == 2
    assert "--batch-size -1: must be an integer >= 1" in capsys.readouterr().err
    path = save_yaml(tmp_path, config, "huge.yaml")
    assert cli_main(["train", "--config", str(path), "--out", str(tmp_path / "huge"), "--no-progress",
                     "--set", "model.hidden_dim=1000000"]) == 2
    assert "does not fit in the memory of cpu" in capsys.readouterr().err
    assert not (tmp_path / "huge").exists()  # the config and tokenizers it wrote went with the start
    assert cli_main(["train", "--config", str(path), "--out", str(tmp_path / "huge"), "--no-progress"]) == 0
    # align --threads 0 (a RuntimeError of torch) and --max-tokens -1 (a ValueError) were tracebacks.
    align = ["align", "--model", str(tmp_path / "run"), "--src", str(tmp_path / "valid.de"), "--tgt",
             str(tmp_path / "valid.en"), "--out", str(tmp_path / "links.txt")]
    assert cli_main([*align, "--threads", "0"]) == 2
    assert "--threads 0: must be an integer from 1 to 1024" in capsys.readouterr().err
    assert cli_main([*align, "--max-tokens", "-1"]) == 2
    assert "--max-tokens must be an integer >= 1, got -1" in capsys.readouterr().err
    assert not (tmp_path / "links.txt").exists()


def test_a_model_too_big_for_the_machine_is_refused_before_a_weight_is_allocated(tmp_path, capsys, monkeypatch):
    """The model is counted on the meta device first: where the kernel overcommits memory, allocating
    a huge model succeeds and the first write kills the process, so the allocator cannot be asked."""
    config_path = save_yaml(tmp_path, tiny_run_config(tmp_path, max_epochs=1, max_steps=2, device="cpu"))
    monkeypatch.setattr("attnmt.models.available_memory", lambda device: 2**16)  # check_model_fits's view
    built = []
    monkeypatch.setattr("attnmt.models.build_model", lambda *args: built.append(args) or nn.Linear(8, 8))
    monkeypatch.setattr("attnmt.models.count_parameters", lambda model, trainable_only: 10_000)
    assert cli_main(["train", "--config", str(config_path), "--out", str(tmp_path / "big"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("attnmt train: error: model: the model this config describes does not fit in the memory of cpu: "
                   "its 10,000 parameters need about 156 KiB there, and 64 KiB is free; make it smaller")
    assert len(built) == 1 and not (tmp_path / "big" / "last.pt").exists()  # built once, on meta


def test_a_training_batch_too_big_for_the_machine_is_refused_before_the_first_step(tmp_path, capsys, monkeypatch):
    """On a machine with 1 MiB free, the logits of 64 words (768 bytes a target position) leave room
    for 682 positions: data.max_tokens 100,000,000 (one batch of all 200 pairs) is refused, and the
    682 that the message advises trains."""
    config_path = save_yaml(tmp_path, tiny_run_config(tmp_path, max_epochs=1, max_steps=2, device="cpu"))
    monkeypatch.setattr("attnmt.training.builder.available_memory", lambda device: 2**20)
    assert cli_main(["train", "--config", str(config_path), "--out", str(tmp_path / "big"), "--no-progress",
                     "--set", "data.max_tokens=100000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("attnmt train: error: data.max_tokens=100000000: a training batch of up to ")
    assert "for its logits over 64 words alone, more than half of the 1 MiB free on cpu" in err
    assert err.endswith("use data.max_tokens 682 or less")
    assert cli_main(["train", "--config", str(config_path), "--out", str(tmp_path / "fits"), "--no-progress",
                     "--set", "data.max_tokens=682"]) == 0


@pytest.mark.parametrize("setting, message", [
    ("search.max_len_b=100000000", "search.max_len_b: must be an integer from 0 to 1000, got 100000000"),
    ("search.max_len_a=100000",
     "search.max_len_a: at most 10 (an output 10 times as long as its source), got 100000.0"),
])
def test_an_output_limit_that_would_decode_for_hours_is_refused(tmp_path, capsys, setting, message):
    """Found by hand after the fuzz run: these decoded validation sentences for over a minute (the
    untrained model never ends one), now they end in one line before any work."""
    config_path = save_yaml(tmp_path, tiny_run_config(tmp_path, max_epochs=1, max_steps=2))
    assert cli_main(["train", "--config", str(config_path), "--out", str(tmp_path / "run"), "--no-progress",
                     "--set", setting]) == 2
    assert message in capsys.readouterr().err


def test_a_training_whose_disk_fills_up_ends_in_one_line_and_resumes_to_the_same_end(tmp_path, capsys):
    config_path = save_yaml(tmp_path, tiny_run_config(tmp_path, max_epochs=2, max_steps=8, checkpoint_every=2))
    train = ["train", "--config", str(config_path), "--no-progress", "--out"]
    with FullDisk(tmp_path / "alone") as disk:
        assert cli_main([*train, str(tmp_path / "alone")]) == 0
    with FullDisk(tmp_path / "full", disk.written // 2):
        assert cli_main([*train, str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"attnmt train: error: {tmp_path / 'full'}") and "(No space left on device)" in err
    assert not list((tmp_path / "full").glob(".*.tmp"))
    assert cli_main([*train, str(tmp_path / "full"), "--resume"]) == 0
    alone, resumed = load_checkpoint(tmp_path / "alone" / "last.pt"), load_checkpoint(tmp_path / "full" / "last.pt")
    assert all(torch.equal(alone["model"][name], resumed["model"][name]) for name in alone["model"])
    assert alone["progress"]["step"] == resumed["progress"]["step"] == 8
