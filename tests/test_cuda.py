"""CUDA against the CPU: where a GPU is, training steps, search, 16-bit training, checkpoints moving
between devices, and torchrun with NCCL. Skipped with the reason elsewhere (CI has no GPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnmt.attention import scaled_dot_product_attention
from attnmt.data import make_batches
from attnmt.decoding.search import beam_search, greedy_search
from attnmt.decoding.translator import Translator
from attnmt.models import build_model
from attnmt.runs.checkpoint import load_checkpoint
from attnmt.training import backward_on_batch

from helpers import make_pairs, run_trainer, save_yaml, tiny_run_config

pytestmark = [pytest.mark.slow,  # trains on the GPU
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; this machine has none")]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "rnn-lstm": {"type": "rnn", "embed_dim": 16, "hidden_dim": 32, "dropout": 0.0, "attention": "additive"},
    "rnn-gru-luong": {"type": "rnn", "embed_dim": 16, "hidden_dim": 32, "dropout": 0.0, "attention": "general",
                      "cell": "gru", "flow": "luong"},
    "transformer": {"type": "transformer", "d_model": 32, "num_heads": 4, "ffn_dim": 64, "encoder_layers": 2,
                    "decoder_layers": 2, "dropout": 0.0, "attention_dropout": 0.0},
}
VOCAB = 40


def _batch():
    generator = torch.Generator().manual_seed(0)
    src = [torch.randint(4, VOCAB, (n,), generator=generator).tolist() for n in (5, 3, 7, 1)]
    tgt = [torch.randint(4, VOCAB, (n,), generator=generator).tolist() for n in (4, 6, 2, 3)]
    [batch] = make_batches(src, tgt, max_tokens=1000, shuffle=False)
    return batch


@pytest.mark.parametrize("name", MODELS)
def test_a_training_step_on_cuda_equals_the_cpu_in_float64(name):
    torch.manual_seed(0)
    cpu_model = build_model(dict(MODELS[name]), VOCAB, VOCAB).double()
    cuda_model = build_model(dict(MODELS[name]), VOCAB, VOCAB).double().cuda()
    cuda_model.load_state_dict(cpu_model.state_dict())
    batch = _batch()
    cpu = backward_on_batch(cpu_model, batch, 0.1, batch.num_tgt_tokens)
    cuda = backward_on_batch(cuda_model, batch.to("cuda"), 0.1, batch.num_tgt_tokens)
    assert float(cuda.loss_sum) == pytest.approx(float(cpu.loss_sum), rel=1e-12)
    for (parameter_name, on_cpu), on_cuda in zip(cpu_model.named_parameters(), cuda_model.parameters()):
        torch.testing.assert_close(on_cuda.grad.cpu(), on_cpu.grad, rtol=1e-10, atol=1e-12, msg=parameter_name)


@pytest.mark.parametrize("name", MODELS)
def test_search_gives_the_same_tokens_on_cpu_and_cuda(name):
    torch.manual_seed(1)
    model = build_model(dict(MODELS[name]), VOCAB, VOCAB).eval()
    batch = _batch()
    cpu_greedy = [h.tokens for h in greedy_search(model, batch.src, batch.src_mask, max_len_a=1.0, max_len_b=4)]
    cpu_beam = [n[0].tokens for n in beam_search(model, batch.src, batch.src_mask, beam=3, max_len_a=1.0, max_len_b=4)]
    model.cuda()
    on_cuda = batch.to("cuda")
    cuda_greedy = greedy_search(model, on_cuda.src, on_cuda.src_mask, max_len_a=1.0, max_len_b=4)
    assert [h.tokens for h in cuda_greedy] == cpu_greedy
    assert [n[0].tokens for n in beam_search(model, on_cuda.src, on_cuda.src_mask, beam=3, max_len_a=1.0,
                                             max_len_b=4)] == cpu_beam


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_16_bit_training_on_cuda_lowers_the_loss_and_resumes(tmp_path, precision):
    config = tiny_run_config(tmp_path, max_epochs=2, precision=precision, device="cuda")
    unbroken = run_trainer(tmp_path, config, out="unbroken")
    losses = [r["loss"] for r in unbroken.history if r["type"] == "train"]
    assert losses[-1] < 0.8 * losses[0]
    assert all(r["device"].startswith("cuda") for r in unbroken.history if r["type"] == "train")
    stopped = {**config, "training": {**config["training"], "max_steps": 9}}
    run_trainer(tmp_path, stopped, out="resumed")
    resumed = run_trainer(tmp_path, config, out="resumed", resume=True)
    assert resumed.step == unbroken.step
    a, b = load_checkpoint(tmp_path / "resumed" / "last.pt"), load_checkpoint(tmp_path / "unbroken" / "last.pt")
    assert a.get("scaler") == b.get("scaler") and (precision != "fp16" or a["scaler"])
    for name, tensor in b["model"].items():  # GPU kernels may reorder sums: equal up to rounding
        torch.testing.assert_close(a["model"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_attention_on_cuda_never_plans_in_cudnn_and_equals_float64(dtype):
    """cuDNN's fused attention plans every new shape (a 7x slower first epoch): attnmt keeps it out."""
    generator = torch.Generator().manual_seed(3)
    profiled = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with profiled:
        for length in (5, 9, 13):  # a new shape each call, as in training
            q, k, v = (torch.randn(2, 4, length, 32, generator=generator) for _ in range(3))
            mask = torch.rand(2, 1, length, length, generator=generator) > 0.3
            mask[0, 0, 1] = False  # one query row that may attend to nothing
            out, _ = scaled_dot_product_attention(*(t.to("cuda", dtype) for t in (q, k, v)), mask.cuda())
            reference, _ = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask, need_weights=True)
            error = (out.double().cpu() - reference).norm() / reference.norm()
            assert float(error) < 1e-2 and bool(torch.isfinite(out).all())
            assert bool((out[0, :, 1] == 0).all())
    assert not [e.key for e in profiled.key_averages() if "cudnn_attention" in e.key]


