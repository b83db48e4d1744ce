"""What does a dropout mask cost on a CPU, and how far below it could a cheaper mask go?

The training profiles (``benchmarks/experiments/utilisation.py``) put ``bernoulli_`` among the largest operators
of a step: 0.08 of the fast RNN recipe's and 0.26 of the Transformer's. Here, for the activation
shapes of those recipes' dropout calls, the microseconds of one forward dropout
``y = x · m / (1 − p)`` with the mask m drawn in four ways:

- ``F.dropout`` (what attnmt uses: ``bernoulli_`` on a float tensor);
- ``rand_like(x) >= p`` (one float draw per element, then a comparison);
- ``bernoulli_`` on a bool tensor;
- one random byte per element, kept when it is ≥ round(256 p) (the keep probability rounds to a
  multiple of 1/256, and the scale uses that probability), a draw per byte;
- the same bytes eight to a 64-bit draw: ``model.dropout_mask: bytes`` (``attnmt.models.dropout``).

    PYTHONPATH=benchmarks python benchmarks/experiments/dropout_masks.py --json benchmarks/results/speed/dropout_masks.json

Two threads, as training uses. Each timing is the median of ``--rounds`` rounds of ``--calls``
calls. Prints a table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnmt.models.dropout import byte_dropout
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

P = 0.2
KEEP_BYTE = round(P * 256)  # bytes below this are dropped

MASKS = {
    "F.dropout (bernoulli_)": lambda x: F.dropout(x, P, True),
    "rand_like >= p": lambda x: x * (torch.rand_like(x) >= P) * (1 / (1 - P)),
    "bernoulli_ on bool": lambda x: x * torch.empty_like(x, dtype=torch.bool).bernoulli_(1 - P) * (1 / (1 - P)),
    "one random byte": lambda x: (x * (torch.empty_like(x, dtype=torch.uint8).random_() >= KEEP_BYTE)
                                  * (256 / (256 - KEEP_BYTE))),
    "bytes, eight a draw (attnmt)": lambda x: byte_dropout(x, P),
}
# [tokens, features] of the dropout calls: fast RNN recipe (512-token batches, embeddings 128 and
# readout 256) and Transformer (1,024-token batches, d_model 256 and its feed-forward 1,024).
SHAPES = {"fast RNN, embeddings": (512, 128), "fast RNN, readout": (512, 256),
          "Transformer, d_model": (1024, 256), "Transformer, feed-forward": (1024, 1024)}


def microseconds(mask, x: torch.Tensor, calls: int, rounds: int) -> float:
    for _ in range(10):
        mask(x)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            mask(x)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "speed" / "dropout_masks.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows, results = [], []
    for shape_name, shape in SHAPES.items():
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(shape, dtype=dtype)
            timings = {name: round(microseconds(mask, x, args.calls, args.rounds), 1) for name, mask in MASKS.items()}
            base = timings["F.dropout (bernoulli_)"]
            results.append({"shape": shape_name, "size": list(shape), "dtype": str(dtype).removeprefix("torch."),
                            "microseconds": timings,
                            "speedup_of_bytes": round(base / timings["one random byte"], 2),
                            "speedup_of_attnmt_bytes": round(base / timings["bytes, eight a draw (attnmt)"], 2)})
            rows.append([shape_name, "x".join(map(str, shape)), results[-1]["dtype"], *timings.values(),
                         f"{results[-1]['speedup_of_bytes']:.2f}x", f"{results[-1]['speedup_of_attnmt_bytes']:.2f}x"])
    print(format_table(["activations", "shape", "dtype", *[f"{name} us" for name in MASKS], "bytes vs F.dropout",
                        "attnmt's bytes vs F.dropout"],
                       rows))
    write_text_atomic(args.json, json.dumps({
        "p": P, "threads": args.threads, "calls": args.calls, "rounds": args.rounds,
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(), "results": results,
    }, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
