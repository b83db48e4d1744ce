"""Multi-head attention in bf16 on a CPU: torch's fused kernel against plain steps, and its share of
a training step.

    PYTHONPATH=benchmarks python benchmarks/experiments/bf16_attention.py \\
        --json benchmarks/results/speed/bf16_attention.json

1. **The kernel.** On the query, key and value shapes of a recipe's first batches (its own batching;
   the decoder's self-attention, causal and padding masks, h heads of d_model/h), forward and backward
   of softmax(q kᵀ/√d) v from bf16 inputs, in three ways: torch's fused kernel
   (``F.scaled_dot_product_attention``, what attnmt ran before), attnmt's float32 plain steps
   (``attnmt.attention.functional._cpu_bf16_attention``, what it runs now), and the same steps with
   the scores rounded to bf16. Each gets its milliseconds (the median of the rounds, rounds taking
   turns) and the largest error of its output and gradients against float64 on the same rounded
   inputs, with the queries scaled by 1 and by 30 (large logits). The same shapes in float32 time
   torch's fused kernel against the plain steps there, which is why float32 keeps the fused kernel.
2. **The step.** The trainer's own ``train_step`` on the recipe's batches under torch's profiler, with
   the fused kernel and then with the plain steps: the share of the step's CPU time in the fused
   kernel's forward and backward, and the step's milliseconds.

Needs the Multi30k files (``ATTNMT_DATA_DIR``). Run it on an otherwise idle machine. Prints two
tables; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from step_ab import PROJECT, use_bf16_attention
from torch.profiler import ProfilerActivity, profile

from attnmt.attention import functional
from attnmt.attention.functional import causal_mask, masked_softmax, scaled_dot_product_attention
from attnmt.data import batch_indices, collate
from attnmt.runs.run_config import load_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table
from attnmt.training.builder import build_training
from attnmt.training.distributed import DistributedContext
from attnmt.training.trainer import train_step

from common import portable

FUSED_KERNEL_OPS = ("aten::_scaled_dot_product_flash_attention_for_cpu",
                    "aten::_scaled_dot_product_flash_attention_for_cpu_backward")


def fused(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def plain_float32(q, k, v, mask):
    return functional._cpu_bf16_attention(q, k, v, mask, 0.0, None)


def plain_bf16_scores(q, k, v, mask):
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))  # rounded to bf16
    return torch.matmul(masked_softmax(scores.float(), mask).to(v.dtype), v)


def plain_steps(q, k, v, mask):
    """attnmt's explicit matmul–softmax–matmul in the inputs' own type (float32 here)."""
    return scaled_dot_product_attention(q, k, v, mask, need_weights=True)[0]


KERNELS = {"torch fused": fused, "plain, float32": plain_float32, "plain, bf16 scores": plain_bf16_scores}
FLOAT32_KERNELS = {"torch fused": fused, "plain steps": plain_steps}


def attention_inputs(batch, heads: int, head_dim: int, logit_scale: float, generator: torch.Generator):
    """q, k, v [B, h, T, d_head] in bf16, the upstream gradient, and the decoder self-attention mask."""
    size, length = batch.tgt_in.shape
    q, k, v, upstream = (torch.randn(size, heads, length, head_dim, generator=generator) for _ in range(4))
    real = batch.tgt_in != 0
    mask = (causal_mask(length) & real[:, None, :]).unsqueeze(1)
    mask = mask | ~mask.any(dim=-1, keepdim=True)  # padding queries see everything, as torch's kernel needs
    return [(q * logit_scale).bfloat16(), k.bfloat16(), v.bfloat16()], upstream.bfloat16(), mask


def kernel_errors(kernel, inputs, upstream, mask) -> tuple[float, float]:
    """Largest |output − float64| and largest gradient error relative to the largest gradient."""
    exact = [t.double().requires_grad_() for t in inputs]
    expected = plain_steps(*exact, mask)  # float64, tested against the NumPy reference
    expected.backward(upstream.double())
    rounded = [t.clone().requires_grad_() for t in inputs]
    output = kernel(*rounded, mask)
    output.backward(upstream)
    gradient = max((mine.grad.double() - theirs.grad).abs().max().item() / theirs.grad.abs().max().item()
                   for mine, theirs in zip(rounded, exact))
    return (output.double() - expected).abs().max().item(), gradient


def timed_rounds(kernels: dict, cases, rounds: int) -> dict[str, list[float]]:
    """Milliseconds of forward and backward per case, each round every kernel over all cases, the
    order reversed every other round."""
    def forward_backward(kernel) -> float:
        started = time.perf_counter()
        for inputs, upstream, mask in cases:
            leaves = [t.detach().requires_grad_() for t in inputs]
            kernel(*leaves, mask).backward(upstream)
        return (time.perf_counter() - started) / len(cases) * 1e3

    for kernel in kernels.values():  # warm-up
        forward_backward(kernel)
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for round_index in range(rounds):
        for name in kernels if round_index % 2 == 0 else list(kernels)[::-1]:
            times[name].append(forward_backward(kernels[name]))
    return times


def measure_float32(batches, heads: int, head_dim: int, rounds: int) -> list[dict]:
    """The same shapes in float32: torch's fused kernel against attnmt's plain steps."""
    generator = torch.Generator().manual_seed(0)
    cases = []
    for batch in batches:
        inputs, upstream, mask = attention_inputs(batch, heads, head_dim, 1.0, generator)
        cases.append(([t.float() for t in inputs], upstream.float(), mask))
    times = timed_rounds(FLOAT32_KERNELS, cases, rounds)
    return [{"kernel": name, "ms_median": round(statistics.median(times[name]), 3),
             "ms": [round(t, 3) for t in times[name]]} for name in FLOAT32_KERNELS]


def measure_kernels(batches, heads: int, head_dim: int, rounds: int) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    cases = [attention_inputs(batch, heads, head_dim, 1.0, generator) for batch in batches]
    times = timed_rounds(KERNELS, cases, rounds)
    results = []
    for name, kernel in KERNELS.items():
        errors = {}
        for scale in (1.0, 30.0):
            inputs, upstream, mask = attention_inputs(batches[0], heads, head_dim, scale, generator)
            errors[f"scale {scale:g}"] = [round(e, 5) for e in kernel_errors(kernel, inputs, upstream, mask)]
        results.append({"kernel": name, "ms_median": round(statistics.median(times[name]), 3),
                        "ms": [round(t, 3) for t in times[name]], "output_and_gradient_errors": errors})
    return results


def profile_steps(parts, batches, kernel: str) -> dict:
    use_bf16_attention(parts, kernel)
    for batch in batches[:5]:
        train_step(parts, batch, int(batch.tgt_mask.sum()))
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for batch in batches:
            train_step(parts, batch, int(batch.tgt_mask.sum()))
    elapsed = time.perf_counter() - started
    events = profiler.key_averages()
    total = sum(event.self_cpu_time_total for event in events)
    shares = {name: round(sum(e.self_cpu_time_total for e in events if e.key == name) / total, 4)
              for name in FUSED_KERNEL_OPS}
    return {"kernel": kernel, "step_ms": round(elapsed / len(batches) * 1e3, 2), "fused_kernel_share": shares}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/multi30k_transformer_fast.yaml")
    parser.add_argument("--batches", type=int, default=30, help="batches of the recipe (default 30)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(PROJECT / args.config)
    if config.model.type != "transformer" or config.training.precision != "bf16":
        raise SystemExit(f"bf16_attention.py: {args.config} is not a bf16 Transformer recipe")
    with tempfile.TemporaryDirectory(prefix="attnmt-bf16-attention-") as folder:
        print(f"{args.config}: building the recipe ...", file=sys.stderr)
        parts = build_training(config, Path(folder) / "run", False, DistributedContext(), lambda message: None)
        parts.model.train()
        positions = batch_indices([len(ids) for ids in parts.train_src], [len(ids) for ids in parts.train_tgt],
                                  max_tokens=config.data.max_tokens, shuffle=True, seed=config.training.seed, epoch=0)
        batches = [collate(parts.train_src, parts.train_tgt, indices) for indices in positions[:args.batches]]
        heads = config.model.num_heads
        print("the kernels ...", file=sys.stderr)
        kernels = measure_kernels(batches, heads, config.model.d_model // heads, args.rounds)
        float32 = measure_float32(batches, heads, config.model.d_model // heads, args.rounds)
        print("the steps under the profiler ...", file=sys.stderr)
        steps = [profile_steps(parts, batches, kernel) for kernel in ("fused", "plain")]
        use_bf16_attention(parts, "plain")
    baseline = kernels[0]["ms_median"]
    print(format_table(
        ["kernel", "forward and backward ms", "against torch's", "output error (scale 1, 30)",
         "gradient error (scale 1, 30)"],
        [[k["kernel"], k["ms_median"], f"{baseline / k['ms_median']:.2f}x",
          " / ".join(f"{e[0]:.4f}" for e in k["output_and_gradient_errors"].values()),
          " / ".join(f"{e[1]:.4f}" for e in k["output_and_gradient_errors"].values())] for k in kernels]))
    print(format_table(["float32 inputs", "forward and backward ms"], [[k["kernel"], k["ms_median"]] for k in float32]))
    print(format_table(["attention in the step", "step ms", "fused kernel forward share", "its backward share"],
                       [[s["kernel"], s["step_ms"], *s["fused_kernel_share"].values()] for s in steps]))
    write_text_atomic(args.json, json.dumps(portable({
        "config": args.config, "threads": args.threads, "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(), "batches": len(batches),
        "batch_shapes": [list(batch.tgt_in.shape) for batch in batches],
        "kernels": kernels, "float32": float32, "steps": steps,
    }), indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
