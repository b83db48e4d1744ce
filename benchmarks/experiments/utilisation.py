"""What share of the processor does a training step use? For each recipe:

1. **FLOPs per target token**, counted layer by layer from the model's sizes and the shapes of the
   training batches of the first epoch (padding included, as the step computes it): a matrix
   product of an [n, k] by a [k, m] is 2nkm FLOPs forward and twice that backward (the gradients of
   both operands), so a training step is 3× its forward pass. Elementwise work (gates, softmax,
   layer norms, dropout, Adam) is left out: it is not what the matrix units do. The count without
   the LSTMs is checked against ``torch.utils.flop_counter.FlopCounterMode`` on the same batches,
   which does not count the fused LSTM kernels.
2. **Achieved GFLOP/s**: the FLOPs per target token × the median training target tokens/s of a
   real ``attnmt train`` run of ``--steps`` steps (the allocator as attnmt sets it).
3. **The peak**: a large ``torch.matmul`` at the recipe's precision on the same threads.
4. **Where a step's time goes**: ``torch.profiler`` over ``--profile-steps`` steps, each operator's
   own time sorted into the LSTM recurrence, matrix products, elementwise work, the optimiser and
   memory allocation; the rest of the wall time is Python and the framework around the operators.

    PYTHONPATH=benchmarks python benchmarks/experiments/utilisation.py                       # the fast recipe, the 7.8M recipe, the Transformer
    PYTHONPATH=benchmarks python benchmarks/experiments/utilisation.py configs/multi30k_rnn_fast.yaml --steps 150

Run on an otherwise idle machine. Prints tables; writes benchmarks/results/utilisation.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from attnmt.data import batch_indices, collate
from attnmt.models.rnn import RNNSeq2Seq
from attnmt.models.transformer import Transformer
from attnmt.runs.folder import read_saved_config, resolve_resume_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table
from attnmt.training.builder import build_training
from attnmt.training.distributed import DistributedContext
from attnmt.training.step import backward_on_batch
from attnmt.training.trainer import train_step

from common import portable

PROJECT = Path(__file__).resolve().parents[2]
RECIPES = ["configs/multi30k_rnn_fast.yaml", "configs/multi30k_rnn_bf16.yaml", "configs/multi30k_transformer.yaml"]
BACKWARD = 2  # a matrix product's backward pass: the gradients of both operands


def matmul(n: int, k: int, m: int) -> int:
    """Forward FLOPs of an [n, k] × [k, m] product."""
    return 2 * n * k * m


def rnn_flops(model: RNNSeq2Seq, batch) -> dict[str, int]:
    """Forward FLOPs of one batch through the parallel-flow RNN with scaled dot-product attention,
    by layer. B sentences, S source and T target positions (padded), N real target tokens."""
    config = model.config
    if config.flow != "parallel" or config.attention not in ("scaled_dot", "sdp"):
        raise SystemExit(f"utilisation: the count covers the parallel flow with scaled_dot, not "
                         f"flow={config.flow} attention={config.attention}")
    B, S = batch.src.shape
    T = batch.tgt_in.shape[1]
    N = int(batch.tgt_mask.sum())
    E, H, D = config.embed_dim, config.hidden_dim, config.encoder_state_dim
    gates = 4 if config.cell == "lstm" else 3
    kq = model.attention.kq_dim
    counts: dict[str, int] = defaultdict(int)
    inputs = E
    for _ in range(config.encoder_layers):  # both directions over every padded position
        counts["encoder LSTM, input"] += 2 * matmul(B * S, inputs, gates * D // 2)
        counts["encoder LSTM, recurrence"] += 2 * matmul(B * S, D // 2, gates * D // 2)
        inputs = D
    counts["bridge"] += config.decoder_layers * matmul(B, D, H)
    inputs = E
    for _ in range(config.decoder_layers):
        counts["decoder LSTM, input"] += matmul(B * T, inputs, gates * H)
        counts["decoder LSTM, recurrence"] += matmul(B * T, H, gates * H)
        inputs = H
    counts["attention projections"] += matmul(B * S, D, kq) + matmul(B * T, H, kq)
    counts["attention scores and context"] += B * (matmul(T, kq, S) + matmul(T, S, D))
    features = model.attention.output_dim + H + (E if config.output_embedding else 0)
    V = model.tgt_vocab_size
    if config.tie_output:
        if features != E:
            counts["output projection"] += matmul(N, features, E)
        counts["output layer (logits)"] += matmul(N, E, V)
    else:
        counts["output layer (logits)"] += matmul(N, features, V)
    return counts


def transformer_flops(model: Transformer, batch) -> dict[str, int]:
    """Forward FLOPs of one batch through the Transformer, by kind of layer (every attention over
    all padded positions, the causal one over the full T × T)."""
    config = model.config
    B, S = batch.src.shape
    T = batch.tgt_in.shape[1]
    N = int(batch.tgt_mask.sum())
    d, f = config.d_model, config.ffn_dim
    counts: dict[str, int] = defaultdict(int)
    for _ in range(config.encoder_layers):
        counts["attention projections"] += 4 * matmul(B * S, d, d)
        counts["attention scores and context"] += 2 * B * matmul(S, d, S)
        counts["feed-forward"] += 2 * matmul(B * S, d, f)
    for _ in range(config.decoder_layers):
        counts["attention projections"] += 4 * matmul(B * T, d, d)  # self-attention
        counts["attention scores and context"] += 2 * B * matmul(T, d, T)
        counts["attention projections"] += 2 * matmul(B * T, d, d) + 2 * matmul(B * S, d, d)  # cross: Q, O; K, V
        counts["attention scores and context"] += 2 * B * matmul(T, d, S)
        counts["feed-forward"] += 2 * matmul(B * T, d, f)
    counts["output layer (logits)"] += matmul(N, d, model.tgt_vocab_size)
    return counts


def forward_flops(model, batch) -> dict[str, int]:
    return rnn_flops(model, batch) if isinstance(model, RNNSeq2Seq) else transformer_flops(model, batch)


def is_lstm(name: str) -> bool:
    return "LSTM" in name


def matmul_peak(precision: str, size: int = 4096, repeats: int = 5) -> float:
    """GFLOP/s of the best of ``repeats`` [size, size] × [size, size] products at ``precision``."""
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.matmul(a, b)
    best = min(_seconds(lambda: torch.matmul(a, b)) for _ in range(repeats))
    return matmul(size, size, size) / best / 1e9


def _seconds(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


CATEGORIES = [  # (category, is it this kind of operator?) first match wins; names of torch 2.x CPU ops
    ("LSTM recurrence", lambda n: "lstm" in n or "rnn" in n or "gru" in n),
    ("optimiser", lambda n: "adam" in n or "_foreach" in n or "optimizer" in n),
    ("matrix products", lambda n: any(k in n for k in ("::mm", "addmm", "bmm", "matmul", "linear", "dot"))),
    ("memory allocation", lambda n: any(k in n for k in ("::empty", "resize_", "zeros", "new_", "::clone"))),
]


def category_of(name: str) -> str:
    lowered = name.lower()
    return next((category for category, test in CATEGORIES if test(lowered)), "elementwise and other operators")


def run_trainer(config: str, steps: int, out: Path) -> dict:
    """``attnmt train`` for ``steps`` steps: the run folder and the median training target tokens/s."""
    command = [sys.executable, "-m", "attnmt", "train", "--config", str(PROJECT / config), "--out", str(out),
               "--no-progress", "--max-steps", str(steps), "--set", "training.bleu_max_sentences=0",
               "--set", "training.examples=0", "--set", "training.log_every=25"]
    subprocess.run(command, check=True, capture_output=True, text=True)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    speeds = [r["tokens_per_s"] for r in records if r["type"] == "train"][1:]  # the first holds start-up
    return {"tokens_per_s_median": statistics.median(speeds), "records": len(speeds)}


def measure(config_path: str, steps: int, profile_steps: int, check_batches: int, folder: Path) -> dict:
    run_dir = folder / Path(config_path).stem
    trained = run_trainer(config_path, steps, run_dir)
    config = resolve_resume_config(read_saved_config(run_dir), None, {})
    parts = build_training(config, run_dir, True, DistributedContext(), lambda message: None)
    model, precision = parts.model, config.training.precision
    model.train()
    positions = batch_indices([len(ids) for ids in parts.train_src], [len(ids) for ids in parts.train_tgt],
                              max_tokens=config.data.max_tokens, shuffle=True, seed=config.training.seed, epoch=0)
    batches = [collate(parts.train_src, parts.train_tgt, indices) for indices in positions]

    by_layer: dict[str, int] = defaultdict(int)
    tokens = padded_target = 0
    for batch in batches:
        for name, count in forward_flops(model, batch).items():
            by_layer[name] += count
        tokens += int(batch.tgt_mask.sum())
        padded_target += batch.tgt_mask.numel()
    per_token = {name: (1 + BACKWARD) * count / tokens for name, count in by_layer.items()}
    total_per_token = sum(per_token.values())

    # FlopCounterMode on the first batches: what it counts against the count without the LSTMs
    counted = expected = 0
    for batch in batches[:check_batches]:
        with FlopCounterMode(display=False) as counter:
            backward_on_batch(model, batch, config.training.label_smoothing, int(batch.tgt_mask.sum()),
                              precision=precision)
        model.zero_grad(set_to_none=True)
        counted += counter.get_total_flops()
        expected += (1 + BACKWARD) * sum(c for name, c in forward_flops(model, batch).items() if not is_lstm(name))

    # a profile of whole steps, as the trainer takes them (one warm-up step first)
    def step(batch) -> None:
        train_step(parts, batch, int(batch.tgt_mask.sum()))  # the trainer's own step

    chosen = batches[check_batches:check_batches + profile_steps + 1]
    step(chosen[0])
    plain_seconds = sum(_seconds(lambda b=b: step(b)) for b in chosen[1:])
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        profiled_seconds = sum(_seconds(lambda b=b: step(b)) for b in chosen[1:])
    own_time: dict[str, float] = defaultdict(float)
    for event in profiler.key_averages():
        own_time[category_of(event.key)] += event.self_cpu_time_total / 1e6
    operators = sum(own_time.values())
    shares = {name: seconds / profiled_seconds for name, seconds in own_time.items()}
    shares["Python and the framework around the operators"] = max(0.0, 1 - operators / profiled_seconds)
    profiled_tokens = sum(int(b.tgt_mask.sum()) for b in chosen[1:])

    peak = matmul_peak(precision if precision in ("bf16", "fp32") else "fp32")
    achieved = total_per_token * trained["tokens_per_s_median"] / 1e9
    in_process = total_per_token * profiled_tokens / plain_seconds / 1e9
    top = sorted(((e.key, e.self_cpu_time_total / 1e6 / profiled_seconds) for e in profiler.key_averages()),
                 key=lambda item: -item[1])[:12]
    return {
        "config": config_path, "precision": precision, "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "epoch_batches": len(batches), "target_tokens": tokens,
        "target_padding_share": round(1 - tokens / padded_target, 3),
        "mflop_per_target_token": round(total_per_token / 1e6, 3),
        "mflop_per_target_token_by_layer": {k: round(v / 1e6, 3) for k, v in sorted(per_token.items())},
        "lstm_share_of_flops": round(sum(v for k, v in per_token.items() if is_lstm(k)) / total_per_token, 3),
        "flop_counter": {"batches": check_batches, "counted": counted, "expected_without_lstm": expected,
                         "ratio": round(counted / expected, 4)},
        "trainer_steps": steps, "trainer_tokens_per_s_median": round(trained["tokens_per_s_median"]),
        "achieved_gflops": round(achieved, 1), "in_process_gflops": round(in_process, 1),
        "matmul_peak_gflops": round(peak, 1), "share_of_peak": round(achieved / peak, 3),
        "profile": {"steps": profile_steps, "seconds_per_step": round(profiled_seconds / profile_steps, 4),
                    "overhead_of_profiling": round(profiled_seconds / plain_seconds, 3),
                    "shares": {k: round(v, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
                    "top_operators": [[name, round(share, 3)] for name, share in top]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", default=RECIPES)
    parser.add_argument("--steps", type=int, default=150, help="steps of the timed attnmt train run")
    parser.add_argument("--profile-steps", type=int, default=10)
    parser.add_argument("--check-batches", type=int, default=3, help="batches FlopCounterMode checks")
    parser.add_argument("--json", type=Path, default=PROJECT / "benchmarks" / "results" / "speed" / "utilisation.json")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="attnmt-utilisation-") as temporary:
        for config in args.configs:
            print(f"{config}: training {args.steps} steps, then counting and profiling", flush=True)
            results.append(measure(config, args.steps, args.profile_steps, args.check_batches, Path(temporary)))
    print(format_table(
        ["recipe", "precision", "MFLOP / target token", "LSTM share", "FlopCounter / count", "target tokens/s",
         "achieved GFLOP/s", "matmul peak GFLOP/s", "share of peak"],
        [[Path(r["config"]).stem, r["precision"], f"{r['mflop_per_target_token']:.2f}",
          f"{r['lstm_share_of_flops']:.2f}", f"{r['flop_counter']['ratio']:.3f}",
          f"{r['trainer_tokens_per_s_median']:,}", f"{r['achieved_gflops']:.0f}", f"{r['matmul_peak_gflops']:.0f}",
          f"{r['share_of_peak']:.2f}"] for r in results]))
    categories = sorted({name for r in results for name in r["profile"]["shares"]})
    print(format_table(["share of a step's time"] + [Path(r["config"]).stem for r in results],
                       [[name] + [f"{r['profile']['shares'].get(name, 0):.2f}" for r in results]
                        for name in categories]))
    record = {"command": "PYTHONPATH=benchmarks python benchmarks/experiments/utilisation.py " + " ".join(sys.argv[1:]), "cpus": os.cpu_count(),
              "torch": torch.__version__, "recipes": results}
    write_text_atomic(args.json, json.dumps(portable(record), indent=2) + "\n")
    print(f"wrote {portable(args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
