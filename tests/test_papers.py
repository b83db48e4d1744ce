"""Each mechanism against its paper's equations, written out here from the papers in float64 with
plain loops over sentences, steps and source positions: no attnmt helper (no masked softmax, no
reference module) takes part, only the modules' learnt parameters are read.

    Bahdanau et al. 2015, Eq. (5)-(6) and Appendix A.1.2:  e_s = vᵀ tanh(W h + U h̄_s) [+ b: attnmt's]
    Luong et al. 2015, Eq. (7)-(8):  a_t(s) = exp(score(h_t, h̄_s)) / Σ_s' exp(score(h_t, h̄_s'))
        dot h_tᵀ h̄_s, general h_tᵀ W_a h̄_s, concat v_aᵀ tanh(W_a [h_t; h̄_s])
    Luong et al. 2015, §3.2:  local-m p_t = t, Eq. (7) inside [p_t − D, p_t + D];
        local-p p_t = S · sigmoid(v_pᵀ tanh(W_p h_t)) (Eq. 9), times exp(−(s − p_t)² / (2σ²)),
        σ = D/2 (Eq. 10), which attnmt renormalises
    Vaswani et al. 2017, Eq. (1) and §3.2.2:  softmax(q kᵀ / √d_k) v, per head, then W^O

Rows with nothing to attend to follow attnmt's rule: zero weights and a zero weighted sum, then
any output projection (docs/mechanisms.md).
"""

from __future__ import annotations

import math

import pytest
import torch

from attnmt.attention import build_attention
from attnmt.attention.multihead import MultiHeadAttention

DQ, DK, DV = 6, 6, 5
LENGTHS = [6, 4, 1, 0]  # padding, a one-word sentence, and one with nothing to attend to
B, S, T = len(LENGTHS), max(LENGTHS), 7  # T > S: local-m's window must stop at the last word


def inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
    mask = torch.tensor([[s < length for s in range(S)] for length in LENGTHS])
    return draw(B, T, DQ) * 2, draw(B, S, DK) * 2, draw(B, S, DV), mask


def weights_over(scores: dict[int, float]) -> dict[int, float]:
    """exp(score) normalised over the given positions (none: no weights)."""
    if not scores:
        return {}
    top = max(scores.values())
    exps = {s: math.exp(score - top) for s, score in scores.items()}
    total = sum(exps.values())
    return {s: value / total for s, value in exps.items()}


def as_rows(weights: dict[int, float], values_b: torch.Tensor) -> tuple[list[float], torch.Tensor]:
    """A weight per source position (0 outside ``weights``) and Σ_s α_s v_s."""
    row = [weights.get(s, 0.0) for s in range(S)]
    context = torch.zeros(values_b.shape[-1], dtype=torch.float64)
    for s, alpha in weights.items():
        context += alpha * values_b[s]
    return row, context


def paper_score(name: str, p: dict, h: torch.Tensor, hs: torch.Tensor) -> float:
    """score(h_t, h̄_s) of each paper (module docstring), with the module's parameters ``p``."""
    if name == "dot":
        return float(h @ hs)
    if name in ("general", "local-m", "local-p"):
        return float(h @ (p["key_proj.weight"] @ hs))  # W_a h̄_s, W_a stored as [Dq, Dk]
    if name == "additive":  # Luong's concat: W_a [h; h̄] = W h + U h̄ (one matrix split in two)
        hidden = torch.tanh(p["query_proj.weight"] @ h + p["key_proj.weight"] @ hs + p["key_proj.bias"])
        return float(p["energy.weight"][0] @ hidden)
    if name == "scaled_dot":
        q = p["query_proj.weight"] @ h + p["query_proj.bias"]
        k = p["key_proj.weight"] @ hs + p["key_proj.bias"]
        return float(q @ k) / math.sqrt(q.numel())
    raise AssertionError(name)


def by_the_paper(name: str, module, query, keys, values) -> tuple[torch.Tensor, torch.Tensor]:
    """(context [B, T, Dv], weights [B, T, S]) by the paper's equations (module docstring)."""
    p = {k: v.detach() for k, v in module.state_dict().items()}
    contexts, all_weights = [], []
    for b, length in enumerate(LENGTHS):
        row_weights, row_contexts = [], []
        for t in range(T):
            h = query[b, t]

            def score(s: int, h=h, b=b) -> float:
                return paper_score(name, p, h, keys[b, s])

            allowed = list(range(length))
            if name in ("local-m", "local-p"):
                D = module.window
                if name == "local-m":
                    p_t = float(min(t, length - 1))  # p_t = t, held at the last word past the source's end
                else:
                    gate = p["position_energy.weight"][0] @ torch.tanh(p["position_proj.weight"] @ h)
                    p_t = length / (1.0 + math.exp(-float(gate)))  # Eq. (9)
                allowed = [s for s in allowed if p_t - D <= s <= p_t + D]
                weights = weights_over({s: score(s) for s in allowed})  # Eq. (7) inside the window
                if name == "local-p":
                    sigma = D / 2
                    gaussian = {s: math.exp(-(s - p_t) ** 2 / (2 * sigma**2)) for s in weights}  # Eq. (10)
                    weights = {s: a * gaussian[s] for s, a in weights.items()}
                    total = sum(weights.values())
                    weights = {s: a / total for s, a in weights.items()}  # attnmt's renormalisation
            else:
                weights = weights_over({s: score(s) for s in allowed})
            row, context = as_rows(weights, values[b])
            row_weights.append(row)
            row_contexts.append(context)
        all_weights.append(row_weights)
        contexts.append(torch.stack(row_contexts))
    return torch.stack(contexts), torch.tensor(all_weights, dtype=torch.float64)


