"""Distributed data parallel training (gloo, 2 processes on this machine).

One DDP step over two ranks, each with its own batch, must give the loss and gradients of one
process stepping on both batches at once; and the Trainer must run with two ranks, keep their
weights identical, and write its files once.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml

pytestmark = pytest.mark.slow  # starts two processes

WORLD_SIZE = 2
MODEL = {"type": "rnn", "embed_dim": 8, "hidden_dim": 16, "dropout": 0.0, "attention": "additive"}
VOCAB = 40


def _synthetic_ids(count: int = 64, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    rng = random.Random(seed)
    src = [[rng.randrange(4, VOCAB) for _ in range(rng.randint(1, 9))] for _ in range(count)]
    tgt = [[rng.randrange(4, VOCAB) for _ in range(rng.randint(1, 9))] for _ in range(count)]
    return src, tgt


def _write_text_corpus(folder: Path) -> Path:
    rng = random.Random(5)
    words = "ein der hund katze mann frau läuft sitzt im park ball rot".split()
    for name, count in (("train", 120), ("valid", 10)):
        src = [" ".join(rng.choices(words, k=rng.randint(2, 6))) for _ in range(count)]
        (folder / f"{name}.de").write_text("\n".join(src) + "\n", encoding="utf-8")
        (folder / f"{name}.en").write_text("\n".join(s.upper() for s in src) + "\n", encoding="utf-8")
    config = {
        "data": {"train": ["train.de", "train.en"], "valid": ["valid.de", "valid.en"], "vocab_size": 80,
                 "max_tokens": 120},
        "model": dict(MODEL, dropout=0.1),
        "training": {"max_steps": 6, "log_every": 2, "checkpoint_every": 3, "num_threads": 1,
                     "bleu_max_sentences": 2, "examples": 0},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def _first_global_step(rank: int, world_size: int) -> list[int]:
    """The corpus positions rank ``rank`` trains on in the first step (world_size=1: all of them)."""
    from attnmt.data import batch_indices

    src, tgt = _synthetic_ids()
    lengths = ([len(s) for s in src], [len(t) for t in tgt])
    if world_size == 1:  # a single process taking the batches of both ranks at once
        batches = batch_indices(*lengths, max_tokens=60, seed=11, epoch=0)
        return batches[0] + batches[1]
    return batch_indices(*lengths, max_tokens=60, seed=11, epoch=0, rank=rank, world_size=world_size)[0]


def _worker(rank: int, folder: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from attnmt.data import collate
    from attnmt.models import build_model
    from attnmt.runs.run_config import load_config
    from attnmt.training import DistributedContext, Trainer, backward_on_batch

    folder = Path(folder)
    # The ranks meet through a file, not a TCP port: a port probed free can be taken before rank 0 binds it.
    dist.init_process_group("gloo", init_method=(folder / "rendezvous").as_uri(), rank=rank, world_size=WORLD_SIZE)
    torch.set_num_threads(1)
    try:
        # 1. One DDP step; the global loss is normalised by the global token count.
        torch.manual_seed(0)
        model = build_model(dict(MODEL), VOCAB, VOCAB)
        ddp = DistributedDataParallel(model)
        src, tgt = _synthetic_ids()
        batch = collate(src, tgt, _first_global_step(rank, WORLD_SIZE))
        counts = torch.tensor([float(batch.num_tgt_tokens)], dtype=torch.float64)
        dist.all_reduce(counts)
        stats = backward_on_batch(ddp, batch, 0.1, float(counts), WORLD_SIZE)
        loss = torch.tensor([float(stats.loss_sum)], dtype=torch.float64)
        dist.all_reduce(loss)
        if rank == 0:
            grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
            torch.save({"loss": float(loss) / float(counts), "grads": grads}, folder / "ddp_step.pt")

        # 2. The Trainer with two ranks.
        config = load_config(folder / "config.yaml")
        trainer = Trainer(config, folder / "run", context=DistributedContext(rank, WORLD_SIZE),
                          show_progress=False, verbose=False)
        trainer.run()
        torch.save(trainer.model.state_dict(), folder / f"trained-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_ddp_step_equals_single_process_step_and_trainer_runs(tmp_path):
    import torch.multiprocessing as mp

    from attnmt.data import collate
    from attnmt.models import build_model
    from attnmt.runs.checkpoint import load_checkpoint
    from attnmt.training import backward_on_batch

    _write_text_corpus(tmp_path)
    mp.spawn(_worker, args=(str(tmp_path),), nprocs=WORLD_SIZE, join=True)

    # The same step in one process, on the union of the two ranks' batches.
    torch.manual_seed(0)
    model = build_model(dict(MODEL), VOCAB, VOCAB)
    src, tgt = _synthetic_ids()
    union = _first_global_step(0, 1)
    assert sorted(union) == sorted(_first_global_step(0, 2) + _first_global_step(1, 2))
    batch = collate(src, tgt, union)
    stats = backward_on_batch(model, batch, 0.1, batch.num_tgt_tokens, 1)
    distributed = torch.load(tmp_path / "ddp_step.pt", weights_only=True)
    assert distributed["loss"] == pytest.approx(float(stats.loss_sum) / batch.num_tgt_tokens, abs=1e-5)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(distributed["grads"][name], parameter.grad, atol=1e-5, rtol=1e-5, msg=name)

    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r["type"] == "train"]
    assert steps == sorted(set(steps)) and {2, 4, 6} <= set(steps)  # each record written once, by rank 0
    assert [r["type"] for r in records].count("summary") == 1 and records[-1]["step"] == 6
    checkpoint = load_checkpoint(run / "last.pt", require_training_state=True)
    assert checkpoint["progress"]["world_size"] == 2 and len(checkpoint["rng"]) == 2
    assert not torch.equal(checkpoint["rng"][0]["torch"], checkpoint["rng"][1]["torch"])  # own dropout masks
    ranks = [torch.load(tmp_path / f"trained-rank{rank}.pt", weights_only=True) for rank in range(WORLD_SIZE)]
    for name, tensor in checkpoint["model"].items():
        assert torch.equal(ranks[0][name], tensor) and torch.equal(ranks[1][name], tensor), name
