"""Decoding speed: batched beam search against one sentence at a time, and across beam sizes.

Question 1: how much faster is ``attnmt.decoding.search.beam_search`` on many sentences at once (all
sentences × all beams in one tensor per step) than the same search run sentence by sentence, and
does it find exactly the same translations? Beam size 5 (``--beam``); batches of 1, 16 and 64
sentences (``--batch-sizes``; 64 is the translator's default), made by
``attnmt.data.batches_for_inference`` (longest first, as the translator does). The baseline,
measured in the same run, calls ``beam_search`` on each sentence alone, unpadded. Every batched
output is checked against it: same tokens, scores within 1e-4. The target, 10×, applies to the
largest batch size. A second table counts the decoder's work, rows × steps of ``decode_step``
(the same for every method, up to the rows of finished sentences still riding along), and times
it: that work at the decoder's best time per row (its fullest batched steps) is a floor under any
batched search, and the one-at-a-time time over that floor a ceiling on the speed-up.

Question 2 (beam sizes B = 1, 5, 10, 20, 50; ``--beams``): sentences and output tokens
per second of the batched search at the largest batch size.

    python benchmarks/decoding.py --run runs/sdp          # a trained run (Translator.load), real sentences
    python benchmarks/decoding.py                         # no run: randomly initialised models

With ``--run`` the sentences are the first ``--limit`` lines of ``--source`` (default: the
run's source language of Multi30k test_2016_flickr in ../shared/data), decoded with the run's
``search`` settings (length penalty α, max_len_a, max_len_b) unless given on the command line.
Without a run, the model is randomly initialised at two sizes — ``realistic`` (vocabulary 8000,
embeddings 256, hidden 512, scaled dot-product; a Multi30k-sized translator) and ``small``
(vocabulary 1000, embeddings 64, hidden 128) — over random source ids of Multi30k-like lengths (8
to 24 tokens + EOS). A random model rarely ends a sentence, so its outputs run to the length limit
(1.5·|x| + 10): longer than real translations, the same for both methods. Prints two tables per
model and writes benchmarks/results/decoding.json.

``--precision bf16`` runs every search (both methods alike) under CPU bfloat16 autocast, as
``attnmt translate --precision bf16`` does, and writes decoding-bf16.json; its outputs are
compared with the bf16 one-at-a-time search.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from attnmt.data import batches_for_inference
from attnmt.decoding.search import beam_search
from attnmt.models import build_model, count_parameters
from attnmt.runtime.atomic_files import write_text_atomic

from common import portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "search" / "decoding.json"  # a trained run (--run)
RESULTS_BF16 = ROOT / "benchmarks" / "results" / "search" / "decoding-bf16.json"
RESULTS_RANDOM = ROOT / "benchmarks" / "results" / "search" / "decoding_random.json"  # random models (no --run)
EOS = 3
SIZES = {
    "realistic": dict(vocab=8000, embed_dim=256, hidden_dim=512),
    "small": dict(vocab=1000, embed_dim=64, hidden_dim=128),
}


def random_setup(size: str, sentences: int, seed: int = 0):
    """A randomly initialised parallel-flow RNN and random source ids (without EOS)."""
    torch.manual_seed(seed)
    sizes = SIZES[size]
    model = build_model(dict(type="rnn", embed_dim=sizes["embed_dim"], hidden_dim=sizes["hidden_dim"],
                             attention="scaled_dot"), sizes["vocab"], sizes["vocab"])
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 25, (sentences,), generator=generator).tolist()
    ids = [torch.randint(4, sizes["vocab"], (n,), generator=generator).tolist() for n in lengths]
    description = (f"random init ({size}: vocab {sizes['vocab']}, embed {sizes['embed_dim']}, "
                   f"hidden {sizes['hidden_dim']}, scaled_dot, parallel flow), random source ids")
    return model, ids, description, {}


def run_setup(run: str, source: str | None, sentences: int):
    """The run's model, the first ``sentences`` source sentences as ids, a description and the
    run's search settings."""
    from attnmt.data.corpus import read_lines
    from attnmt.decoding.translator import Translator

    translator = Translator.load(run)
    if source is None:
        lang = translator.run_config.to_dict().get("data", {}).get("src_lang", "de")
        source = str(ROOT.parent / "shared" / "data" / "multi30k" / f"test_2016_flickr.{lang}.gz")
    lines = [line for line in read_lines(source) if line.strip()][:sentences]
    ids = translator.tokenizers.src.encode_many(lines)
    config = translator.run_config.to_dict().get("model", {})
    description = f"trained run {run} ({config.get('type')}, {config.get('attention')}), {len(ids)} lines of {source}"
    settings = translator.search_config
    search = dict(alpha=settings.alpha, max_len_a=settings.max_len_a, max_len_b=settings.max_len_b)
    return translator.model, ids, description, search