@pytest.mark.parametrize("name", ["dot", "general", "additive", "scaled_dot", "local-m", "local-p"])
@pytest.mark.parametrize("seed", [0, 1])
def test_each_mechanism_is_its_papers_equation(name, seed):
    torch.manual_seed(seed)
    options = {"local-m": {"window": 2}, "local-p": {"window": 2}, "scaled_dot": {"kq_dim": 7},
               "additive": {"attention_dim": 4}}.get(name, {})
    module = build_attention(name, DQ, DK, DV, **options).double()
    query, keys, values, mask = inputs(seed)
    context, weights = module(query, keys, values, mask)
    expected_context, expected_weights = by_the_paper(name, module, query, keys, values)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(context, expected_context, rtol=1e-12, atol=1e-14)


def test_local_m_differs_from_local_p_only_in_the_centre_and_the_gaussian():
    torch.manual_seed(3)
    local_m = build_attention("local-m", DQ, DK, DV, window=2, gaussian=True).double()
    local_p = build_attention("local-p", DQ, DK, DV, window=2).double()
    local_p.key_proj.load_state_dict(local_m.key_proj.state_dict())
    local_p.positions = local_m.positions  # p_t = t in both: what remains must be the same
    query, keys, values, mask = inputs(4)
    for got, want in zip(local_p(query, keys, values, mask), local_m(query, keys, values, mask)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    paper = build_attention("local-m", DQ, DK, DV, window=2).double()
    paper.load_state_dict(local_m.state_dict())
    assert not torch.allclose(paper(query, keys, values, mask)[1], local_m(query, keys, values, mask)[1])


def multihead_by_the_paper(query, keys, values, lengths, w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o, heads: int):  # noqa: PLR0913 (every weight of the layer, as the paper names them)
    """Vaswani et al. 2017, §3.2.2, one query at a time: head_i = Σ_s softmax_s(q_i·k_is / √d) v_is,
    output = W^O [head_1; …; head_h] + b^O. query [B, Lq, E], keys/values [B, S, *]."""
    batch, query_length, _ = query.shape
    width = w_q.shape[0]
    d = width // heads
    out = torch.zeros(batch, query_length, w_o.shape[0], dtype=torch.float64)
    for b in range(batch):
        for t in range(query_length):
            q = w_q @ query[b, t] + b_q
            concatenated = torch.zeros(width, dtype=torch.float64)
            for i in range(heads):
                part = slice(i * d, (i + 1) * d)
                scores = {s: float(q[part] @ (w_k @ keys[b, s] + b_k)[part]) / math.sqrt(d) for s in range(lengths[b])}
                for s, alpha in weights_over(scores).items():
                    concatenated[part] += alpha * (w_v @ values[b, s] + b_v)[part]
            out[b, t] = w_o @ concatenated + b_o
    return out


def test_the_multihead_mechanism_is_vaswanis_multi_head_attention():
    torch.manual_seed(5)
    module = build_attention("multihead", DQ, DK, DV, num_heads=2).double()
    query, keys, values, mask = inputs(5)
    context, _ = module(query, keys, values, mask)
    p = {k: v.detach() for k, v in module.state_dict().items()}
    expected = multihead_by_the_paper(query, keys, values, LENGTHS, p["query_proj.weight"], p["query_proj.bias"],
                                      p["key_proj.weight"], p["key_proj.bias"], p["value_proj.weight"],
                                      p["value_proj.bias"], p["output_proj.weight"], p["output_proj.bias"], 2)
    torch.testing.assert_close(context, expected, rtol=1e-12, atol=1e-14)


def test_the_transformers_multi_head_attention_is_vaswanis():
    torch.manual_seed(6)
    E, heads = 8, 2
    layer = MultiHeadAttention(E, heads, kdim=DK, vdim=DV).double()
    with torch.no_grad():  # torch's initialisation leaves the biases at zero: give them values
        for parameter in layer.parameters():
            if parameter.dim() == 1:
                parameter.normal_()
    generator = torch.Generator().manual_seed(6)
    query = torch.randn(B, 3, E, generator=generator, dtype=torch.float64)
    _, keys, values, mask = inputs(6)
    output, _ = layer(query, keys, values, key_padding_mask=mask)
    w_q, w_k, w_v = layer.q_proj_weight, layer.k_proj_weight, layer.v_proj_weight
    b_q, b_k, b_v = layer.in_proj_bias.detach().split(E)
    expected = multihead_by_the_paper(query, keys, values, LENGTHS, w_q.detach(), b_q, w_k.detach(), b_k,
                                      w_v.detach(), b_v, layer.out_proj.weight.detach(),
                                      layer.out_proj.bias.detach(), heads)
    torch.testing.assert_close(output, expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(output[3], layer.out_proj.bias.detach().expand(3, E), rtol=0, atol=0)
