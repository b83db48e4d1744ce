"""Where a recipe's training step spends its time, operator by operator, on the real batches.

The trainer's own step (``train_step``: forward, loss, backward, clipping, AdamW, the moving
average) over the first N batches of epoch 1: one pass to compile oneDNN's kernels (with attnmt's
kernel cache, ``attnmt.runtime.kernel_cache``), one timed pass without the profiler, then
``--profiled`` of the same batches under ``torch.profiler``. Reported: each operator's own time
(time inside it less the operators it calls) in ms per step and as a share of the profiled steps'
wall time, the operators grouped as named below, and the time outside any operator (Python, the
autograd engine's bookkeeping, the profiler itself).

    PYTHONPATH=benchmarks python benchmarks/experiments/step_profile.py configs/multi30k_rnn_fast.yaml \\
        --json benchmarks/results/speed/step_profile_rnn_fast.json

Needs the Multi30k files (``ATTNMT_DATA_DIR``); trains the recipe's tokenizers in a temporary folder
first. Run it on an otherwise idle machine. Prints a table; writes the JSON.
"""

from __future__ import annotations

import json
import platform
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from attnmt.data import batch_indices, collate
from attnmt.runs.run_config import load_config
from attnmt.runtime.allocator import keep_freed_memory
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.kernel_cache import enlarge_kernel_cache
from attnmt.runtime.tables import format_table
from attnmt.training.builder import build_training
from attnmt.training.distributed import DistributedContext
from attnmt.training.trainer import train_step

from common import cpu_name, portable, recipe_steps_parser

# Operators by what they do in a step; an operator in no group is counted under "other operators".
GROUPS = {
    "LSTM kernels, forward": ("aten::mkldnn_rnn_layer",),
    "LSTM kernels, backward": ("aten::mkldnn_rnn_layer_backward",),
    "matrix products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "copies and casts (bf16 autocast)": ("aten::copy_", "aten::_to_copy", "aten::empty_strided", "aten::empty"),
    "dropout masks": ("aten::bernoulli_",),
    "log-softmax and its gradient": ("aten::_log_softmax", "aten::_log_softmax_backward_data"),
    "AdamW, clipping, moving average": ("aten::_fused_adamw_", "aten::lerp_", "aten::linalg_vector_norm",
                                        "aten::_foreach_norm", "aten::_foreach_mul_", "aten::_foreach_lerp_"),
}
SHOWN = 12  # operators listed one by one


def measure(config_path: str, batches: int, profiled: int, threads: int) -> dict:
    """The timed pass's ms per step, and the profiled steps' ATen operators (self ms per step)."""
    enlarge_kernel_cache()
    keep_freed_memory()
    torch.set_num_threads(threads)
    config = load_config(config_path)
    with tempfile.TemporaryDirectory(prefix="attnmt-step-profile-") as folder:
        parts = build_training(config, Path(folder) / "run", False, DistributedContext(), lambda message: None)
        parts.model.train()
        positions = batch_indices([len(ids) for ids in parts.train_src], [len(ids) for ids in parts.train_tgt],
                                  max_tokens=config.data.max_tokens, shuffle=True, seed=config.training.seed,
                                  epoch=0)
        steps = [collate(parts.train_src, parts.train_tgt, indices) for indices in positions[:batches]]
        counts = [batch.num_tgt_tokens for batch in steps]
        for batch, count in zip(steps, counts):  # oneDNN compiles each shape's kernels here
            train_step(parts, batch, count)
        started = time.perf_counter()
        for batch, count in zip(steps, counts):
            train_step(parts, batch, count)
        timed_ms = (time.perf_counter() - started) * 1e3 / len(steps)
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            started = time.perf_counter()
            for batch, count in zip(steps[:profiled], counts[:profiled]):
                train_step(parts, batch, count)
            profiled_ms = (time.perf_counter() - started) * 1e3 / profiled
    operators = {event.key: event.self_cpu_time_total / 1e3 / profiled for event in profiler.key_averages()
                 if event.self_cpu_time_total > 0 and event.key.startswith("aten::")}  # the rest: outside operators
    return {"timed_ms_per_step": timed_ms, "profiled_ms_per_step": profiled_ms,
            "target_tokens_per_step": sum(counts) / len(counts), "operators_ms_per_step": operators}


def grouped(operators: dict[str, float]) -> dict[str, float]:
    """ms per step by group (``GROUPS``), the rest as "other operators"."""
    totals = {name: sum(operators.get(op, 0.0) for op in ops) for name, ops in GROUPS.items()}
    named = {op for ops in GROUPS.values() for op in ops}
    totals["other operators"] = sum(ms for op, ms in operators.items() if op not in named)
    return totals


def main() -> int:
    parser = recipe_steps_parser(__doc__, "batches of epoch 1")
    parser.add_argument("--profiled", type=int, default=100, help="of those, steps profiled (default 100)")
    args = parser.parse_args()
    if not 1 <= args.profiled <= args.batches:
        raise SystemExit(f"step_profile.py: --profiled {args.profiled} must be between 1 and --batches {args.batches}")
    found = measure(args.config, args.batches, args.profiled, args.threads)
    wall = found["profiled_ms_per_step"]
    operators = found["operators_ms_per_step"]
    groups = grouped(operators)
    groups["outside operators (Python, autograd, profiler)"] = wall - sum(operators.values())
    rows = [[name, round(ms, 2), f"{ms / wall:.1%}"] for name, ms in groups.items()]
    print(format_table(["group", "ms a step", "share"], rows))
    top = sorted(operators.items(), key=lambda item: -item[1])[:SHOWN]
    print(format_table(["operator", "ms a step", "share"], [[op, round(ms, 2), f"{ms / wall:.1%}"] for op, ms in top]))
    print(f"{found['timed_ms_per_step']:.1f} ms a step unprofiled, {wall:.1f} ms profiled; "
          f"{found['target_tokens_per_step']:.0f} target tokens a step")
    write_text_atomic(args.json, json.dumps(portable({
        "config": args.config, "batches": args.batches, "profiled": args.profiled, "threads": args.threads,
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(), "cpu": cpu_name(),
        "timed_ms_per_step": round(found["timed_ms_per_step"], 2), "profiled_ms_per_step": round(wall, 2),
        "target_tokens_per_step": round(found["target_tokens_per_step"], 1),
        "groups": [{"group": name, "ms_per_step": round(ms, 3), "share": round(ms / wall, 4)}
                   for name, ms in groups.items()],
        "operators": [{"operator": op, "ms_per_step": round(ms, 3), "share": round(ms / wall, 4)} for op, ms in top],
    }), indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
