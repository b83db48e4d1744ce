"""Does the LSTM of the fast recipe run in bf16 under CPU autocast, and what would a bf16 LSTM add?

The two LSTMs of ``configs/multi30k_rnn_fast.yaml`` at one of its batches (512 tokens: 38 sentences
of 14 positions): the bidirectional encoder (128 → 2 × 128) and the decoder (128 → 256), forward
and backward, three ways:

- ``fp32``: float32 weights and inputs;
- ``autocast bf16``: float32 weights under ``torch.autocast("cpu", dtype=torch.bfloat16)``, what
  attnmt's ``precision: bf16`` runs;
- ``bf16 weights``: the module and its input cast to bfloat16 (no float32 master weights).

For each: the output's dtype, the LSTM operators the profiler saw, and the median milliseconds of
``--repeats`` calls after a warm-up, on ``--threads`` threads. Run it on an otherwise idle machine.

    PYTHONPATH=benchmarks python benchmarks/experiments/lstm_precision.py --json benchmarks/results/speed/lstm_precision.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

LSTMS = {  # name: (input size, hidden size, bidirectional), as in multi30k_rnn_fast.yaml
    "encoder": (128, 128, True),
    "decoder": (128, 256, False),
}
BATCH, LENGTH = 38, 14


def run_once(lstm: torch.nn.LSTM, x: torch.Tensor, autocast: bool) -> torch.dtype:
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with context:
        output, _ = lstm(x)
    output.float().sum().backward()
    return output.dtype


def measure(name: str, way: str, repeats: int) -> dict:
    torch.manual_seed(0)
    input_size, hidden_size, bidirectional = LSTMS[name]
    lstm = torch.nn.LSTM(input_size, hidden_size, batch_first=True, bidirectional=bidirectional)
    x = torch.randn(BATCH, LENGTH, input_size)
    if way == "bf16 weights":
        lstm, x = lstm.to(torch.bfloat16), x.to(torch.bfloat16)
    x.requires_grad_()
    autocast = way == "autocast bf16"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiled:
        dtype = run_once(lstm, x, autocast)
    operators = sorted({e.key for e in profiled.key_averages() if e.key.startswith("aten::") and "rnn" in e.key})
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run_once(lstm, x, autocast)
        times.append(time.perf_counter() - started)
    return {"lstm": name, "way": way, "output_dtype": str(dtype).removeprefix("torch."),
            "operators": operators, "ms_median": statistics.median(times) * 1e3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", required=True, help="where to write the results")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results, rows = [], []
    for name in LSTMS:
        by_way = {way: measure(name, way, args.repeats) for way in ("fp32", "autocast bf16", "bf16 weights")}
        for way, result in by_way.items():
            result["speedup_over_fp32"] = by_way["fp32"]["ms_median"] / result["ms_median"]
            results.append(result)
            rows.append([name, way, result["output_dtype"], " ".join(result["operators"]), result["ms_median"],
                         f"{result['speedup_over_fp32']:.2f}×"])
    print(format_table(["LSTM", "way", "output", "operators", "ms, forward + backward", "against fp32"], rows))
    record = {"question": "does the fast recipe's LSTM run in bf16 under CPU autocast?", "torch": torch.__version__,
              "machine": platform.machine(), "threads": args.threads, "batch": [BATCH, LENGTH],
              "repeats": args.repeats, "results": results}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(args.json), json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
