"""The single-query mechanisms: each against a float64 NumPy restatement of its equation, the
properties every attention distribution must have, gradients, and the errors users see."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnmt.attention import ATTENTION_TYPES, build_attention, canonical_name, padding_mask
from attnmt.attention.mechanisms import PreparedKeys
from attnmt.attention.reference import softmax

MECHANISMS = ["none", "mean", "dot", "scaled_dot", "general", "additive", "local-m", "local-p", "multihead"]
POSITION_FREE = [m for m in MECHANISMS if not m.startswith("local")]
DQ, DK, DV = 6, 6, 5  # dot needs DQ == DK
OPTIONS = {"scaled_dot": {"kq_dim": 7}, "additive": {"attention_dim": 4}, "multihead": {"num_heads": 2},
           "local-m": {"window": 2}, "local-p": {"window": 2}}


def make(name: str, dtype=torch.float64, **options):
    torch.manual_seed(0)
    return build_attention(name, DQ, DK, DV, **{**OPTIONS.get(name, {}), **options}).to(dtype)


def params(module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def reference_attention(name: str, module, query, keys, values, lengths, steps):
    """float64 NumPy: query [B, T, Dq], keys [B, S, Dk], values [B, S, Dv] -> (context, weights)."""
    p = params(module)
    B, T, _ = query.shape
    S = keys.shape[1]
    allowed = np.arange(S)[None, None, :] < lengths[:, None, None]  # [B, 1, S]
    allowed = np.broadcast_to(allowed, (B, T, S)).copy()
    values_out = values
    if name in ("none",):
        return np.zeros((B, T, DV)), np.zeros((B, T, S))
    if name == "mean":
        scores = np.zeros((B, T, S))
    elif name == "dot":
        scores = query @ keys.transpose(0, 2, 1)
    elif name == "scaled_dot":
        q = query @ p["query_proj.weight"].T + p["query_proj.bias"]
        k = keys @ p["key_proj.weight"].T + p["key_proj.bias"]
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    elif name in ("general", "local-m", "local-p"):
        scores = query @ (keys @ p["key_proj.weight"].T).transpose(0, 2, 1)
    elif name == "additive":
        hidden = np.tanh((query @ p["query_proj.weight"].T)[:, :, None, :]
                         + (keys @ p["key_proj.weight"].T + p["key_proj.bias"])[:, None, :, :])
        scores = hidden @ p["energy.weight"][0]
    elif name == "multihead":
        h = module.num_heads
        q = query @ p["query_proj.weight"].T + p["query_proj.bias"]
        k = keys @ p["key_proj.weight"].T + p["key_proj.bias"]
        v = values @ p["value_proj.weight"].T + p["value_proj.bias"]
        dh = q.shape[-1] // h

        def split(x):  # [B, L, h·dh] -> [B, h, L, dh]
            return x.reshape(x.shape[0], x.shape[1], h, dh).transpose(0, 2, 1, 3)

        s = split(q) @ split(k).transpose(0, 1, 3, 2) / np.sqrt(dh)  # [B, h, T, S]
        w = masked_reference_softmax(s, allowed[:, None])
        heads = (w @ split(v)).transpose(0, 2, 1, 3).reshape(B, T, h * dh)
        context = heads @ p["output_proj.weight"].T + p["output_proj.bias"]  # an empty row: the bias
        return context, w.mean(axis=1)
    else:  # pragma: no cover
        raise AssertionError(name)
    if name.startswith("local"):
        if name == "local-m":
            centre = np.minimum(steps, np.maximum(lengths - 1, 0)[:, None]).astype(float)
        else:
            gate = np.tanh(query @ p["position_proj.weight"].T) @ p["position_energy.weight"][0]
            centre = lengths[:, None] / (1.0 + np.exp(-gate))
        distance = np.arange(S)[None, None, :] - centre[:, :, None]
        sigma = module.window / 2.0
        if module.gaussian:  # local-p, and local-m as runs trained before 0.2 had it
            scores = scores - distance**2 / (2 * sigma**2)
        allowed &= np.abs(distance) <= module.window
    weights = masked_reference_softmax(scores, allowed)
    return weights @ values_out, weights


def masked_reference_softmax(scores, allowed):
    """Reference softmax over allowed positions; rows with none allowed are all zero."""
    weights = softmax(np.where(allowed, scores, -np.inf), axis=-1)
    return np.where(allowed.any(axis=-1, keepdims=True), np.nan_to_num(weights), 0.0)


@st.composite
def problems(draw):
    B = draw(st.integers(1, 3))
    S = draw(st.integers(1, 6))
    T = draw(st.integers(1, 3))
    lengths = draw(st.lists(st.integers(0, S), min_size=B, max_size=B))
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    return B, S, T, np.array(lengths), scale, seed


@pytest.mark.slow
@pytest.mark.parametrize("name", MECHANISMS)
@settings(max_examples=25, deadline=None)
@given(problem=problems())
def test_matches_float64_reference(name, problem):
    B, S, T, lengths, scale, seed = problem
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, T, DQ)) * scale
    keys = rng.normal(size=(B, S, DK))
    values = rng.normal(size=(B, S, DV))
    module = make(name)
    mask = padding_mask(torch.as_tensor(lengths), S)
    context, weights = module(torch.from_numpy(query), torch.from_numpy(keys), torch.from_numpy(values), mask)
    steps = np.broadcast_to(np.arange(T), (B, T))
    ref_context, ref_weights = reference_attention(name, module, query, keys, values, lengths, steps)
    np.testing.assert_allclose(weights.detach().numpy(), ref_weights, atol=1e-10, rtol=1e-9)
    np.testing.assert_allclose(context.detach().numpy(), ref_context, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("name", MECHANISMS)
def test_weights_are_a_distribution_over_allowed_keys(name):
    module = make(name, torch.float32)
    lengths = torch.tensor([7, 3, 1, 0])
    mask = padding_mask(lengths, 7)
    keys = torch.randn(4, 7, DK) * 5
    context, weights = module(torch.randn(4, 5, DQ) * 50, keys, torch.randn(4, 7, DV), mask)
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert (weights >= 0).all()
    assert (weights.masked_select(~mask[:, None, :].expand_as(weights)) == 0).all()
    sums = weights.sum(-1)
    expected = torch.zeros(4, 5) if name == "none" else (lengths > 0).float()[:, None].expand(4, 5)
    torch.testing.assert_close(sums, expected)
    # the sentence with nothing to attend to: a zero weighted sum, then multihead's output projection
    empty = module.output_proj.bias.detach().expand(5, DV) if name == "multihead" else torch.zeros(5, DV)
    assert torch.equal(context[3], empty)


@pytest.mark.parametrize("name", POSITION_FREE)
def test_permuting_keys_and_values_together_leaves_the_output_unchanged(name):
    module = make(name)
    keys, values = torch.randn(2, 6, DK, dtype=torch.float64), torch.randn(2, 6, DV, dtype=torch.float64)
    query = torch.randn(2, DQ, dtype=torch.float64)
    mask = padding_mask(torch.tensor([6, 4]), 6)
    permutation = torch.randperm(6)
    context, weights = module(query, keys, values, mask)
    context_p, weights_p = module(query, keys[:, permutation], values[:, permutation], mask[:, permutation])
    torch.testing.assert_close(context_p, context)
    torch.testing.assert_close(weights_p, weights[:, permutation])


@pytest.mark.parametrize("name", MECHANISMS)
def test_one_step_at_a_time_equals_all_steps_at_once(name):
    module = make(name)
    keys, values = torch.randn(3, 5, DK, dtype=torch.float64), torch.randn(3, 5, DV, dtype=torch.float64)
    queries = torch.randn(3, 4, DQ, dtype=torch.float64)
    prepared = module.prepare(keys, values, padding_mask(torch.tensor([5, 2, 1]), 5))
    context_all, weights_all = module.attend(queries, prepared)
    for step in range(4):
        context, weights = module.attend(queries[:, step], prepared, step=step)
        torch.testing.assert_close(context, context_all[:, step])
        torch.testing.assert_close(weights, weights_all[:, step])


def test_local_m_centres_its_window_on_the_decoding_step():
    module = make("local-m")
    keys = torch.zeros(1, 12, DK, dtype=torch.float64)  # equal scores: only the window acts
    prepared = module.prepare(keys, torch.randn(1, 12, DV, dtype=torch.float64))
    _, weights = module.attend(torch.randn(1, DQ, dtype=torch.float64), prepared, step=6)
    torch.testing.assert_close(weights[0, 4:9], torch.full((5,), 0.2, dtype=torch.float64))  # Eq. (7), no Gaussian
    assert (weights[0, :4] == 0).all() and (weights[0, 9:] == 0).all()  # window half-width 2
    _, gaussian = make("local-m", gaussian=True).attend(torch.randn(1, DQ, dtype=torch.float64),
                                                        make("local-m", gaussian=True).prepare(keys, prepared.values),
                                                        step=6)
    assert gaussian.argmax().item() == 6 and (gaussian[0, :4] == 0).all()  # the form of runs saved before 0.2


def test_prepared_keys_index_select_reorders_rows():
    module = make("additive")
    prepared = module.prepare(torch.randn(3, 4, DK, dtype=torch.float64), torch.randn(3, 4, DV, dtype=torch.float64))
    index = torch.tensor([2, 2, 0])
    selected = prepared.index_select(index)
    assert isinstance(selected, PreparedKeys)
    torch.testing.assert_close(selected.keys, prepared.keys[index])
    torch.testing.assert_close(selected.lengths, prepared.lengths[index])


@pytest.mark.slow
@pytest.mark.parametrize("name", [m for m in MECHANISMS if m not in ("none", "mean")])
def test_gradcheck(name):
    module = make(name)
    query = torch.randn(2, 2, DQ, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 4, DK, dtype=torch.float64, requires_grad=True)
    values = torch.randn(2, 4, DV, dtype=torch.float64, requires_grad=True)
    mask = padding_mask(torch.tensor([4, 2]), 4)
    assert torch.autograd.gradcheck(lambda q, k, v: module(q, k, v, mask), (query, keys, values))
    # and through the parameters
    for parameter in module.parameters():
        parameter.requires_grad_(True)
    loss = sum(t.sum() for t in module(query, keys, values, mask))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in module.parameters())


@pytest.mark.parametrize("name", ["none", "mean"])
def test_gradcheck_parameter_free_mechanisms(name):
    module = make(name)
    values = torch.randn(2, 4, DV, dtype=torch.float64, requires_grad=True)
    mask = padding_mask(torch.tensor([4, 0]), 4)
    query, keys = torch.randn(2, DQ, dtype=torch.float64), torch.randn(2, 4, DK, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda v: module(query, keys, v, mask)[0], (values,))


def test_registry_names_and_aliases():
    assert set(MECHANISMS) | {"sdp", "bahdanau", "concat"} == set(ATTENTION_TYPES)
    assert canonical_name("sdp") == "scaled_dot"
    assert canonical_name("Bahdanau") == "additive" and canonical_name("concat") == "additive"
    assert type(build_attention("sdp", 4, 4)) is type(build_attention("scaled_dot", 4, 4))
    assert build_attention("scaled_dot", 4, 4).kq_dim == 512  # the default size of the projections


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown attention mechanism 'luong-magic'.*scaled_dot.*bahdanau"):
        build_attention("luong-magic", 4, 4)


def test_unknown_option_names_it():
    with pytest.raises(TypeError, match="kq_dim"):
        build_attention("general", 4, 4, kq_dim=8)


def test_non_bool_mask_is_a_type_error():
    module = make("general", torch.float32)
    with pytest.raises(TypeError, match="mask must be a torch.bool"):
        module(torch.randn(1, DQ), torch.randn(1, 3, DK), torch.randn(1, 3, DV), torch.ones(1, 3))


def test_mismatched_shapes_name_the_shapes():
    module = make("general", torch.float32)
    with pytest.raises(ValueError, match=r"keys \(2, 3, 6\) and values \(2, 4, 5\)"):
        module.prepare(torch.randn(2, 3, DK), torch.randn(2, 4, DV))
    with pytest.raises(ValueError, match=r"mask \(2, 4\) must be \[B, S\] = \(2, 3\)"):
        module.prepare(torch.randn(2, 3, DK), torch.randn(2, 3, DV), torch.ones(2, 4, dtype=torch.bool))
    prepared = module.prepare(torch.randn(2, 3, DK), torch.randn(2, 3, DV))
    with pytest.raises(ValueError, match="query must be"):
        module.attend(torch.randn(2, DQ + 1), prepared)
    with pytest.raises(ValueError, match="dot attention needs query_dim == key_dim"):
        build_attention("dot", 4, 6)


def _rows_of_docs_table() -> dict[str, str]:
    """docs/mechanisms.md's table: the registry name -> its "as computed" cell, pipes unescaped."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "mechanisms.md").read_text(encoding="utf-8")
    cells = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            parts = [part.replace("\\|", "|").strip() for part in re.split(r"(?<!\\)\|", line)[1:-1]]
            cells[parts[0].split("`")[1]] = parts[1]
    return cells