def decode_one_at_a_time(model, ids, beam, search):
    outputs = []
    for sentence in ids:
        src = torch.tensor([list(sentence) + [EOS]])
        mask = torch.ones_like(src, dtype=torch.bool)
        outputs.append(beam_search(model, src, mask, beam=beam, return_attention=True, **search)[0][0])
    return outputs


def decode_batched(model, ids, beam, batch_size, search):
    outputs = [None] * len(ids)
    for batch in batches_for_inference(ids, batch_size=batch_size):
        found = beam_search(model, batch.src, batch.src_mask, beam=beam, return_attention=True, **search)
        for index, n_best in zip(batch.indices, found):
            outputs[index] = n_best[0]
    return outputs


def mismatches(found, expected, tolerance=1e-4) -> int:
    return sum(f.tokens != e.tokens or abs(f.score - e.score) > tolerance for f, e in zip(found, expected))


class StepRecorder:
    """Counts the decoder rows of every ``decode_step`` call and times the calls."""

    def __init__(self, model):
        self.model, self.calls = model, []  # (rows, seconds) per call

    def __enter__(self):
        original = self.model.decode_step

        def recorded(prev_tokens, *args):
            start = time.perf_counter()
            result = original(prev_tokens, *args)
            self.calls.append((len(prev_tokens), time.perf_counter() - start))
            return result

        self.model.decode_step = recorded
        return self

    def __exit__(self, *exc):
        del self.model.decode_step  # back to the class's method

    @property
    def row_steps(self) -> int:
        return sum(rows for rows, _ in self.calls)

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.calls)

    def best_seconds_per_row(self) -> float:
        """Median time per row of the fullest calls (≥ 90% of the most rows): the decoder at its
        most efficient in this search."""
        most = max(rows for rows, _ in self.calls)
        return statistics.median(seconds / rows for rows, seconds in self.calls if rows >= 0.9 * most)


def measure(model, ids, beam, batch_sizes, search):
    """Question 1. search: alpha, max_len_a, max_len_b for beam_search.

    Also returns the decoder work: the rows × steps the one-at-a-time search runs (every method
    must run at least these), the decoder's best time per row seen in the largest batches, and
    so the floor (work × best time per row) under any batched search and the speed-up ceiling
    (one-at-a-time seconds / floor).
    """
    model.eval()
    decode_batched(model, ids[:2], beam, 2, search)  # warm-up
    with StepRecorder(model) as alone:
        start = time.perf_counter()
        reference = decode_one_at_a_time(model, ids, beam, search)
        baseline = time.perf_counter() - start
    rows = [dict(method="one sentence at a time", batch_size=None, seconds=baseline,
                 sentences_per_second=len(ids) / baseline, speedup=1.0, mismatches=0,
                 decoder_row_steps=alone.row_steps, decoder_seconds=alone.seconds)]
    best_per_row = float("inf")
    for batch_size in batch_sizes:
        with StepRecorder(model) as batched:
            start = time.perf_counter()
            found = decode_batched(model, ids, beam, batch_size, search)
            seconds = time.perf_counter() - start
        best_per_row = min(best_per_row, batched.best_seconds_per_row())
        rows.append(dict(method=f"batched, {batch_size} sentences", batch_size=batch_size, seconds=seconds,
                         sentences_per_second=len(ids) / seconds, speedup=baseline / seconds,
                         mismatches=mismatches(found, reference),
                         decoder_row_steps=batched.row_steps, decoder_seconds=batched.seconds))
    output_tokens = sum(len(h.tokens) + 1 for h in reference)
    floor = alone.row_steps * best_per_row
    work = dict(row_steps=alone.row_steps, best_seconds_per_row=best_per_row, floor_seconds=floor,
                speedup_ceiling=baseline / floor)
    return rows, output_tokens, work