def test_a_run_moves_between_cuda_and_the_cpu(tmp_path):
    config = tiny_run_config(tmp_path, max_epochs=1, max_steps=8, device="cuda")
    run_trainer(tmp_path, config)
    checkpoint = load_checkpoint(tmp_path / "run" / "last.pt")
    assert all(t.device.type == "cpu" for t in checkpoint["model"].values())  # no device in the file
    sources, _ = make_pairs(5, seed=4)
    on_cuda, on_cpu = Translator.load(tmp_path / "run", device="cuda"), Translator.load(tmp_path / "run", device="cpu")
    assert on_cuda.device.type == "cuda" and on_cpu.device.type == "cpu"
    assert [t.output for t in on_cuda.translate(sources)] == [t.output for t in on_cpu.translate(sources)]
    shutil.copytree(tmp_path / "run", tmp_path / "on-cpu")
    moved = {**config, "training": {**config["training"], "max_steps": 12, "device": "cpu"}}
    assert run_trainer(tmp_path, moved, out="on-cpu", resume=True).step == 12  # GPU run resumed on the CPU


def test_torchrun_with_one_process_trains_with_nccl(tmp_path):
    config_path = save_yaml(tmp_path, tiny_run_config(tmp_path, max_epochs=1, max_steps=6, device="cuda"))
    command = [shutil.which("torchrun") or sys.executable + " -m torch.distributed.run", "--nproc_per_node", "1",
               "-m", "attnmt", "train", "--config", str(config_path), "--out", str(tmp_path / "ddp"), "--no-progress"]
    command = command[0].split() + command[1:]
    done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "device cuda:0" in done.stderr
    records = [json.loads(line) for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["type"] == "summary" and records[-1]["step"] == 6