def test_each_mechanisms_equations_are_written_once_and_shown_alike_in_its_docstring_the_docs_and_serve():
    """EQUATIONS is the one source: every row stands in the class's docstring, the rows joined by
    "; " in docs/mechanisms.md, and serve draws one MathML row per equation (well-formed XML)."""
    import xml.etree.ElementTree as ElementTree

    from attnmt.attention.mechanisms import BUILTIN_BUILDERS, EQUATIONS, mechanism_equations
    from attnmt.serve.equations import equation_mathml

    assert set(EQUATIONS) == set(BUILTIN_BUILDERS)
    docs = _rows_of_docs_table()
    for name, rows in EQUATIONS.items():
        module = build_attention(name, 8, 8, 8)
        docstring = " ".join((type(module).__doc__ or "").split())
        for row in rows:
            assert row in docstring, (name, row)
        assert docs[name].startswith("; ".join(rows)), (name, docs[name])
        math = ElementTree.fromstring(equation_mathml(name))
        assert len(math.findall(".//{http://www.w3.org/1998/Math/MathML}mtr")) == len(rows)
    assert mechanism_equations("local-m", {"gaussian": True})[1] == EQUATIONS["local-p"][1]  # runs from before
    assert equation_mathml("my_file.py:Mine") is None


def test_the_equations_show_the_biases_and_local_m_s_clamp_that_the_code_has():
    from attnmt.attention.mechanisms import EQUATIONS

    assert "+ b_q" in EQUATIONS["scaled_dot"][0] and "+ b_k" in EQUATIONS["scaled_dot"][1]
    assert EQUATIONS["additive"][0].endswith("+ b)") and EQUATIONS["local-m"][0] == "p_t = min(t, S_b − 1)"
