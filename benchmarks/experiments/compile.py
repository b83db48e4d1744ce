"""Does ``torch.compile`` speed up training here? Measured, not assumed.

The Transformer recipe's model (and the RNN recipe's) trained on random Multi30k-sized batches
(lengths 8–25, max_tokens 2048, vocabulary 8000), eager and compiled (``torch.compile(model,
dynamic=True)``: batch shapes change every step). Reported: the seconds until the first five steps
are done (compilation happens there) and the tokens/s of the next ``--steps`` steps. Both runs use
the same batches, weights and order.

    PYTHONPATH=benchmarks python benchmarks/experiments/compile.py                    # both models, writes benchmarks/results/speed/compile.json
    PYTHONPATH=benchmarks python benchmarks/experiments/compile.py --models transformer --steps 10
    PYTHONPATH=benchmarks python benchmarks/experiments/compile.py --device cuda --precision bf16 --max-tokens 4096 --steps 200 \
        --output benchmarks/results/gpu/compile.json   # on a GPU: TF32 on, as attnmt trains there
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import torch
from gpu import synchronize

from attnmt.data import make_batches
from attnmt.models import build_model
from attnmt.runtime.device import enable_tf32
from attnmt.runtime.tables import format_table
from attnmt.training import backward_on_batch

RESULTS = Path(__file__).resolve().parents[1] / "results" / "speed" / "compile.json"
MODELS = {
    "transformer": {"type": "transformer", "d_model": 256, "heads": 4, "ffn_dim": 1024, "encoder_layers": 3,
                    "decoder_layers": 3, "dropout": 0.1},
    "rnn": {"type": "rnn", "embed_dim": 256, "hidden_dim": 512, "attention": "scaled_dot", "tie_embeddings": True},
}
WARM_UP = 5


def measure(name: str, compiled: bool, steps: int, device: torch.device, precision: str, max_tokens: int) -> dict:
    torch.manual_seed(0)
    model = build_model(dict(MODELS[name]), 8000, 8000).to(device)
    rng = random.Random(0)
    src = [[rng.randrange(4, 8000) for _ in range(rng.randint(8, 25))] for _ in range(3000)]
    tgt = [[rng.randrange(4, 8000) for _ in range(rng.randint(8, 25))] for _ in range(3000)]
    batches = make_batches(src, tgt, max_tokens=max_tokens, shuffle=True, seed=1)[: WARM_UP + steps]
    batches = [batch.to(device) for batch in batches]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    runner = torch.compile(model, dynamic=True) if compiled else model
    started = time.perf_counter()
    tokens = 0
    for index, batch in enumerate(batches):
        if index == WARM_UP:
            synchronize(device)
            warmed, tokens = time.perf_counter(), 0
        optimizer.zero_grad(set_to_none=True)
        backward_on_batch(runner, batch, 0.1, batch.num_tgt_tokens, precision=precision)
        optimizer.step()
        tokens += batch.num_tgt_tokens
    synchronize(device)
    finished = time.perf_counter()
    return {"model": name, "compiled": compiled, "first_steps_seconds": warmed - started,
            "tokens_per_s": tokens / (finished - warmed), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--steps", type=int, default=25, help="timed steps after the first five (default 25)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--max-tokens", type=int, default=2048, help="batch size in tokens (default 2048)")
    args = parser.parse_args()
    device = torch.device(args.device)
    enable_tf32(device)
    rows, results = [], []
    for name in args.models:
        eager = measure(name, False, args.steps, device, args.precision, args.max_tokens)
        compiled = measure(name, True, args.steps, device, args.precision, args.max_tokens)
        results += [eager, compiled]
        rows.append([name, eager["first_steps_seconds"], compiled["first_steps_seconds"], eager["tokens_per_s"],
                     compiled["tokens_per_s"], f"{compiled['tokens_per_s'] / eager['tokens_per_s']:.2f}×"])
    print(format_table(["model", f"first {WARM_UP} steps, eager s", f"first {WARM_UP} steps, compiled s",
                        "eager tokens/s", "compiled tokens/s", "compiled / eager"], rows))
    record = {"question": "training tokens/s with torch.compile(model, dynamic=True) against eager",
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "precision": args.precision, "max_tokens": args.max_tokens, "threads": torch.get_num_threads(),
              "torch": torch.__version__,
              "machine": platform.machine(), "results": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
