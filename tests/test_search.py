"""Greedy and batched beam search (attnmt.decoding.search) on a hand-made toy model and on RNN translators."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from torch import nn

from attnmt.attention.functional import padding_mask
from attnmt.decoding.search import Hypothesis, beam_search, greedy_search, length_penalty
from attnmt.models import build_model

from helpers import BigramToy, Rows

PAD, UNK, BOS, EOS, A, B = range(6)  # the toy's tokens (helpers.BigramToy)


def toy_source(lengths=(3,)):
    mask = padding_mask(torch.tensor(lengths))
    return torch.full(mask.shape, 7).masked_fill(~mask, PAD), mask


def test_beam_two_finds_what_greedy_misses():
    src, mask = toy_source()
    greedy = greedy_search(BigramToy(), src, mask, max_len_a=0, max_len_b=3)[0]
    assert greedy.tokens == [A, A, A]  # then EOS forced at the length limit
    assert greedy.score == pytest.approx(math.log(0.5 * 0.4 * 0.4 * 0.3))
    best = beam_search(BigramToy(), src, mask, beam=2, alpha=0.0, max_len_a=0, max_len_b=3)[0][0]
    assert best.tokens == [B]
    assert best.score == pytest.approx(math.log(0.4 * 0.9))
    assert best.normalized_score == best.score  # alpha = 0: no length normalisation


def test_greedy_search_goes_on_from_a_forced_prefix_and_scores_it_too():
    src, mask = toy_source((3, 3))
    forced = greedy_search(BigramToy(), src, mask, max_len_a=0, max_len_b=3, prefix=[[B], [A, B]])
    assert forced[0].tokens == [B] and forced[0].score == pytest.approx(math.log(0.4 * 0.9))  # B, then EOS
    assert forced[1].tokens == [A, B] and forced[1].score == pytest.approx(math.log(0.5 * 0.3 * 0.9))
    long = greedy_search(BigramToy(), src[:1], mask[:1], max_len_a=0, max_len_b=1, prefix=[[A, A, A]])[0]
    assert long.tokens == [A, A, A]  # a prefix past the length limit moves the limit to its end
    with pytest.raises(ValueError, match="without PAD, BOS or EOS"):
        greedy_search(BigramToy(), src[:1], mask[:1], prefix=[[EOS]])


def distribution(**probabilities):
    """log P over the toy vocabulary from {token name: probability}; unnamed tokens get 0."""
    log_p = torch.full((6,), float("-inf"), dtype=torch.float64)
    for name, p in probabilities.items():
        log_p[{"A": A, "B": B, "EOS": EOS}[name]] = math.log(p)
    return log_p


class CountingToy(nn.Module):
    """P(next) depends on how many A's came before: ``start`` at the first step, ``early`` while
    there are fewer than four, ``late`` from four on (a B counts as four: it ends the sentence).

    state = the number of A's so far; ``calls`` counts decode_step calls.
    """

    def __init__(self, start, early, late):
        super().__init__()
        self.register_buffer("tables", torch.stack([start, early, late]))
        self.calls = 0

    def encode(self, src, src_mask):
        return Rows(src_mask)

    def init_decoder_state(self, encoded):
        return Rows(torch.zeros(encoded.tensors[0].shape[0], dtype=torch.long))

    def decode_step(self, prev_tokens, state, encoded, step):
        self.calls += 1
        (count,) = state.tensors
        count = torch.where(prev_tokens == A, count + 1, count)
        count = torch.where(prev_tokens == B, torch.full_like(count, 4), count)
        table = torch.where(count >= 4, 2, 1) if step > 0 else torch.zeros_like(count)
        mask = encoded.tensors[0]
        attention = mask.double() / mask.sum(1, keepdim=True)
        return self.tables[table].clone(), attention, Rows(count)


def early_eos_toy():
    """P(A) = 0.9, P(EOS) = 0.09, P(B) = 0.01 until four A's, then P(EOS) = 0.99: the best output
    is A A A A, but EOS is the second-best token of every early step."""
    early = distribution(A=0.9, EOS=0.09, B=0.01)
    return CountingToy(early, early, distribution(EOS=0.99, A=0.005, B=0.005))


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_early_eos_candidates_do_not_end_the_search(alpha):
    """Regression: beam 2 used to stop at the second step, with "EOS" and "A EOS" finished, and
    return [A] (score log 0.081 = -2.513) although the live beam "A A" leads to A A A A (-0.432)."""
    src, mask = toy_source()
    greedy = greedy_search(early_eos_toy(), src, mask, max_len_a=0, max_len_b=10, alpha=alpha)[0]
    assert greedy.tokens == [A, A, A, A]
    assert greedy.score == pytest.approx(math.log(0.9**4 * 0.99))
    model = early_eos_toy()
    found = beam_search(model, src, mask, beam=2, alpha=alpha, max_len_a=0, max_len_b=10)[0][0]
    assert found.tokens == [A, A, A, A]
    assert found.score == pytest.approx(math.log(0.9**4 * 0.99))
    assert found.normalized_score == pytest.approx(found.score / length_penalty(5, alpha))
    # It stopped as soon as no live beam could win, not at the length limit (11 steps).
    assert model.calls == 5


def test_live_beams_are_bounded_with_the_longest_length_penalty():
    """With α > 0 a live beam scoring below a finished hypothesis's normalized score can still win
    once normalised over more tokens. Here "EOS" (0.4, normalized log 0.4 = -0.92) ends at the
    first step, while "A" (0.35) grows into A A A A EOS: log(0.35 · 0.97³ · 0.99) / (10/6) = -0.69.
    Stopping when the best live score is below -0.92 (the rule for α = 0) would return []."""
    toy = CountingToy(distribution(EOS=0.4, A=0.35, B=0.25), distribution(A=0.97, EOS=0.03),
                      distribution(EOS=0.99, A=0.005, B=0.005))
    src, mask = toy_source()
    assert greedy_search(toy, src, mask, max_len_a=0, max_len_b=8, alpha=1.0)[0].tokens == []
    for beam in (2, 3):
        best = beam_search(toy, src, mask, beam=beam, alpha=1.0, max_len_a=0, max_len_b=8)[0][0]
        assert best.tokens == [A, A, A, A]
        assert best.normalized_score == pytest.approx(math.log(0.35 * 0.97**3 * 0.99) / (10 / 6))
    # Without length normalisation "EOS" is the best translation.
    assert beam_search(toy, src, mask, beam=2, alpha=0.0, max_len_a=0, max_len_b=8)[0][0].tokens == []


def test_toy_n_best_are_ranked_by_normalized_score():
    src, mask = toy_source()
    hypotheses = beam_search(BigramToy(), src, mask, beam=2, alpha=0.0, max_len_a=0, max_len_b=5, n_best=2)[0]
    # "B EOS" (0.36) ends at step 2, "A B EOS" (0.5·0.3·0.9 = 0.135) at step 3; the live beams are
    # then "A A A" (0.08) and "A A B" (0.06): neither can beat 0.135, so the search stops there.
    assert [h.tokens for h in hypotheses] == [[B], [A, B]]
    assert [h.score for h in hypotheses] == pytest.approx([math.log(0.36), math.log(0.135)])


def test_toy_attention_has_one_row_per_token_and_eos_over_real_source():
    src, mask = toy_source((4, 2))
    for hypothesis in greedy_search(BigramToy(), src, mask, max_len_a=0, max_len_b=2):
        assert hypothesis.attention.shape[0] == len(hypothesis.tokens) + 1
    hypotheses = beam_search(BigramToy(), src, mask, beam=2, max_len_a=0, max_len_b=3)
    assert hypotheses[0][0].attention.shape == (2, 4)
    assert hypotheses[1][0].attention.shape == (2, 2)
    np.testing.assert_allclose(hypotheses[1][0].attention, 0.5)


def test_length_penalty_formula_and_its_effect():
    assert length_penalty(1, 0.6) == pytest.approx((6 / 6) ** 0.6)
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    assert length_penalty(30, 0.0) == 1.0
    src, mask = toy_source()
    hypothesis = beam_search(BigramToy(), src, mask, beam=2, alpha=1.0, max_len_a=0, max_len_b=3)[0][0]
    assert hypothesis.normalized_score == pytest.approx(hypothesis.score / ((5 + 2) / 6))


def test_maximum_length_forces_eos():
    src, mask = toy_source((4,))
    for beam in (1, 3):
        for hypothesis in beam_search(BigramToy(), src, mask, beam=beam, alpha=0, max_len_a=0.5,
                                      max_len_b=0, n_best=beam)[0]:
            assert len(hypothesis.tokens) <= 2  # ⌊0.5 · 4 + 0⌋
    only_eos = greedy_search(BigramToy(), src, mask, max_len_a=0, max_len_b=0)[0]
    assert only_eos.tokens == [] and only_eos.score == pytest.approx(math.log(0.1))


def test_search_argument_errors():
    src, mask = toy_source()
    with pytest.raises(ValueError, match="beam"):
        beam_search(BigramToy(), src, mask, beam=0)
    with pytest.raises(ValueError, match="n_best"):
        beam_search(BigramToy(), src, mask, beam=2, n_best=3)
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


@functools.cache
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


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(MODELS)), ids=MODEL_IDS)
def test_beam_one_is_greedy(index):
    model = half_trained_model(index)
    src, mask = random_sources()
    greedy = greedy_search(model, src, mask)
    beam = beam_search(model, src, mask, beam=1)
    for found, expected in zip(beam, greedy):
        assert_same(found[0], expected)
    assert len({len(h.tokens) for h in greedy}) > 1  # the check covered different lengths


@pytest.mark.parametrize("index", range(len(MODELS)), ids=MODEL_IDS)
def test_batched_beam_search_equals_one_sentence_at_a_time(index):
    model = half_trained_model(index)
    src, mask = random_sources()
    batched = beam_search(model, src, mask, beam=4, n_best=3, max_len_a=1.0, max_len_b=4)
    for i, length in enumerate(mask.sum(1).tolist()):
        alone = beam_search(model, src[i : i + 1, :length], mask[i : i + 1, :length], beam=4, n_best=3,
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


def exhaustive_beam_search(model, src, mask, K, alpha, max_len_a, max_len_b, n_best):
    """Beam search on one unpadded sentence as a plain loop *without* a stopping rule: every beam
    is followed to the length limit. Same pruning as attnmt.decoding.search: of the 2K best continuations,
    EOS in the top K ends a hypothesis and the K best others go on. Returns the n_best best
    finished (tokens, score, normalized score), best first."""
    limit = int(max_len_a * mask.shape[1] + max_len_b)
    with torch.no_grad():
        encoded = model.encode(src, mask).index_select(torch.zeros(K, dtype=torch.long))
        state = model.init_decoder_state(encoded)
        scores = torch.full((K,), float("-inf"), dtype=torch.float64)
        scores[0] = 0.0
        beams, prev, finished = [[] for _ in range(K)], torch.full((K,), BOS), []
        for step in range(limit + 1):
            log_probs, _, state = model.decode_step(prev, state, encoded, step)
            log_probs = log_probs.double()
            vocab = log_probs.shape[-1]
            log_probs[:, [PAD, BOS]] = float("-inf")
            if step == limit:
                log_probs[:, [t for t in range(vocab) if t != EOS]] = float("-inf")
            top_scores, top_index = (scores.unsqueeze(1) + log_probs).view(-1).topk(2 * K)
            going_on = []
            for rank, (score, index) in enumerate(zip(top_scores.tolist(), top_index.tolist())):
                beam, token = divmod(index, vocab)
                if token == EOS:
                    if rank < K and score > float("-inf"):
                        finished.append((beams[beam], score, score / length_penalty(len(beams[beam]) + 1, alpha)))
                elif len(going_on) < K:
                    going_on.append((beam, token, score))
            rows = torch.tensor([beam for beam, _, _ in going_on])
            state = state.index_select(rows)
            beams = [beams[beam] + [token] for beam, token, _ in going_on]
            scores = torch.tensor([score for _, _, score in going_on], dtype=torch.float64)
            prev = torch.tensor([token for _, token, _ in going_on])
    return sorted(finished, key=lambda h: -h[2])[:n_best]


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("index", range(len(MODELS)), ids=MODEL_IDS)
def test_stopping_early_finds_what_following_every_beam_to_the_limit_finds(index, alpha):
    """The stopping rule is exact: the batched search returns the n_best hypotheses of the same
    beam search run to the length limit, and still stops before the limit for some sentences."""
    model = half_trained_model(index)
    src, mask = random_sources(lengths=(5, 2, 7, 1, 4, 6))
    calls = []
    original_step = model.decode_step
    model.decode_step = lambda prev, *args: calls.append(len(prev)) or original_step(prev, *args)
    try:
        found = beam_search(model, src, mask, beam=3, alpha=alpha, n_best=2, max_len_a=1.0, max_len_b=6)
    finally:
        del model.decode_step
    for i, length in enumerate(mask.sum(1).tolist()):
        expected = exhaustive_beam_search(model, src[i : i + 1, :length], mask[i : i + 1, :length], 3, alpha,
                                          1.0, 6, 2)
        assert [h.tokens for h in found[i]] == [tokens for tokens, _, _ in expected]
        assert [h.score for h in found[i]] == pytest.approx([score for _, score, _ in expected], abs=1e-5)
        assert [h.normalized_score for h in found[i]] == pytest.approx([n for _, _, n in expected], abs=1e-5)
    # Fewer rows decoded than if every sentence's K beams had run to its limit (length + 6 + 1 steps).
    assert sum(calls) < 3 * sum(length + 7 for length in mask.sum(1).tolist())


def test_more_beams_than_tokens_search_like_the_plain_loop():
    """Vocabulary 6 (two words, EOS and three never produced), beam 8: the first step (one row per
    sentence) has fewer candidates than beams; dead beams fill up and change nothing."""
    torch.manual_seed(2)
    model = build_model(dict(type="rnn", embed_dim=8, hidden_dim=16, attention="scaled_dot"), VOCAB, 6).eval()
    src, mask = random_sources(lengths=(3, 1, 4))
    found = beam_search(model, src, mask, beam=8, n_best=3, max_len_a=1.0, max_len_b=2)
    for i, length in enumerate(mask.sum(1).tolist()):
        expected = exhaustive_beam_search(model, src[i : i + 1, :length], mask[i : i + 1, :length], 8, 0.6,
                                          1.0, 2, 3)
        assert [h.tokens for h in found[i]] == [tokens for tokens, _, _ in expected]
        assert [h.score for h in found[i]] == pytest.approx([score for _, score, _ in expected], abs=1e-5)


def test_bfloat16_autocast_keeps_log_probabilities_float32():
    model = half_trained_model(0)
    src, mask = random_sources()
    encoded = model.encode(src, mask)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        log_probs, _, _ = model.decode_step(torch.full((5,), BOS), model.init_decoder_state(encoded), encoded, 0)
        found = beam_search(model, src, mask, beam=3)
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(5), rtol=0, atol=1e-5)
    expected = beam_search(model, src, mask, beam=3)
    assert all(f[0].attention.dtype == np.float32 for f in found)
    # bfloat16 products move scores by about 1%, not more, on this model.
    assert [f[0].score for f in found] == pytest.approx([e[0].score for e in expected], rel=0.05, abs=0.05)


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
    hypothesis = beam_search(model, src, mask, beam=3)[0][0]
    assert model.training  # search ran in eval mode and handed the model back as it was
    model.eval()
    tgt_in = torch.tensor([[BOS] + hypothesis.tokens])
    tgt_out = torch.tensor(hypothesis.tokens + [EOS])
    with torch.no_grad():
        logits, attention = model(src, mask, tgt_in, return_attention=True)
    log_probs = logits[0].log_softmax(-1).gather(1, tgt_out.unsqueeze(1)).sum()
    assert hypothesis.score == pytest.approx(float(log_probs), abs=1e-4)
    np.testing.assert_allclose(hypothesis.attention, attention[0].numpy(), atol=1e-5)



def test_search_works_for_the_transformer_too():
    """Search uses only the model interface: a tiny Transformer gives the same batched and
    one-at-a-time results, and beam 1 equals greedy."""
    pytest.importorskip("attnmt.models.transformer")
    torch.manual_seed(0)
    config = dict(type="transformer", d_model=16, num_heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=2)
    model = build_model(config, VOCAB, VOCAB)
    src, mask = random_sources()
    batched = beam_search(model, src, mask, beam=4, n_best=2, max_len_a=1.0, max_len_b=3)
    for i, length in enumerate(mask.sum(1).tolist()):
        alone = beam_search(model, src[i : i + 1, :length], mask[i : i + 1, :length], beam=4, n_best=2,
                            max_len_a=1.0, max_len_b=3)[0]
        for found, expected in zip(batched[i], alone, strict=True):
            assert_same(found, expected)
    for found, expected in zip(beam_search(model, src, mask, beam=1), greedy_search(model, src, mask)):
        assert_same(found[0], expected)


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_when_finished_sentences_leave_the_tensors_changes_nothing(monkeypatch, fraction):
    """0: each done sentence leaves at once; 1: done sentences ride along to the end."""
    import attnmt.decoding.search as search

    model = half_trained_model(0)
    src, mask = random_sources(lengths=(5, 2, 7, 1, 4, 3, 6, 2))
    expected = beam_search(model, src, mask, beam=3, n_best=2, max_len_a=1.0, max_len_b=4)
    monkeypatch.setattr(search, "RETIRED_FRACTION", fraction)
    found = beam_search(model, src, mask, beam=3, n_best=2, max_len_a=1.0, max_len_b=4)
    for found_n_best, expected_n_best in zip(found, expected):
        assert len(found_n_best) == len(expected_n_best) == 2
        for f, e in zip(found_n_best, expected_n_best):
            assert_same(f, e)
