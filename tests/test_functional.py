"""The torch core (attnmt.attention.functional) against the float64 NumPy reference.

``scaled_dot_product_attention`` has two paths, the fused kernel (no weights) and the explicit
matmul–softmax–matmul (weights); both are checked on fresh random inputs, with every kind of
mask, with logits up to ±1e4, and through autograd.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnmt.attention import reference
from attnmt.attention.functional import (
    causal_mask,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)

FAST = settings(max_examples=25, deadline=None)
BOTH_PATHS = pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])


def random_inputs(seed, batch, num_queries, num_keys, d_k, d_v, logit_scale=1.0, dtype=torch.float64):
    """q, k, v as float64 NumPy arrays and as torch tensors of ``dtype`` holding the same numbers."""
    rng = np.random.default_rng(seed)
    arrays = (
        rng.normal(size=(*batch, num_queries, d_k)) * logit_scale,
        rng.normal(size=(*batch, num_keys, d_k)),
        rng.normal(size=(*batch, num_keys, d_v)),
    )
    if dtype != torch.float64:  # compare against the reference on exactly the rounded numbers
        arrays = tuple(a.astype(np.float32).astype(np.float64) for a in arrays)
    return arrays, tuple(torch.tensor(a, dtype=dtype) for a in arrays)


def make_mask(kind, rng, batch, num_queries, num_keys):
    """A bool mask [*batch, Lq, Lk] (or broadcastable to it) of the given kind, or None."""
    if kind == "none":
        return None
    if kind == "random":  # rows with no allowed key happen
        return torch.from_numpy(rng.random((*batch, num_queries, num_keys)) < 0.5)
    lengths = torch.from_numpy(rng.integers(0, num_keys + 1, size=batch[0]))  # 0: nothing to attend
    padding = padding_mask(lengths, num_keys).view(batch[0], *([1] * (len(batch) - 1)), 1, num_keys)
    if kind == "padding":
        return padding
    causal = torch.ones(num_queries, num_keys, dtype=torch.bool).tril()
    return causal if kind == "causal" else padding & causal


def reference_attention(q, k, v, mask):
    return reference.scaled_dot_product_attention(q, k, v, None if mask is None else mask.numpy())


# --- agreement with the reference --------------------------------------------------------------


@FAST
@BOTH_PATHS
@given(seed=st.integers(0, 2**32 - 1), batch=st.sampled_from([(1,), (3,), (2, 2)]),
       num_queries=st.integers(1, 9), num_keys=st.integers(1, 9), d_k=st.sampled_from([1, 4, 16]),
       d_v=st.sampled_from([1, 5]), logit_scale=st.sampled_from([1.0, 50.0, 2500.0]),
       mask_kind=st.sampled_from(["none", "random", "padding", "causal", "padding+causal"]))
@pytest.mark.slow
def test_float64_attention_matches_the_reference(  # noqa: PLR0913 (one parameter of the grid each)
    need_weights, seed, batch, num_queries, num_keys, d_k, d_v, logit_scale, mask_kind
):
    # logit_scale 2500 with unit-normal q, k and d_k up to 16 gives scores up to about ±1e4.
    (q, k, v), (tq, tk, tv) = random_inputs(seed, batch, num_queries, num_keys, d_k, d_v, logit_scale)
    mask = make_mask(mask_kind, np.random.default_rng(seed + 1), batch, num_queries, num_keys)
    output, weights = scaled_dot_product_attention(tq, tk, tv, mask, need_weights=need_weights)
    expected_output, expected_weights = reference_attention(q, k, v, mask)
    np.testing.assert_allclose(output.numpy(), expected_output, rtol=1e-9, atol=1e-9)
    if need_weights:
        np.testing.assert_allclose(weights.numpy(), expected_weights, rtol=1e-9, atol=1e-9)
    else:
        assert weights is None


@FAST
@BOTH_PATHS
@given(seed=st.integers(0, 2**32 - 1), num_queries=st.integers(1, 12), num_keys=st.integers(1, 24),
       mask_kind=st.sampled_from(["none", "random", "padding+causal"]))
def test_float32_attention_matches_the_reference_to_1e_5(need_weights, seed, num_queries, num_keys, mask_kind):
    batch = (2, 3)
    (q, k, v), (tq, tk, tv) = random_inputs(seed, batch, num_queries, num_keys, 8, 4, dtype=torch.float32)
    mask = make_mask(mask_kind, np.random.default_rng(seed + 1), batch, num_queries, num_keys)
    output, weights = scaled_dot_product_attention(tq, tk, tv, mask, need_weights=need_weights)
    expected_output, expected_weights = reference_attention(q, k, v, mask)
    assert output.dtype == torch.float32
    np.testing.assert_allclose(output.numpy(), expected_output, rtol=1e-5, atol=1e-5)
    if need_weights:
        np.testing.assert_allclose(weights.numpy(), expected_weights, rtol=1e-5, atol=1e-6)


@FAST
@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from([(1,), (4,), (3, 5), (2, 3, 4), (3, 20), (40, 2)]),
       magnitude=st.sampled_from([1.0, 1e4]), masked=st.booleans(), data=st.data())
def test_masked_softmax_matches_the_reference_softmax(seed, shape, magnitude, masked, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=shape) * magnitude
    mask = rng.random(shape) < 0.6 if masked else None
    result = masked_softmax(torch.tensor(scores), None if mask is None else torch.from_numpy(mask), dim=dim)
    expected = reference.softmax(scores if mask is None else np.where(mask, scores, -np.inf), axis=dim)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("length", [5, 15, 16, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_softmax_is_the_same_with_and_without_autograd(length, dtype):
    # Short CPU rows take a hand-written softmax when no gradient is needed (faster there).
    scores = torch.randn(6, length, dtype=dtype) * 30
    mask = torch.rand(6, length) < 0.7
    mask[2] = False
    plain = masked_softmax(scores, mask)
    with_graph = masked_softmax(scores.clone().requires_grad_(), mask)
    assert with_graph.requires_grad and not plain.requires_grad
    torch.testing.assert_close(plain, with_graph.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(plain.sum(-1), mask.any(-1).to(dtype))


def test_the_seed_004_case_padding_and_look_ahead_on_random_64_5_64():
    """Random (64, 5, 64) queries, keys and values in [0, 1) with a padding and a look-ahead mask."""
    generator = torch.Generator().manual_seed(4)
    q, k, v = (torch.rand(64, 5, 64, generator=generator) for _ in range(3))
    lengths = torch.randint(1, 6, (64,), generator=generator)
    mask = padding_mask(lengths, 5).unsqueeze(1) & causal_mask(5)  # [64, 5, 5]
    expected_output, expected_weights = reference.scaled_dot_product_attention(
        q.double().numpy(), k.double().numpy(), v.double().numpy(), mask.numpy()
    )
    for need_weights in (False, True):
        output, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
        assert output.shape == (64, 5, 64)
        np.testing.assert_allclose(output.numpy(), expected_output, rtol=1e-5, atol=1e-5)
        # The first position may look only at itself: its output is its own value.
        torch.testing.assert_close(output[:, 0], v[:, 0])
    np.testing.assert_allclose(weights.numpy(), expected_weights, rtol=1e-5, atol=1e-6)
    assert (weights[~mask.expand(64, 5, 5)] == 0).all()


# --- properties of the weights and the output --------------------------------------------------


@FAST
@given(seed=st.integers(0, 2**32 - 1), num_queries=st.integers(1, 7), num_keys=st.integers(1, 7),
       dtype=st.sampled_from([torch.float32, torch.float64]), logit_scale=st.sampled_from([1.0, 1e3]))
def test_weights_are_a_distribution_over_the_allowed_keys(seed, num_queries, num_keys, dtype, logit_scale):
    _, (q, k, v) = random_inputs(seed, (2,), num_queries, num_keys, 6, 3, logit_scale, dtype=dtype)
    mask = torch.from_numpy(np.random.default_rng(seed + 1).random((2, num_queries, num_keys)) < 0.5)
    output, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    has_key = mask.any(-1)
    assert (weights >= 0).all()
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), has_key.to(dtype))
    assert (output[~has_key] == 0).all()
    assert torch.isfinite(output).all()


@FAST
@BOTH_PATHS
@given(seed=st.integers(0, 2**32 - 1), num_keys=st.integers(1, 10))
def test_permuting_keys_and_values_together_leaves_the_output_unchanged(need_weights, seed, num_keys):
    _, (q, k, v) = random_inputs(seed, (2, 3), 4, num_keys, 5, 3)
    mask = torch.from_numpy(np.random.default_rng(seed + 1).random((2, 1, 4, num_keys)) < 0.7)
    permutation = torch.from_numpy(np.random.default_rng(seed + 2).permutation(num_keys))
    output, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    permuted_output, permuted_weights = scaled_dot_product_attention(
        q, k[..., permutation, :], v[..., permutation, :], mask[..., permutation], need_weights=need_weights
    )
    torch.testing.assert_close(permuted_output, output, rtol=1e-12, atol=1e-12)
    if need_weights:
        torch.testing.assert_close(permuted_weights, weights[..., permutation], rtol=1e-12, atol=1e-12)


@BOTH_PATHS
def test_length_one_and_a_mask_shared_across_the_batch(need_weights):
    (q, k, v), (tq, tk, tv) = random_inputs(7, (3, 2), 1, 1, 4, 2)
    output, _ = scaled_dot_product_attention(tq, tk, tv, need_weights=need_weights)
    torch.testing.assert_close(output, tv)  # one key: all the weight on it
    mask = torch.tensor([[True, False, True]])  # [Lq, Lk] for every batch row
    (q, k, v), (tq, tk, tv) = random_inputs(8, (3, 2), 1, 3, 4, 2)
    output, _ = scaled_dot_product_attention(tq, tk, tv, mask, need_weights=need_weights)
    np.testing.assert_allclose(output.numpy(), reference_attention(q, k, v, mask)[0], rtol=1e-10)


def test_dropout_changes_the_output_but_not_the_returned_weights():
    _, (q, k, v) = random_inputs(9, (4,), 6, 6, 8, 8)
    output, weights = scaled_dot_product_attention(q, k, v, need_weights=True)
    dropped_output, dropped_weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5, need_weights=True)
    torch.testing.assert_close(dropped_weights, weights)
    assert not torch.allclose(dropped_output, output)
    fused_dropped, _ = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not torch.allclose(fused_dropped, output)


# --- bf16 on a CPU: float32 arithmetic in plain steps, not torch's fused kernel ----------------


def _bf16_errors(seed, mask_kind, num_queries, num_keys, logit_scale, fused):
    """Largest errors of bf16 attention's output and of the input gradients (relative to the largest
    gradient, absolute where that is below 1) against float64 on the same rounded inputs, with
    attnmt's path or torch's kernel."""
    rng = np.random.default_rng(seed)
    batch = (3, 2)
    arrays = [rng.normal(size=(*batch, length, 16)) for length in (num_queries, num_keys, num_keys)]
    arrays[0] = arrays[0] * logit_scale
    inputs = [torch.tensor(a, dtype=torch.bfloat16) for a in arrays]
    upstream = torch.tensor(rng.normal(size=(*batch, num_queries, 16)), dtype=torch.bfloat16)
    mask = make_mask(mask_kind, np.random.default_rng(seed + 1), batch, num_queries, num_keys)
    exact = [t.double().requires_grad_() for t in inputs]
    expected, _ = scaled_dot_product_attention(*exact, mask, need_weights=True)
    expected.backward(upstream.double())
    rounded = [t.clone().requires_grad_() for t in inputs]
    if fused:  # torch's kernel, with the empty rows attnmt zeroes given a key and zeroed after
        has_key = torch.ones(1, dtype=torch.bool) if mask is None else mask.any(dim=-1, keepdim=True)
        full = None if mask is None else mask | ~has_key
        output = torch.nn.functional.scaled_dot_product_attention(*rounded, attn_mask=full).masked_fill(~has_key, 0)
    else:
        output, _ = scaled_dot_product_attention(*rounded, mask)
    output.backward(upstream)
    assert output.dtype == torch.bfloat16
    output_error = (output.double() - expected).abs().max().item()
    gradient_error = max((mine.grad.double() - theirs.grad).abs().max().item()
                         / max(theirs.grad.abs().max().item(), 1.0) for mine, theirs in zip(rounded, exact))
    return output_error, gradient_error


@pytest.mark.parametrize("mask_kind", ["none", "random", "padding+causal"])
@pytest.mark.parametrize("num_queries, num_keys", [(1, 1), (7, 12), (30, 30)])
@pytest.mark.parametrize("logit_scale", [1.0, 30.0])
def test_bf16_attention_on_a_cpu_is_as_accurate_as_torch_s_kernel(mask_kind, num_queries, num_keys, logit_scale):
    seed = 1000 * num_queries + num_keys
    ours = _bf16_errors(seed, mask_kind, num_queries, num_keys, logit_scale, fused=False)
    torchs = _bf16_errors(seed, mask_kind, num_queries, num_keys, logit_scale, fused=True)
    # float32 inside, as torch's kernel: the same error up to the last bit of bf16 (2^-8 near 1).
    assert ours[0] <= 1.25 * torchs[0] + 2**-8, (ours, torchs)
    assert ours[1] <= 1.25 * torchs[1] + 2**-8, (ours, torchs)


def test_bf16_attention_on_a_cpu_gives_zero_rows_for_nothing_to_attend_and_survives_huge_logits(monkeypatch):
    def no_fused_kernel(*args, **kwargs):
        raise AssertionError("torch's fused kernel called for bf16 on a CPU")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", no_fused_kernel)
    q = (torch.randn(2, 3, 4) * 1e4).to(torch.bfloat16).requires_grad_()  # scores up to about 1e5
    k, v = torch.randn(2, 5, 4, dtype=torch.bfloat16), torch.randn(2, 5, 4, dtype=torch.bfloat16)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 2] = False
    mask[0, 0, 1:] = False  # one key: its value exactly
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output, _ = scaled_dot_product_attention(q, k, v, mask, dropout_p=0.0)
    assert output.dtype == torch.bfloat16 and torch.isfinite(output).all()
    assert (output[1, 2] == 0).all() and torch.equal(output[0, 0], v[0, 0])
    output.float().sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[1, 2] == 0).all()
    dropped, _ = scaled_dot_product_attention(q.detach(), k, v, mask, dropout_p=0.5)  # on the weights
    assert torch.isfinite(dropped).all() and not torch.equal(dropped, output.detach())


# --- gradients ---------------------------------------------------------------------------------


@BOTH_PATHS
def test_gradcheck_with_a_padding_mask_and_a_fully_masked_row(need_weights):
    _, inputs = random_inputs(10, (2,), 3, 4, 3, 2)
    q, k, v = (t.requires_grad_() for t in inputs)
    mask = padding_mask(torch.tensor([4, 2]), 4).unsqueeze(1).repeat(1, 3, 1)
    mask[1, 2] = False  # a query row with nothing to attend to

    def attention(q, k, v):
        output, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
        return output if weights is None else (output, weights)

    assert torch.autograd.gradcheck(attention, (q, k, v))
    output, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    output.sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[1, 2] == 0).all()


def test_gradcheck_masked_softmax():
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(3, 5) < 0.6
    mask[1] = False
    assert torch.autograd.gradcheck(lambda s: masked_softmax(s, mask), (scores,))


# --- masks -------------------------------------------------------------------------------------


def test_padding_mask_marks_the_real_positions():
    assert padding_mask(torch.tensor([2, 0, 3])).tolist() == [
        [True, True, False], [False, False, False], [True, True, True]
    ]
    assert padding_mask([1, 2], max_len=4).tolist() == [[True, False, False, False], [True, True, False, False]]
    assert padding_mask(torch.tensor([], dtype=torch.long)).shape == (0, 0)


def test_padding_mask_errors_name_the_bad_value():
    with pytest.raises(TypeError,
                       match=r"lengths must be a 1-D integer tensor, got dtype torch.float32 and shape \(2,\)"):
        padding_mask(torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match=r"shape \(2, 1\)"):
        padding_mask(torch.tensor([[1], [2]]))
    with pytest.raises(ValueError, match=r"lengths must be >= 0, got \[1, -1\]"):
        padding_mask(torch.tensor([1, -1]))
    with pytest.raises(ValueError, match="max_len=2 is smaller than the longest length 3"):
        padding_mask(torch.tensor([3, 1]), max_len=2)


def test_causal_mask_lets_each_position_see_itself_and_the_past():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(0).shape == (0, 0)
    with pytest.raises(ValueError, match="length must be >= 0, got -1"):
        causal_mask(-1)


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "message"),
    [
        ((2, 3, 4), (2, 5, 6), (2, 5, 6),
         r"q and k must have the same last dimension d_k: q \(2, 3, 4\), k \(2, 5, 6\)"),
        ((2, 3, 4), (2, 5, 4), (2, 6, 4),
         r"k and v must have the same number of keys Lk: k \(2, 5, 4\), v \(2, 6, 4\)"),
        ((4,), (5, 4), (5, 4), r"q must have shape \[\.\.\., L, d\], got \(4,\)"),
        ((2, 3, 4), (3, 5, 4), (3, 5, 4),
         r"dimensions of q \(2, 3, 4\), k \(3, 5, 4\) and v \(3, 5, 4\) do not broadcast"),
    ],
)
@BOTH_PATHS
def test_mismatched_shapes_raise_value_errors_naming_them(need_weights, q_shape, k_shape, v_shape, message):
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(torch.zeros(q_shape), torch.zeros(k_shape), torch.zeros(v_shape),
                                     need_weights=need_weights)


def test_bad_masks_and_arguments_raise_clear_errors():
    q, k, v = torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(2, 5, 1)
    with pytest.raises(TypeError, match=r"mask must be a torch.bool tensor .* got torch.float32"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 3, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast .* \(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="k must be a torch.Tensor, got ndarray"):
        scaled_dot_product_attention(q, np.zeros((2, 5, 4)), v)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.5"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match=r"mask must be a torch.bool tensor .* got torch.int64"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 3, 5, dtype=torch.int64))
