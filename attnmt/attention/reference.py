"""Reference attention in NumPy: the ground truth every faster implementation is tested against.

Written to be read and to be right, in any float dtype (the tests use float64). Masks follow the
project's convention: a boolean array, **True = may attend**; a query row with nothing to attend
to gets all-zero weights and a zero output, never NaN.

    softmax(x)_j = exp(x_j − m) / Σ_j' exp(x_j' − m),      m = max_j x_j

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V

    q: [..., Lq, d_k]   k: [..., Lk, d_k]   v: [..., Lk, d_v]   mask: broadcastable to [..., Lq, Lk]
    output: [..., Lq, d_v]   weights: [..., Lq, Lk]

Subtracting the row maximum m changes nothing mathematically (it cancels in the ratio) but keeps
every exponent ≤ 0, so logits such as [1000, 1001] or −1e4 give finite weights instead of
inf/inf = NaN or 0/0.

``chunked_attention`` computes the same output without ever holding the Lq × Lk matrix: it walks
over blocks of keys with an *online* softmax (a running maximum and a running sum, rescaled
whenever the maximum grows), the idea behind memory-efficient and flash attention.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "chunked_attention",
    "general_attention",
    "scaled_dot_product_attention",
    "softmax",
]


def _as_float_array(x: Any, name: str) -> np.ndarray:
    """``x`` as a floating-point array (integers become float64); anything else is a TypeError."""
    array = np.asarray(x)
    if array.dtype.kind in "iu":
        return array.astype(np.float64)
    if array.dtype.kind != "f":
        raise TypeError(f"{name} must be a real floating-point array, got dtype {array.dtype} "
                        f"with shape {array.shape}")
    return array


def _softmax_inplace(x: np.ndarray, axis: int) -> np.ndarray:
    """Overwrite ``x`` with its softmax over ``axis`` (see :func:`softmax`) and return it."""
    if x.shape[axis] == 0:
        return x
    row_max = np.max(x, axis=axis, keepdims=True)
    # A slice that is entirely -inf (fully masked) has no finite maximum; shifting it by 0 keeps
    # its exponentials at exactly 0 instead of computing -inf - (-inf) = NaN.
    row_max[~np.isfinite(row_max)] = 0.0
    x -= row_max
    np.exp(x, out=x)
    total = np.sum(x, axis=axis, keepdims=True)
    # Where the total is 0 every exponential is 0 already: leave those zeros in place.
    np.divide(x, total, out=x, where=total > 0)
    return x


def softmax(x: Any, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax of ``x`` over ``axis``.

    softmax(x)_j = exp(x_j − max x) / Σ_j' exp(x_j' − max x). Finite for any finite logits (e.g.
    [1000, 1001] → [0.2689, 0.7311]); ``-inf`` entries get weight 0 and a slice that is entirely
    ``-inf`` gets all-zero weights. Integers are computed in float64; float dtypes are kept.
    """
    x = _as_float_array(x, "x")
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ValueError(f"softmax: axis={axis} is out of range for x of shape {x.shape}")
    return _softmax_inplace(np.array(x, copy=True), axis)


def _check_attention_inputs(q: Any, k: Any, v: Any, mask: Any, scale: float | None,
                            caller: str) -> tuple[Any, ...]:
    """Validate and convert the arguments shared by the attention functions.

    Returns ``(q, k, v, mask, scale, batch_shape)`` with ``mask`` None or a bool array.
    """
    q = _as_float_array(q, "q")
    k = _as_float_array(k, "k")
    v = _as_float_array(v, "v")
    for name, array in (("q", q), ("k", k), ("v", v)):
        if array.ndim < 2:
            raise ValueError(f"{caller}: {name} must have shape [..., L, d], got {array.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{caller}: q and k must have the same last dimension d_k: "
                         f"q {q.shape}, k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{caller}: k and v must have the same number of keys Lk: "
                         f"k {k.shape}, v {v.shape}")
    try:
        batch_shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"{caller}: the leading (batch) dimensions of q {q.shape}, k {k.shape} "
                         f"and v {v.shape} do not broadcast together") from None
    scores_shape = (*batch_shape, q.shape[-2], k.shape[-2])
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"{caller}: mask must be a boolean array (True = may attend), got dtype "
                            f"{mask.dtype} with shape {mask.shape}")
        try:
            broadcast = np.broadcast_shapes(mask.shape, scores_shape)
        except ValueError:
            broadcast = None
        if broadcast != scores_shape:
            raise ValueError(f"{caller}: mask of shape {mask.shape} does not broadcast to the "
                             f"attention scores' shape {scores_shape} ([..., Lq, Lk])")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    return q, k, v, mask, float(scale), batch_shape


