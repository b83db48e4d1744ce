"""How fast (and how small) is attnmt's attention, next to a baseline measured in the same run?

    python benchmarks/attention.py [--quick] [--threads N] [--output benchmarks/results/mechanisms/attention.json]

Five questions, each answered as a ratio contender / baseline (lower is better):

1. ``functional.scaled_dot_product_attention`` without weights vs ``F.scaled_dot_product_attention``
   — the wrapper (checks, mask handling) should cost almost nothing: target ≤ 1.10×.
2. the same with ``need_weights=True`` vs a naive torch matmul–softmax–matmul that divides the
   scores by √d — the explicit path should be no slower: target ≤ 1.00×.
3. ``MultiHeadAttention`` forward + backward vs ``torch.nn.MultiheadAttention`` (E = 512, 8 heads,
   self-attention, need_weights=False on both): target ≤ 1.15×.
4. the NumPy reference (stable softmax) vs a naive NumPy version (no max
   subtraction), float64: the price of numerical safety (no target).
5. ``reference.chunked_attention`` vs ``reference.scaled_dot_product_attention`` at L = 16,384,
   d = 64 in float32: peak memory from tracemalloc (target ≤ 0.10×) and time (no target).

Shapes (B, heads, L, d): (64, 1, 5, 64), (32, 8, 128, 64), (8, 8, 1024, 64), (1, 8, 4096, 64).
Timings are medians over repeats; the two contenders alternate (A B, then B A, ...) so that load
from other processes hits both alike, and the ratio is the median of the back-to-back ratios.
On one thread (the default) the clock is the process's CPU time, else wall time.
``--quick`` uses fewer repeats, skips the largest NumPy shape and runs question 5 at L = 4,096
with chunks of 256 (the same 16 blocks per row). Torch and NumPy run on ``--threads`` threads,
1 by default (see DEFAULT_THREADS); the JSON records the thread count and the load average.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from functools import partial
from pathlib import Path


def _threads_from_argv(argv: list[str]) -> int:
    """The --threads value, read before NumPy is imported (its BLAS fixes its pool at import)."""
    for index, argument in enumerate(argv):
        if argument.startswith("--threads="):
            return int(argument.split("=", 1)[1])
        if argument == "--threads" and index + 1 < len(argv):
            return int(argv[index + 1])
    return DEFAULT_THREADS


# One thread by default: the ratios are what this script reports, and on a machine whose cores
# are busy with other work, multi-threaded kernels spend their time waiting for one another
# (OpenMP barriers), which turns timings into noise. --threads 0 keeps the libraries' defaults.
DEFAULT_THREADS = 1
THREADS = _threads_from_argv(sys.argv[1:]) if __name__ == "__main__" else 0
if THREADS > 0:
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(THREADS)

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from attnmt.attention import reference
from attnmt.attention.functional import scaled_dot_product_attention
from attnmt.attention.multihead import MultiHeadAttention

SHAPES = [(64, 1, 5, 64), (32, 8, 128, 64), (8, 8, 1024, 64), (1, 8, 4096, 64)]
RESULTS = Path(__file__).resolve().parent / "results" / "mechanisms" / "attention.json"


# --- timing --------------------------------------------------------------------------------------


# On one thread the clock is the CPU time of this process: time during which other processes
# hold the core is not counted, which keeps the ratios steady on a shared machine. With more
# threads CPU time would also count threads spinning while they wait, so wall time is used.
CLOCK = time.process_time if THREADS == 1 else time.perf_counter


def _time_calls(function, calls: int) -> float:
    start = CLOCK()
    for _ in range(calls):
        function()
    return (CLOCK() - start) / calls


def compare(contender, baseline, budget_seconds: float, max_repeats: int) -> dict:
    """Median seconds per call of both and the median of their back-to-back ratios.

    Calls shorter than ~10 ms are timed in groups so that each sample lasts about 10 ms.
    """
    gc.collect()
    contender(), baseline()  # warm-up: allocator, kernels, lazy initialisation
    single = max(_time_calls(contender, 1), _time_calls(baseline, 1), 1e-7)
    calls = max(1, int(0.01 / single))
    repeats = max(3, min(max_repeats, int(budget_seconds / (2 * single * calls))))
    contender_times, baseline_times = [], []
    for repeat in range(repeats):
        if repeat % 2 == 0:
            contender_times.append(_time_calls(contender, calls))
            baseline_times.append(_time_calls(baseline, calls))
        else:
            baseline_times.append(_time_calls(baseline, calls))
            contender_times.append(_time_calls(contender, calls))
    ratios = [c / b for c, b in zip(contender_times, baseline_times)]
    return {
        "contender_ms": statistics.median(contender_times) * 1e3,
        "baseline_ms": statistics.median(baseline_times) * 1e3,
        "ratio": statistics.median(ratios),
        "repeats": repeats,
        "calls_per_repeat": calls,
    }


def row(question: str, shape: str, contender: str, baseline: str, result: dict, target: float | None,
        note: str = "") -> dict:
    met = None if target is None else bool(result["ratio"] <= target)
    return {"question": question, "shape": shape, "contender": contender, "baseline": baseline,
            **result, "target": target, "met": met, "note": note}


# --- the contenders --------------------------------------------------------------------------


def naive_torch_attention(q, k, v):
    """matmul, divide by √d, softmax, matmul: the textbook line."""
    weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1]), dim=-1)
    return torch.matmul(weights, v), weights


def naive_numpy_attention(q, k, v):
    """The naive way: exp without subtracting the maximum (fast, overflows for big logits)."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(k.shape[-1])
    exponentials = np.exp(scores)
    weights = exponentials / np.expand_dims(np.sum(exponentials, axis=-1), -1)
    return np.matmul(weights, v), weights