def measure_beams(model, ids, beams, batch_size, search):
    """Question 2: the batched search at each beam size."""
    rows = []
    for beam in beams:
        start = time.perf_counter()
        found = decode_batched(model, ids, beam, batch_size, search)
        seconds = time.perf_counter() - start
        tokens = sum(len(h.tokens) + 1 for h in found)
        rows.append(dict(beam=beam, batch_size=batch_size, seconds=seconds, sentences_per_second=len(ids) / seconds,
                         output_tokens=tokens, output_tokens_per_second=tokens / seconds))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", help="a trained run folder (or checkpoint file); default: random models")
    parser.add_argument("--source", help="source sentences (plain or .gz) for --run")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["realistic", "small"],
                        help="random model sizes (without --run)")
    parser.add_argument("--limit", "--sentences", dest="sentences", type=int, default=100, metavar="N",
                        help="decode the first N sentences (default 100)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64],
                        help="sentences per batch for question 1; the last also serves question 2")
    parser.add_argument("--beams", type=int, nargs="*", default=[1, 5, 10, 20, 50],
                        help="beam sizes for question 2 (none: skip it)")
    parser.add_argument("--alpha", type=float, default=None, help="length penalty (default: the run's, else 0.6)")
    parser.add_argument("--max-len-a", type=float, default=None, help="default: the run's, else 1.5")
    parser.add_argument("--max-len-b", type=float, default=None, help="default: the run's, else 10")
    parser.add_argument("--target", type=float, default=10.0, help="speed-up the largest batch should reach")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: every search under CPU bfloat16 autocast (both methods alike)")
    parser.add_argument("--output", type=Path, default=None,
                        help="default: benchmarks/results/search/decoding.json with --run (decoding-bf16.json with "
                             "--precision bf16), decoding_random.json without")
    args = parser.parse_args(argv)
    if args.output is None:
        args.output = RESULTS_RANDOM if not args.run else RESULTS_BF16 if args.precision == "bf16" else RESULTS
    torch.set_num_threads(args.threads)

    setups = ([run_setup(args.run, args.source, args.sentences)] if args.run
              else [random_setup(size, args.sentences) for size in args.sizes])
    defaults = dict(alpha=0.6, max_len_a=1.5, max_len_b=10)
    given = dict(alpha=args.alpha, max_len_a=args.max_len_a, max_len_b=args.max_len_b)
    report = []
    for model, ids, description, run_search in setups:
        # Command line first, then the run's search settings, then beam_search's defaults.
        search = {key: given[key] if given[key] is not None else run_search.get(key, defaults[key]) for key in defaults}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            rows, output_tokens, work = measure(model, ids, args.beam, args.batch_sizes, search)
        largest = rows[-1]
        target_met = largest["speedup"] >= args.target and all(row["mismatches"] == 0 for row in rows)
        print(f"\n{description}; {count_parameters(model):,} parameters")
        print(f"{len(ids)} sentences, beam {args.beam}, alpha {search['alpha']:g}, max length "
              f"{search['max_len_a']:g}·|x| + {search['max_len_b']:g}, {output_tokens} output tokens "
              f"(one-at-a-time reference), torch {torch.__version__}, {args.threads} threads, {args.precision}")
        print(f"{'method':<26} {'seconds':>8} {'sent/s':>8} {'speed-up':>9} {'differ':>7}")
        for row in rows:
            print(f"{row['method']:<26} {row['seconds']:>8.2f} {row['sentences_per_second']:>8.2f} "
                  f"{row['speedup']:>8.2f}x {row['mismatches']:>7}")
        print(f"{largest['method']}: {largest['speedup']:.1f}x the one-at-a-time speed "
              f"(target >= {args.target:g}x with identical outputs: {'met' if target_met else 'NOT met'})")
        print(f"{'method':<26} {'decoder rows x steps':>21} {'decode_step s':>14}")
        for row in rows:
            print(f"{row['method']:<26} {row['decoder_row_steps']:>21,} {row['decoder_seconds']:>14.2f}")
        print(f"decoder work: {work['row_steps']:,} rows x steps (one at a time) at "
              f"{1e6 * work['best_seconds_per_row']:.1f} "
              f"us a row (median of the fullest steps) = {work['floor_seconds']:.2f} s at least for any batched search:"
              f" speed-up ceiling {work['speedup_ceiling']:.1f}x")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            beam_rows = measure_beams(model, ids, args.beams, args.batch_sizes[-1], search)
        if beam_rows:
            print(f"\nbatched search, {args.batch_sizes[-1]} sentences a batch, by beam size")
            print(f"{'beam':>5} {'seconds':>8} {'sent/s':>8} {'out tok/s':>10}")
            for row in beam_rows:
                print(f"{row['beam']:>5} {row['seconds']:>8.2f} {row['sentences_per_second']:>8.2f} "
                      f"{row['output_tokens_per_second']:>10.0f}")
        report.append(dict(model=description, parameters=count_parameters(model), sentences=len(ids),
                           output_tokens=output_tokens, search=search, results=rows,
                           target_speedup=args.target, target_met=target_met, decoder_work=work,
                           by_beam=beam_rows))

    write_text_atomic(args.output, json.dumps(portable(dict(
        benchmark="decoding",
        mode="run" if args.run else "random",
        config=dict(beam=args.beam, batch_sizes=args.batch_sizes, beams=args.beams, sentences=args.sentences,
                    threads=args.threads, precision=args.precision),
        environment=dict(torch=torch.__version__, python=sys.version.split()[0], machine=platform.machine(),
                         cpus=os.cpu_count(), load_average=os.getloadavg()),
        setups=report,
    )), indent=2) + "\n")
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
