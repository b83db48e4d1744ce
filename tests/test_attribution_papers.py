"""The attributions made for attention models (attnmt.models.attribution), each against its paper's
equations written with plain loops over positions and heads in float64: value norms (Kobayashi et
al., 2020), erasure (leave one out), ALTI+ (Ferrando et al., 2022) and attention rollout (Abnar &
Zuidema, 2020) in the encoder–decoder composition the module states. Tiny random models, a batch
with padding and a one-word source, several heads and layers; every method agrees within 1e-10
relative."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnmt.attribution.forced import Request
from attnmt.attribution.methods import METHODS, AttributionOptions
from attnmt.attribution.reader import attribute as saliency
from attnmt.attribution.trace import trace_transformer
from attnmt.errors import ConfigError
from attnmt.models import build_model
from attnmt.models.readout import ATTNMT_SPECIALS, forced_batch

SOURCES = [[5, 6, 7, 8, 3], [9, 3], [4, 10, 3]]  # the second is one word and its EOS
OUTPUTS = [[11, 12, 3], [13, 14, 15, 16, 3], [3]]
TRANSFORMER = {"type": "transformer", "d_model": 12, "num_heads": 3, "ffn_dim": 16, "encoder_layers": 2,
               "decoder_layers": 2, "dropout": 0.0}


def relative_error(found: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(found - expected).max() / max(np.abs(expected).max(), 1e-300))


def random_model(config: dict, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(config, 20, 20).double().eval()
    with torch.no_grad():  # biases and norms away from their zero / one initial values
        for name, parameter in model.named_parameters():
            if "bias" in name or "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    return model


def attributions(model, method: str) -> list[np.ndarray]:
    found = dict(saliency(model, SOURCES, OUTPUTS, method=method))
    return [found[k].astype(np.float64) for k in range(len(SOURCES))]


def float64_attributions(model, method: str) -> list[np.ndarray]:
    """As ``attributions``, kept in float64 (the registry hands out float32)."""
    batch = forced_batch(list(range(len(SOURCES))), SOURCES, OUTPUTS, ATTNMT_SPECIALS, torch.device("cpu"))
    scores = METHODS[method].compute(model, batch, Request(SOURCES, OUTPUTS, AttributionOptions(method)))
    return [scores[k, : len(OUTPUTS[k]), : len(SOURCES[k])].numpy() for k in range(len(SOURCES))]


# ---- the Transformer by the paper, one vector at a time -------------------------------------------


def layer_norm(module, z: torch.Tensor) -> torch.Tensor:
    mean = sum(z[i] for i in range(len(z))) / len(z)
    variance = sum((z[i] - mean) ** 2 for i in range(len(z))) / len(z)
    return module.weight * (z - mean) / math.sqrt(variance + module.eps) + module.bias


def head_weights(attention, index: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    d, d_h = attention.embed_dim, attention.head_dim
    rows = slice(index * d + head * d_h, index * d + (head + 1) * d_h)
    return attention.in_proj_weight[rows], attention.in_proj_bias[rows]


def block_by_the_paper(attention, queries: list[torch.Tensor], keys: list[torch.Tensor], allowed):
    """For each query i and key j: α^h_ij per head and f^h(key_j) = (key_j W^V_h + b^V_h) W^O_hᵀ."""
    h, d_h = attention.num_heads, attention.head_dim
    alpha = [[[0.0] * len(keys) for _ in queries] for _ in range(h)]
    f = [[None] * len(keys) for _ in range(h)]
    for head in range(h):
        w_q, b_q = head_weights(attention, 0, head)
        w_k, b_k = head_weights(attention, 1, head)
        w_v, b_v = head_weights(attention, 2, head)
        w_o = attention.out_proj.weight[:, head * d_h:(head + 1) * d_h]
        for j, key in enumerate(keys):
            f[head][j] = w_o @ (w_v @ key + b_v)
        for i, query in enumerate(queries):
            q = w_q @ query + b_q
            scores = {j: float(q @ (w_k @ key + b_k)) / math.sqrt(d_h) for j, key in enumerate(keys) if allowed(i, j)}
            top = max(scores.values())
            total = sum(math.exp(score - top) for score in scores.values())
            for j, score in scores.items():
                alpha[head][i][j] = math.exp(score - top) / total
    return alpha, f


def alti_by_the_paper(alpha, f, residual: list[torch.Tensor], self_attention: bool) -> list[list[float]]:
    """c_ij = max(0, ‖ŷ_i‖₁ − ‖ŷ_i − T_i(z_j)‖₁), normalised over j (the residual last for a cross block)."""
    heads, keys = len(alpha), len(f[0])
    rows = []
    for i in range(len(residual)):
        terms = [sum(alpha[h][i][j] * f[h][j] for h in range(heads)) for j in range(keys)]
        if self_attention:
            terms[i] = terms[i] + residual[i]
        else:
            terms.append(residual[i])
        total = sum(terms)
        raw = [max(0.0, float(total.abs().sum() - (total - term).abs().sum())) for term in terms]
        rows.append([value / sum(raw) for value in raw])
    return rows


def rollout_by_the_paper(alpha, residual: list[torch.Tensor], self_attention: bool) -> list[list[float]]:
    heads, keys = len(alpha), len(alpha[0][0])
    rows = []
    for i in range(len(residual)):
        row = [0.5 * sum(alpha[h][i][j] for h in range(heads)) / heads for j in range(keys)]
        if self_attention:
            row[i] += 0.5
        else:
            row.append(0.5)
        rows.append(row)
    return rows


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    return [[sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def transformer_by_the_paper(model, source: list[int], output: list[int]) -> dict[str, np.ndarray]:
    """Value norms, ALTI+ and rollout of one pair, written out from the equations."""
    src = torch.tensor([source])
    tgt_in = torch.tensor([[ATTNMT_SPECIALS.start, *output[:-1]]])
    S, T = len(source), len(output)
    x = list(model.source_embeddings(src)[0])
    alti_encoder = [[float(i == j) for j in range(S)] for i in range(S)]
    rollout_encoder = [row[:] for row in alti_encoder]
    for layer in model.encoder_layers:
        normed = [layer_norm(layer.attention_block.norm, z) for z in x]
        alpha, f = block_by_the_paper(layer.self_attention, normed, normed, lambda i, j: True)
        alti_encoder = matmul(alti_by_the_paper(alpha, f, x, True), alti_encoder)
        rollout_encoder = matmul(rollout_by_the_paper(alpha, x, True), rollout_encoder)
        x = [x[i] + sum(alpha[h][i][j] * f[h][j] for h in range(len(alpha)) for j in range(S))
             + layer.self_attention.out_proj.bias for i in range(S)]
        x = [z + layer.feed_forward(layer_norm(layer.feed_forward_block.norm, z)) for z in x]
    states = [layer_norm(model.encoder_norm, z) for z in x]

    y = list(model.target_embeddings(tgt_in, 0)[0])
    identity = [[0.0] * S + [float(i == j) for j in range(T)] for i in range(T)]
    alti_total, rollout_total, norms = identity, [row[:] for row in identity], []
    for layer in model.decoder_layers:
        normed = [layer_norm(layer.self_attention_block.norm, z) for z in y]
        alpha, f = block_by_the_paper(layer.self_attention, normed, normed, lambda i, j: j <= i)
        alti_total = matmul(alti_by_the_paper(alpha, f, y, True), alti_total)
        rollout_total = matmul(rollout_by_the_paper(alpha, y, True), rollout_total)
        y = [y[i] + sum(alpha[h][i][j] * f[h][j] for h in range(len(alpha)) for j in range(i + 1))
             + layer.self_attention.out_proj.bias for i in range(T)]
        normed = [layer_norm(layer.cross_attention_block.norm, z) for z in y]
        alpha, f = block_by_the_paper(layer.cross_attention, normed, states, lambda i, j: True)
        norms.append([[float(torch.linalg.vector_norm(sum(alpha[h][t][s] * f[h][s] for h in range(len(alpha)))))
                       for s in range(S)] for t in range(T)])
        for name, rows, encoder in (("alti", alti_by_the_paper(alpha, f, y, False), alti_encoder),
                                    ("rollout", rollout_by_the_paper(alpha, y, False), rollout_encoder)):
            total = alti_total if name == "alti" else rollout_total
            new = [[rows[t][S] * total[t][j] + (sum(rows[t][s] * encoder[s][j] for s in range(S)) if j < S else 0.0)
                    for j in range(S + T)] for t in range(T)]
            if name == "alti":
                alti_total = new
            else:
                rollout_total = new
        y = [y[t] + sum(alpha[h][t][s] * f[h][s] for h in range(len(alpha)) for s in range(S))
             + layer.cross_attention.out_proj.bias for t in range(T)]
        y = [z + layer.feed_forward(layer_norm(layer.feed_forward_block.norm, z)) for z in y]
    return {"alti": np.array(alti_total)[:, :S], "rollout": np.array(rollout_total)[:, :S],
            "value_norm": np.mean(np.array(norms), axis=0)}


@pytest.fixture(scope="module")
def transformer():
    return random_model(TRANSFORMER)


@pytest.fixture(scope="module")
def transformer_references(transformer):
    with torch.no_grad():
        return [transformer_by_the_paper(transformer, source, output) for source, output in zip(SOURCES, OUTPUTS)]


@pytest.mark.parametrize("method", ["value_norm", "alti", "rollout"])
def test_each_transformer_attribution_is_its_papers_equation(transformer, transformer_references, method):
    found = float64_attributions(transformer, method)
    for k, reference in enumerate(transformer_references):
        assert relative_error(found[k], reference[method]) < 1e-10, (method, k)
    # and the registry's float32 copy of the same numbers
    assert all(np.allclose(a, b[method], rtol=1e-5, atol=1e-6)
               for a, b in zip(attributions(transformer, method), transformer_references))


def test_alti_splits_each_output_token_between_source_and_prefix(transformer):
    """Each row of R sums to 1, so the source's share is the row sum of the scores, strictly
    between 0 and 1; rollout's split is fixed by the depth, 1 − ½^L."""
    for alti, rollout in zip(float64_attributions(transformer, "alti"), float64_attributions(transformer, "rollout")):
        shares = alti.sum(axis=1)
        assert ((shares > 0) & (shares < 1)).all()
        assert np.allclose(rollout.sum(axis=1), 1 - 0.5 ** TRANSFORMER["decoder_layers"])


