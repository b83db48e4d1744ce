"""Batching: token budget, every pair once, masks and specials, fixed order per (seed, epoch), shards."""

from __future__ import annotations

import random

import pytest
import torch

from attnmt.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    TokenBatchSampler,
    batch_indices,
    batches_for_inference,
    collate,
    make_batches,
    restore_order,
    shard,
)
from attnmt.data.batching import ladder_floor, ladder_size, scored_positions
from attnmt.models import build_model
from attnmt.models.losses import token_losses
from attnmt.training.step import backward_on_batch


def random_corpus(count=500, seed=0, max_len=40):
    """Id lists of varied lengths (ids >= 4, so they never collide with the specials)."""
    rng = random.Random(seed)
    src = [[rng.randrange(4, 100) for _ in range(rng.randrange(0, max_len))] for _ in range(count)]
    tgt = [[rng.randrange(4, 100) for _ in range(rng.randrange(0, max_len))] for _ in range(count)]
    return src, tgt


def order_of(batches):
    return [batch.indices for batch in batches]


@pytest.mark.parametrize("shuffle", [True, False])
def test_budget_respected_and_every_pair_exactly_once(shuffle):
    src, tgt = random_corpus()
    batches = make_batches(src, tgt, max_tokens=300, shuffle=shuffle, seed=1)
    seen = sorted(i for batch in batches for i in batch.indices)
    assert seen == list(range(len(src)))
    for batch in batches:
        B, S = batch.src.shape
        T = batch.tgt_in.shape[1]
        assert B * max(S, T) <= 300
    # the budget is used well: batches are not needlessly small
    assert len(batches) < 1.5 * sum(max(len(s), len(t)) + 1 for s, t in zip(src, tgt)) / 300


def test_tensors_masks_and_specials_match_the_ids():
    src, tgt = random_corpus(count=50)
    for batch in make_batches(src, tgt, max_tokens=200, seed=0):
        B = batch.size
        assert batch.src.dtype == torch.long and batch.tgt_in.dtype == torch.long
        assert batch.src_mask.dtype == torch.bool and batch.tgt_mask.dtype == torch.bool
        assert batch.src.shape == batch.src_mask.shape and batch.tgt_in.shape == batch.tgt_out.shape
        assert batch.src_lengths.tolist() == batch.src_mask.sum(1).tolist()
        assert batch.tgt_lengths.tolist() == batch.tgt_mask.sum(1).tolist()
        assert batch.num_tgt_tokens == int(batch.tgt_mask.sum())
        assert batch.src.shape[1] == max(batch.src_lengths.tolist())  # no all-padding columns
        for row, index in enumerate(batch.indices):
            n, m = len(src[index]), len(tgt[index])
            assert batch.src[row, : n + 1].tolist() == src[index] + [EOS_ID]
            assert batch.tgt_in[row, : m + 1].tolist() == [BOS_ID] + tgt[index]
            assert batch.tgt_out[row, : m + 1].tolist() == tgt[index] + [EOS_ID]
            assert (batch.src[row][~batch.src_mask[row]] == PAD_ID).all()
            assert (batch.tgt_in[row][~batch.tgt_mask[row]] == PAD_ID).all()
            assert (batch.tgt_out[row][~batch.tgt_mask[row]] == PAD_ID).all()
        assert B == len(batch.indices) == len(batch)


def test_empty_sentences_still_have_one_position():
    batch = collate([[], [5, 6]], [[], [7]], [0, 1])
    assert batch.src.tolist() == [[EOS_ID, PAD_ID, PAD_ID], [5, 6, EOS_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, PAD_ID], [BOS_ID, 7]]
    assert batch.tgt_out.tolist() == [[EOS_ID, PAD_ID], [7, EOS_ID]]
    assert batch.src_lengths.tolist() == [1, 3] and batch.num_tgt_tokens == 3


