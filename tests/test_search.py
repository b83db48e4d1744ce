"""Greedy and batched beam search (attnmt.search) on a hand-made toy model and on RNN translators."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from torch import nn

from attnmt.attention.functional import padding_mask
from attnmt.models import build_model
from attnmt.search import Hypothesis, beam_search, greedy_search, length_penalty

PAD, UNK, BOS, EOS, A, B = range(6)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one thread avoids OpenMP contention on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------------
# A toy model with fixed tables: P(next | previous token), uniform attention
# ------------------------------------------------------------------------------------------------


class Rows:
    """Encoder output / state of the toy: a tensor of per-row values with index_select."""

    def __init__(self, *tensors):
        self.tensors = tensors

    def index_select(self, index):
        return Rows(*(t.index_select(0, index) for t in self.tensors))


class BigramToy(nn.Module):
    """P(next | prev) from a table; greedy follows A (0.5) then A (0.4)… while B, EOS has 0.36.

    state = the number of steps taken (to check that search passes ``step`` and reorders states).
    """

    def __init__(self):
        super().__init__()
        table = torch.zeros(6, 6, dtype=torch.float64)
        table[BOS, [EOS, A, B]] = torch.tensor([0.1, 0.5, 0.4], dtype=torch.float64)
        table[A, [EOS, A, B]] = torch.tensor([0.3, 0.4, 0.3], dtype=torch.float64)
        table[B, [EOS, A, B]] = torch.tensor([0.9, 0.05, 0.05], dtype=torch.float64)
        self.register_buffer("log_table", table.log())

    def encode(self, src, src_mask):
        return Rows(src_mask)

    def init_decoder_state(self, encoded):
        return Rows(torch.zeros(encoded.tensors[0].shape[0], dtype=torch.long))

    def decode_step(self, prev_tokens, state, encoded, step):
        (steps,) = state.tensors
        assert (steps == step).all(), "state and step disagree: search reordered states wrongly"
        mask = encoded.tensors[0]
        attention = mask.double() / mask.sum(1, keepdim=True)
        return self.log_table[prev_tokens].clone(), attention, Rows(steps + 1)


def toy_source(lengths=(3,)):
    mask = padding_mask(torch.tensor(lengths))
    return torch.full(mask.shape, 7).masked_fill(~mask, PAD), mask


def test_beam_two_finds_what_greedy_misses():
    src, mask = toy_source()
    greedy = greedy_search(BigramToy(), src, mask, max_len_a=0, max_len_b=3)[0]
    assert greedy.tokens == [A, A, A]  # then EOS forced at the length limit
    assert greedy.score == pytest.approx(math.log(0.5 * 0.4 * 0.4 * 0.3))
    best = beam_search(BigramToy(), src, mask, beam_size=2, alpha=0.0, max_len_a=0, max_len_b=3)[0][0]
    assert best.tokens == [B]
    assert best.score == pytest.approx(math.log(0.4 * 0.9))
    assert best.normalized_score == best.score  # alpha = 0: no length normalisation


def test_toy_n_best_are_the_first_k_finished_ranked():
    src, mask = toy_source()
    hypotheses = beam_search(BigramToy(), src, mask, beam_size=2, alpha=0.0, max_len_a=0, max_len_b=5, n_best=2)[0]
    # Step 1 finishes "B" (0.36); step 2 finishes "A B" (0.5·0.3·0.9 = 0.135): two finished, stop.
    assert [h.tokens for h in hypotheses] == [[B], [A, B]]
    assert [h.score for h in hypotheses] == pytest.approx([math.log(0.36), math.log(0.135)])


def test_toy_attention_has_one_row_per_token_and_eos_over_real_source():
    src, mask = toy_source((4, 2))
    for hypothesis in greedy_search(BigramToy(), src, mask, max_len_a=0, max_len_b=2):
        assert hypothesis.attention.shape[0] == len(hypothesis.tokens) + 1
    hypotheses = beam_search(BigramToy(), src, mask, beam_size=2, max_len_a=0, max_len_b=3)
    assert hypotheses[0][0].attention.shape == (2, 4)
    assert hypotheses[1][0].attention.shape == (2, 2)
    np.testing.assert_allclose(hypotheses[1][0].attention, 0.5)


def test_length_penalty_formula_and_its_effect():
    assert length_penalty(1, 0.6) == pytest.approx((6 / 6) ** 0.6)
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    assert length_penalty(30, 0.0) == 1.0
    src, mask = toy_source()
    hypothesis = beam_search(BigramToy(), src, mask, beam_size=2, alpha=1.0, max_len_a=0, max_len_b=3)[0][0]
    assert hypothesis.normalized_score == pytest.approx(hypothesis.score / ((5 + 2) / 6))


def test_maximum_length_forces_eos():
    src, mask = toy_source((4,))
    for beam in (1, 3):
        for hypothesis in beam_search(BigramToy(), src, mask, beam_size=beam, alpha=0, max_len_a=0.5,
                                      max_len_b=0, n_best=beam)[0]:
            assert len(hypothesis.tokens) <= 2  # ⌊0.5 · 4 + 0⌋
    only_eos = greedy_search(BigramToy(), src, mask, max_len_a=0, max_len_b=0)[0]
    assert only_eos.tokens == [] and only_eos.score == pytest.approx(math.log(0.1))


def test_search_argument_errors():
    src, mask = toy_source()
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(BigramToy(), src, mask, beam_size=0)
    with pytest.raises(ValueError, match="n_best"):
        beam_search(BigramToy(), src, mask, beam_size=2, n_best=3)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(BigramToy(), src, mask, alpha=-1)
    with pytest.raises(ValueError, match="src_mask"):
        greedy_search(BigramToy(), src, mask.long())


# ------------------------------------------------------------------------------------------------
# RNN translators: exactness of the batched search
# ------------------------------------------------------------------------------------------------

VOCAB = 17
MODELS = [
    dict(flow="parallel", attention="scaled_dot", attention_options={"kq_dim": 8}),
    dict(flow="bahdanau", attention="additive", cell="gru"),
    dict(flow="luong", attention="local-m", attention_options={"window": 2}),
    dict(flow="parallel", attention="multihead", attention_options={"num_heads": 2}, decoder_layers=2),
]


def reversal_data(pairs=16, seed=0):
    """Random sentences (+ EOS) and their reversals, as attnmt.data would batch them."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 7, (pairs,), generator=generator)
    width = int(lengths.max()) + 1
    src, tgt_in, tgt_out = (torch.zeros(pairs, width, dtype=torch.long) for _ in range(3))
    for i, length in enumerate(lengths.tolist()):
        tokens = torch.randint(4, VOCAB, (length,), generator=generator)
        src[i, : length + 1] = torch.cat([tokens, torch.tensor([EOS])])
        tgt_in[i, : length + 1] = torch.cat([torch.tensor([BOS]), tokens.flip(0)])
        tgt_out[i, : length + 1] = torch.cat([tokens.flip(0), torch.tensor([EOS])])
    return src, padding_mask(lengths + 1, width), tgt_in, tgt_out


