"""The models against independent references, in float64.

- The Transformer's encoder and decoder layers against ``torch.nn.TransformerEncoderLayer`` and
  ``TransformerDecoderLayer`` with the same weights copied in, pre- and post-norm.
- The whole Transformer's logits against a restatement of Vaswani et al. (2017) written here from
  the paper: √d · embedding + sinusoids → layers → final norm (pre-norm) → shared output matrix.
- The RNN's teacher-forced logits, for each decoder flow, against a restatement of its equations
  (LSTM cell, the ``general`` score of Luong et al. 2015, softmax, context, output layer), step by
  step over the encoder states the model computes (the encoder has its own reference test).
Random weights, a padded batch with a length-1 sentence; compared at the real target positions.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnmt.attention.functional import causal_mask
from attnmt.models import build_model
from attnmt.models.rnn import FLOWS
from attnmt.models.transformer import DecoderLayer, EncoderLayer, TransformerConfig

VOCAB = 37


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Every parameter random (LayerNorms and biases too, so none of them can hide a bug)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * 0.3)


def _batch(seed: int = 0):
    """src [3, 6] with lengths 6, 1, 4; tgt_in [3, 5] with lengths 5, 2, 1 (BOS first)."""
    generator = torch.Generator().manual_seed(seed)
    src_lengths, tgt_lengths = torch.tensor([6, 1, 4]), torch.tensor([5, 2, 1])
    src_mask = torch.arange(6)[None, :] < src_lengths[:, None]
    tgt_mask = torch.arange(5)[None, :] < tgt_lengths[:, None]
    src = torch.randint(4, VOCAB, (3, 6), generator=generator).masked_fill(~src_mask, 0)
    tgt_in = torch.randint(4, VOCAB, (3, 5), generator=generator).masked_fill(~tgt_mask, 0)
    tgt_in[:, 0] = 2
    return src, src_mask, tgt_in, tgt_mask


# ---------------------------------------------------------------------------- Transformer layers


def _layer_config(norm: str) -> TransformerConfig:
    return TransformerConfig(d_model=16, num_heads=4, ffn_dim=24, encoder_layers=1, decoder_layers=1, dropout=0.0,
                             attention_dropout=0.0, norm=norm)


def _copy_attention(ours, theirs) -> None:
    theirs.in_proj_weight.copy_(ours.in_proj_weight)
    theirs.in_proj_bias.copy_(ours.in_proj_bias)
    theirs.out_proj.weight.copy_(ours.out_proj.weight)
    theirs.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_feed_forward(ours, theirs) -> None:
    theirs.linear1.load_state_dict(ours.feed_forward.expand.state_dict())
    theirs.linear2.load_state_dict(ours.feed_forward.contract.state_dict())


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_encoder_layer_equals_torch_transformer_encoder_layer(norm):
    config = _layer_config(norm)
    ours = EncoderLayer(config).double().eval()
    _randomise(ours, seed=1)
    theirs = torch.nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, batch_first=True, norm_first=norm == "pre",
                                              dtype=torch.float64).eval()
    with torch.no_grad():
        _copy_attention(ours.self_attention, theirs.self_attn)
        _copy_feed_forward(ours, theirs)
        theirs.norm1.load_state_dict(ours.attention_block.norm.state_dict())
        theirs.norm2.load_state_dict(ours.feed_forward_block.norm.state_dict())
    _, src_mask, _, _ = _batch()
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    with torch.no_grad():
        expected = theirs(x, src_key_padding_mask=~src_mask)
        got = ours(x, src_mask)
    torch.testing.assert_close(got[src_mask], expected[src_mask], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_decoder_layer_equals_torch_transformer_decoder_layer(norm):
    config = _layer_config(norm)
    ours = DecoderLayer(config).double().eval()
    _randomise(ours, seed=2)
    theirs = torch.nn.TransformerDecoderLayer(16, 4, 24, dropout=0.0, batch_first=True, norm_first=norm == "pre",
                                              dtype=torch.float64).eval()
    with torch.no_grad():
        _copy_attention(ours.self_attention, theirs.self_attn)
        _copy_attention(ours.cross_attention, theirs.multihead_attn)
        _copy_feed_forward(ours, theirs)
        theirs.norm1.load_state_dict(ours.self_attention_block.norm.state_dict())
        theirs.norm2.load_state_dict(ours.cross_attention_block.norm.state_dict())
        theirs.norm3.load_state_dict(ours.feed_forward_block.norm.state_dict())
    _, src_mask, _, tgt_mask = _batch()
    y, memory = torch.randn(3, 5, 16, dtype=torch.float64), torch.randn(3, 6, 16, dtype=torch.float64)
    self_mask = (causal_mask(5) & tgt_mask[:, None, :]).unsqueeze(1)  # [B, 1, T, T], True = may attend
    with torch.no_grad():
        expected = theirs(y, memory, tgt_mask=~causal_mask(5), tgt_key_padding_mask=~tgt_mask,
                          memory_key_padding_mask=~src_mask)
        keys, values = ours.cross_attention.project_key_value(memory, memory)
        got, *_ = ours(y, self_mask, keys, values, src_mask[:, None, None, :])
    torch.testing.assert_close(got[tgt_mask], expected[tgt_mask], rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------- the whole Transformer


def _layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + eps) * weight + bias


def _multi_head(query, memory, allowed, weights, prefix, heads):
    """MultiHead(Q, K, V) = Concat(head_1 … head_h) W^O, head_i = softmax(Q W_i^Q (K W_i^K)ᵀ / √d_h) V W_i^V.
    allowed: [B, T, S] bool."""
    d = query.shape[-1]
    d_h = d // heads
    w_q, w_k, w_v = weights[f"{prefix}.in_proj_weight"].chunk(3)
    b_q, b_k, b_v = weights[f"{prefix}.in_proj_bias"].chunk(3)

    def split(z):  # [B, L, d] -> [B, h, L, d_h]
        return z.view(z.shape[0], z.shape[1], heads, d_h).transpose(1, 2)

    q, k, v = split(query @ w_q.T + b_q), split(memory @ w_k.T + b_k), split(memory @ w_v.T + b_v)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d_h)
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    attention = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with nothing allowed: zeros
    heads_out = (attention @ v).transpose(1, 2).reshape(query.shape)
    return heads_out @ weights[f"{prefix}.out_proj.weight"].T + weights[f"{prefix}.out_proj.bias"]


def _feed_forward(x, weights, prefix):
    hidden = torch.relu(x @ weights[f"{prefix}.expand.weight"].T + weights[f"{prefix}.expand.bias"])
    return hidden @ weights[f"{prefix}.contract.weight"].T + weights[f"{prefix}.contract.bias"]


def _sublayer(z, weights, norm_name, pre_norm, function):
    """pre: z + f(LN(z)); post: LN(z + f(z))."""
    norm = (weights[f"{norm_name}.weight"], weights[f"{norm_name}.bias"])
    if pre_norm:
        return z + function(_layer_norm(z, *norm))
    return _layer_norm(z + function(z), *norm)


def _sinusoids(length, d):
    position = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float64)
    angles = position / torch.pow(torch.tensor(10000.0, dtype=torch.float64), i / d)
    table = torch.zeros(length, d, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return table


def transformer_reference(weights, config, src, src_mask, tgt_in, tgt_mask):
    """Logits [B, T, V] of Vaswani et al. (2017), restated from the paper over a state dict."""
    d, heads, pre = config["d_model"], config["num_heads"], config["norm"] == "pre"
    embedding = weights["target_embeddings.tokens.weight"]
    x = embedding[src] * math.sqrt(d) + _sinusoids(src.shape[1], d)
    encoder_allowed = src_mask[:, None, :].expand(-1, src.shape[1], -1)
    for n in range(config["encoder_layers"]):
        p = f"encoder_layers.{n}"
        x = _sublayer(x, weights, f"{p}.attention_block.norm", pre,
                      lambda z, p=p: _multi_head(z, z, encoder_allowed, weights, f"{p}.self_attention", heads))
        x = _sublayer(x, weights, f"{p}.feed_forward_block.norm", pre,
                      lambda z, p=p: _feed_forward(z, weights, f"{p}.feed_forward"))
    if pre:
        x = _layer_norm(x, weights["encoder_norm.weight"], weights["encoder_norm.bias"])
    T = tgt_in.shape[1]
    y = embedding[tgt_in] * math.sqrt(d) + _sinusoids(T, d)
    self_allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))[None] & tgt_mask[:, None, :]
    cross_allowed = src_mask[:, None, :].expand(-1, T, -1)
    for n in range(config["decoder_layers"]):
        p = f"decoder_layers.{n}"
        y = _sublayer(y, weights, f"{p}.self_attention_block.norm", pre,
                      lambda z, p=p: _multi_head(z, z, self_allowed, weights, f"{p}.self_attention", heads))
        y = _sublayer(y, weights, f"{p}.cross_attention_block.norm", pre,
                      lambda z, p=p: _multi_head(z, x, cross_allowed, weights, f"{p}.cross_attention", heads))
        y = _sublayer(y, weights, f"{p}.feed_forward_block.norm", pre,
                      lambda z, p=p: _feed_forward(z, weights, f"{p}.feed_forward"))
    if pre:
        y = _layer_norm(y, weights["decoder_norm.weight"], weights["decoder_norm.bias"])
    return y @ embedding.T  # the output matrix is the shared embedding


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_whole_transformer_equals_a_restatement_of_the_paper(norm):
    config = {"type": "transformer", "d_model": 16, "num_heads": 4, "ffn_dim": 24, "encoder_layers": 2,
              "decoder_layers": 2, "dropout": 0.0, "attention_dropout": 0.0, "norm": norm,
              "positions": "sinusoidal", "share_embeddings": True, "tie_output": True}
    model = build_model(dict(config), VOCAB, VOCAB).double().eval()
    _randomise(model, seed=3)
    src, src_mask, tgt_in, tgt_mask = _batch(seed=4)
    with torch.no_grad():
        logits, _ = model(src, src_mask, tgt_in)
    expected = transformer_reference(model.state_dict(), config, src, src_mask, tgt_in, tgt_mask)
    torch.testing.assert_close(logits[tgt_mask], expected[tgt_mask], rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------- the RNN decoder


def _lstm_cell(x, h, c, weights, layer):
    """i, f, g, o = σ, σ, tanh, σ of W_ih x + b_ih + W_hh h + b_hh; c' = f·c + i·g; h' = o·tanh(c')."""
    gates = (x @ weights[f"decoder_rnn.weight_ih_l{layer}"].T + weights[f"decoder_rnn.bias_ih_l{layer}"]
             + h @ weights[f"decoder_rnn.weight_hh_l{layer}"].T + weights[f"decoder_rnn.bias_hh_l{layer}"])
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _attend(query, states, src_mask, weights, mechanism):
    """context c = Σ_s α_s h̄_s with α = softmax(e) over the real positions; e from Luong et al.
    (2015)'s general score hᵀ W_a h̄_s, or Bahdanau et al. (2015)'s vᵀ tanh(W_q h + W_k h̄_s + b)."""
    if mechanism == "general":
        scores = torch.einsum("bd,bsd->bs", query, states @ weights["attention.key_proj.weight"].T)
    else:
        hidden = torch.tanh((query @ weights["attention.query_proj.weight"].T)[:, None, :]
                            + states @ weights["attention.key_proj.weight"].T + weights["attention.key_proj.bias"])
        scores = (hidden @ weights["attention.energy.weight"].T).squeeze(-1)
    alpha = torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=-1)
    return torch.einsum("bs,bsd->bd", alpha, states)


