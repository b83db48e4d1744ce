"""One lever of a training step, A against B on the same batches: what it gives a step on this machine.

A recipe's whole training step (the trainer's own ``train_step``: forward, backward, clipping, Adam
and the moving average) runs on the same batches with each value of the lever, in the order A B … then … B A,
round after round, so that a slow moment of the machine falls on every value. Reports each value's
median target tokens/s, its ratio to the first value (the baseline), and how many rounds it lost.

    PYTHONPATH=benchmarks python benchmarks/experiments/step_ab.py --lever adam --json benchmarks/results/speed/step_ab_adam.json
    PYTHONPATH=benchmarks python benchmarks/experiments/step_ab.py --lever dropout_mask --json benchmarks/results/speed/step_ab_dropout_mask.json
    PYTHONPATH=benchmarks python benchmarks/experiments/step_ab.py --lever dropout_mask configs/multi30k_transformer_fast.yaml \\
        --json benchmarks/results/speed/step_ab_dropout_mask_transformer.json
    PYTHONPATH=benchmarks python benchmarks/experiments/step_ab.py --lever cpu_bf16 configs/multi30k_rnn_fast.yaml --batches 20 --rounds 4 \\
        --json benchmarks/results/speed/step_ab_cpu_bf16.json

Levers:
- ``adam``: ``training.adam`` for_loop (what runs before the option used on a CPU), foreach, fused.
  Also times the optimizer's step alone, the median of 100 after 5.
- ``dropout_mask``: ``model.dropout_mask`` bernoulli, bytes.
- ``bf16_attention``: the Transformer's attention in bf16 on a CPU, in torch's fused kernel or in
  attnmt's float32 plain steps (``attnmt.attention.functional``).
- ``cpu_bf16``: a bf16 recipe's steps in bf16 (on) or in fp32 (off): what falling back to fp32 on a
  CPU without bf16 arithmetic gives (``attnmt.runtime.precision``; also records the CPU's flags).

Needs the Multi30k files (``ATTNMT_DATA_DIR``); trains each recipe's tokenizers in a temporary
folder first. Run it on an otherwise idle machine. Prints a table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from attnmt.attention import functional
from attnmt.data import batch_indices, collate
from attnmt.models.dropout import Dropout
from attnmt.runs.run_config import load_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.precision import CPU_BF16_VARIABLE, cpu_has_bf16
from attnmt.runtime.tables import format_table
from attnmt.training.builder import build_training
from attnmt.training.distributed import DistributedContext
from attnmt.training.optimizer import build_adam, load_adam_state
from attnmt.training.trainer import train_step

from common import portable

PROJECT = Path(__file__).resolve().parents[2]


def use_adam(parts, form: str) -> None:
    """Adam in ``form`` from here on, with the state the optimizer had."""
    state = parts.optimizer.state_dict()
    parts.optimizer = build_adam(parts.model, parts.config.training.lr, form, parts.config.training.weight_decay)
    load_adam_state(parts.optimizer, state, form)


def use_dropout_mask(parts, mask: str) -> None:
    """Every dropout of the translator (not the attention weights') draws ``mask`` from here on."""
    parts.model.config.dropout_mask = mask
    for module in parts.model.modules():
        if isinstance(module, Dropout):
            module.mask = mask


_PLAIN_CPU_BF16_ATTENTION = functional._cpu_bf16_attention


def _torch_fused_attention(q, k, v, mask, dropout_p, scale):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)


def use_bf16_attention(parts, kernel: str) -> None:
    """Multi-head attention in bf16 on the CPU runs in torch's fused kernel ("fused", what every run
    used before) or in attnmt's float32 plain steps ("plain", ``functional._cpu_bf16_attention``)."""
    functional._cpu_bf16_attention = _torch_fused_attention if kernel == "fused" else _PLAIN_CPU_BF16_ATTENTION


def use_cpu_bf16(parts, value: str) -> None:
    """``precision: bf16`` runs in bf16 on this CPU ("on", emulated where it has no bf16 arithmetic)
    or falls back to fp32 ("off"), as $ATTNMT_CPU_BF16 says (``attnmt.runtime.precision``)."""
    os.environ[CPU_BF16_VARIABLE] = value


LEVERS = {"adam": (("for_loop", "foreach", "fused"), use_adam),
          "dropout_mask": (("bernoulli", "bytes"), use_dropout_mask),
          "cpu_bf16": (("on", "off"), use_cpu_bf16),
          "bf16_attention": (("fused", "plain"), use_bf16_attention)}