@functools.lru_cache(maxsize=None)
def half_trained_model(index: int):
    """MODELS[index] after 20 Adam steps on reversal: outputs of varied lengths where beam search
    and greedy search often disagree (a random model only loops to the length limit)."""
    torch.manual_seed(0)
    model = build_model(dict(type="rnn", embed_dim=8, hidden_dim=16, dropout=0.2, **MODELS[index]), VOCAB, VOCAB)
    src, mask, tgt_in, tgt_out = reversal_data()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(20):
        logits, _ = model(src, mask, tgt_in)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def random_sources(lengths=(5, 2, 7, 1, 4), seed=0):
    generator = torch.Generator().manual_seed(seed)
    mask = padding_mask(torch.tensor(lengths))
    src = torch.randint(4, VOCAB, mask.shape, generator=generator).masked_fill(~mask, PAD)
    src[torch.arange(len(lengths)), torch.tensor(lengths) - 1] = EOS
    return src, mask


def assert_same(found: Hypothesis, expected: Hypothesis):
    assert found.tokens == expected.tokens
    assert found.score == pytest.approx(expected.score, abs=1e-5)
    assert found.normalized_score == pytest.approx(expected.normalized_score, abs=1e-5)
    np.testing.assert_allclose(found.attention, expected.attention, atol=1e-5)


MODEL_IDS = [f"{o['flow']}-{o['attention']}" for o in MODELS]


@pytest.mark.parametrize("index", range(len(MODELS)), ids=MODEL_IDS)
def test_beam_one_is_greedy(index):
    model = half_trained_model(index)
    src, mask = random_sources()
    greedy = greedy_search(model, src, mask)
    beam = beam_search(model, src, mask, beam_size=1)
    for found, expected in zip(beam, greedy):
        assert_same(found[0], expected)
    assert len({len(h.tokens) for h in greedy}) > 1  # the check covered different lengths


@pytest.mark.parametrize("index", range(len(MODELS)), ids=MODEL_IDS)
def test_batched_beam_search_equals_one_sentence_at_a_time(index):
    model = half_trained_model(index)
    src, mask = random_sources()
    batched = beam_search(model, src, mask, beam_size=4, n_best=3, max_len_a=1.0, max_len_b=4)
    for i, length in enumerate(mask.sum(1).tolist()):
        alone = beam_search(model, src[i : i + 1, :length], mask[i : i + 1, :length], beam_size=4, n_best=3,
                            max_len_a=1.0, max_len_b=4)[0]
        assert len(batched[i]) == len(alone) == 3
        for found, expected in zip(batched[i], alone):
            assert_same(found, expected)
        scores = [h.normalized_score for h in batched[i]]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in batched[i]}) == 3
        for h in batched[i]:
            assert h.attention.shape == (len(h.tokens) + 1, length)
            assert EOS not in h.tokens and BOS not in h.tokens and PAD not in h.tokens
    greedy = greedy_search(model, src, mask, max_len_a=1.0, max_len_b=4)
    assert any(b[0].tokens != g.tokens for b, g in zip(batched, greedy))  # the beams mattered


def test_batched_greedy_equals_one_sentence_at_a_time():
    model = half_trained_model(0)
    src, mask = random_sources()
    batched = greedy_search(model, src, mask)
    for i, length in enumerate(mask.sum(1).tolist()):
        assert_same(batched[i], greedy_search(model, src[i : i + 1, :length], mask[i : i + 1, :length])[0])


def test_scores_are_the_models_log_probabilities_and_mode_is_restored():
    model = half_trained_model(2)
    model.train()
    src, mask = random_sources(lengths=(6,))
    hypothesis = beam_search(model, src, mask, beam_size=3)[0][0]
    assert model.training  # search ran in eval mode and handed the model back as it was
    model.eval()
    tgt_in = torch.tensor([[BOS] + hypothesis.tokens])
    tgt_out = torch.tensor(hypothesis.tokens + [EOS])
    with torch.no_grad():
        logits, attention = model(src, mask, tgt_in, return_attention=True)
    log_probs = logits[0].log_softmax(-1).gather(1, tgt_out.unsqueeze(1)).sum()
    assert hypothesis.score == pytest.approx(float(log_probs), abs=1e-4)
    np.testing.assert_allclose(hypothesis.attention, attention[0].numpy(), atol=1e-5)