def test_same_seed_same_batches_other_epoch_or_seed_other_order():
    src, tgt = random_corpus()
    first = order_of(make_batches(src, tgt, max_tokens=400, seed=7, epoch=3))
    again = order_of(make_batches(src, tgt, max_tokens=400, seed=7, epoch=3))
    assert first == again
    assert order_of(make_batches(src, tgt, max_tokens=400, seed=7, epoch=4)) != first
    assert order_of(make_batches(src, tgt, max_tokens=400, seed=8, epoch=3)) != first
    unshuffled = order_of(make_batches(src, tgt, max_tokens=400, shuffle=False, seed=1, epoch=1))
    assert unshuffled == order_of(make_batches(src, tgt, max_tokens=400, shuffle=False, seed=2, epoch=5))


def test_sorting_keeps_padding_small():
    # Lengths like a real corpus: targets about as long as their sources.
    rng = random.Random(0)
    src = [[5] * rng.randrange(1, 60) for _ in range(2000)]
    tgt = [[6] * max(0, len(s) + rng.randrange(-4, 5)) for s in src]

    def real_share(batches):
        real = sum(int(b.src_mask.sum()) + int(b.tgt_mask.sum()) for b in batches)
        return real / sum(b.src_mask.numel() + b.tgt_mask.numel() for b in batches)

    unsorted = [collate(src, tgt, list(range(k, min(k + 40, 2000)))) for k in range(0, 2000, 40)]
    assert real_share(unsorted) < 0.6
    assert real_share(make_batches(src, tgt, max_tokens=2000, seed=0)) > 0.9


