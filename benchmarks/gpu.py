"""Training and decoding speed on a CUDA GPU, and the GPU recipes' results in one file.

Three steps, each its own command so that a short lease of a GPU can run them in one script
(benchmarks/gpu_session.sh) and this machine can put the pieces together afterwards:

``speed``   For each recipe and precision (fp32, which attnmt runs with TF32 matrix products on
            CUDA; bf16 and fp16 under autocast, fp16 with a GradScaler): training target tokens/s
            over ``--steps`` steps of the recipe's real Multi30k batches, taken exactly as the
            trainer takes them (collate, pinned copy, forward, backward, clip, Adam, the average),
            timed from one device synchronisation to the next. Then ``--split-steps`` steps with a
            synchronisation between the parts of a step, to show where a step's time goes (data,
            forward, backward, optimiser), and one validation as the trainer runs it.
``decode``  Beam-5 decoding of a run's test split (the 1,000 sentences of test_2016_flickr) at
            several batch sizes: the time of ``Translator.translate`` alone, median of ``--repeats``
            after one warm-up.
``report``  Puts the speed, decoding and recipe JSON files (benchmarks/recipe.py) into one file,
            benchmarks/results/gpu/gpu.json, and prints the tables.

    python benchmarks/gpu.py speed --json gpu_speed.json
    python benchmarks/gpu.py decode runs/rnn-gpu runs/transformer-gpu --json gpu_decode.json
    python benchmarks/gpu.py report --speed gpu_speed.json --decode gpu_decode.json \\
        --recipe rnn=rnn_gpu.json --recipe transformer=transformer_gpu.json --json benchmarks/results/gpu/gpu.json

``--device cpu`` runs ``speed`` and ``decode`` on the CPU, as a smoke test of the script.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from attnmt.data import batch_indices, collate
from attnmt.data.data_config import load_split
from attnmt.decoding.translator import Translator
from attnmt.evaluation.scores import likelihood_sums
from attnmt.models import build_model
from attnmt.models.common import count_parameters
from attnmt.runs.folder import data_of_run
from attnmt.runs.run_config import load_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.precision import grad_scaler
from attnmt.runtime.tables import format_table
from attnmt.training.averaging import WeightAverage
from attnmt.training.builder import build_training
from attnmt.training.distributed import DistributedContext
from attnmt.training.step import backward_on_batch
from attnmt.training.trainer import optimizer_update, train_step

from common import portable

PROJECT = Path(__file__).resolve().parents[1]
RECIPES = ["configs/multi30k_rnn_gpu.yaml", "configs/multi30k_transformer_gpu.yaml"]
PRECISIONS = ["fp32", "bf16", "fp16"]
PARTS = ["data", "forward and backward", "optimiser"]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_facts(device: torch.device) -> dict:
    """The GPU's name and memory, and the versions of torch, CUDA and cuDNN."""
    facts = {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda,
             "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
             "python": platform.python_version()}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        facts.update(name=properties.name, memory_gib=round(properties.total_memory / 2**30, 1),
                     multiprocessors=properties.multi_processor_count,
                     capability=f"{properties.major}.{properties.minor}")
    else:
        facts.update(name=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    return facts


class StepRunner:
    """One precision's model, Adam, GradScaler and weight average, in the trainer's parts, stepped
    by the trainer's own ``train_step``; ``batch``, ``gradients`` and ``update`` are its parts,
    each attnmt's own code, for timing them apart."""

    def __init__(self, config, parts, precision: str, device: torch.device):
        torch.manual_seed(config.training.seed)
        config = dataclasses.replace(config, training=dataclasses.replace(config.training, precision=precision))
        tokenizers = parts.tokenizers
        model = build_model(config.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size).to(device)
        model.train()
        decay = config.training.ema_decay
        self.parts = dataclasses.replace(
            parts, config=config, model=model, ddp_model=model,
            optimizer=torch.optim.Adam(model.parameters(), lr=config.training.lr),
            scaler=grad_scaler(precision, device.type),
            average=WeightAverage(model, decay) if decay is not None else None,
        )
        self.model, self.device = model, device

    def batch(self, indices):
        batch = collate(self.parts.train_src, self.parts.train_tgt, indices)
        pin = self.device.type == "cuda"
        return (batch.pin_memory() if pin else batch).to(self.device, non_blocking=pin)

    def gradients(self, batch) -> None:
        """Forward and backward, as ``train_step`` runs them."""
        training = self.parts.config.training
        self.parts.optimizer.zero_grad(set_to_none=True)
        backward_on_batch(self.model, batch, training.label_smoothing, int(batch.tgt_mask.sum()),
                          precision=training.precision, scaler=self.parts.scaler)

    def update(self) -> None:
        optimizer_update(self.parts)

    def step(self, indices) -> None:
        batch = self.batch(indices)
        train_step(self.parts, batch, int(batch.tgt_mask.sum()))


def epoch_batches(config, parts) -> list[list[int]]:
    return batch_indices([len(ids) for ids in parts.train_src], [len(ids) for ids in parts.train_tgt],
                         max_tokens=config.data.max_tokens, shuffle=True, seed=config.training.seed, epoch=0)


def target_tokens(parts, indices) -> int:
    return sum(len(parts.train_tgt[k]) + 1 for k in indices)  # + EOS, as the trainer counts


def timed(work: Callable[[], Any], device: torch.device, before: float = 0.0) -> tuple[Any, float]:
    """(what ``work()`` returns, ``before`` + its seconds, the device's queue drained at both ends)."""
    synchronize(device)
    started = time.perf_counter()
    result = work()
    synchronize(device)
    return result, before + time.perf_counter() - started


def measure_precision(config, parts, precision: str, device: torch.device, steps: int, split_steps: int) -> dict:
    """First a whole epoch of batches, timed: every batch shape is new to the GPU libraries then,
    as in a run's first epoch. Then ``steps`` of those batches again (shapes seen, as in the
    epochs after), timed; then ``split_steps`` more with a synchronisation between the parts."""
    runner = StepRunner(config, parts, precision, device)
    batches = epoch_batches(config, parts)
    profiled = min(5, len(batches) - 1)  # a step with a new shape, after the one-time set-up
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.type == "cuda" else [])]) \
            as profiler:
        for indices in batches[:profiled + 1]:
            runner.step(indices)
    _, first_seconds = timed(lambda: [runner.step(indices) for indices in batches[profiled + 1:]], device)
    first_tokens = sum(target_tokens(parts, indices) for indices in batches[profiled + 1:])
    again = (batches * (steps // len(batches) + 1))[:steps]
    _, seconds = timed(lambda: [runner.step(indices) for indices in again], device)
    tokens = sum(target_tokens(parts, indices) for indices in again)

    spent = dict.fromkeys(PARTS, 0.0)
    for indices in again[:split_steps]:
        batch, spent["data"] = timed(functools.partial(runner.batch, indices), device, spent["data"])
        _, spent["forward and backward"] = timed(functools.partial(runner.gradients, batch), device,
                                                 spent["forward and backward"])
        _, spent["optimiser"] = timed(runner.update, device, spent["optimiser"])
    split_total = sum(spent.values())
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    top = sorted(profiler.key_averages(), key=lambda event: -event.self_cpu_time_total)[:8]
    return {
        "precision": precision, "epoch_batches": len(batches),
        "first_epoch_target_tokens_per_s": round(first_tokens / first_seconds),
        "steps": steps, "seconds": round(seconds, 4),
        "target_tokens_per_s": round(tokens / seconds), "ms_per_step": round(1000 * seconds / steps, 2),
        "split_steps": split_steps,
        "split_ms_per_step": {name: round(1000 * value / split_steps, 3) for name, value in spent.items()},
        "split_shares": {name: round(value / split_total, 3) for name, value in spent.items()},
        "max_memory_gib": round(memory, 2) if memory is not None else None,
        "first_steps_top_cpu_ms": [[event.key, round(event.self_cpu_time_total / 1000, 2)] for event in top],
        "runner": runner,
    }


def validation_seconds(config, parts, runner: StepRunner, device: torch.device) -> dict:
    """One validation as the trainer runs it: perplexity on the whole validation set and greedy
    BLEU decoding of ``training.bleu_max_sentences`` sentences (the decoding alone is timed)."""
    model = runner.model
    model.eval()
    _, ppl_seconds = timed(lambda: likelihood_sums(model, parts.valid_batches), device)
    count = config.training.bleu_max_sentences
    count = len(parts.valid_corpus) if count is None else count
    translator = Translator(model, parts.tokenizers, run_config=config)
    _, greedy_seconds = timed(lambda: translator.translate(parts.valid_corpus.src[:count], beam=1), device)
    model.train()
    return {"perplexity_seconds": round(ppl_seconds, 3), "greedy_sentences": count,
            "greedy_seconds": round(greedy_seconds, 3)}


def speed(args) -> dict:
    device = torch.device(args.device)
    results = {"machine": device_facts(device), "recipes": []}
    with tempfile.TemporaryDirectory() as folder:
        for config_path in args.configs:
            config = load_config(PROJECT / config_path, set_options=[f"training.device={args.device}"])
            started = time.perf_counter()
            parts = build_training(config, Path(folder) / Path(config_path).stem, False, DistributedContext(),
                                   lambda message: print(f"  {message}", file=sys.stderr))
            setup_seconds = time.perf_counter() - started
            by_precision = []
            for precision in args.precisions:
                if precision == "fp16" and device.type == "cpu":  # PyTorch has no float16 LSTM on a CPU
                    print(f"{config_path} fp16: skipped on the CPU (no float16 kernels there; fp16 is for GPUs)",
                          file=sys.stderr)
                    by_precision.append({"precision": precision, "skipped": "no float16 kernels on a CPU"})
                    continue
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                measured = measure_precision(config, parts, precision, device, args.steps, args.split_steps)
                runner = measured.pop("runner")
                measured["validation"] = validation_seconds(config, parts, runner, device)
                by_precision.append(measured)
                print(f"{config_path} {precision}: {measured['target_tokens_per_s']:,} target tokens/s, "
                      f"{measured['ms_per_step']} ms/step (first epoch {measured['first_epoch_target_tokens_per_s']:,}"
                      f" tokens/s); slowest operators of the first steps: {measured['first_steps_top_cpu_ms'][:4]}",
                      file=sys.stderr)
                del runner
            results["recipes"].append({
                "config": config_path, "model": config.model.type, "max_tokens": config.data.max_tokens,
                "tf32": parts.tf32,  # fp32 runs its matrix products in TF32 where the GPU has it
                "parameters": count_parameters(parts.model, trainable_only=False),
                "setup_seconds": round(setup_seconds, 1), "by_precision": by_precision,
            })
            del parts
    return results


def decode(args) -> dict:
    device = torch.device(args.device)
    results = {"machine": device_facts(device), "runs": []}
    for run in args.runs:
        translator = Translator.load(run, device=args.device)
        assert translator.run_config is not None
        corpus = load_split(data_of_run(Path(run), translator.run_config.data), args.split)
        sources = list(corpus.src)
        by_batch = []
        for batch_size in args.batch_sizes:
            translator.translate(sources[:batch_size], beam=args.beam, batch_size=batch_size)  # warm-up
            search = functools.partial(translator.translate, sources, beam=args.beam, batch_size=batch_size)
            times = [timed(search, device)[1] for _ in range(args.repeats)]
            by_batch.append({"batch_size": batch_size, "seconds_median": round(statistics.median(times), 3),
                             "seconds": [round(t, 3) for t in times]})
            print(f"{run} beam {args.beam} batch {batch_size}: {statistics.median(times):.3f} s", file=sys.stderr)
        entry = {"run": run, "model": translator.run_config.model.type, "split": args.split,
                 "sentences": len(sources), "beam": args.beam, "precision": translator.precision,
                 "by_batch_size": by_batch}
        if args.count_syncs and device.type == "cuda":
            entry["host_reads"] = count_host_reads(translator, sources, args.beam, max(args.batch_sizes))
            print(f"{run}: {entry['host_reads']}", file=sys.stderr)
        results["runs"].append(entry)
    return results


def count_host_reads(translator: Translator, sources: list[str], beam: int, batch_size: int) -> dict:
    """How often a search waits for the GPU: PyTorch's sync debug mode warns at every operation
    that copies a value to the host (``.item()``, ``.tolist()``, ``bool(tensor)``, ``nonzero``);
    the warnings are counted over one translation of ``sources``, with the decoder steps."""
    model = translator.model
    decode_step = model.decode_step
    steps = 0

    def counted_step(*args, **kwargs):
        nonlocal steps
        steps += 1
        return decode_step(*args, **kwargs)

    model.decode_step = counted_step
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                translator.translate(sources, beam=beam, batch_size=batch_size)
            finally:
                torch.cuda.set_sync_debug_mode("default")
    finally:
        del model.decode_step  # the instance attribute; the class's method shows again
    reads = sum("synchroniz" in str(w.message) for w in caught)
    return {"batch_size": batch_size, "decoder_steps": steps, "host_reads": reads,
            "host_reads_per_step": round(reads / max(steps, 1), 2)}


def report(args) -> dict:
    speed_result = json.loads(Path(args.speed).read_text()) if args.speed else None
    decode_result = json.loads(Path(args.decode).read_text()) if args.decode else None
    recipes = {}
    for item in args.recipe:
        name, _, path = item.partition("=")
        recipe = json.loads(Path(path).read_text())
        training = recipe["training"]
        recipes[name] = {
            "config": recipe["config"], "parameters": recipe["parameters"], "test": recipe["test"],
            "by_beam": recipe["by_beam"],
            "training": {key: training.get(key) for key in (
                "epochs_completed", "steps", "training_minutes", "tokens_per_s_median", "stop_reason",
                "minutes_to_best", "best_val_ppl", "best_val_bleu_greedy")},
        }
    return {"machine": (speed_result or decode_result or {}).get("machine"),
            "speed": speed_result["recipes"] if speed_result else None,
            "decoding": decode_result["runs"] if decode_result else None,
            "recipes": recipes}


def print_tables(result: dict) -> None:
    if result.get("speed"):
        rows = []
        for recipe in result["speed"]:
            for p in recipe["by_precision"]:
                if "skipped" in p:  # fp16 on a CPU: said in one line when it was skipped
                    continue
                split = p["split_ms_per_step"]
                rows.append([recipe["model"], p["precision"], p["first_epoch_target_tokens_per_s"],
                             p["target_tokens_per_s"], p["ms_per_step"],
                             *(split[name] for name in PARTS), p["validation"]["perplexity_seconds"],
                             p["validation"]["greedy_seconds"]])
        headers = ["model", "precision", "1st epoch tok/s", "target tok/s", "ms/step", *(f"{n} ms" for n in PARTS),
                   "val ppl s", "val greedy s"]
        print(format_table(headers, rows))
    if result.get("decoding"):
        rows = [[run["model"], run["beam"], b["batch_size"], b["seconds_median"]]
                for run in result["decoding"] for b in run["by_batch_size"]]
        print(format_table(["model", "beam", "batch", "seconds"], rows))
    if result.get("recipes"):
        rows = []
        for name, recipe in result["recipes"].items():
            beam5 = next(b for b in recipe["by_beam"] if b["beam"] == 5)
            t = recipe["training"]
            rows.append([name, t["training_minutes"], t["minutes_to_best"], t["stop_reason"], beam5["bleu"],
                         beam5["chrf"], recipe["test"]["perplexity"]])
        print(format_table(["recipe", "minutes", "to best", "stopped", "BLEU b5", "chrF", "test ppl"], rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    speed_parser = commands.add_parser("speed", help="training tokens/s per precision and where a step's time goes")
    speed_parser.add_argument("--configs", nargs="+", default=RECIPES)
    speed_parser.add_argument("--precisions", nargs="+", default=PRECISIONS, choices=PRECISIONS)
    speed_parser.add_argument("--steps", type=int, default=100)
    speed_parser.add_argument("--split-steps", type=int, default=20)
    decode_parser = commands.add_parser("decode", help="beam search time of runs' test split")
    decode_parser.add_argument("runs", nargs="+")
    decode_parser.add_argument("--split", default="test_2016_flickr")
    decode_parser.add_argument("--beam", type=int, default=5)
    decode_parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 250, 1000])
    decode_parser.add_argument("--repeats", type=int, default=3)
    decode_parser.add_argument("--count-syncs", action="store_true",
                               help="also count the search's host reads per decoder step (CUDA only)")
    for sub in (speed_parser, decode_parser):
        sub.add_argument("--device", default="cuda")
    report_parser = commands.add_parser("report", help="one JSON of the speed, decoding and recipe results")
    report_parser.add_argument("--speed")
    report_parser.add_argument("--decode")
    report_parser.add_argument("--recipe", action="append", default=[], metavar="NAME=RECIPE.json")
    for sub in (speed_parser, decode_parser, report_parser):
        sub.add_argument("--json", required=True, help="where to write the results")
    args = parser.parse_args(argv)

    if args.command in ("speed", "decode") and args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu.py: --device {args.device}, but torch {torch.__version__} sees no CUDA GPU here "
              "(use --device cpu for a smoke test)", file=sys.stderr)
        return 2
    result = {"speed": speed, "decode": decode, "report": report}[args.command](args)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(args.json), json.dumps(portable(result), indent=2) + "\n")
    if args.command == "report":
        print_tables(result)
    elif args.command == "speed":
        print_tables({"speed": result["recipes"]})
    else:
        print_tables({"decoding": result["runs"]})
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