def optimizer_step_ms(parts, forms: tuple[str, ...], calls: int = 100) -> dict[str, float]:
    """Milliseconds of one ``optimizer.step()`` in each form, on gradients of the model's size."""
    for parameter in parts.model.parameters():
        parameter.grad = torch.randn_like(parameter) * 1e-3
    timings = {}
    for form in forms:
        use_adam(parts, form)
        for _ in range(5):
            parts.optimizer.step()
        started = time.perf_counter()
        for _ in range(calls):
            parts.optimizer.step()
        timings[form] = round((time.perf_counter() - started) / calls * 1e3, 3)
    return timings


def measure(config_path: str, lever: str, batches_per_round: int, rounds: int, folder: Path) -> dict:
    values, switch = LEVERS[lever]
    config = load_config(PROJECT / config_path)
    if lever == "dropout_mask" and not hasattr(config.model, "dropout_mask"):
        raise SystemExit(f"step_ab.py: {config_path}: its model has no dropout_mask option")
    parts = build_training(config, folder / "run", False, DistributedContext(), lambda message: None)
    model, training = parts.model, config.training
    model.train()
    positions = batch_indices([len(ids) for ids in parts.train_src], [len(ids) for ids in parts.train_tgt],
                              max_tokens=config.data.max_tokens, shuffle=True, seed=training.seed, epoch=0)
    batches = [collate(parts.train_src, parts.train_tgt, indices) for indices in positions[:batches_per_round + 10]]

    def step(batch) -> None:
        train_step(parts, batch, int(batch.tgt_mask.sum()))  # the trainer's own step

    for batch in batches[:10]:  # warm-up: the allocator and oneDNN's kernels
        step(batch)
    timed = batches[10:]
    tokens = sum(int(batch.tgt_mask.sum()) for batch in timed)
    speeds: dict[str, list[float]] = {value: [] for value in values}
    for round_index in range(rounds):
        for value in values if round_index % 2 == 0 else values[::-1]:
            switch(parts, value)
            started = time.perf_counter()
            for batch in timed:
                step(batch)
            speeds[value].append(tokens / (time.perf_counter() - started))
    baseline = values[0]
    medians = {value: statistics.median(speeds[value]) for value in values}
    result = {
        "config": config_path, "lever": lever, "baseline": baseline, "precision": training.precision,
        "parameters": sum(p.numel() for p in model.parameters()),
        "batches_per_round": len(timed), "target_tokens_per_round": tokens, "rounds": rounds,
        "tokens_per_s": {value: [round(v) for v in speeds[value]] for value in values},
        "tokens_per_s_median": {value: round(medians[value]) for value in values},
        "speedup": {value: round(medians[value] / medians[baseline], 3) for value in values},
        "rounds_slower_than_baseline": {value: sum(v < b for v, b in zip(speeds[value], speeds[baseline]))
                                        for value in values[1:]},
    }
    if lever == "adam":
        result["optimizer_step_ms"] = optimizer_step_ms(parts, values)
    if lever == "cpu_bf16":
        os.environ.pop(CPU_BF16_VARIABLE, None)
        result.update(cpu_capability=torch.backends.cpu.get_cpu_capability(), cpu_flags_have_bf16=cpu_has_bf16())
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", default=["configs/multi30k_rnn_15min.yaml"],
                        help="recipes (default: the fifteen-minute RNN)")
    parser.add_argument("--lever", choices=sorted(LEVERS), required=True)
    parser.add_argument("--batches", type=int, default=50, help="batches a round trains on (default 50)")
    parser.add_argument("--rounds", type=int, default=12, help="rounds of each value (default 12)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for config_path in args.configs:
        with tempfile.TemporaryDirectory(prefix="attnmt-step-ab-") as folder:
            print(f"{config_path}: {args.rounds} rounds of {args.batches} steps with each {args.lever} ...",
                  file=sys.stderr)
            results.append(measure(config_path, args.lever, args.batches, args.rounds, Path(folder)))
    rows = []
    for r in results:
        for value, median in r["tokens_per_s_median"].items():
            lost = r["rounds_slower_than_baseline"].get(value)
            rows.append([r["config"], value, median, f"{r['speedup'][value]:.3f}x",
                         "-" if lost is None else f"{lost}/{r['rounds']}",
                         r.get("optimizer_step_ms", {}).get(value, "-")])
    print(format_table(["recipe", args.lever, "target tok/s", "against the first", "rounds slower",
                        "optimizer step ms"], rows))
    write_text_atomic(args.json, json.dumps(portable({
        "threads": args.threads, "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
        "results": results,
    }), indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
