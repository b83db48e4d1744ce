"""Training speed of the RNN translator: the ``parallel`` flow against a step-by-step loop.

Question: how much does the parallel decoder flow (one fused RNN call over the whole target, one
batched attention, one output-layer matmul) gain over computing the same model one target
position at a time? The baseline is the *same* parallel-flow model, same weights, same batch,
trained through ``decode_step`` once per position (teacher forcing, forward + backward) — what a
straightforward seq2seq implementation does. The ``bahdanau`` and ``luong`` flows, whose context
feeds the recurrence and so must loop over time, are measured at the same sizes for reference.

A Multi30k-like batch by default: B = 64 sentences, source and target lengths around 20 (random
between 16 and 24, padded), vocabulary 8000, embeddings 256, hidden 512, scaled dot-product
attention; then a small model (vocabulary 2000, embeddings 64, hidden 128) on the same batch
shape, where per-step overheads weigh more than arithmetic. Most of the time goes to the output
layer, [B·T, 2H] × [2H, V], the same work in
both methods; two variants show what remains: tied embeddings (the output goes through a
2H → E projection) and CPU bfloat16 autocast (a trainer option, not a model one). Each variant
is compared with the step loop of the same model in the same arithmetic. Every method runs
forward + cross-entropy + backward; the methods take turns (round-robin) and the median time per
batch is kept, so a neighbour's load hits all of them alike.

The encoder and the output layer (with the loss) are work both methods do; timed alone at full
batch they bound the speed-up: step loop / (encoder + output layer) is a ceiling that no decoder
flow can pass. A second table prints it.

    python benchmarks/training_speed.py                  # full run, writes benchmarks/results/speed/training_speed.json
    python benchmarks/training_speed.py --quick          # tiny sizes, a smoke test
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
import torch.nn.functional as F

from attnmt.attention.functional import padding_mask
from attnmt.models import build_model, count_parameters

RESULTS = Path(__file__).resolve().parent / "results" / "speed" / "training_speed.json"
PAD, BOS, EOS = 0, 2, 3


def make_batch(batch: int, length: int, vocab: int, generator: torch.Generator):
    """Random right-padded batch: src [B, S] (+EOS), tgt_in [B, T] (BOS+), tgt_out [B, T] (+EOS)."""
    spread = max(1, length // 5)
    src_lengths = torch.randint(length - spread, length + spread + 1, (batch,), generator=generator)
    tgt_lengths = torch.randint(length - spread, length + spread + 1, (batch,), generator=generator)
    src_mask = padding_mask(src_lengths)
    tgt_mask = padding_mask(tgt_lengths)
    src = torch.randint(4, vocab, src_mask.shape, generator=generator).masked_fill(~src_mask, PAD)
    src[torch.arange(batch), src_lengths - 1] = EOS
    tokens = torch.randint(4, vocab, tgt_mask.shape, generator=generator)
    tgt_in = torch.cat([torch.full((batch, 1), BOS), tokens[:, :-1]], dim=1).masked_fill(~tgt_mask, PAD)
    tgt_out = tokens.clone()
    tgt_out[torch.arange(batch), tgt_lengths - 1] = EOS
    tgt_out = tgt_out.masked_fill(~tgt_mask, PAD)
    return src, src_mask, tgt_in, tgt_out


def loss_parallel(model, src, src_mask, tgt_in, tgt_out):
    """Teacher forcing through ``forward`` as the trainer calls it: the output layer runs only at
    the real target tokens (``tgt_mask``), where the loss is."""
    tgt_mask = tgt_out != PAD
    logits, _ = model(src, src_mask, tgt_in, tgt_mask=tgt_mask)  # [N, V]
    return F.cross_entropy(logits, tgt_out[tgt_mask], reduction="sum")


def loss_step_loop(model, src, src_mask, tgt_in, tgt_out):
    """Teacher forcing through ``decode_step``, one target position at a time."""
    encoded = model.encode(src, src_mask)
    state = model.init_decoder_state(encoded)
    total = 0.0
    for step in range(tgt_in.shape[1]):
        log_probs, _, state = model.decode_step(tgt_in[:, step], state, encoded, step)
        total = total + F.nll_loss(log_probs, tgt_out[:, step], ignore_index=PAD, reduction="sum")
    return total


def loss_encoder_only(model, src, src_mask, tgt_in, tgt_out):
    """Shared work 1: the bidirectional encoder and the sentence representation (both methods run it once)."""
    encoded = model.encode(src, src_mask)
    return encoded.states.sum() + encoded.sentence.sum()


def loss_output_layer_only(model, src, src_mask, tgt_in, tgt_out):
    """Shared work 2: the output layer and the loss at every real target token, at full batch —
    the least this work costs; the step loop does the same products T times on B rows."""
    tgt_mask = tgt_out != PAD
    width = model.config.hidden_dim + model.attention.output_dim
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(int(tgt_mask.sum()), width, generator=generator).requires_grad_(True)
    return F.cross_entropy(model._logits(features), tgt_out[tgt_mask], reduction="sum")


def bf16(loss_fn):
    """``loss_fn`` under CPU bfloat16 autocast (matmuls in bf16; weights and gradients stay fp32)."""

    def loss_bf16(*args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return loss_fn(*args).float()

    return loss_bf16


def time_training_step(model, loss_fn, batch) -> float:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    loss = loss_fn(model, *batch)
    loss.backward()
    return time.perf_counter() - start


def write_json_atomic(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.replace(handle.name, path)


SIZES = {
    "multi30k": dict(vocab=8000, embed=256, hidden=512),
    "small": dict(vocab=2000, embed=64, hidden=128),
    "tiny": dict(vocab=200, embed=16, hidden=32),
}


def measure(sizes: dict, args) -> dict:
    """Time every method at one model size; print the table; return the JSON record."""
    vocab = sizes["vocab"]
    torch.manual_seed(0)
    base = dict(type="rnn", embed_dim=sizes["embed"], hidden_dim=sizes["hidden"], attention=args.attention,
                cell=args.cell, dropout=args.dropout)
    parallel = build_model({**base, "flow": "parallel"}, vocab, vocab)
    tied = build_model({**base, "flow": "parallel", "tie_embeddings": True}, vocab, vocab)
    # name -> (model, loss function, the step-loop row it is compared with)
    loop, tied_loop, bf16_loop = "parallel, step loop", "parallel tied, step loop", "parallel bf16, step loop"
    methods = {
        "parallel, forward": (parallel, loss_parallel, loop),
        loop: (parallel, loss_step_loop, loop),
        "bahdanau, forward (step loop)": (build_model({**base, "flow": "bahdanau"}, vocab, vocab), loss_parallel, loop),
        "luong, forward (step loop)": (build_model({**base, "flow": "luong"}, vocab, vocab), loss_parallel, loop),
        "parallel tied, forward": (tied, loss_parallel, tied_loop),
        tied_loop: (tied, loss_step_loop, tied_loop),
        "parallel bf16, forward": (parallel, bf16(loss_parallel), bf16_loop),
        bf16_loop: (parallel, bf16(loss_step_loop), bf16_loop),
    }
    # The work both methods share, done once at full batch: the speed-up cannot exceed
    # step loop / (encoder + output layer), whatever the decoder flow does.
    shared = {
        "encoder": (parallel, loss_encoder_only), "output layer + loss": (parallel, loss_output_layer_only),
        "tied: encoder": (tied, loss_encoder_only), "tied: output layer + loss": (tied, loss_output_layer_only),
    }
    generator = torch.Generator().manual_seed(0)
    batch = make_batch(args.batch, args.length, vocab, generator)
    target_tokens = int((batch[3] != PAD).sum())

    # Same numbers both ways (eval mode: no dropout) before timing anything.
    parallel.eval()
    with torch.no_grad():
        same = abs(float(loss_parallel(parallel, *batch)) - float(loss_step_loop(parallel, *batch)))
    parallel.train()

    timed = {**{name: (model, loss_fn) for name, (model, loss_fn, _) in methods.items()}, **shared}
    times: dict[str, list[float]] = {name: [] for name in timed}
    for model, loss_fn in timed.values():  # warm-up (allocator, kernels)
        model.train()
        time_training_step(model, loss_fn, batch)
    for _ in range(args.repeats):
        for name, (model, loss_fn) in timed.items():
            times[name].append(time_training_step(model, loss_fn, batch))

    rows = []
    for name, (model, _, baseline) in methods.items():
        seconds = statistics.median(times[name])
        rows.append(dict(method=name, seconds_per_batch=seconds, target_tokens_per_second=target_tokens / seconds,
                         compared_with=baseline, speedup=statistics.median(times[baseline]) / seconds,
                         parameters=count_parameters(model)))

    print(f"\nB={args.batch}, S≈T≈{args.length} ({target_tokens} target tokens), vocab {vocab}, "
          f"embed {sizes['embed']}, hidden {sizes['hidden']}, {args.attention}, {args.cell}, dropout {args.dropout}; "
          f"torch {torch.__version__}, {args.threads} threads; median of {args.repeats}; forward+backward")
    print(f"parallel forward vs step loop, eval-mode summed loss difference: {same:.2e}")
    print(f"{'method':<31} {'s/batch':>8} {'tokens/s':>9} {'speed-up':>9}  {'vs':<25} {'params':>11}")
    for row in rows:
        print(f"{row['method']:<31} {row['seconds_per_batch']:>8.3f} {row['target_tokens_per_second']:>9.0f} "
              f"{row['speedup']:>8.2f}x  {row['compared_with']:<25} {row['parameters']:>11,}")
    ceilings = []
    for prefix, loop_name, forward_name in (("", loop, "parallel, forward"),
                                            ("tied: ", tied_loop, "parallel tied, forward")):
        shared_seconds = sum(statistics.median(times[prefix + part]) for part in ("encoder", "output layer + loss"))
        loop_seconds = statistics.median(times[loop_name])
        ceilings.append(dict(
            model="tied" if prefix else "untied",
            encoder_seconds=statistics.median(times[prefix + "encoder"]),
            output_layer_seconds=statistics.median(times[prefix + "output layer + loss"]),
            shared_share_of_parallel=shared_seconds / statistics.median(times[forward_name]),
            speedup_ceiling=loop_seconds / shared_seconds,
        ))
    print("\nwork both methods share, timed alone at full batch (forward+backward); the speed-up over the step")
    print("loop cannot exceed step loop / (encoder + output layer), however fast the decoder flow is")
    print(f"{'model':<8} {'encoder s':>10} {'output s':>9} {'share of parallel':>18} {'ceiling':>8}")
    for row in ceilings:
        print(f"{row['model']:<8} {row['encoder_seconds']:>10.3f} {row['output_layer_seconds']:>9.3f} "
              f"{row['shared_share_of_parallel']:>17.0%} {row['speedup_ceiling']:>7.2f}x")
    return dict(sizes=sizes, target_tokens=target_tokens, loss_difference_parallel_vs_step_loop=same, results=rows,
                shared_work=ceilings)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["multi30k", "small"],
                        help="model sizes: multi30k (vocab 8000, embed 256, hidden 512), small (2000, 64, 128)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=20, help="typical source and target length")
    parser.add_argument("--attention", default="scaled_dot")
    parser.add_argument("--cell", default="lstm")
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--repeats", type=int, default=5, help="timed batches per method (median kept)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="tiny sizes, B=8, 2 repeats (smoke test)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.batch, args.length, args.repeats = ["tiny"], 8, 8, 2
    torch.set_num_threads(args.threads)
    records = [measure(SIZES[name], args) for name in args.sizes]
    write_json_atomic(args.output, dict(
        benchmark="training_speed",
        config=dict(batch=args.batch, length=args.length, attention=args.attention, cell=args.cell,
                    dropout=args.dropout, repeats=args.repeats, threads=args.threads, quick=args.quick),
        environment=dict(torch=torch.__version__, python=sys.version.split()[0], machine=platform.machine(),
                         cpus=os.cpu_count(), load_average=os.getloadavg()),
        setups=records,
    ))
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
