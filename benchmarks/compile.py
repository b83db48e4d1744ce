"""Does ``torch.compile`` speed up training here? Measured, not assumed.

The Transformer recipe's model (and the RNN recipe's) trained on random Multi30k-sized batches
(lengths 8–25, max_tokens 2048, vocabulary 8000), eager and compiled (``torch.compile(model,
dynamic=True)``: batch shapes change every step). Reported: the seconds until the first five steps
are done (compilation happens there) and the tokens/s of the next ``--steps`` steps. Both runs use
the same batches, weights and order.

    python benchmarks/compile.py                    # both models, writes benchmarks/results/compile.json
    python benchmarks/compile.py --models transformer --steps 10
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import torch

from attnmt.data import make_batches
from attnmt.models import build_model
from attnmt.runtime.tables import format_table
from attnmt.training import backward_on_batch

RESULTS = Path(__file__).resolve().parent / "results" / "compile.json"
MODELS = {
    "transformer": {"type": "transformer", "d_model": 256, "heads": 4, "ffn_dim": 1024, "encoder_layers": 3,
                    "decoder_layers": 3, "dropout": 0.1},
    "rnn": {"type": "rnn", "embed_dim": 256, "hidden_dim": 512, "attention": "scaled_dot", "tie_embeddings": True},
}
WARM_UP = 5


def measure(name: str, compiled: bool, steps: int) -> dict:
    torch.manual_seed(0)
    model = build_model(dict(MODELS[name]), 8000, 8000)
    rng = random.Random(0)
    src = [[rng.randrange(4, 8000) for _ in range(rng.randint(8, 25))] for _ in range(3000)]
    tgt = [[rng.randrange(4, 8000) for _ in range(rng.randint(8, 25))] for _ in range(3000)]
    batches = make_batches(src, tgt, max_tokens=2048, shuffle=True, seed=1)[: WARM_UP + steps]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    runner = torch.compile(model, dynamic=True) if compiled else model
    started = time.perf_counter()
    tokens = 0
    for index, batch in enumerate(batches):
        if index == WARM_UP:
            warmed, tokens = time.perf_counter(), 0
        optimizer.zero_grad(set_to_none=True)
        backward_on_batch(runner, batch, 0.1, batch.num_tgt_tokens)
        optimizer.step()
        tokens += batch.num_tgt_tokens
    finished = time.perf_counter()
    return {"model": name, "compiled": compiled, "first_steps_seconds": warmed - started,
            "tokens_per_s": tokens / (finished - warmed), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--steps", type=int, default=25, help="timed steps after the first five (default 25)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows, results = [], []
    for name in args.models:
        eager = measure(name, False, args.steps)
        compiled = measure(name, True, args.steps)
        results += [eager, compiled]
        rows.append([name, eager["first_steps_seconds"], compiled["first_steps_seconds"], eager["tokens_per_s"],
                     compiled["tokens_per_s"], f"{compiled['tokens_per_s'] / eager['tokens_per_s']:.2f}×"])
    print(format_table(["model", f"first {WARM_UP} steps, eager s", f"first {WARM_UP} steps, compiled s",
                        "eager tokens/s", "compiled tokens/s", "compiled / eager"], rows))
    record = {"question": "training tokens/s with torch.compile(model, dynamic=True) against eager",
              "device": "cpu", "threads": torch.get_num_threads(), "torch": torch.__version__,
              "machine": platform.machine(), "results": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
