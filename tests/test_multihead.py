"""MultiHeadAttention: against the NumPy reference, against torch.nn.MultiheadAttention, and its parts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnmt.attention import reference
from attnmt.attention.functional import causal_mask, padding_mask
from attnmt.attention.multihead import MultiHeadAttention

FAST = settings(max_examples=20, deadline=None)


def randomise(module: nn.Module, seed: int, std: float = 0.5) -> nn.Module:
    """Overwrite every parameter (biases included, which start at 0) with random numbers."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * std)
    return module


def numpy_multihead(module: MultiHeadAttention, query, key, value, mask):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O in float64 NumPy, one head at a time.

    mask: bool [B, h or 1, Lq, Lk] or None. Returns (output [B, Lq, E], weights [B, h, Lq, Lk]).
    """
    H, d = module.num_heads, module.head_dim
    params = {name: p.detach().double().numpy() for name, p in module.named_parameters()}
    if module.packed_projection:
        W_q, W_k, W_v = np.split(params["in_proj_weight"], 3)
    else:
        W_q, W_k, W_v = params["q_proj_weight"], params["k_proj_weight"], params["v_proj_weight"]
    b_q, b_k, b_v = np.split(params["in_proj_bias"], 3) if "in_proj_bias" in params else (0.0, 0.0, 0.0)
    Q, K, V = query @ W_q.T + b_q, key @ W_k.T + b_k, value @ W_v.T + b_v
    heads, weights = [], []
    for i in range(H):
        head_mask = None if mask is None else mask[:, min(i, mask.shape[1] - 1)]
        head, head_weights = reference.scaled_dot_product_attention(
            Q[..., i * d:(i + 1) * d], K[..., i * d:(i + 1) * d], V[..., i * d:(i + 1) * d], head_mask
        )
        heads.append(head)
        weights.append(head_weights)
    output = np.concatenate(heads, axis=-1) @ params["out_proj.weight"].T + params.get("out_proj.bias", 0.0)
    return output, np.stack(weights, axis=1)


# --- against the NumPy reference ---------------------------------------------------------------


@FAST
@given(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 3), num_queries=st.integers(1, 6),
       num_keys=st.integers(1, 6), heads=st.sampled_from([1, 2, 4]), dims=st.sampled_from([(None, None), (3, 5)]),
       bias=st.booleans(), need_weights=st.booleans(), scale=st.sampled_from([1.0, 30.0]),
       mask_kind=st.sampled_from(["none", "padding", "random"]))
def test_float64_multihead_matches_the_numpy_reference(  # noqa: PLR0913 (one parameter of the grid each)
    seed, batch, num_queries, num_keys, heads, dims, bias, need_weights, scale, mask_kind
):
    module = randomise(MultiHeadAttention(8, heads, kdim=dims[0], vdim=dims[1], bias=bias).double(), seed)
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(batch, num_queries, 8)) * scale  # scale 30: logits in the hundreds
    key = rng.normal(size=(batch, num_keys, module.kdim))
    value = rng.normal(size=(batch, num_keys, module.vdim))
    key_padding_mask = attn_mask = None
    if mask_kind == "padding":  # length 0 happens: rows with nothing to attend to
        key_padding_mask = padding_mask(torch.from_numpy(rng.integers(0, num_keys + 1, size=batch)), num_keys)
        mask = key_padding_mask[:, None, None, :].numpy()
    elif mask_kind == "random":  # per batch row and head, in torch's [B·h, Lq, Lk] layout
        attn_mask = torch.from_numpy(rng.random((batch * heads, num_queries, num_keys)) < 0.6)
        mask = attn_mask.view(batch, heads, num_queries, num_keys).numpy()
    else:
        mask = None
    output, weights = module(torch.from_numpy(query), torch.from_numpy(key), torch.from_numpy(value),
                             key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                             need_weights=need_weights, average_weights=False)
    expected_output, expected_weights = numpy_multihead(module, query, key, value, mask)
    np.testing.assert_allclose(output.detach().numpy(), expected_output, rtol=1e-9, atol=1e-9)
    if need_weights:
        np.testing.assert_allclose(weights.detach().numpy(), expected_weights, rtol=1e-9, atol=1e-9)
    else:
        assert weights is None


def test_self_attention_shortcut_equals_separate_projections():
    module = randomise(MultiHeadAttention(12, 3).double(), 1)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    shared, _ = module(x, x, x, attn_mask=causal_mask(5))
    separate, _ = module(x, x.clone(), x.clone(), attn_mask=causal_mask(5))
    torch.testing.assert_close(shared, separate, rtol=1e-12, atol=1e-12)


def test_weights_averaged_over_heads_and_zero_on_masked_keys():
    module = randomise(MultiHeadAttention(8, 4), 2)
    x = torch.randn(3, 4, 8)
    mask = padding_mask(torch.tensor([4, 2, 1]), 4)
    _, per_head = module(x, x, x, key_padding_mask=mask, need_weights=True, average_weights=False)
    _, averaged = module(x, x, x, key_padding_mask=mask, need_weights=True)
    assert per_head.shape == (3, 4, 4, 4) and averaged.shape == (3, 4, 4)
    torch.testing.assert_close(averaged, per_head.mean(dim=1))
    assert (per_head >= 0).all() and (per_head[~mask[:, None, None, :].expand_as(per_head)] == 0).all()
    torch.testing.assert_close(per_head.sum(-1), torch.ones(3, 4, 4))


def test_a_query_with_nothing_to_attend_to_outputs_the_output_bias():
    module = randomise(MultiHeadAttention(8, 2), 3)
    x = torch.randn(2, 3, 8)
    mask = padding_mask(torch.tensor([3, 0]), 3)
    output, weights = module(x, x, x, key_padding_mask=mask, need_weights=True)
    fused_output, _ = module(x, x, x, key_padding_mask=mask)
    assert (weights[1] == 0).all()
    torch.testing.assert_close(output[1], module.out_proj.bias.detach().expand(3, 8))
    torch.testing.assert_close(fused_output, output)


def test_permuting_keys_and_values_together_leaves_the_output_unchanged():
    module = randomise(MultiHeadAttention(8, 2, kdim=5, vdim=6).double(), 4)
    query, key, value = torch.randn(2, 3, 8).double(), torch.randn(2, 7, 5).double(), torch.randn(2, 7, 6).double()
    mask = padding_mask(torch.tensor([7, 4]), 7)
    permutation = torch.randperm(7)
    output, _ = module(query, key, value, key_padding_mask=mask)
    permuted, _ = module(query, key[:, permutation], value[:, permutation], key_padding_mask=mask[:, permutation])
    torch.testing.assert_close(permuted, output, rtol=1e-12, atol=1e-12)


# --- against torch.nn.MultiheadAttention -------------------------------------------------------


@pytest.mark.parametrize("dims", [(None, None), (6, 10)], ids=["packed", "separate"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal", "padding+causal"])
@pytest.mark.parametrize("bias", [True, False])
def test_from_torch_agrees_to_1e_5(dims, masks, bias):
    torch_module = nn.MultiheadAttention(16, 4, kdim=dims[0], vdim=dims[1], bias=bias, batch_first=True)
    randomise(torch_module, 5, std=0.3).eval()
    ours = MultiHeadAttention.from_torch(torch_module)
    assert not ours.training and ours.packed_projection == (dims == (None, None))
    B, L = 3, 6
    query = torch.randn(B, L, 16)
    key, value = torch.randn(B, L, torch_module.kdim), torch.randn(B, L, torch_module.vdim)
    if dims == (None, None):
        key = value = query  # self-attention, torch's packed path
    # Every query keeps key 0, so torch (which has no rule for empty rows) stays finite.
    padding = padding_mask(torch.tensor([6, 3, 1]), L) if "padding" in masks else None
    causal = causal_mask(L) if "causal" in masks else None
    for need_weights in (False, True):
        for average in (True, False):
            expected_output, expected_weights = torch_module(
                query, key, value,
                key_padding_mask=None if padding is None else ~padding,  # torch: True = masked out
                attn_mask=None if causal is None else ~causal,
                need_weights=need_weights, average_attn_weights=average,
            )
            output, weights = ours(query, key, value, key_padding_mask=padding, attn_mask=causal,
                                   need_weights=need_weights, average_weights=average)
            torch.testing.assert_close(output, expected_output, rtol=1e-5, atol=1e-5)
            if need_weights:
                torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-5)


def test_from_torch_agrees_with_per_head_masks_and_copies_dropout_and_mode():
    torch_module = randomise(nn.MultiheadAttention(8, 2, dropout=0.25, batch_first=True), 6).eval()
    ours = MultiHeadAttention.from_torch(torch_module)
    assert ours.dropout == 0.25 and not ours.training
    assert MultiHeadAttention.from_torch(torch_module.train()).training
    torch_module.eval()
    query, key = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    allowed = torch.rand(4, 3, 4) < 0.6
    allowed[..., 0] = True
    expected, expected_weights = torch_module(query, key, key, attn_mask=~allowed, average_attn_weights=False)
    output, weights = ours(query, key, key, attn_mask=allowed, need_weights=True, average_weights=False)
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-5)


def test_from_torch_rejects_what_it_cannot_copy():
    with pytest.raises(TypeError, match="expects a torch.nn.MultiheadAttention, got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))


# --- the separable steps, for incremental decoding ---------------------------------------------


def test_step_by_step_decoding_with_cached_keys_and_values_equals_the_full_forward():
    module = randomise(MultiHeadAttention(8, 2).double(), 7).eval()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    full, _ = module(x, x, x, attn_mask=causal_mask(5))
    cached_keys = cached_values = None
    for t in range(5):
        step = x[:, t:t + 1]
        keys, values = module.project_key_value(step, step)
        assert keys.shape == (2, 2, 1, 4)
        cached_keys = keys if cached_keys is None else torch.cat([cached_keys, keys], dim=2)
        cached_values = values if cached_values is None else torch.cat([cached_values, values], dim=2)
        output, weights = module.attend(module.project_query(step), cached_keys, cached_values, need_weights=True)
        assert weights.shape == (2, 2, 1, t + 1)
        torch.testing.assert_close(output[:, 0], full[:, t], rtol=1e-12, atol=1e-12)


def test_cross_attention_keys_projected_once_equal_the_forward():
    module = randomise(MultiHeadAttention(8, 4).double(), 8)
    target, source = torch.randn(2, 3, 8).double(), torch.randn(2, 6, 8).double()
    source_mask = padding_mask(torch.tensor([6, 2]), 6)
    keys, values = module.project_key_value(source, source)
    output, _ = module.attend(module.project_query(target), keys, values, source_mask[:, None, None, :])
    expected, _ = module(target, source, source, key_padding_mask=source_mask)
    torch.testing.assert_close(output, expected, rtol=1e-12, atol=1e-12)


# --- training behaviour and gradients ----------------------------------------------------------


def test_dropout_acts_in_training_mode_only():
    module = randomise(MultiHeadAttention(8, 2, dropout=0.5), 9)
    x = torch.randn(2, 6, 8)
    module.eval()
    torch.testing.assert_close(module(x, x, x)[0], module(x, x, x)[0])
    module.train()
    assert not torch.allclose(module(x, x, x)[0], module.eval()(x, x, x)[0])


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_gradcheck_through_inputs_and_parameters(need_weights):
    module = randomise(MultiHeadAttention(4, 2, kdim=3, vdim=5).double(), 10, std=0.7)
    query = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    key = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    value = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    mask = padding_mask(torch.tensor([4, 2]), 4)
    names = [name for name, _ in module.named_parameters()]

    def multihead(query, key, value, *parameters):
        output, weights = torch.func.functional_call(
            module, dict(zip(names, parameters)), (query, key, value),
            {"key_padding_mask": mask, "attn_mask": causal_mask(4)[:3], "need_weights": need_weights},
        )
        return output if weights is None else (output, weights)

    parameters = tuple(p.detach().clone().requires_grad_() for p in module.parameters())
    # fast_mode checks random directions of the Jacobian: ~170 inputs would otherwise take seconds.
    assert torch.autograd.gradcheck(multihead, (query, key, value, *parameters), fast_mode=True)


# --- errors ------------------------------------------------------------------------------------


def test_constructor_errors():
    with pytest.raises(ValueError, match="embed_dim=10 is not divisible by num_heads=3"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="dropout must be in"):
        MultiHeadAttention(8, 2, dropout=1.0)
    with pytest.raises(ValueError, match="must be positive"):
        MultiHeadAttention(8, 0)


def test_bad_inputs_and_masks_raise_errors_naming_them():
    module = MultiHeadAttention(8, 2, kdim=4)
    query, key, value = torch.zeros(2, 3, 8), torch.zeros(2, 5, 4), torch.zeros(2, 5, 8)
    with pytest.raises(ValueError, match=r"key must have shape \[B, L, 4\] \(batch first\), got \(2, 5, 8\)"):
        module(query, value, value)
    with pytest.raises(ValueError, match=r"query must have shape \[B, L, 8\] .* got \(3, 8\)"):
        module(query[0], key, value)
    with pytest.raises(ValueError, match=r"share the batch size B.*key \(2, 5, 4\), value \(2, 6, 8\)"):
        module(query, key, torch.zeros(2, 6, 8))
    with pytest.raises(TypeError, match="key_padding_mask must be a torch.bool tensor with True = may attend"):
        module(query, key, value, key_padding_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \[B, Lk\] = \(2, 5\), got \(2, 4\)"):
        module(query, key, value, key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 3\) does not fit Lq=3, Lk=5, B=2, heads=2"):
        module(query, key, value, attn_mask=causal_mask(3))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 3, 5\)"):
        module(query, key, value, attn_mask=torch.ones(3, 3, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="query must be a torch.Tensor, got list"):
        module([[0.0] * 8], key, value)


def test_both_multi_head_classes_split_their_output_by_head_and_token_with_one_product():
    """Σ_i Σ_l α^i_tl f^i(v_l) + b^O is the output, for MultiHeadAttention and for the RNN's
    single-query ``multihead``; f^i is the one ``head_outputs`` both use (value norms, ALTI+)."""
    from attnmt.attention.mechanisms import MultiHeadSingleQueryAttention

    torch.manual_seed(0)
    layer = MultiHeadAttention(12, 3, kdim=10, vdim=10).double()
    query, keys = torch.randn(2, 4, 12, dtype=torch.float64), torch.randn(2, 5, 10, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    k_heads, v_heads = layer.project_key_value(keys, keys)
    output, weights = layer.attend(layer.project_query(query), k_heads, v_heads, mask[:, None, None, :],
                                   need_weights=True)
    summed = torch.einsum("bhtl,bhle->bte", weights, layer.head_outputs(v_heads)) + layer.out_proj.bias
    torch.testing.assert_close(summed, output, rtol=0, atol=1e-12)

    single = MultiHeadSingleQueryAttention(8, 10, 10, num_heads=2).double()
    prepared = single.prepare(keys, keys, mask)
    context, head_weights = single.attend_heads(torch.randn(2, 4, 8, dtype=torch.float64), prepared)
    shares = single.head_outputs(prepared.values)
    summed = torch.einsum("bhtl,bhle->bte", head_weights, shares) + single.output_proj.bias
    torch.testing.assert_close(summed, context, rtol=0, atol=1e-12)