def test_the_trace_is_the_models_own_forward(transformer):
    batch = forced_batch([0, 1, 2], SOURCES, OUTPUTS, ATTNMT_SPECIALS, torch.device("cpu"))
    with torch.no_grad():
        logits, _ = transformer(batch.src, batch.src_mask, batch.tgt_in)
        trace = trace_transformer(transformer, batch.src, batch.src_mask, batch.tgt_in)
    assert relative_error(trace.logits.numpy(), logits.numpy()) < 1e-12


# ---- erasure, for every kind of model ------------------------------------------------------------


def erasure_by_the_definition(model, source: list[int], output: list[int]) -> np.ndarray:
    """log p(y_t | y_<t, x) − log p(y_t | y_<t, x with token s replaced by <unk>), one pair at a time."""
    def log_probs(row: list[int]) -> np.ndarray:
        with torch.no_grad():
            logits, _ = model(torch.tensor([row]), torch.ones(1, len(row), dtype=torch.bool),
                              torch.tensor([[ATTNMT_SPECIALS.start, *output[:-1]]]))
        return torch.log_softmax(logits[0], -1)[range(len(output)), output].numpy()

    whole = log_probs(source)
    columns = []
    for s in range(len(source)):
        erased = list(source)
        erased[s] = ATTNMT_SPECIALS.unk
        columns.append(whole - log_probs(erased))
    return np.stack(columns, axis=1)


