"""The Transformer translator: masks, padding, the incremental-decoding cache, search, its config."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnmt.decoding.search import beam_search, greedy_search
from attnmt.errors import ConfigError
from attnmt.models import build_model
from attnmt.models.transformer import Transformer, TransformerConfig, sinusoidal_positions

from helpers import tiny_transformer_config

PAD, BOS, EOS = 0, 2, 3
VOCAB = 14  # ids 4 … 13 are words


def tiny_model(vocab: int = VOCAB, **overrides) -> Transformer:
    return Transformer(tiny_transformer_config(**overrides), vocab, vocab).eval()


def pad_batch(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, L] and their mask [B, L] (True = real token)."""
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), PAD, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence)
    return ids, ids != PAD


def random_batch(generator: torch.Generator, batch: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sources of different lengths (with EOS) and BOS-prefixed targets of different lengths."""
    sources, targets = [], []
    for row in range(batch):
        source_length, target_length = 3 + 2 * row, 6 - row
        sources.append(torch.randint(4, VOCAB, (source_length,), generator=generator).tolist() + [EOS])
        targets.append([BOS] + torch.randint(4, VOCAB, (target_length,), generator=generator).tolist())
    src, src_mask = pad_batch(sources)
    tgt_in, _ = pad_batch(targets)
    return src, src_mask, tgt_in


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(1)


# ------------------------------------------------------------------------------------------------
# Masks and padding
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_changing_a_future_target_token_leaves_earlier_outputs_unchanged(norm, generator):
    model = tiny_model(norm=norm)
    src, src_mask, tgt_in = random_batch(generator)
    changed = tgt_in.clone()
    changed[0, 3] = 4 if int(tgt_in[0, 3]) != 4 else 5
    with torch.no_grad():
        logits, _ = model(src, src_mask, tgt_in)
        changed_logits, _ = model(src, src_mask, changed)
    torch.testing.assert_close(changed_logits[0, :3], logits[0, :3], rtol=0, atol=1e-6)
    assert (changed_logits[0, 3:] - logits[0, 3:]).abs().amax(dim=-1).min() > 1e-4
    torch.testing.assert_close(changed_logits[1:], logits[1:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_padding_changes_no_output_at_a_real_position(norm, generator):
    model = tiny_model(norm=norm)
    src, src_mask, tgt_in = random_batch(generator)
    with torch.no_grad():
        logits, attention = model(src, src_mask, tgt_in, return_attention=True)
        # Each sentence alone, with no padding at all …
        for row in range(src.shape[0]):
            source_length, target_length = int(src_mask[row].sum()), int((tgt_in[row] != PAD).sum())
            alone, alone_attention = model(
                src[row:row + 1, :source_length],
                src_mask[row:row + 1, :source_length],
                tgt_in[row:row + 1, :target_length],
                return_attention=True,
            )
            torch.testing.assert_close(alone[0], logits[row, :target_length], rtol=0, atol=1e-5)
            torch.testing.assert_close(
                alone_attention[0], attention[row, :target_length, :source_length], rtol=0, atol=1e-6
            )
        # … and the whole batch with five more columns of padding on both sides.
        padded, padded_attention = model(
            F.pad(src, (0, 5), value=PAD), F.pad(src_mask, (0, 5), value=False),
            F.pad(tgt_in, (0, 5), value=PAD), return_attention=True,
        )
    torch.testing.assert_close(padded[:, : tgt_in.shape[1]], logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(padded_attention[:, : tgt_in.shape[1], : src.shape[1]], attention, rtol=0, atol=1e-6)
    assert padded_attention[:, :, src.shape[1]:].abs().max() == 0


def test_cross_attention_per_layer_and_head_is_a_distribution_over_real_source_tokens(generator):
    model = tiny_model(decoder_layers=3)
    src, src_mask, tgt_in = random_batch(generator)
    B, S = src.shape
    T = tgt_in.shape[1]
    with torch.no_grad():
        _, heads = model(src, src_mask, tgt_in, return_attention="heads")
        _, layers = model(src, src_mask, tgt_in, return_attention="layers")
        _, last = model(src, src_mask, tgt_in, return_attention=True)
        _, none = model(src, src_mask, tgt_in)
    assert none is None
    assert heads.shape == (B, 3, 4, T, S)
    assert layers.shape == (B, 3, T, S)
    assert last.shape == (B, T, S)
    torch.testing.assert_close(heads.sum(dim=-1), torch.ones(B, 3, 4, T))
    assert heads.masked_select(~src_mask[:, None, None, None, :]).abs().max() == 0
    torch.testing.assert_close(layers, heads.mean(dim=2))
    torch.testing.assert_close(last, heads[:, -1].mean(dim=1))
    # The heads do not all attend alike (they have different projections).
    assert (heads[:, -1, 0] - heads[:, -1, 1]).abs().max() > 1e-3
    with pytest.raises(ValueError, match="return_attention"):
        model(src, src_mask, tgt_in, return_attention="all")


@pytest.mark.parametrize("overrides", [{}, {"norm": "post", "positions": "learned", "tie_output": False}])
def test_every_parameter_gets_a_gradient_in_training_mode(overrides, generator):
    """Distributed training needs it: DDP fails on parameters that take no part in the loss."""
    model = tiny_model(dropout=0.1, attention_dropout=0.1, **overrides).train()
    src, src_mask, tgt_in = random_batch(generator)
    logits, _ = model(src, src_mask, tgt_in)
    logits.logsumexp(dim=-1).sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


# ------------------------------------------------------------------------------------------------
# Incremental decoding
# ------------------------------------------------------------------------------------------------


def decode_incrementally(model, src, src_mask, tgt_in):
    """Log-probs [B, T, V] and attention [B, T, S] from one decode_step per target position."""
    encoded = model.encode(src, src_mask)
    state = model.init_decoder_state(encoded)
    log_probs, attention = [], []
    for step in range(tgt_in.shape[1]):
        step_log_probs, step_attention, state = model.decode_step(tgt_in[:, step], state, encoded, step)
        log_probs.append(step_log_probs)
        attention.append(step_attention)
    return torch.stack(log_probs, dim=1), torch.stack(attention, dim=1)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_cached_decoding_equals_recomputing_the_whole_prefix(norm, positions, generator):
    model = tiny_model(norm=norm, positions=positions)
    src, src_mask, tgt_in = random_batch(generator)
    with torch.no_grad():
        logits, attention = model(src, src_mask, tgt_in, return_attention=True)
        log_probs, step_attention = decode_incrementally(model, src, src_mask, tgt_in)
        # The same through recomputation: teacher forcing on every prefix, last position only.
        for t in range(1, tgt_in.shape[1] + 1):
            prefix_logits, prefix_attention = model(src, src_mask, tgt_in[:, :t], return_attention=True)
            torch.testing.assert_close(
                log_probs[:, t - 1], prefix_logits[:, -1].log_softmax(-1), rtol=0, atol=1e-5
            )
            torch.testing.assert_close(step_attention[:, t - 1], prefix_attention[:, -1], rtol=0, atol=1e-5)
    torch.testing.assert_close(log_probs, logits.log_softmax(-1), rtol=0, atol=1e-5)
    torch.testing.assert_close(step_attention, attention, rtol=0, atol=1e-5)


def test_cached_decoding_in_float64_is_exact_to_rounding(generator):
    model = tiny_model().double()
    src, src_mask, tgt_in = random_batch(generator)
    with torch.no_grad():
        logits, attention = model(src, src_mask, tgt_in, return_attention=True)
        log_probs, step_attention = decode_incrementally(model, src, src_mask, tgt_in)
    assert log_probs.dtype == torch.float64
    torch.testing.assert_close(log_probs, logits.log_softmax(-1), rtol=0, atol=1e-12)
    torch.testing.assert_close(step_attention, attention, rtol=0, atol=1e-12)


def test_reordering_the_cache_with_index_select_follows_the_reordered_batch(generator):
    """What beam search does: expand sentences, decode, shuffle the hypotheses, decode on."""
    model = tiny_model()
    src, src_mask, tgt_in = random_batch(generator)
    expand = torch.tensor([0, 0, 1, 2, 2])
    shuffle = torch.tensor([4, 1, 0, 3, 2])
    with torch.no_grad():
        encoded = model.encode(src, src_mask).index_select(expand)
        state = model.init_decoder_state(encoded)
        tokens = tgt_in.index_select(0, expand)
        for step in range(2):
            _, _, state = model.decode_step(tokens[:, step], state, encoded, step)
        state, encoded, tokens = state.index_select(shuffle), encoded.index_select(shuffle), tokens[shuffle]
        log_probs, _, state = model.decode_step(tokens[:, 2], state, encoded, 2)
        rows = expand[shuffle]
        expected, _ = model(src[rows], src_mask[rows], tokens[:, :3])
    torch.testing.assert_close(log_probs, expected[:, -1].log_softmax(-1), rtol=0, atol=1e-5)
    assert state.length == 3 and state.keys[0].shape == (5, 4, 3, 8)


def test_decode_step_refuses_a_step_that_does_not_match_the_cache(generator):
    model = tiny_model()
    src, src_mask, _ = random_batch(generator)
    encoded = model.encode(src, src_mask)
    state = model.init_decoder_state(encoded)
    with pytest.raises(ValueError, match="step=1"):
        model.decode_step(torch.full((3,), BOS), state, encoded, 1)


# ------------------------------------------------------------------------------------------------
# Learning and search
# ------------------------------------------------------------------------------------------------


def reversal_pairs(count: int, generator: torch.Generator) -> list[tuple[list[int], list[int]]]:
    """Made-up task: the target is the source (3–6 words) backwards."""
    pairs = []
    for _ in range(count):
        length = int(torch.randint(3, 7, (1,), generator=generator))
        words = torch.randint(4, VOCAB, (length,), generator=generator).tolist()
        pairs.append((words, words[::-1]))
    return pairs


@pytest.fixture(scope="module", params=["pre", "post"])
def reverser(request, training_seed):
    """A tiny Transformer (pre- or post-norm) trained on 20 reversal pairs until it knows them: over
    seeds 0-11 the loss fell below 0.005 within 73-123 of its 300 steps."""
    torch.manual_seed(training_seed)
    pairs = reversal_pairs(20, torch.Generator().manual_seed(1))
    src, src_mask = pad_batch([source + [EOS] for source, _ in pairs])
    tgt_in, _ = pad_batch([[BOS] + target for _, target in pairs])
    tgt_out, _ = pad_batch([target + [EOS] for _, target in pairs])
    model = Transformer(tiny_transformer_config(norm=request.param, share_embeddings=True), VOCAB, VOCAB)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(300):
        logits, _ = model(src, src_mask, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.005:
            break
    return model.eval(), pairs, src, src_mask, loss.item()


def hypothesis_log_prob(model, src, src_mask, tokens: list[int]) -> float:
    """log P(tokens + EOS | src) by teacher forcing, for one sentence."""
    tgt_in = torch.tensor([[BOS] + tokens])
    tgt_out = torch.tensor([tokens + [EOS]])
    with torch.no_grad():
        logits, _ = model(src, src_mask, tgt_in)
    return logits.log_softmax(-1).gather(2, tgt_out.unsqueeze(-1)).sum().item()


@pytest.mark.slow
@pytest.mark.outcome
def test_a_tiny_transformer_learns_to_reverse_20_sentences_and_greedy_search_finds_them(reverser, record_property):
    model, pairs, src, src_mask, loss = reverser
    record_property("final_loss", loss)
    assert loss < 0.01
    greedy = greedy_search(model, src, src_mask)
    assert [h.tokens for h in greedy] == [target for _, target in pairs]
    for row, (hypothesis, (source, target)) in enumerate(zip(greedy, pairs)):
        assert hypothesis.attention.shape == (len(target) + 1, len(source) + 1)
        torch.testing.assert_close(
            torch.from_numpy(hypothesis.attention).sum(dim=1), torch.ones(len(target) + 1), rtol=0, atol=1e-5
        )
        expected = hypothesis_log_prob(model, src[row:row + 1], src_mask[row:row + 1], target)
        assert math.isclose(hypothesis.score, expected, abs_tol=1e-4)


def test_beam_search_runs_on_the_cache_and_scores_hypotheses_as_teacher_forcing_does(reverser):
    model, pairs, src, src_mask, _ = reverser
    greedy = greedy_search(model, src, src_mask)
    single = beam_search(model, src, src_mask, beam=1)
    assert [hyps[0].tokens for hyps in single] == [h.tokens for h in greedy]
    for hyps, hypothesis in zip(single, greedy):
        assert math.isclose(hyps[0].score, hypothesis.score, abs_tol=1e-4)
    beams = beam_search(model, src, src_mask, beam=4, n_best=4)
    for row, hyps in enumerate(beams):
        assert len(hyps) == 4
        assert [h.normalized_score for h in hyps] == sorted((h.normalized_score for h in hyps), reverse=True)
        for hypothesis in hyps:
            expected = hypothesis_log_prob(model, src[row:row + 1], src_mask[row:row + 1], hypothesis.tokens)
            assert math.isclose(hypothesis.score, expected, abs_tol=1e-4)
            assert hypothesis.attention.shape == (len(hypothesis.tokens) + 1, int(src_mask[row].sum()))


# ------------------------------------------------------------------------------------------------
# Embeddings and positions
# ------------------------------------------------------------------------------------------------


def test_shared_embeddings_use_one_matrix_for_source_target_and_output():
    shared = tiny_model(share_embeddings=True)
    assert shared.source_embeddings.tokens is shared.target_embeddings.tokens
    assert shared.output_projection.weight is shared.target_embeddings.tokens.weight
    tied = tiny_model()
    assert tied.source_embeddings.tokens is not tied.target_embeddings.tokens
    assert tied.output_projection.weight is tied.target_embeddings.tokens.weight
    untied = tiny_model(tie_output=False)
    assert untied.output_projection.weight is not untied.target_embeddings.tokens.weight
    def count(module) -> int:  # parameters() yields a tied weight once
        return sum(p.numel() for p in module.parameters())

    assert count(tied) - count(shared) == VOCAB * 32
    assert count(untied) - count(tied) == VOCAB * 32
    with pytest.raises(ConfigError, match="joint vocabulary.*12.*14"):
        Transformer(tiny_transformer_config(share_embeddings=True), 12, 14)


@pytest.mark.parametrize("share_embeddings", [False, True])
def test_a_state_dict_restores_the_same_model_tied_weights_included(share_embeddings, generator):
    model = tiny_model(share_embeddings=share_embeddings)
    restored = tiny_model(share_embeddings=share_embeddings)
    restored.load_state_dict(model.state_dict())
    assert restored.output_projection.weight is restored.target_embeddings.tokens.weight
    src, src_mask, tgt_in = random_batch(generator)
    with torch.no_grad():
        torch.testing.assert_close(restored(src, src_mask, tgt_in)[0], model(src, src_mask, tgt_in)[0], rtol=0, atol=0)


def test_sinusoidal_positions_follow_the_paper_and_extend_past_max_positions():
    table = sinusoidal_positions(50, 6)
    for pos in (0, 7, 49):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert math.isclose(table[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
    model = tiny_model(max_positions=4)
    src = torch.full((1, 9), 5)
    logits, _ = model(src, src != PAD, torch.full((1, 7), 6))
    assert logits.shape == (1, 7, VOCAB) and torch.isfinite(logits).all()
    like = torch.zeros(1, dtype=torch.float64)
    torch.testing.assert_close(
        model.target_embeddings.positions(3, start=6, like=like), sinusoidal_positions(9, 32, torch.float64)[6:9]
    )


def test_learned_positions_stop_at_max_positions():
    model = tiny_model(positions="learned", max_positions=4)
    src = torch.full((1, 5), 5)
    with pytest.raises(ValueError, match="max_positions"):
        model(src, src != PAD, torch.full((1, 3), 6))


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


def test_config_round_trips_and_builds_through_the_registry():
    config = tiny_transformer_config(norm="post", positions="learned", share_embeddings=True)
    assert TransformerConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["type"] == "transformer"
    model = build_model({"type": "transformer", "d_model": 16, "num_heads": 2, "ffn_dim": 32}, 30, 40)
    assert isinstance(model, Transformer) and model.model_type == "transformer"
    assert model.config.d_model == 16 and model.config.encoder_layers == 3
    assert model.attention_heads == 2
    assert model.output_projection.out_features == 40


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"d_model": 32, "num_heads": 4, "layers": 6}, "unknown model option.*layers"),
        ({"type": "rnn"}, "model.type must be 'transformer'"),
        ({"d_model": 30, "num_heads": 4}, "model.d_model=30 is not divisible by model.num_heads=4"),
        ({"ffn_dim": 0}, "ffn_dim must be an integer from 1 to 1,048,576"),
        ({"encoder_layers": 2.5}, "encoder_layers must be an integer from 1"),
        ({"decoder_layers": True}, "decoder_layers must be an integer from 1"),
        ({"dropout": 1.0}, r"dropout must be a number in \[0, 1\)"),
        ({"attention_dropout": "0.1"}, "attention_dropout must be a number"),
        ({"positions": "rotary"}, "positions must be one of sinusoidal, learned.*'rotary'"),
        ({"norm": "sandwich"}, "norm must be one of pre, post.*'sandwich'"),
        ({"share_embeddings": "yes"}, "share_embeddings must be true or false"),
        ({"share_embeddings": True, "tie_output": False}, "tie_output cannot be false"),
    ],
)
def test_config_errors_name_the_key_and_the_value(values, message):
    with pytest.raises(ConfigError, match=message):
        TransformerConfig.from_dict(values)


def test_config_must_be_a_mapping():
    with pytest.raises(ConfigError, match="mapping"):
        TransformerConfig.from_dict(["d_model", 32])


def test_target_mask_computes_only_the_real_rows_of_the_logits(generator):
    model = tiny_model().double()
    src, src_mask, tgt_in = random_batch(generator)
    tgt_mask = tgt_in != PAD
    logits, weights = model(src, src_mask, tgt_in, return_attention="heads")
    selected, selected_weights = model(src, src_mask, tgt_in, return_attention="heads", tgt_mask=tgt_mask)
    assert selected.shape == (int(tgt_mask.sum()), VOCAB)
    torch.testing.assert_close(selected, logits[tgt_mask], rtol=0, atol=1e-12)
    torch.testing.assert_close(selected_weights, weights, rtol=0, atol=0)
    with pytest.raises(ValueError, match="tgt_mask must be a bool tensor"):
        model(src, src_mask, tgt_in, tgt_mask=tgt_mask.float())


def test_decoding_under_bfloat16_autocast_gives_float32_log_probabilities(generator):
    model = tiny_model()
    src, src_mask, tgt_in = random_batch(generator)
    with torch.no_grad():
        expected, _ = decode_incrementally(model, src, src_mask, tgt_in)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            log_probs, _ = decode_incrementally(model, src, src_mask, tgt_in)
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(log_probs.shape[:2]), rtol=0, atol=1e-5)
    torch.testing.assert_close(log_probs, expected, rtol=0, atol=0.1)  # bf16 products: close, not equal


def test_state_bytes_per_token_is_what_the_decoder_state_grows_by(generator):
    """The translator's memory check counts ``state_bytes_per_token`` per output token of a row."""
    model = tiny_model(decoder_layers=3).eval()
    src, src_mask, _ = random_batch(generator, batch=2)

    def size(state) -> int:
        return sum(t.nelement() * t.element_size() for t in (*state.keys, *state.values, state.target_mask))

    with torch.no_grad():
        encoded = model.encode(src, src_mask)
        state = model.init_decoder_state(encoded)
        prev = torch.full((2,), 1)
        _, _, state = model.decode_step(prev, state, encoded, 0)
        one = size(state)
        _, _, state = model.decode_step(prev, state, encoded, 1)
    assert size(state) - one == 2 * model.state_bytes_per_token  # two rows, one token more each


@pytest.mark.parametrize(("values", "message"), [
    ({"dropout": "0.1"}, "model.dropout must be a number in [0, 1), got '0.1'"),
    ({"decoder_layers": 0}, "model.decoder_layers must be an integer from 1 to 1,048,576, got 0"),
    ({"dropout_mask": "uniform"}, "model.dropout_mask must be one of bernoulli, bytes, got 'uniform'"),
    ({"tie_output": "yes"}, "model.tie_output must be true or false, got 'yes'"),
    ({"attention_options": ["kq_dim"]}, "model.attention_options must be a mapping of option names to values"),
    ({"width": 3}, "unknown model option(s) 'width' for type"),
    (["not", "a", "mapping"], "the model config must be a mapping, got list"),
])
def test_both_models_read_their_config_the_same_way_and_say_the_same_mistake_alike(values, message):
    """One base (attnmt.models.config.ModelConfig): the RNN and the Transformer raise the same
    ConfigError, with the same words, for the same mistake."""
    from attnmt.models import RNNConfig

    for config_class in (RNNConfig, TransformerConfig):
        with pytest.raises(ConfigError) as caught:
            config_class.from_dict(values)
        assert str(caught.value).startswith(message), (config_class.__name__, str(caught.value))
        assert type(caught.value) is ConfigError