def bench_functional(shapes, budget, max_repeats, progress) -> list[dict]:
    rows = []
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for shape in shapes:
            q, k, v = (torch.randn(shape, generator=generator) for _ in range(3))
            label = str(shape)
            result = compare(partial(scaled_dot_product_attention, q, k, v),
                             partial(F.scaled_dot_product_attention, q, k, v), budget, max_repeats)
            rows.append(row("sdpa, no weights", label, "attnmt fused", "F.scaled_dot_product_attention",
                            result, 1.10))
            progress.update()
            result = compare(partial(scaled_dot_product_attention, q, k, v, need_weights=True),
                             partial(naive_torch_attention, q, k, v), budget, max_repeats)
            rows.append(row("sdpa, with weights", label, "attnmt explicit", "naive matmul-softmax-matmul",
                            result, 1.00))
            progress.update()
            del q, k, v
    return rows


def bench_multihead(shapes, budget, max_repeats, progress) -> list[dict]:
    rows = []
    embed_dim, heads = 512, 8
    torch.manual_seed(0)
    baseline_module = nn.MultiheadAttention(embed_dim, heads, batch_first=True)
    ours = MultiHeadAttention.from_torch(baseline_module)
    for batch, _, length, _ in shapes:
        x = torch.randn(batch, length, embed_dim, requires_grad=True)
        grad_output = torch.randn(batch, length, embed_dim)

        def forward_backward(module, x, grad_output):
            output, _ = module(x, x, x, need_weights=False)
            torch.autograd.grad(output, [x, *module.parameters()], grad_output)

        result = compare(partial(forward_backward, ours, x, grad_output),
                         partial(forward_backward, baseline_module, x, grad_output), budget, max_repeats)
        rows.append(row("MultiHeadAttention fwd+bwd", f"B={batch} L={length} E={embed_dim} h={heads}",
                        "attnmt MultiHeadAttention", "nn.MultiheadAttention", result, 1.15,
                        "self-attention, need_weights=False"))
        progress.update()
    return rows


def bench_numpy(shapes, budget, max_repeats, progress) -> list[dict]:
    rows = []
    rng = np.random.default_rng(0)
    for shape in shapes:
        q, k, v = (rng.normal(size=shape) for _ in range(3))
        result = compare(partial(reference.scaled_dot_product_attention, q, k, v),
                         partial(naive_numpy_attention, q, k, v), budget, max_repeats)
        rows.append(row("NumPy reference", str(shape), "reference (stable softmax)",
                        "naive NumPy (no max subtracted)", result, None, "float64"))
        progress.update()
        del q, k, v
    return rows


def _peak_bytes(function) -> tuple[int, float]:
    """Peak memory that NumPy allocated during ``function()`` above what was live before, and the time."""
    gc.collect()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    start = time.perf_counter()
    function()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak - before, seconds