def scaled_dot_product_attention(
    q: Any, k: Any, v: Any, mask: Any = None, *, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """softmax(q kᵀ · scale) v with a boolean mask (True = may attend); scale = 1/√d_k by default.

    q: [..., Lq, d_k], k: [..., Lk, d_k], v: [..., Lk, d_v], mask broadcastable to [..., Lq, Lk].
    Leading (batch) dimensions broadcast. Returns ``(output [..., Lq, d_v], weights [..., Lq, Lk])``.
    Masked keys get weight exactly 0; a query row with no allowed key gets zero weights and a
    zero output. Raises ValueError / TypeError naming the argument and shapes on bad input.
    """
    q, k, v, mask, scale, _ = _check_attention_inputs(q, k, v, mask, scale,
                                                      "scaled_dot_product_attention")
    scores = np.matmul(q, np.swapaxes(k, -1, -2))  # [..., Lq, Lk], a fresh array we may overwrite
    scores *= scale
    if mask is not None:
        np.copyto(scores, -np.inf, where=~mask)
    weights = _softmax_inplace(scores, axis=-1)
    return np.matmul(weights, v), weights


def general_attention(
    words: Any, W_q: Any, W_k: Any, W_v: Any, mask: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """The general attention mechanism on word vectors (Luong et al. 2015's general score), with
    scaled dot-product scoring.

        Q = words W_q,   K = words W_k,   V = words W_v,   output = softmax(Q Kᵀ / √d_k) V

    words: [..., L, d_model]; W_q, W_k: [d_model, d_k]; W_v: [d_model, d_v]; mask broadcastable
    to [..., L, L]. Every word is a query scored against every word's key.
    Returns ``(output [..., L, d_v], weights [..., L, L])``.
    """
    words = _as_float_array(words, "words")
    if words.ndim < 2:
        raise ValueError(f"general_attention: words must have shape [..., L, d_model], got {words.shape}")
    d_model = words.shape[-1]
    matrices = {}
    for name, matrix in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        matrix = _as_float_array(matrix, name)
        if matrix.ndim != 2 or matrix.shape[0] != d_model:
            raise ValueError(f"general_attention: {name} must have shape [d_model={d_model}, d], "
                             f"got {matrix.shape} (words {words.shape})")
        matrices[name] = matrix
    if matrices["W_q"].shape[1] != matrices["W_k"].shape[1]:
        raise ValueError(f"general_attention: W_q and W_k must project to the same d_k: "
                         f"W_q {matrices['W_q'].shape}, W_k {matrices['W_k'].shape}")
    queries = words @ matrices["W_q"]
    keys = words @ matrices["W_k"]
    values = words @ matrices["W_v"]
    return scaled_dot_product_attention(queries, keys, values, mask)


def chunked_attention(
    q: Any, k: Any, v: Any, mask: Any = None, chunk_size: int = 1024, *,
    scale: float | None = None,
) -> np.ndarray:
    """The output of :func:`scaled_dot_product_attention`, computed block by block in O(chunk²) memory.

    Queries are taken ``chunk_size`` rows at a time; for each query block the keys are visited in
    blocks of ``chunk_size`` with an online softmax. Per query row it keeps the running maximum
    m, the running sum ℓ = Σ exp(s_j − m) and the running numerator a = Σ exp(s_j − m) v_j; a new
    block with scores s′ updates them as

        m′ = max(m, max s′),   c = exp(m − m′),   ℓ ← c·ℓ + Σ exp(s′ − m′),   a ← c·a + exp(s′ − m′) V′

    and the output is a / ℓ (0 where ℓ = 0, i.e. the row had no allowed key). No Lq × Lk array is
    ever formed: the working memory is [..., chunk, chunk] scores plus [..., chunk, d_v] sums.

    q: [..., Lq, d_k], k: [..., Lk, d_k], v: [..., Lk, d_v], mask broadcastable to [..., Lq, Lk]
    (broadcast as a view, not materialised). Returns ``output [..., Lq, d_v]`` only: the weights
    are exactly what this function avoids storing.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunked_attention: chunk_size must be a positive integer, got {chunk_size!r}")
    q, k, v, mask, scale, batch_shape = _check_attention_inputs(q, k, v, mask, scale,
                                                                "chunked_attention")
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    dtype = np.result_type(q, k, v)
    output = np.zeros((*batch_shape, num_queries, v.shape[-1]), dtype=dtype)
    if mask is not None:
        mask = np.broadcast_to(mask, (*batch_shape, num_queries, num_keys))
    keys_transposed = np.swapaxes(k, -1, -2)

    for q_start in range(0, num_queries, chunk_size):
        q_stop = min(q_start + chunk_size, num_queries)
        query_block = q[..., q_start:q_stop, :] * scale
        rows = (*batch_shape, q_stop - q_start)
        running_max = np.full((*rows, 1), -np.inf, dtype=dtype)
        running_sum = np.zeros((*rows, 1), dtype=dtype)
        numerator = np.zeros((*rows, v.shape[-1]), dtype=dtype)

        for k_start in range(0, num_keys, chunk_size):
            k_stop = min(k_start + chunk_size, num_keys)
            scores = np.matmul(query_block, keys_transposed[..., k_start:k_stop])
            if mask is not None:
                np.copyto(scores, -np.inf, where=~mask[..., q_start:q_stop, k_start:k_stop])
            new_max = np.maximum(running_max, np.max(scores, axis=-1, keepdims=True))
            # Rows with no allowed key so far have max -inf: shift them by 0 so that their
            # exponentials (and the correction of their empty sums) are exactly 0, not NaN.
            shift = np.where(np.isfinite(new_max), new_max, 0.0)
            scores -= shift
            np.exp(scores, out=scores)
            correction = np.exp(running_max - shift)
            running_sum = running_sum * correction + np.sum(scores, axis=-1, keepdims=True)
            numerator = numerator * correction + np.matmul(scores, v[..., k_start:k_stop, :])
            running_max = new_max

        np.divide(numerator, running_sum, out=output[..., q_start:q_stop, :], where=running_sum > 0)
    return output