def test_max_sentences_and_oversized_pairs(caplog):
    src = [[5] * 3] * 10 + [[5] * 50]
    tgt = [[6] * 3] * 11
    batches = make_batches(src, tgt, max_tokens=20, max_sentences=4, shuffle=False)
    sizes = sorted(len(b) for b in batches)
    assert all(len(b) <= 4 for b in batches)
    alone = [b for b in batches if 10 in b.indices]
    assert len(alone) == 1 and alone[0].indices == [10]  # longer than the budget: its own batch
    assert "longer than max_tokens=20" in caplog.text
    assert sum(sizes) == 11


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_shards_have_equal_counts_and_cover_everything(world_size):
    src, tgt = random_corpus(count=300)
    full = order_of(make_batches(src, tgt, max_tokens=500, seed=2, epoch=1))
    shards = [
        order_of(make_batches(src, tgt, max_tokens=500, seed=2, epoch=1, rank=r, world_size=world_size))
        for r in range(world_size)
    ]
    assert len({len(s) for s in shards}) == 1
    assert len(shards[0]) == -(-len(full) // world_size)
    covered = {i for s in shards for batch in s for i in batch}
    assert covered == set(range(300))
    assert [b for s in shards for b in s if b not in full] == []


def test_shard_edge_cases():
    assert shard([["a"]], rank=2, world_size=3) == [["a"]]  # fewer batches than ranks: repeated
    assert shard(list(range(5)), rank=0, world_size=1) == list(range(5))
    with pytest.raises(ValueError, match="rank"):
        shard([1, 2], rank=2, world_size=2)


def test_inference_batches_sorted_and_order_restored():
    src, _ = random_corpus(count=120)
    batches = batches_for_inference(src, max_tokens=256)
    lengths = [len(src[i]) for b in batches for i in b.indices]
    assert lengths == sorted(lengths, reverse=True)
    assert all(b.tgt_in is None and b.src.numel() <= 256 for b in batches)
    outputs = [[f"out{i}" for i in b.indices] for b in batches]
    assert restore_order(batches, outputs) == [f"out{i}" for i in range(120)]
    by_count = batches_for_inference(src, batch_size=16)
    assert all(len(b) <= 16 for b in by_count) and sum(len(b) for b in by_count) == 120
    with pytest.raises(ValueError, match="max_tokens or max_sentences"):
        batches_for_inference(src)


def test_restore_order_rejects_mismatches():
    batches = batches_for_inference([[4], [5, 6]], batch_size=1)
    with pytest.raises(ValueError, match="outputs"):
        restore_order(batches, [["x"], []])


def test_sampler_follows_set_epoch():
    src, tgt = random_corpus(count=200)
    lengths = ([len(s) for s in src], [len(t) for t in tgt])
    sampler = TokenBatchSampler(*lengths, max_tokens=300, seed=4)
    sampler.set_epoch(2)
    assert list(sampler) == batch_indices(*lengths, max_tokens=300, seed=4, epoch=2)
    assert len(sampler) == len(list(sampler))
    sampler.set_epoch(3)
    assert list(sampler) == batch_indices(*lengths, max_tokens=300, seed=4, epoch=3)


def test_batch_to_device_and_argument_checks():
    src, tgt = random_corpus(count=10)
    batch = make_batches(src, tgt, max_tokens=1000)[0]
    moved = batch.to("cpu")
    assert torch.equal(moved.src, batch.src) and moved.indices == batch.indices
    with pytest.raises(ValueError, match="sources but"):
        make_batches(src, tgt[:5])
    with pytest.raises(ValueError, match="max_tokens"):
        make_batches(src, tgt, max_tokens=0)
    assert make_batches([], [], max_tokens=10) == []


@pytest.mark.parametrize("multiple", [4, 8])
def test_a_pad_multiple_gives_widths_of_that_multiple_within_the_budget_and_the_same_pairs(multiple):
    """data.pad_multiple: every batch's S and T are multiples of it, the budget counts them, every
    pair comes once, and far fewer shapes remain; 1 changes nothing."""
    rng = random.Random(3)
    src = [[rng.randrange(4, 50) for _ in range(rng.randrange(0, 40))] for _ in range(600)]
    tgt = [[rng.randrange(4, 50) for _ in range(max(0, len(s) + rng.randrange(-3, 4)))] for s in src]  # as translations
    plain = make_batches(src, tgt, max_tokens=300, seed=1)
    padded = make_batches(src, tgt, max_tokens=300, seed=1, pad_multiple=multiple)
    assert [b.indices for b in make_batches(src, tgt, max_tokens=300, seed=1, pad_multiple=1)] == \
        [b.indices for b in plain]
    assert sorted(i for b in padded for i in b.indices) == list(range(600))
    for batch in padded:
        assert batch.src.shape[1] % multiple == 0 and batch.tgt_in.shape[1] % multiple == 0
        assert batch.src.shape[0] * max(batch.src.shape[1], batch.tgt_in.shape[1]) <= 300 or len(batch.indices) == 1
        assert int(batch.src_mask.sum()) == sum(len(src[i]) + 1 for i in batch.indices)
        assert int(batch.tgt_mask.sum()) == batch.num_tgt_tokens == sum(len(tgt[i]) + 1 for i in batch.indices)
    shapes = {(b.src.shape, b.tgt_in.shape) for b in padded}
    assert len(shapes) < len({(b.src.shape, b.tgt_in.shape) for b in plain}) / 2
    with pytest.raises(ValueError, match="pad_multiple must be a positive integer, got 0"):
        make_batches(src, tgt, max_tokens=300, pad_multiple=0)


def test_ladder_floor_rounds_down_to_the_sizes_ladder_size_rounds_up_to():
    """ladder_floor: never above the count, less than N / k + 1 below it, at least 1, and always a
    size of the token ladder (ladder_size leaves it as it is), so at most k sizes per doubling."""
    for k in (1, 2, 4, 16):
        for n in range(1, 3000):
            size = ladder_floor(n, k)
            assert 1 <= size <= n and n - size < max(1, n / k)
            assert ladder_size(size, k) == size
        for j in range(12):
            assert len({ladder_floor(n, k) for n in range(2**j, 2 ** (j + 1))}) <= k
    assert [ladder_floor(n, 4) for n in (1, 7, 8, 9, 11, 37, 100)] == [1, 7, 8, 8, 10, 32, 96]
    assert ladder_floor(37, 0) == 37 and ladder_floor(0, 4) == 0


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("max_sentences", [None, 12])
def test_a_row_ladder_gives_batch_sizes_on_the_ladder_and_every_pair_once(shuffle, max_sentences):
    """data.row_ladder: every batch's B is a ladder size, the budget holds, every pair comes once,
    the same (seed, epoch) gives the same batches, fewer batch sizes remain, and the batches grow
    no smaller than the ladder allows; 0 changes nothing."""
    rng = random.Random(6)
    src = [[rng.randrange(4, 50) for _ in range(rng.randrange(0, 40))] for _ in range(1500)]
    tgt = [[rng.randrange(4, 50) for _ in range(max(0, len(s) + rng.randrange(-3, 4)))] for s in src]
    lengths = ([len(s) for s in src], [len(t) for t in tgt])
    settings = dict(max_tokens=400, shuffle=shuffle, seed=2, epoch=1, max_sentences=max_sentences, pad_multiple=4)
    plain = batch_indices(*lengths, **settings)
    assert batch_indices(*lengths, **settings, row_ladder=0) == plain
    for k in (1, 2, 4):
        laddered = batch_indices(*lengths, **settings, row_ladder=k)
        assert laddered == batch_indices(*lengths, **settings, row_ladder=k)
        assert sorted(i for batch in laddered for i in batch) == list(range(1500))
        for batch in laddered:
            assert ladder_floor(len(batch), k) == len(batch)
            width = max(max(-(-(lengths[0][i] + 1) // 4), -(-(lengths[1][i] + 1) // 4)) * 4 for i in batch)
            assert len(batch) * width <= 400 and len(batch) <= (max_sentences or len(batch))
        assert len({len(b) for b in laddered}) < len({len(b) for b in plain})
        rows = sum(len(b) for b in plain) / len(plain)
        assert sum(len(b) for b in laddered) / len(laddered) > rows * k / (k + 1)  # ladder_floor(n) > n·k/(k+1)
    with pytest.raises(ValueError, match="row_ladder must be an integer >= 0, got -1"):
        batch_indices(*lengths, max_tokens=400, row_ladder=-1)


def test_a_row_ladder_batch_is_collated_like_any_other():
    """make_batches with row_ladder: the tensors of each batch are those collate makes of its pairs."""
    src, tgt = random_corpus(300, seed=9)
    for batch in make_batches(src, tgt, max_tokens=300, seed=3, row_ladder=2):
        again = collate(src, tgt, batch.indices)
        assert torch.equal(batch.src, again.src) and torch.equal(batch.tgt_out, again.tgt_out)
        assert batch.size in {2**j for j in range(10)} | {3 * 2**j for j in range(9)}  # 2 sizes per doubling


@pytest.mark.parametrize("model_config", [
    {"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "additive", "dropout": 0.0},
    {"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "general", "dropout": 0.0, "flow": "luong"},
    {"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "multihead", "dropout": 0.0, "flow": "bahdanau",
     "attention_options": {"num_heads": 2}},
    {"type": "transformer", "d_model": 12, "num_heads": 3, "ffn_dim": 16, "encoder_layers": 2, "decoder_layers": 2,
     "dropout": 0.0, "attention_dropout": 0.0},
], ids=["rnn-parallel", "rnn-luong", "rnn-bahdanau-multihead", "transformer"])
def test_the_extra_padding_leaves_the_loss_and_the_gradients_as_they_are_in_float64(model_config):
    """One batch collated with pad_multiple 1 and 16, and with the output layer's rows on a token
    ladder (padding rows scored with weight 0): the same loss, likelihood, token count and
    gradients within 1e-12."""
    rng = random.Random(5)
    src = [[rng.randrange(4, 30) for _ in range(rng.randrange(0, 9))] for _ in range(5)]
    tgt = [[rng.randrange(4, 30) for _ in range(rng.randrange(0, 9))] for _ in range(5)]
    found = []
    for multiple, ladder in ((1, 0), (16, 0), (16, 2), (1, 1)):
        torch.manual_seed(0)
        model = build_model(model_config, 30, 30).double()
        batch = collate(src, tgt, range(5), pad_multiple=multiple, token_ladder=ladder)
        if ladder:  # the ladder did add padding rows to the output layer's
            assert int(batch.scored_mask.sum()) > batch.num_tgt_tokens
        stats = backward_on_batch(model, batch, label_smoothing=0.1, global_tokens=batch.num_tgt_tokens)
        found.append((float(stats.loss_sum), float(stats.nll_sum), stats.num_tokens,
                      {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    loss, nll, count, grads = found[0]
    for padded_loss, padded_nll, padded_count, padded_grads in found[1:]:
        assert padded_loss == pytest.approx(loss, rel=0, abs=1e-12)
        assert padded_nll == pytest.approx(nll, rel=0, abs=1e-12)
        assert padded_count == count
        assert grads.keys() == padded_grads.keys()
        for name in grads:
            torch.testing.assert_close(padded_grads[name], grads[name], rtol=0, atol=1e-12, msg=name)


def test_the_token_ladder_rounds_up_to_a_few_sizes_per_doubling():
    """ladder_size: never below the count, less than one step above it (step = 2^⌊log₂ N⌋ / k, so at
    most N / k more), at most k sizes in each doubling; 0 or a count below 1 is left as it is."""
    for k in (1, 4, 16):
        sizes = [ladder_size(n, k) for n in range(1, 5000)]
        assert all(n <= size <= n + max(1, n // k) for n, size in zip(range(1, 5000), sizes, strict=True))
        assert sizes == sorted(sizes)
        for j in range(13):
            assert len({ladder_size(n, k) for n in range(2**j, 2 ** (j + 1))} - {2 ** (j + 1)}) <= k
    assert len({ladder_size(n, 16) for n in range(256, 4097)}) <= 16 * 4 + 1  # against 3,841 counts
    assert [ladder_size(n, 16) for n in (1, 17, 100, 1000, 3601)] == [1, 17, 100, 1024, 3712]
    assert ladder_size(37, 0) == 37 and ladder_size(0, 16) == 0


def test_the_scored_positions_are_the_real_ones_and_the_first_padding():
    """scored_positions: every real position, the first padding positions row by row up to the
    ladder's size, never more than B · T; the mask given is left as it was; collate names them
    only with a ladder."""
    rng = random.Random(8)
    for _ in range(50):
        lengths = [rng.randrange(1, 30) for _ in range(rng.randrange(1, 9))]
        mask = torch.arange(max(lengths)).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        before = mask.clone()
        scored = scored_positions(mask, 4)
        assert torch.equal(mask, before)
        assert bool(scored[mask].all())
        assert int(scored.sum()) == min(ladder_size(sum(lengths), 4), mask.numel())
        extra = (scored & ~mask).reshape(-1).nonzero().reshape(-1)
        padding = (~mask).reshape(-1).nonzero().reshape(-1)
        assert torch.equal(extra, padding[: len(extra)])
    full = torch.ones(3, 7, dtype=torch.bool)  # no padding to add: all 21 positions
    assert torch.equal(scored_positions(full, 16), full)
    src, tgt = random_corpus(20, seed=4)
    assert collate(src, tgt, range(20)).scored_mask is None
    laddered = collate(src, tgt, range(20), token_ladder=8)
    assert torch.equal(laddered.scored_mask, scored_positions(laddered.tgt_mask, 8))
    assert torch.equal(laddered.to("cpu").scored_mask, laddered.scored_mask)


def test_the_padding_rows_on_the_ladder_never_reach_the_loss_even_when_their_logits_are_not_finite():
    """token_losses with scored positions: the padding rows' logits are set aside before the softmax,
    so huge, infinite or NaN values there change neither the loss nor the real rows' gradients
    (float64, against the loss of the real rows alone)."""
    torch.manual_seed(3)
    mask = torch.arange(6).unsqueeze(0) < torch.tensor([[6], [2], [4]])  # 12 real of 18
    scored = scored_positions(mask, 1)  # 16 rows: 4 of them padding
    targets = torch.randint(4, 11, mask.shape)
    real_rows = torch.randn(12, 11, dtype=torch.float64, requires_grad=True)
    reference = token_losses(real_rows, targets, mask, 0.1)
    (reference_grad,) = torch.autograd.grad(reference[0], real_rows)
    for filler in (1e300, float("inf"), float("nan")):
        rows = torch.full((16, 11), filler, dtype=torch.float64)
        rows[mask[scored]] = real_rows.detach()
        rows.requires_grad_(True)
        loss, nll, count = token_losses(rows, targets, mask, 0.1, scored)
        (grad,) = torch.autograd.grad(loss, rows)
        assert count == 12 and torch.isfinite(loss)
        assert float(loss.detach()) == pytest.approx(float(reference[0].detach()), rel=0, abs=1e-12)
        assert float(nll) == pytest.approx(float(reference[1]), rel=0, abs=1e-12)
        torch.testing.assert_close(grad[mask[scored]], reference_grad, rtol=0, atol=1e-12)
        assert bool((grad[~mask[scored]] == 0).all())