def rnn_reference(model, src, src_mask, tgt_in, flow, mechanism):
    """Teacher-forced logits [B, T, V] of the three decoder flows, one step at a time:

    parallel:  h_i = LSTM(b_i, h_{i−1});       c_i = Attn(h_i);      logits = W_o [c_i; h_i] + b_o
    bahdanau:  c_i = Attn(s_{i−1});            s_i = LSTM([b_i; c_i], s_{i−1});   logits = W_o [c_i; s_i] + b_o
    luong:     h_i = LSTM([b_i; h̃_{i−1}], h_{i−1});  c_i = Attn(h_i);  h̃_i = tanh(W_c [c_i; h_i]);
               logits = W_o h̃_i + b_o
    with h_0 = h_sent (the encoder's sentence summaries), c_0 = 0 and h̃_0 = 0.
    """
    weights = model.state_dict()
    encoded = model.encode(src, src_mask)
    states, layers = encoded.states, model.config.decoder_layers
    hidden = [encoded.sentence[layer] for layer in range(layers)]
    cells = [torch.zeros_like(h) for h in hidden]
    feed = torch.zeros_like(hidden[0])
    logits = []
    for step in range(tgt_in.shape[1]):
        b = weights["tgt_embedding.weight"][tgt_in[:, step]]
        if flow == "bahdanau":
            context = _attend(hidden[-1], states, src_mask, weights, mechanism)
            x = torch.cat([b, context], dim=-1)
        else:
            x = b if flow == "parallel" else torch.cat([b, feed], dim=-1)
        for layer in range(layers):
            hidden[layer], cells[layer] = _lstm_cell(x, hidden[layer], cells[layer], weights, layer)
            x = hidden[layer]
        if flow != "bahdanau":
            context = _attend(hidden[-1], states, src_mask, weights, mechanism)
        if flow == "luong":
            feed = torch.tanh(torch.cat([context, hidden[-1]], dim=-1) @ weights["attentional.weight"].T)
            features = feed
        else:
            features = torch.cat([context, hidden[-1]], dim=-1)
        logits.append(features @ weights["output.weight"].T + weights["output.bias"])
    return torch.stack(logits, dim=1)


@pytest.mark.parametrize("flow,mechanism", [(flow, "general") for flow in FLOWS] + [("bahdanau", "additive")])
def test_rnn_decoder_equals_a_restatement_of_its_equations(flow, mechanism):
    config = {"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "decoder_layers": 2, "dropout": 0.0,
              "attention": mechanism, "flow": flow}
    model = build_model(config, VOCAB, VOCAB).double().eval()
    _randomise(model, seed=5)
    src, src_mask, tgt_in, tgt_mask = _batch(seed=6)
    with torch.no_grad():
        logits, _ = model(src, src_mask, tgt_in)
        expected = rnn_reference(model, src, src_mask, tgt_in, flow, mechanism)
        # decode_step, the path search takes, restated the same way
        encoded = model.encode(src, src_mask)
        state = model.init_decoder_state(encoded)
        stepped = []
        for step in range(tgt_in.shape[1]):
            log_probs, _, state = model.decode_step(tgt_in[:, step], state, encoded, step)
            stepped.append(log_probs)
    torch.testing.assert_close(logits[tgt_mask], expected[tgt_mask], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(torch.stack(stepped, 1)[tgt_mask], F.log_softmax(expected, -1)[tgt_mask],
                               rtol=1e-10, atol=1e-10)