@pytest.mark.parametrize("config", [TRANSFORMER,
                                    {"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "additive"},
                                    {"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "none",
                                     "flow": "luong"}], ids=["transformer", "rnn-additive", "rnn-none-luong"])
def test_erasure_is_the_drop_in_log_probability(config):
    model = random_model(config)
    found = float64_attributions(model, "erasure")
    for k, (source, output) in enumerate(zip(SOURCES, OUTPUTS)):
        assert relative_error(found[k], erasure_by_the_definition(model, source, output)) < 1e-10


# ---- value norms of the RNN's mechanisms --------------------------------------------------------------


def rnn_value_norm_by_the_paper(model, source: list[int], output: list[int]) -> np.ndarray:
    """α_ts ‖h̄_s‖₂ for one head; ‖Σ_i α^i_ts W^O_i (W^V_i h̄_s + b^V_i)‖₂ for multihead."""
    src, mask = torch.tensor([source]), torch.ones(1, len(source), dtype=torch.bool)
    with torch.no_grad():
        _, weights = model(src, mask, torch.tensor([[ATTNMT_SPECIALS.start, *output[:-1]]]), return_attention="heads")
        states = model.encode(src, mask).states[0]  # h̄_s: the keys and values of every mechanism
    weights = weights[0, 0]  # [h, T, S]
    attention = model.attention
    rows = []
    for t in range(len(output)):
        row = []
        for s in range(len(source)):
            if weights.shape[0] == 1:
                row.append(float(weights[0, t, s]) * float(torch.sqrt(sum(v * v for v in states[s]))))
                continue
            d_h = attention.head_dim
            vector = 0.0
            for i in range(weights.shape[0]):
                part = slice(i * d_h, (i + 1) * d_h)
                value = attention.value_proj.weight[part] @ states[s] + attention.value_proj.bias[part]
                vector = vector + weights[i, t, s] * (attention.output_proj.weight[:, part] @ value)
            row.append(float(torch.sqrt(sum(v * v for v in vector)).detach()))
        rows.append(row)
    return np.array(rows)


@pytest.mark.parametrize("attention", ["dot", "general", "additive", "local-p", "mean", "multihead"])
def test_rnn_value_norms_are_kobayashis(attention):
    options = {"num_heads": 3} if attention == "multihead" else {}
    model = random_model({"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": attention,
                          "attention_options": options})
    found = float64_attributions(model, "value_norm")
    for k, (source, output) in enumerate(zip(SOURCES, OUTPUTS)):
        assert relative_error(found[k], rnn_value_norm_by_the_paper(model, source, output)) < 1e-10


# ---- what does not apply says so --------------------------------------------------------------------


@pytest.mark.parametrize(("config", "method", "words"), [
    ({"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "dot"}, "rollout", "not attnmt's Transformer"),
    ({"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "none"}, "value_norm", "attends to nothing"),
    ({**TRANSFORMER, "norm": "post"}, "alti", "pre-norm"),
])
def test_a_method_that_does_not_apply_names_those_that_do(config, method, words):
    model = random_model(config)
    with pytest.raises(ConfigError) as error:
        next(iter(saliency(model, SOURCES, OUTPUTS, method=method)))
    message = str(error.value)
    assert words in message and "use one of: gradient, smoothgrad, integrated" in message and "\n" not in message
