"""The RNN encoder–decoder (attnmt.models.rnn): shapes, gradients, incremental decoding,
padding, configuration errors, and that it can learn a toy task."""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
import torch.nn.functional as F

from attnmt.attention.functional import padding_mask
from attnmt.attention.registry import ATTENTION_TYPES, canonical_name
from attnmt.decoding.search import greedy_search
from attnmt.errors import ConfigError
from attnmt.models import build_model, count_parameters
from attnmt.models.rnn import CUDNN_WEIGHT_COPY_WARNING, FLOWS, RNNConfig, RNNSeq2Seq

from helpers import tiny_rnn_config

MECHANISMS = sorted({canonical_name(name) for name in ATTENTION_TYPES})
SRC_VOCAB, TGT_VOCAB = 23, 19
BOS, EOS = 2, 3


def make_batch(lengths=(6, 4, 1), target_length=5, seed=0):
    """Right-padded random sources and BOS-initial targets."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    mask = padding_mask(lengths, int(lengths.max()))
    src = torch.randint(4, SRC_VOCAB, mask.shape, generator=generator).masked_fill(~mask, 0)
    tgt_in = torch.randint(4, TGT_VOCAB, (len(lengths), target_length), generator=generator)
    tgt_in[:, 0] = BOS
    return src, mask, tgt_in


def teacher_forced_by_steps(model, src, mask, tgt_in):
    """log-probs [B, T, V] and weights [B, T, S] from decode_step, one position at a time."""
    encoded = model.encode(src, mask)
    state = model.init_decoder_state(encoded)
    log_probs, weights = [], []
    for step in range(tgt_in.shape[1]):
        step_log_probs, step_weights, state = model.decode_step(tgt_in[:, step], state, encoded, step)
        log_probs.append(step_log_probs)
        weights.append(step_weights)
    return torch.stack(log_probs, 1), torch.stack(weights, 1)


# ------------------------------------------------------------------------------------------------
# Every mechanism × flow × cell trains
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("flow", FLOWS)
@pytest.mark.parametrize("attention", MECHANISMS)
def test_forward_backward_every_mechanism_flow_and_cell(attention, flow, cell):
    model = build_model(tiny_rnn_config(attention=attention, flow=flow, cell=cell), SRC_VOCAB, TGT_VOCAB)
    src, mask, tgt_in = make_batch()
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    logits, weights = model(src, mask, tgt_in, return_attention=True)
    assert logits.shape == (3, 5, TGT_VOCAB)
    assert weights.shape == (3, 5, 6)
    loss = F.cross_entropy(logits.reshape(-1, TGT_VOCAB), tgt_out.reshape(-1))
    loss.backward()
    assert torch.isfinite(loss)
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(parameter.grad).all(), name
    # Attention never reaches padding, and each row is a distribution (or all zero for 'none').
    assert (weights[~mask.unsqueeze(1).expand_as(weights)] == 0).all()
    sums = weights.sum(-1)
    expected = torch.zeros_like(sums) if attention == "none" else torch.ones_like(sums)
    torch.testing.assert_close(sums, expected)


def test_multilayer_model_and_sizes():
    config = tiny_rnn_config(encoder_layers=2, decoder_layers=3, encoder_hidden_dim=5)
    config["attention"] = "additive"
    config["attention_options"] = {}
    model = build_model(config, SRC_VOCAB, TGT_VOCAB)
    src, mask, tgt_in = make_batch()
    encoded = model.encode(src, mask)
    assert encoded.states.shape == (3, 6, 10)
    assert encoded.sentence.shape == (3, 3, 12)
    assert (encoded.sentence >= 0).all()  # ReLU (eq. 7)
    assert (encoded.states[~mask] == 0).all()
    logits, _ = model(src, mask, tgt_in)
    assert logits.shape == (3, 5, TGT_VOCAB)


def test_cudnns_warning_of_its_weight_copy_never_reaches_the_user(monkeypatch):
    """cuDNN warns at each encoder call that it copies the layer's weights into one buffer (seen on an
    H200 in every `attnmt evaluate`); here torch.lstm warns as cuDNN does. Other warnings still pass."""
    lstm = torch.lstm

    def warning_lstm(*args):
        warnings.warn(f"{CUDNN_WEIGHT_COPY_WARNING} of memory. (Triggered internally)", UserWarning, stacklevel=1)
        warnings.warn("another warning", UserWarning, stacklevel=1)
        return lstm(*args)

    monkeypatch.setattr(torch, "lstm", warning_lstm)
    model = build_model(tiny_rnn_config(encoder_layers=2), SRC_VOCAB, TGT_VOCAB)
    src, mask, _ = make_batch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.encode(src, mask)
    assert [str(w.message) for w in caught] == ["another warning"] * 4  # 2 layers x 2 directions


# ------------------------------------------------------------------------------------------------
# Incremental decoding reproduces teacher forcing (float64: the step path is the reference)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flow", FLOWS)
@pytest.mark.parametrize("attention", MECHANISMS)
def test_decode_step_matches_forward(attention, flow):
    model = build_model(
        tiny_rnn_config(attention=attention, flow=flow, decoder_layers=2), SRC_VOCAB, TGT_VOCAB
    ).double().eval()
    src, mask, tgt_in = make_batch(target_length=7)
    logits, weights = model(src, mask, tgt_in, return_attention=True)
    step_log_probs, step_weights = teacher_forced_by_steps(model, src, mask, tgt_in)
    torch.testing.assert_close(step_log_probs, logits.log_softmax(-1), rtol=0, atol=1e-10)
    torch.testing.assert_close(step_weights, weights, rtol=0, atol=1e-10)


@pytest.mark.parametrize("flow", FLOWS)
@pytest.mark.parametrize("options", [dict(cell="gru"), dict(tie_output=True, output_embedding=True)])
def test_decode_step_matches_forward_gru_tied_deep_output(flow, options):
    model = build_model(tiny_rnn_config(flow=flow, **options), SRC_VOCAB, TGT_VOCAB).eval()
    src, mask, tgt_in = make_batch(target_length=6)
    logits, _ = model(src, mask, tgt_in)
    step_log_probs, _ = teacher_forced_by_steps(model, src, mask, tgt_in)
    torch.testing.assert_close(step_log_probs, logits.log_softmax(-1), rtol=0, atol=1e-5)


def decode_steps(model, encoded, tokens, steps=3):
    """log-probs and weights of ``steps`` decode_step calls feeding ``tokens`` [N, steps]."""
    state = model.init_decoder_state(encoded)
    outputs = []
    for step in range(steps):
        log_probs, weights, state = model.decode_step(tokens[:, step], state, encoded, step)
        outputs.append((log_probs, weights))
    return outputs


@pytest.mark.parametrize("flow", FLOWS)
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_search_steps_look_up_the_input_projection_with_the_same_numbers(flow, cell):
    """Without autograd, decode_step takes W_ih·b_i + b from a per-vocabulary table and runs the
    cell from its gates; with autograd it calls torch.lstm_cell / gru_cell. Same numbers (float64)."""
    model = build_model(tiny_rnn_config(flow=flow, cell=cell, decoder_layers=2), SRC_VOCAB, TGT_VOCAB).double().eval()
    src, mask, tgt_in = make_batch(target_length=4)
    encoded = model.encode(src, mask)
    reference = decode_steps(model, encoded, tgt_in)
    with torch.no_grad():
        looked_up = decode_steps(model, encoded, tgt_in)
    assert model._token_gate_table.shape == (TGT_VOCAB, (4 if cell == "lstm" else 3) * 12)
    for (log_probs, weights), (expected_log_probs, expected_weights) in zip(looked_up, reference):
        torch.testing.assert_close(log_probs, expected_log_probs, rtol=0, atol=1e-12)
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)


def test_the_input_projection_table_follows_weight_updates():
    model = build_model(tiny_rnn_config(), SRC_VOCAB, TGT_VOCAB).double()
    src, mask, tgt_in = make_batch(target_length=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(2):
        model.eval()
        encoded = model.encode(src, mask)
        with torch.no_grad():
            looked_up = decode_steps(model, encoded, tgt_in)
        for (log_probs, _), (expected, _) in zip(looked_up, decode_steps(model, encoded, tgt_in)):
            torch.testing.assert_close(log_probs, expected, rtol=0, atol=1e-12)
        model.train()
        logits, _ = model(src, mask, tgt_in)
        optimizer.zero_grad()
        logits.logsumexp(-1).sum().backward()
        optimizer.step()  # changes every weight in place: the table must be rebuilt
    fresh = build_model(tiny_rnn_config(), SRC_VOCAB, TGT_VOCAB).double().eval()
    model.load_state_dict(fresh.state_dict())
    model.eval()
    with torch.no_grad():
        mine = decode_steps(model, model.encode(src, mask), tgt_in)
        theirs = decode_steps(fresh, fresh.encode(src, mask), tgt_in)
    for (log_probs, _), (expected, _) in zip(mine, theirs):
        torch.testing.assert_close(log_probs, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("flow", FLOWS)
@pytest.mark.parametrize("attention", MECHANISMS)
def test_beams_sharing_an_encoding_equal_beams_with_copies(attention, flow):
    """with_beams(K): the K rows of a sentence attend to one copy of its encoding, as one [B, K, Dq]
    query; same numbers as repeating the encoding K times (every mechanism, per-head weights too)."""
    K = 3
    model = build_model(tiny_rnn_config(attention=attention, flow=flow), SRC_VOCAB, TGT_VOCAB).double().eval()
    src, mask, _ = make_batch(lengths=(6, 4, 1))
    tokens = torch.randint(4, TGT_VOCAB, (3 * K, 4), generator=torch.Generator().manual_seed(1))
    encoded = model.encode(src, mask)
    repeated = encoded.index_select(torch.arange(3).repeat_interleave(K))
    shared = encoded.with_beams(K)
    assert model.init_decoder_state(shared).hidden.shape == model.init_decoder_state(repeated).hidden.shape
    with torch.no_grad():
        for (log_probs, weights), (expected, expected_weights) in zip(
            decode_steps(model, shared, tokens, 4), decode_steps(model, repeated, tokens, 4)
        ):
            torch.testing.assert_close(log_probs, expected, rtol=0, atol=1e-12)
            torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)
        query = torch.randn(3 * K, 12, dtype=torch.float64)
        context, heads = model._attend(query, shared.prepared, 2, True, beams=K)
        expected_context, expected_heads = model._attend(query, repeated.prepared, 2, True)
        torch.testing.assert_close(context, expected_context, rtol=0, atol=1e-12)
        torch.testing.assert_close(heads, expected_heads, rtol=0, atol=1e-12)
    kept = shared.index_select(torch.tensor([2, 0]))
    assert kept.beams == K and kept.states.shape[0] == 2
    with pytest.raises(ValueError, match="with_beams"):
        shared.with_beams(2)


def test_state_index_select_reorders_rows():
    model = build_model(tiny_rnn_config(flow="luong"), SRC_VOCAB, TGT_VOCAB).eval()
    src, mask, tgt_in = make_batch()
    encoded = model.encode(src, mask)
    state = model.init_decoder_state(encoded)
    log_probs, _, state = model.decode_step(tgt_in[:, 0], state, encoded, 0)
    order = torch.tensor([2, 0, 0, 1])
    reordered, _, _ = model.decode_step(
        tgt_in[order, 1], state.index_select(order), encoded.index_select(order), 1
    )
    expected, _, _ = model.decode_step(tgt_in[:, 1], state, encoded, 1)
    torch.testing.assert_close(reordered, expected[order])


# ------------------------------------------------------------------------------------------------
# Encoder: packing makes padding invisible; h_sent is eq. 7 on the real tokens
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_padding_does_not_change_a_sentence(cell):
    model = build_model(tiny_rnn_config(cell=cell, encoder_layers=2), SRC_VOCAB, TGT_VOCAB).eval()
    src, mask, tgt_in = make_batch(lengths=(6, 4, 1))
    logits, weights = model(src, mask, tgt_in, return_attention=True)
    for b, length in enumerate((6, 4, 1)):
        alone, alone_weights = model(src[b : b + 1, :length], mask[b : b + 1, :length], tgt_in[b : b + 1], True)
        torch.testing.assert_close(alone, logits[b : b + 1], rtol=0, atol=1e-5)
        torch.testing.assert_close(alone_weights, weights[b : b + 1, :, :length], rtol=0, atol=1e-6)
        # Extra padding columns change nothing either.
        padded_src = F.pad(src[b : b + 1, :length], (0, 3))
        padded_mask = F.pad(mask[b : b + 1, :length], (0, 3))
        padded, _ = model(padded_src, padded_mask, tgt_in[b : b + 1])
        torch.testing.assert_close(padded, logits[b : b + 1], rtol=0, atol=1e-5)


def test_sentence_representation_is_eq7_on_unpadded_sentence():
    model = build_model(tiny_rnn_config(), SRC_VOCAB, TGT_VOCAB).double().eval()
    src, mask, _ = make_batch(lengths=(6, 3))
    encoded = model.encode(src, mask)
    sentence = src[1:2, :3]
    states, _ = model.encoder_rnn(model.src_embedding(sentence))  # no padding, no packing
    half = states.shape[-1] // 2
    summary = torch.cat([states[0, -1, :half], states[0, 0, half:]])  # [h→_S; h←_1]
    expected = torch.relu(model.bridge[0](summary))
    torch.testing.assert_close(encoded.sentence[0, 1], expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(encoded.states[1, :3], states[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("layers", [1, 2])
def test_encoder_matches_nn_rnn_over_a_packed_batch(cell, layers):
    """The two fused passes per layer (backward one reversed within each length) give the states,
    final states and gradients of nn.LSTM / nn.GRU run over the packed batch, in float64."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    torch.manual_seed(3)
    model = build_model(tiny_rnn_config(cell=cell, encoder_layers=layers, dropout=0.0), SRC_VOCAB, TGT_VOCAB).double()
    lengths = (7, 1, 4, 7, 2)
    src, mask, _ = make_batch(lengths=lengths, seed=5)
    embedded = model.src_embedding(src).detach().requires_grad_(True)
    states, finals = model._bidirectional_encoder(embedded, mask, mask.sum(1))

    reference_input = embedded.detach().clone().requires_grad_(True)
    packed = pack_padded_sequence(reference_input, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
    packed_states, final = model.encoder_rnn(packed)
    expected, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=src.shape[1])
    final_hidden = (final[0] if cell == "lstm" else final).view(layers, 2, len(lengths), -1)
    torch.testing.assert_close(states, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(finals, final_hidden, rtol=0, atol=1e-12)

    weights = torch.randn(states.shape, dtype=torch.float64)
    final_weights = torch.randn(finals.shape, dtype=torch.float64)
    ours = torch.autograd.grad((states * weights).sum() + (finals * final_weights).sum(),
                               [embedded, *model.encoder_rnn.parameters()])
    theirs = torch.autograd.grad((expected * weights).sum() + (final_hidden * final_weights).sum(),
                                 [reference_input, *model.encoder_rnn.parameters()])
    for got, want in zip(ours, theirs):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("flow", FLOWS)
def test_target_mask_computes_only_the_real_rows_of_the_logits(flow):
    model = build_model(tiny_rnn_config(flow=flow, tie_output=flow == "luong"), SRC_VOCAB, TGT_VOCAB).double().eval()
    src, mask, tgt_in = make_batch(lengths=(6, 4, 1), target_length=5)
    tgt_mask = padding_mask(torch.tensor([5, 2, 1]), 5)
    logits, weights = model(src, mask, tgt_in, return_attention=True)
    selected, selected_weights = model(src, mask, tgt_in, return_attention=True, tgt_mask=tgt_mask)
    assert selected.shape == (8, TGT_VOCAB)
    torch.testing.assert_close(selected, logits[tgt_mask], rtol=0, atol=1e-12)
    torch.testing.assert_close(selected_weights, weights, rtol=0, atol=0)  # attention stays [B, T, S]
    with pytest.raises(ValueError, match="tgt_mask must be a bool tensor of tgt_in's shape"):
        model(src, mask, tgt_in, tgt_mask=tgt_mask[:, :4])
    with pytest.raises(ValueError, match="tgt_mask must be a bool"):
        model(src, mask, tgt_in, tgt_mask=tgt_mask.long())


def test_source_mask_must_be_right_padded_bool():
    model = build_model(tiny_rnn_config(), SRC_VOCAB, TGT_VOCAB)
    src, mask, tgt_in = make_batch(lengths=(3, 2))
    with pytest.raises(ValueError, match="right-padded"):
        model(src, mask.flip(1), tgt_in)
    with pytest.raises(ValueError, match="bool"):
        model(src, mask.long(), tgt_in)
    with pytest.raises(ValueError, match="at least one real token"):
        model(src, torch.zeros_like(mask), tgt_in)


# ------------------------------------------------------------------------------------------------
# Per-head weights, tied embeddings
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flow", FLOWS)
def test_multihead_exposes_weights_per_head(flow):
    model = build_model(tiny_rnn_config(attention="multihead", flow=flow), SRC_VOCAB, TGT_VOCAB).eval()
    assert model.attention_heads == 3
    src, mask, tgt_in = make_batch()
    _, averaged = model(src, mask, tgt_in, return_attention=True)
    _, per_head = model(src, mask, tgt_in, return_attention="heads")
    assert per_head.shape == (3, 1, 3, 5, 6)  # [B, L = 1, h, T, S]: the contract's shape
    assert model.cross_attention_layers == 1
    torch.testing.assert_close(per_head[:, 0].mean(dim=1), averaged)
    torch.testing.assert_close(per_head.sum(-1), torch.ones(3, 1, 3, 5))


def test_single_head_mechanism_gives_one_head():
    model = build_model(tiny_rnn_config(), SRC_VOCAB, TGT_VOCAB).eval()
    src, mask, tgt_in = make_batch()
    _, averaged = model(src, mask, tgt_in, return_attention=True)
    _, per_head = model(src, mask, tgt_in, return_attention="heads")
    assert model.attention_heads == 1
    torch.testing.assert_close(per_head, averaged[:, None, None])
    with pytest.raises(ValueError, match="return_attention"):
        model(src, mask, tgt_in, return_attention="all")


def test_tied_embeddings_share_the_target_embedding():
    untied = build_model(tiny_rnn_config(), SRC_VOCAB, TGT_VOCAB)
    tied = build_model(tiny_rnn_config(tie_output=True), SRC_VOCAB, TGT_VOCAB)
    # Tied: a [F, E] projection + V biases replace the [F, V] + V output layer (F = 2·12 = 24).
    assert count_parameters(untied) - count_parameters(tied) == 24 * TGT_VOCAB - 24 * 8
    src, mask, tgt_in = make_batch()
    tied.eval()
    before, _ = tied(src, mask, tgt_in)
    with torch.no_grad():
        tied.tgt_embedding.weight[TGT_VOCAB - 1] += 1.0  # the output weights of that token moved too
    after, _ = tied(src, mask, tgt_in)
    assert not torch.allclose(before[..., TGT_VOCAB - 1], after[..., TGT_VOCAB - 1])


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


def test_config_round_trip_and_defaults():
    config = RNNConfig.from_dict({"type": "rnn", "attention": "sdp", "attention_options": {"kq_dim": 64}})
    assert config.attention == "scaled_dot"  # aliases are normalised
    assert config.encoder_state_dim == config.hidden_dim
    again = RNNConfig.from_dict(config.to_dict())
    assert again == config
    assert config.to_dict()["type"] == "rnn"


@pytest.mark.parametrize(
    "options, named",
    [
        ({"hiden_dim": 3}, "hiden_dim"),
        ({"cell": "lstmx"}, "cell"),
        ({"flow": "sideways"}, "flow"),
        ({"attention": "telepathy"}, "telepathy"),
        ({"attention_options": {"kq_dimension": 4}}, "kq_dimension"),
        ({"attention": "dot", "encoder_hidden_dim": 5}, "dot"),
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": "lots"}, "dropout"),
        ({"hidden_dim": 0}, "hidden_dim"),
        ({"embed_dim": 2.5}, "embed_dim"),
        ({"decoder_layers": True}, "decoder_layers"),
        ({"tie_output": "yes"}, "tie_output"),
        ({"type": "transformer"}, "type"),
        ({"attention_options": [1]}, "attention_options"),
        ({"hidden_dim": 2**70}, "hidden_dim must be an integer from 1 to 1,048,576"),  # was torch's C++ frames
        ({"attention_options": {"kq_dim": 2**70}}, "kq_dim.*Overflow when unpacking long long$"),
    ],
)
def test_config_errors_name_the_option(options, named):
    with pytest.raises(ConfigError, match=named):
        RNNConfig.from_dict({"attention": "scaled_dot", **options})


def test_build_model_dispatch_errors():
    with pytest.raises(ConfigError, match="type"):
        build_model({"hidden_dim": 4}, 10, 10)
    with pytest.raises(ConfigError, match="convolutional"):
        build_model({"type": "convolutional"}, 10, 10)
    with pytest.raises(ConfigError, match="hiden_dim"):
        build_model({"type": "rnn", "hiden_dim": 4}, 10, 10)
    if importlib.util.find_spec("attnmt.models.transformer") is None:
        with pytest.raises(ConfigError, match="transformer"):
            build_model({"type": "transformer"}, 10, 10)
    model = build_model(tiny_rnn_config(), SRC_VOCAB, TGT_VOCAB)
    assert isinstance(model, RNNSeq2Seq) and model.model_type == "rnn"
    assert model.config == RNNConfig.from_dict(tiny_rnn_config())


# ------------------------------------------------------------------------------------------------
# Learning: a tiny model overfits a reversal task
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.outcome
@pytest.mark.parametrize("flow", ["parallel", "luong"])
def test_tiny_model_learns_to_reverse(flow, training_seed, record_property):
    """Over seeds 0-11 the loss fell below 0.05 by step 37-61 of 150, and ended near 0.001."""
    torch.manual_seed(training_seed)
    generator = torch.Generator().manual_seed(1)
    pairs = []
    for _ in range(20):
        length = int(torch.randint(2, 6, (1,), generator=generator))
        tokens = (torch.randint(4, 12, (length,), generator=generator)).tolist()
        pairs.append((tokens, tokens[::-1]))
    src_lengths = torch.tensor([len(s) + 1 for s, _ in pairs])  # + EOS, as attnmt.data batches
    S, T = int(src_lengths.max()), max(len(t) for _, t in pairs) + 1
    src = torch.zeros(20, S, dtype=torch.long)
    tgt_in = torch.zeros(20, T, dtype=torch.long)
    tgt_out = torch.zeros(20, T, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s) + 1] = torch.tensor(s + [EOS])
        tgt_in[i, : len(t) + 1] = torch.tensor([BOS] + t)
        tgt_out[i, : len(t) + 1] = torch.tensor(t + [EOS])
    mask = padding_mask(src_lengths, S)

    config = dict(type="rnn", embed_dim=24, hidden_dim=48, dropout=0.0, attention="scaled_dot", flow=flow,
                  attention_options={"kq_dim": 24})
    model = build_model(config, 12, 12)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(150):
        logits, _ = model(src, mask, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, 12), tgt_out.reshape(-1), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    record_property("final_loss", loss.item())
    assert loss.item() < 0.05
    hypotheses = greedy_search(model, src, mask)
    assert [h.tokens for h in hypotheses] == [t for _, t in pairs]
