"""Scaled dot-product and multi-head attention as Keras 3 layers (Vaswani et al. 2017), for Keras
users who want attnmt's mechanism in their own models. Written with ``keras.ops`` only, so they run
on any Keras backend; attnmt sets ``KERAS_BACKEND=torch`` when the user has not chosen one (PyTorch
is installed with attnmt). Install with ``pip install 'attnmt[keras]'``.

    DotProductAttention()(queries, keys, values, d_k, mask=None)
        softmax(Q Kᵀ / √d_k, masked) V        queries [B, Lq, d_k], keys [B, Lk, d_k], values [B, Lk, d_v]
                                               mask broadcastable to [B, Lq, Lk] -> output [B, Lq, d_v]
    MultiHeadAttention(num_heads, d_model)(queries, keys, values, mask=None, use_causal_mask=False)
        head_i = DotProductAttention(Q W_i^Q + b_i^Q, K W_i^K + b_i^K, V W_i^V + b_i^V)
        output = [head_1; …; head_h] W^O + b^O                                   -> [B, Lq, d_model]

The mask convention is stated, not guessed: with ``mask_means="attend"`` (the default; attnmt's
and ``keras.layers.MultiHeadAttention``'s convention) True or 1 marks a position that may be
attended; with ``mask_means="hide"`` True or 1 marks one that may not, as in the common tutorial
that adds ``-1e9 * mask`` to the scores. Either way masked positions get a weight of exactly 0
(not e^−1e9), and a row with nothing to attend to gets zero weights and a zero weighted sum: the
output of ``DotProductAttention`` is 0 there and that of ``MultiHeadAttention`` is b^O (attnmt's
rule, docs/mechanisms.md). ``padding_mask`` and ``look_ahead_mask`` build masks in the "attend"
convention; combine them with ``&``.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # before Keras is imported: torch is what attnmt has

try:
    import keras
    from keras import ops
except ImportError:  # one line, not a chain: what to install
    raise ImportError("attnmt.keras needs Keras 3: pip install 'attnmt[keras]'") from None

if int(keras.__version__.split(".")[0]) < 3:
    raise ImportError(f"attnmt.keras needs Keras 3 (found {keras.__version__}): pip install 'attnmt[keras]'")

__all__ = ["MASK_CONVENTIONS", "DotProductAttention", "MultiHeadAttention", "look_ahead_mask", "masked_softmax",
           "padding_mask"]

MASK_CONVENTIONS = ("attend", "hide")


def _check_convention(mask_means: str) -> str:
    if mask_means not in MASK_CONVENTIONS:
        raise ValueError(f"mask_means={mask_means!r}: must be 'attend' (True = may attend) or 'hide' "
                         "(True = may not attend)")
    return mask_means


def padding_mask(lengths, length: int):
    """[B, 1, length] bool, True at the first ``lengths[b]`` positions (the real tokens): broadcasts
    over the queries of ``[B, Lq, Lk]``."""
    positions = ops.arange(length)
    return ops.expand_dims(ops.expand_dims(positions, 0) < ops.expand_dims(ops.convert_to_tensor(lengths), 1), 1)


def look_ahead_mask(length: int):
    """[length, length] bool, True where key j ≤ query i: a position sees itself and the past."""
    positions = ops.arange(length)
    return ops.expand_dims(positions, 1) >= ops.expand_dims(positions, 0)


def masked_softmax(scores, allowed):
    """softmax over the last axis of ``scores`` restricted to ``allowed`` (bool, broadcastable):
    exp(e_j − m) / Σ_allowed exp(e_j' − m), m the row's largest allowed score; exactly 0 where not
    allowed, and a zero row where nothing is."""
    allowed = ops.broadcast_to(ops.cast(allowed, "bool"), ops.shape(scores))
    hidden = ops.where(allowed, scores, ops.full_like(scores, -math.inf))
    top = ops.max(hidden, axis=-1, keepdims=True)
    top = ops.where(ops.isfinite(top), top, ops.zeros_like(top))  # an empty row: exp(−inf − 0) = 0
    exps = ops.exp(hidden - ops.stop_gradient(top))
    total = ops.sum(exps, axis=-1, keepdims=True)
    return exps / ops.where(total > 0, total, ops.ones_like(total))


class DotProductAttention(keras.layers.Layer):
    """softmax(Q Kᵀ / √d_k) V with a mask (module docstring); no weights of its own.

    ``call(queries, keys, values, d_k, mask=None, return_weights=False)``: ``d_k`` is the size the
    scores are divided by the root of (the keys' last axis, as the tutorial passes it); with
    ``return_weights`` the call gives ``(output, weights [B, Lq, Lk])``."""

    def __init__(self, mask_means: str = "attend", **kwargs):
        super().__init__(**kwargs)
        self.mask_means = _check_convention(mask_means)

    def __call__(self, queries, keys, values, d_k, mask=None, **kwargs):
        # Keras 3 takes only tensors positionally, and a call argument named "mask" is its own
        # masking of sequences: the tutorial's d_k and mask travel as keywords of other names
        return super().__call__(queries, keys, values, d_k=d_k, attention_mask=mask, **kwargs)

    def call(self, queries, keys, values, d_k, attention_mask=None, return_weights=False):
        scores = ops.matmul(queries, ops.swapaxes(keys, -2, -1)) / ops.sqrt(ops.cast(d_k, queries.dtype))
        if attention_mask is None:
            allowed = ops.ones(ops.shape(scores), dtype="bool")
        else:
            allowed = ops.cast(attention_mask, "bool")
            if self.mask_means == "hide":
                allowed = ops.logical_not(allowed)
        weights = masked_softmax(scores, allowed)
        output = ops.matmul(weights, values)
        return (output, weights) if return_weights else output

    def get_config(self):
        return {**super().get_config(), "mask_means": self.mask_means}


class MultiHeadAttention(keras.layers.Layer):
    """h heads of scaled dot-product attention, each in d_k = d_model / h dimensions (or the given
    ``d_k`` and ``d_v``), then W^O (module docstring).

    ``call(queries [B, Lq, Dq], keys [B, Lk, Dk], values [B, Lk, Dv], mask=None,
    use_causal_mask=False, return_weights=False)`` -> output [B, Lq, d_model] (and the weights
    per head, [B, h, Lq, Lk]). ``mask`` broadcasts to [B, Lq, Lk]; ``use_causal_mask`` adds the
    look-ahead mask. Weights: ``query_kernel`` [Dq, h·d_k], ``key_kernel`` [Dk, h·d_k],
    ``value_kernel`` [Dv, h·d_v], ``output_kernel`` [h·d_v, d_model], and a bias each when
    ``use_bias``; head i uses columns i·d_k … (i+1)·d_k − 1."""

    def __init__(self, num_heads: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                 use_bias: bool = True, mask_means: str = "attend", **kwargs):
        super().__init__(**kwargs)
        if num_heads < 1 or d_model < 1:
            raise ValueError(f"num_heads and d_model must be positive, got {num_heads} and {d_model}")
        if (d_k is None or d_v is None) and d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}; give d_k and d_v")
        self.num_heads, self.d_model = num_heads, d_model
        self.d_k = d_model // num_heads if d_k is None else d_k
        self.d_v = d_model // num_heads if d_v is None else d_v
        self.use_bias = use_bias
        self.mask_means = _check_convention(mask_means)
        self.attention = DotProductAttention(mask_means="attend", dtype=self.dtype_policy)

    def build(self, queries_shape, keys_shape=None, values_shape=None):
        keys_shape = queries_shape if keys_shape is None else keys_shape
        values_shape = keys_shape if values_shape is None else values_shape
        h = self.num_heads
        sizes = {"query": (queries_shape[-1], h * self.d_k), "key": (keys_shape[-1], h * self.d_k),
                 "value": (values_shape[-1], h * self.d_v), "output": (h * self.d_v, self.d_model)}
        for name, shape in sizes.items():
            setattr(self, f"{name}_kernel", self.add_weight(name=f"{name}_kernel", shape=shape,
                                                             initializer="glorot_uniform"))
            setattr(self, f"{name}_bias", self.add_weight(name=f"{name}_bias", shape=(shape[1],), initializer="zeros")
                    if self.use_bias else None)

    def _project(self, x, name: str):
        y = ops.matmul(x, getattr(self, f"{name}_kernel"))
        bias = getattr(self, f"{name}_bias")
        return y if bias is None else y + bias

    def _split(self, x, size: int):
        """[B, L, h·size] -> [B, h, L, size]"""
        shape = ops.shape(x)
        return ops.transpose(ops.reshape(x, (shape[0], shape[1], self.num_heads, size)), (0, 2, 1, 3))

    def __call__(self, queries, keys, values, mask=None, **kwargs):
        return super().__call__(queries, keys, values, attention_mask=mask, **kwargs)  # as DotProductAttention

    def call(self, queries, keys, values, attention_mask=None, use_causal_mask=False, return_weights=False):
        query_length, key_length = ops.shape(queries)[1], ops.shape(keys)[1]
        allowed = ops.ones((1, query_length, key_length), dtype="bool")
        if attention_mask is not None:
            given = ops.cast(attention_mask, "bool")
            allowed = allowed & (ops.logical_not(given) if self.mask_means == "hide" else given)
        if use_causal_mask:
            allowed = allowed & ops.expand_dims(look_ahead_mask(query_length)[:, :key_length], 0)
        q = self._split(self._project(queries, "query"), self.d_k)
        k = self._split(self._project(keys, "key"), self.d_k)
        v = self._split(self._project(values, "value"), self.d_v)
        heads, weights = self.attention(q, k, v, self.d_k, mask=ops.expand_dims(allowed, 1), return_weights=True)
        shape = ops.shape(heads)
        concatenated = ops.reshape(ops.transpose(heads, (0, 2, 1, 3)), (shape[0], shape[2], self.num_heads * self.d_v))
        output = self._project(concatenated, "output")
        return (output, weights) if return_weights else output

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "d_model": self.d_model, "d_k": self.d_k,
                "d_v": self.d_v, "use_bias": self.use_bias, "mask_means": self.mask_means}
