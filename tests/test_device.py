"""Devices and precisions on the CPU (CI has no GPU; tests/test_cuda.py runs where CUDA is):
device names resolve or fail in one line, every command says where it runs, metrics.jsonl records
it, and fp16 training with its loss scaler lowers the loss and resumes exactly."""

from __future__ import annotations

import json

import pytest
import torch

from attnmt.cli import main as cli_main
from attnmt.errors import ConfigError
from attnmt.runs.checkpoint import load_checkpoint
from attnmt.runtime.device import check_device_name, describe, resolve_device
from attnmt.runtime.precision import autocast, effective_precision, grad_scaler

from helpers import comparable, run_trainer, save_yaml, tiny_run_config

pytestmark = pytest.mark.slow  # trains runs in every precision

NO_CUDA = not torch.cuda.is_available()
NO_MPS = not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def test_device_names():
    for name in ("auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"):
        assert check_device_name(name) == name
    for name in ("gpu", "cuda:", "cuda:x", "CPU", "", None, 0):
        with pytest.raises(ConfigError, match="must be one of auto, cpu, cuda, cuda:N, mps"):
            check_device_name(name)
    assert resolve_device("cpu") == torch.device("cpu")
    if NO_CUDA and NO_MPS:
        assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_asking_for_cuda_without_it_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"device cuda:1: CUDA is not available on this machine .*use device=cpu"):
        resolve_device("cuda:1")
    path = save_yaml(tmp_path, tiny_run_config(tmp_path))
    assert cli_main(["train", "--config", str(path), "--out", str(tmp_path / "run"), "--device", "cuda",
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "attnmt train: error: device cuda: CUDA is not available" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.skipif(not NO_MPS, reason="this machine has MPS")
def test_asking_for_mps_without_it_is_a_clear_error():
    with pytest.raises(ConfigError, match="device mps: Apple's MPS is not available"):
        resolve_device("mps")


def test_fp16_autocast_and_its_scaler():
    with autocast("fp16"):
        product = torch.randn(2, 3) @ torch.randn(3, 4)
    assert product.dtype == torch.float16
    assert grad_scaler("fp16").is_enabled() and not grad_scaler("bf16").is_enabled()
    with autocast("fp32"):
        assert (torch.randn(2, 3) @ torch.randn(3, 4)).dtype == torch.float32


def test_bf16_runs_in_fp32_on_a_cpu_without_bf16_and_says_so(monkeypatch):
    monkeypatch.setenv("ATTNMT_CPU_BF16", "off")  # a CPU without avx512_bf16 or amx_bf16
    assert effective_precision("bf16", "cpu") == "fp32" and effective_precision("bf16", "cuda") == "bf16"
    with autocast("bf16", "cpu"):
        assert (torch.randn(2, 3) @ torch.randn(3, 4)).dtype == torch.float32
    assert "precision fp32 (not bf16: this CPU has no bf16 arithmetic)" in describe(torch.device("cpu"), "bf16")
    monkeypatch.setenv("ATTNMT_CPU_BF16", "on")
    with autocast("bf16", "cpu"):
        assert (torch.randn(2, 3) @ torch.randn(3, 4)).dtype == torch.bfloat16


def test_commands_say_where_they_run_and_metrics_record_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ATTNMT_CPU_BF16", "on")  # bf16 as asked, whatever the suite runs with
    config = tiny_run_config(tmp_path, max_epochs=1, max_steps=6, device="cpu")  # what it says is the CPU's
    run_trainer(tmp_path, config)
    run = tmp_path / "run"
    train_records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
                     if json.loads(line)["type"] == "train"]
    assert train_records and all(r["device"] == "cpu" and r["precision"] == "fp32" and r["tf32"] is False
                             for r in train_records)
    capsys.readouterr()
    assert cli_main(["translate", str(run), "ein hund läuft.", "--device", "cpu", "--precision", "bf16"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("attnmt translate: device cpu (") and "precision bf16" in captured.err
    assert len(captured.out.splitlines()) == 1  # stdout stays the translations
    assert cli_main(["evaluate", str(run), "--split", "valid", "-n", "0", "--no-progress", "--device", "cpu"]) == 0
    assert "attnmt evaluate: device cpu (" in capsys.readouterr().err
    assert json.loads((run / "eval-valid.json").read_text())["device"] == "cpu"
    assert cli_main(["translate", str(run), "ein hund.", "--device", "tpu"]) == 2
    assert "device: must be one of auto, cpu, cuda, cuda:N, mps; got 'tpu'" in capsys.readouterr().err


@pytest.mark.outcome
def test_fp16_training_lowers_the_loss_and_resumes_exactly_with_its_scaler(tmp_path, training_seed, record_property):
    """fp16 on the CPU (a GRU: PyTorch has no float16 LSTM there); the GradScaler's state is in
    last.pt, so a run stopped at step 9 and resumed ends as one never stopped."""
    config = tiny_run_config(tmp_path, max_epochs=2, precision="fp16", seed=training_seed)
    config["model"]["cell"] = "gru"
    unbroken = run_trainer(tmp_path, config, out="unbroken")
    losses = [r["loss"] for r in unbroken.history if r["type"] == "train"]
    record_property("loss_ratio", losses[-1] / losses[0])
    assert losses[-1] < 0.8 * losses[0]
    last = load_checkpoint(tmp_path / "unbroken" / "last.pt")
    assert last["scaler"]["scale"] > 0 and "_growth_tracker" in last["scaler"]

    stopped = {**config, "training": {**config["training"], "max_steps": 9}}
    run_trainer(tmp_path, stopped, out="resumed")
    assert load_checkpoint(tmp_path / "resumed" / "last.pt")["progress"]["step"] == 9
    resumed = run_trainer(tmp_path, config, out="resumed", resume=True)
    assert resumed.step == unbroken.step
    a, b = load_checkpoint(tmp_path / "resumed" / "last.pt"), last
    assert a["scaler"] == b["scaler"]
    for name, tensor in b["model"].items():
        assert torch.equal(a["model"][name], tensor), name
    def epochs(history):  # the stop added a validation and cut a logging window in two
        return [r for r in comparable(history) if r["type"] == "epoch"]

    assert len(epochs(a["history"])) == 2 and epochs(a["history"]) == epochs(b["history"])


def test_fp16_lstm_on_the_cpu_is_refused_in_one_line(tmp_path, capsys):
    config = tiny_run_config(tmp_path, max_epochs=1, max_steps=2, precision="fp16", device="cpu")
    path = save_yaml(tmp_path, config)
    assert cli_main(["train", "--config", str(path), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "no float16 LSTM on the CPU; use bf16" in capsys.readouterr().err