def bench_chunked(length, chunk, repeats, progress) -> list[dict]:
    d = 64
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(length, d)).astype(np.float32) for _ in range(3))
    chunked_output = reference.chunked_attention(q, k, v, chunk_size=chunk)
    reference_output, _ = reference.scaled_dot_product_attention(q, k, v)
    max_difference = float(np.abs(chunked_output - reference_output).max())
    del chunked_output, reference_output

    chunked_peak, _ = _peak_bytes(lambda: reference.chunked_attention(q, k, v, chunk_size=chunk))
    reference_peak, _ = _peak_bytes(lambda: reference.scaled_dot_product_attention(q, k, v))
    chunked_times, reference_times = [], []
    for repeat in range(repeats):  # alternate the order, as compare() does
        pair = [(chunked_times, lambda: reference.chunked_attention(q, k, v, chunk_size=chunk)),
                (reference_times, lambda: reference.scaled_dot_product_attention(q, k, v))]
        for times, function in pair if repeat % 2 == 0 else pair[::-1]:
            gc.collect()
            times.append(_time_calls(function, 1))
    progress.update()
    shape = f"L={length} d={d} chunk={chunk}"
    note = f"float32; max |chunked - reference| = {max_difference:.1e}"
    memory = {"contender_ms": None, "baseline_ms": None, "contender_mib": chunked_peak / 2**20,
              "baseline_mib": reference_peak / 2**20, "ratio": chunked_peak / reference_peak,
              "repeats": 1, "calls_per_repeat": 1}
    timing = {"contender_ms": statistics.median(chunked_times) * 1e3,
              "baseline_ms": statistics.median(reference_times) * 1e3,
              "ratio": statistics.median(c / r for c, r in zip(chunked_times, reference_times)),
              "repeats": repeats, "calls_per_repeat": 1}
    return [
        row("chunked attention: peak memory", shape, "chunked_attention", "reference", memory, 0.10, note),
        row("chunked attention: time", shape, "chunked_attention", "reference", timing, None, note),
    ]


# --- output ----------------------------------------------------------------------------------


def format_table(rows: list[dict]) -> str:
    header = ["question", "shape", "contender", "baseline", "ratio", "target", "met"]
    lines = []
    for r in rows:
        if r.get("contender_mib") is not None:
            contender, baseline = f"{r['contender_mib']:.1f} MiB", f"{r['baseline_mib']:.1f} MiB"
        else:
            contender, baseline = f"{r['contender_ms']:.3f} ms", f"{r['baseline_ms']:.3f} ms"
        target = "—" if r["target"] is None else f"≤ {r['target']:.2f}×"
        met = "—" if r["met"] is None else ("yes" if r["met"] else "NO")
        lines.append([r["question"], r["shape"], contender, baseline, f"{r['ratio']:.3f}×", target, met])
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines)]

    def render(cells) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([render(header), render(["-" * w for w in widths]), *map(render, lines)])


def write_json_atomically(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=2)
            file.write("\n")
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller chunked case")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON file (default {RESULTS})")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="threads for torch and NumPy's BLAS (default 1; 0 = the libraries' default)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    budget, max_repeats = (1.0, 7) if args.quick else (4.0, 21)
    numpy_shapes = SHAPES[:3] if args.quick else SHAPES
    # --quick keeps 16 key blocks per row, so the memory ratio means the same thing.
    chunked_length, chunk_size, chunked_repeats = (4096, 256, 3) if args.quick else (16384, 1024, 3)
    started = time.time()
    load_before = os.getloadavg()
    rows: list[dict] = []
    total = 2 * len(SHAPES) + len(SHAPES) + len(numpy_shapes) + 1
    with tqdm(total=total, desc="attention benchmarks", file=sys.stderr) as progress:
        rows += bench_functional(SHAPES, budget, max_repeats, progress)
        rows += bench_multihead(SHAPES, budget, max_repeats, progress)
        rows += bench_numpy(numpy_shapes, budget, max_repeats, progress)
        rows += bench_chunked(chunked_length, chunk_size, chunked_repeats, progress)

    print(format_table(rows))
    data = {
        "benchmark": "attention",
        "quick": args.quick,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "clock": "process CPU time" if CLOCK is time.process_time else "wall time",
        "blas_threads_requested": args.threads or "library default",
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "seconds": round(time.time() - started, 1),
        "rows": rows,
    }
    write_json_atomically(data, args.output)
    print(f"\nwrote {args.output}  ({data['seconds']} s; {data['clock']}, {torch.get_num_threads()} "
          f"thread(s); load average {load_before[0]:.1f} → {data['load_average_after'][0]:.1f} "
          f"on {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
