"""The NumPy reference: softmax, scaled dot-product, general and chunked attention.

The reference is the ground truth of every other attention test, so here it is checked against
an independent, deliberately plain computation: one query at a time, with SciPy's softmax over
the allowed keys only.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax as scipy_softmax

from attnmt.attention import reference

FAST = settings(max_examples=30, deadline=None)


def attention_one_query_at_a_time(q, k, v, mask=None):
    """Attention for 2-D q [Lq, d], k [Lk, d], v [Lk, dv] and mask [Lq, Lk], row by row."""
    num_queries, num_keys = q.shape[0], k.shape[0]
    mask = np.ones((num_queries, num_keys), dtype=bool) if mask is None else mask
    output = np.zeros((num_queries, v.shape[1]))
    weights = np.zeros((num_queries, num_keys))
    for i in range(num_queries):
        allowed = np.flatnonzero(mask[i])
        if allowed.size == 0:
            continue
        scores = np.array([q[i] @ k[j] for j in allowed]) / np.sqrt(q.shape[1])
        weights[i, allowed] = scipy_softmax(scores)
        output[i] = weights[i, allowed] @ v[allowed]
    return output, weights


def random_qkv(rng, batch, num_queries, num_keys, d_k, d_v, logit_scale=1.0):
    q = rng.normal(size=(*batch, num_queries, d_k)) * logit_scale
    k = rng.normal(size=(*batch, num_keys, d_k))
    v = rng.normal(size=(*batch, num_keys, d_v))
    return q, k, v


# --- softmax -----------------------------------------------------------------------------------


def test_softmax_is_finite_for_large_logits():
    np.testing.assert_allclose(reference.softmax([1000.0, 1001.0]), [1 / (1 + np.e), np.e / (1 + np.e)])
    np.testing.assert_allclose(reference.softmax([-1e4, -1e4 + 1.0]), [1 / (1 + np.e), np.e / (1 + np.e)])
    assert reference.softmax([-1e4, 0.0]).tolist() == [0.0, 1.0]


def test_softmax_gives_zero_to_minus_infinity_and_zeros_to_an_all_minus_infinity_row():
    x = np.array([[0.0, -np.inf, 0.0], [-np.inf, -np.inf, -np.inf]])
    np.testing.assert_array_equal(reference.softmax(x), [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]])


@FAST
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 5), cols=st.integers(1, 7),
       axis=st.sampled_from([0, 1, -1]), magnitude=st.sampled_from([1.0, 100.0, 1e4]))
def test_softmax_matches_scipy_and_sums_to_one(seed, rows, cols, axis, magnitude):
    x = np.random.default_rng(seed).normal(size=(rows, cols)) * magnitude
    result = reference.softmax(x, axis=axis)
    np.testing.assert_allclose(result, scipy_softmax(x, axis=axis), rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(result.sum(axis=axis), 1.0, rtol=1e-12)
    assert (result >= 0).all()


def test_softmax_does_not_modify_its_input_and_keeps_float32():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    result = reference.softmax(x)
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert result.dtype == np.float32
    assert reference.softmax([1, 2]).dtype == np.float64


def test_softmax_rejects_a_bad_axis_and_non_numbers():
    with pytest.raises(ValueError, match=r"axis=2 .*\(2, 3\)"):
        reference.softmax(np.zeros((2, 3)), axis=2)
    with pytest.raises(TypeError, match="x must be a real floating-point array"):
        reference.softmax(np.array(["a", "b"]))


# --- scaled dot-product attention --------------------------------------------------------------


@FAST
@given(seed=st.integers(0, 2**32 - 1), num_queries=st.integers(1, 6), num_keys=st.integers(1, 6),
       d_k=st.integers(1, 5), d_v=st.integers(1, 4), logit_scale=st.sampled_from([1.0, 30.0, 3e3]),
       masked=st.booleans())
def test_attention_matches_the_one_query_at_a_time_computation(
    seed, num_queries, num_keys, d_k, d_v, logit_scale, masked
):
    rng = np.random.default_rng(seed)
    q, k, v = random_qkv(rng, (), num_queries, num_keys, d_k, d_v, logit_scale)
    mask = rng.random((num_queries, num_keys)) < 0.6 if masked else None
    output, weights = reference.scaled_dot_product_attention(q, k, v, mask)
    expected_output, expected_weights = attention_one_query_at_a_time(q, k, v, mask)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(output, expected_output, rtol=1e-9, atol=1e-12)


def test_attention_broadcasts_batch_dimensions_and_masks():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 3, 4, 5))
    k = rng.normal(size=(3, 6, 5))  # shared by the first batch dimension
    v = rng.normal(size=(3, 6, 2))
    mask = rng.random((2, 1, 4, 6)) < 0.7  # shared by the second batch dimension
    output, weights = reference.scaled_dot_product_attention(q, k, v, mask)
    assert output.shape == (2, 3, 4, 2) and weights.shape == (2, 3, 4, 6)
    for a in range(2):
        for b in range(3):
            expected, _ = attention_one_query_at_a_time(q[a, b], k[b], v[b], mask[a, 0])
            np.testing.assert_allclose(output[a, b], expected, rtol=1e-10, atol=1e-12)


def test_fully_masked_rows_get_zero_weights_and_zero_output():
    rng = np.random.default_rng(2)
    q, k, v = random_qkv(rng, (2,), 3, 4, 5, 6)
    mask = np.ones((2, 3, 4), dtype=bool)
    mask[0, 1] = False
    mask[1, :, 2] = False
    output, weights = reference.scaled_dot_product_attention(q, k, v, mask)
    assert not np.isnan(output).any()
    assert (weights[0, 1] == 0).all() and (output[0, 1] == 0).all()
    assert (weights[1, :, 2] == 0).all()
    np.testing.assert_allclose(weights.sum(-1), [[1, 0, 1], [1, 1, 1]])


def test_no_keys_at_all_gives_zero_output():
    q = np.ones((3, 4))
    output, weights = reference.scaled_dot_product_attention(q, np.ones((0, 4)), np.ones((0, 2)))
    assert output.shape == (3, 2) and (output == 0).all() and weights.shape == (3, 0)


def test_explicit_scale_replaces_one_over_root_d():
    rng = np.random.default_rng(3)
    q, k, v = random_qkv(rng, (), 3, 4, 9, 2)
    output, _ = reference.scaled_dot_product_attention(q, k, v, scale=1.0)
    expected, _ = attention_one_query_at_a_time(q * 3.0, k, v)  # 1/√9 undone
    np.testing.assert_allclose(output, expected, rtol=1e-10)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "message"),
    [
        ((3, 4), (5, 6), (5, 2), r"q and k must have the same last dimension d_k: q \(3, 4\), k \(5, 6\)"),
        ((3, 4), (5, 4), (6, 2), r"k and v must have the same number of keys Lk: k \(5, 4\), v \(6, 2\)"),
        ((4,), (5, 4), (5, 2), r"q must have shape \[\.\.\., L, d\], got \(4,\)"),
        ((2, 3, 4), (3, 5, 4), (3, 5, 2), r"batch\) dimensions of q \(2, 3, 4\), k \(3, 5, 4\)"),
    ],
)
def test_mismatched_shapes_raise_value_errors_naming_them(q_shape, k_shape, v_shape, message):
    for function in (reference.scaled_dot_product_attention, reference.chunked_attention):
        with pytest.raises(ValueError, match=message):
            function(np.zeros(q_shape), np.zeros(k_shape), np.zeros(v_shape))


def test_bad_masks_raise_errors_naming_the_mask_and_shapes():
    q, k, v = np.zeros((2, 3, 4)), np.zeros((2, 5, 4)), np.zeros((2, 5, 1))
    for function in (reference.scaled_dot_product_attention, reference.chunked_attention):
        with pytest.raises(TypeError, match=r"mask must be a boolean array .* got dtype int64 with shape \(2, 3, 5\)"):
            function(q, k, v, np.ones((2, 3, 5), dtype=np.int64))
        with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast .* \(2, 3, 5\)"):
            function(q, k, v, np.ones((3, 4), dtype=bool))
    with pytest.raises(TypeError, match="q must be a real floating-point array"):
        reference.scaled_dot_product_attention(q.astype(complex), k, v)


# --- general attention (Luong et al. 2015) ----------------------------------------------------------


def test_general_attention_projects_words_into_queries_keys_and_values():
    rng = np.random.default_rng(4)
    words = rng.normal(size=(4, 3))
    W_q, W_k, W_v = rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), rng.normal(size=(3, 2))
    output, weights = reference.general_attention(words, W_q, W_k, W_v)
    expected_output, expected_weights = attention_one_query_at_a_time(words @ W_q, words @ W_k, words @ W_v)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-10)
    np.testing.assert_allclose(output, expected_output, rtol=1e-10)
    assert output.shape == (4, 2) and weights.shape == (4, 4)


def test_general_attention_names_a_projection_of_the_wrong_shape():
    words = np.zeros((4, 3))
    with pytest.raises(ValueError, match=r"W_k must have shape \[d_model=3, d\], got \(2, 3\)"):
        reference.general_attention(words, np.zeros((3, 3)), np.zeros((2, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"W_q and W_k must project to the same d_k"):
        reference.general_attention(words, np.zeros((3, 2)), np.zeros((3, 3)), np.zeros((3, 3)))


# --- chunked (online-softmax) attention --------------------------------------------------------


@FAST
@given(seed=st.integers(0, 2**32 - 1), batch=st.sampled_from([(), (2,), (2, 3)]),
       num_queries=st.integers(1, 40), num_keys=st.integers(1, 40), chunk_size=st.integers(1, 17),
       logit_scale=st.sampled_from([1.0, 100.0, 3e3]), mask_kind=st.sampled_from(["none", "random", "causal"]))
def test_chunked_attention_equals_the_reference(
    seed, batch, num_queries, num_keys, chunk_size, logit_scale, mask_kind
):
    rng = np.random.default_rng(seed)
    q, k, v = random_qkv(rng, batch, num_queries, num_keys, 4, 3, logit_scale)
    if mask_kind == "random":
        mask = rng.random((*batch, num_queries, num_keys)) < 0.5  # includes fully masked rows
    elif mask_kind == "causal":
        mask = np.tri(num_queries, num_keys, dtype=bool)
    else:
        mask = None
    expected, _ = reference.scaled_dot_product_attention(q, k, v, mask)
    result = reference.chunked_attention(q, k, v, mask, chunk_size=chunk_size)
    np.testing.assert_allclose(result, expected, rtol=0, atol=1e-10)


def test_chunked_attention_gives_zeros_for_fully_masked_rows_in_every_chunk():
    rng = np.random.default_rng(5)
    q, k, v = random_qkv(rng, (), 6, 9, 4, 3)
    mask = np.ones((6, 9), dtype=bool)
    mask[2] = False
    mask[4, :4] = False  # empty in the first key chunk only
    result = reference.chunked_attention(q, k, v, mask, chunk_size=4)
    assert (result[2] == 0).all() and not np.isnan(result).any()
    np.testing.assert_allclose(result, reference.scaled_dot_product_attention(q, k, v, mask)[0], atol=1e-12)


def test_chunked_attention_rejects_a_bad_chunk_size():
    q = np.zeros((2, 3))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
            reference.chunked_attention(q, q, q, chunk_size=bad)
