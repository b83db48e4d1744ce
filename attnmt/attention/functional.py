"""The torch core: scaled dot-product attention, masked softmax and the two kinds of mask.

Mask semantics, stated once for the whole project: a mask is a ``torch.bool`` tensor and
**True means "may attend"**, as in ``torch.nn.functional.scaled_dot_product_attention``. A
query row whose mask has no True entry attends to nothing: its weights are all 0 and its output
is the zero vector, never NaN, in every implementation of attnmt.

    Attention(Q, K, V) = softmax(Q Kᵀ · scale) V,      scale = 1/√d_k by default

    q: [..., Lq, d_k]   k: [..., Lk, d_k]   v: [..., Lk, d_v]   mask: broadcastable to [..., Lq, Lk]
    output: [..., Lq, d_v]   weights: [..., Lq, Lk]
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = [
    "causal_mask",
    "check_mask",
    "masked_softmax",
    "padding_mask",
    "scaled_dot_product_attention",
]


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Mask of the real (non-padding) positions: ``mask[b, t] = t < lengths[b]``.

    lengths: [B] integer tensor (or a list of ints) -> mask: [B, max_len] bool, True = may attend.
    ``max_len`` defaults to ``max(lengths)``; it must not be smaller.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise TypeError(
            f"padding_mask: lengths must be a 1-D integer tensor, got dtype {lengths.dtype} "
            f"and shape {tuple(lengths.shape)}"
        )
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"padding_mask: lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    elif max_len < longest:
        raise ValueError(f"padding_mask: max_len={max_len} is smaller than the longest length {longest}")
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)


def causal_mask(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Look-ahead mask: position i may attend to positions j <= i. Returns [L, L] bool."""
    if length < 0:
        raise ValueError(f"causal_mask: length must be >= 0, got {length}")
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def _broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast of ``shapes`` (NumPy/torch rules), or None when they do not broadcast.

    Plain Python on purpose: ``torch.broadcast_shapes`` costs as much as a whole attention over a
    small batch, and this runs on every call.
    """
    ndim = max(len(shape) for shape in shapes)
    result = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for axis, size in enumerate(shape, start=offset):
            if size == result[axis] or size == 1:
                continue
            if result[axis] != 1:
                return None
            result[axis] = size
    return tuple(result)


def check_mask(mask: torch.Tensor | None, scores_shape: tuple[int, ...], name: str = "mask") -> None:
    """Raise a clear error unless ``mask`` is None or a bool tensor broadcastable to ``scores_shape``."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a torch.bool tensor (True = may attend), got {kind}")
    if _broadcast_shapes(tuple(mask.shape), tuple(scores_shape)) != tuple(scores_shape):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores' "
            f"shape {tuple(scores_shape)} ([..., Lq, Lk])"
        )


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """softmax(scores) over ``dim`` restricted to the positions where ``mask`` is True.

    Masked positions get weight exactly 0. A slice with no allowed position gets all-zero
    weights (not NaN), and its gradient is zero too. Stable for any finite scores: the
    softmax subtracts the maximum (``torch.softmax`` does this internally).
    """
    if mask is None:
        return _softmax(scores, dim)
    has_key = mask.any(dim=dim, keepdim=True)
    if bool(has_key.all()):
        return _softmax(scores.masked_fill(~mask, float("-inf")), dim)
    # Some slices are fully masked: let them attend everywhere (finite softmax, finite
    # gradients), then zero them out.
    mask = mask | ~has_key
    weights = _softmax(scores.masked_fill(~mask, float("-inf")), dim)
    return weights.masked_fill(~has_key, 0.0)


# torch's CPU softmax kernel is slow on rows shorter than its vector width: for rows of 5 to 15
# float32 values it took several times as long as the four plain tensor operations below
# (benchmarks/attention.py). Short rows are common here: sentences of a dozen tokens, decoders asking one query
# at a time. Used without autograd only (decoding, evaluation); under autograd the four-op
# version's backward costs more than its forward saves.
_SHORT_ROW = 16


def _softmax(scores: torch.Tensor, dim: int) -> torch.Tensor:
    """torch.softmax(scores, dim), computed as exp(x − max x) / Σ exp(x − max x) for short CPU rows."""
    length = scores.shape[dim] if scores.dim() else 0
    if (
        0 < length < _SHORT_ROW
        and scores.device.type == "cpu"
        and scores.dtype in (torch.float32, torch.float64)
        and not (scores.requires_grad and torch.is_grad_enabled())
    ):
        exponentials = (scores - scores.amax(dim=dim, keepdim=True)).exp_()
        return exponentials.div_(exponentials.sum(dim=dim, keepdim=True))
    return torch.softmax(scores, dim=dim)


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """Raise a clear error on mismatched q, k, v; return their broadcast batch shape."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() < 2:
            raise ValueError(f"{name} must have shape [..., L, d], got {tuple(tensor.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d_k: q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys Lk: k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    q_batch, k_batch, v_batch = q.shape[:-2], k.shape[:-2], v.shape[:-2]
    if q_batch == k_batch == v_batch:  # the common case, without the general broadcast below
        return tuple(q_batch)
    batch_shape = _broadcast_shapes(tuple(q_batch), tuple(k_batch), tuple(v_batch))
    if batch_shape is None:
        raise ValueError(
            f"the leading (batch) dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and "
            f"v {tuple(v.shape)} do not broadcast together"
        )
    return batch_shape


def _scaled_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """scale · q kᵀ: [..., Lq, Lk].

    When q and k share their batch dimensions the scale is the ``alpha`` of a batched GEMM
    (``baddbmm`` with beta = 0), applied inside the matrix product: no extra pass over the
    inputs or over the Lq × Lk scores. Otherwise (broadcast batches) q is scaled first, which
    costs Lq·d multiplications rather than Lq·Lk.
    """
    if q.shape[:-2] != k.shape[:-2]:
        return torch.matmul(q * scale, k.transpose(-2, -1))
    unused_input = q.new_zeros(())  # beta = 0: baddbmm/addmm ignore it
    if q.dim() == 2:
        return torch.addmm(unused_input, q, k.t(), beta=0.0, alpha=scale)
    batch = math.prod(q.shape[:-2])  # not -1: that is ambiguous when a length is 0
    q3 = q.reshape(batch, q.shape[-2], q.shape[-1])
    k3 = k.reshape(batch, k.shape[-2], k.shape[-1])
    scores = torch.baddbmm(unused_input, q3, k3.transpose(-2, -1), beta=0.0, alpha=scale)
    return scores.view(*q.shape[:-2], q.shape[-2], k.shape[-2])


_fused_zeroes_empty_rows: bool | None = None


def _fused_handles_empty_rows() -> bool:
    """Does this torch's fused kernel return 0 (not NaN) for a query row with no allowed key?

    Probed once; torch 2.5 and later do. Older releases get the mask fixed up first.
    """
    global _fused_zeroes_empty_rows
    if _fused_zeroes_empty_rows is None:
        x = torch.ones(1, 2, 4)
        mask = torch.tensor([[[True, True], [False, False]]])
        out = F.scaled_dot_product_attention(x, x, x, attn_mask=mask)
        _fused_zeroes_empty_rows = bool(torch.isfinite(out).all()) and bool((out[0, 1] == 0).all())
    return _fused_zeroes_empty_rows


# The fused kernels a CUDA tensor may use: all but cuDNN's. PyTorch picks cuDNN's kernel for 16-bit
# inputs, and cuDNN plans every new shape anew: training on batches whose lengths change each step
# ran its first epoch 7 times slower than later ones in bf16 and fp16 on an H200, the profiler
# putting the time in ``aten::_cudnn_attention_forward`` (docs/results.md, "On one GPU").
CUDA_FUSED_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float,
                     scale: float | None) -> torch.Tensor:
    """``F.scaled_dot_product_attention``; on CUDA, without cuDNN's kernel (``CUDA_FUSED_BACKENDS``);
    bf16 on a CPU in three plain steps instead (``_cpu_bf16_attention``)."""
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:
        return _cpu_bf16_attention(q, k, v, mask, dropout_p, scale)
    if not q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    with sdpa_kernel(CUDA_FUSED_BACKENDS):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)


def _cpu_bf16_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                        dropout_p: float, scale: float | None) -> torch.Tensor:
    """softmax(q kᵀ · scale) v for bf16 inputs on a CPU, in float32 and plain steps, rounded to bf16
    at the end; shapes as ``scaled_dot_product_attention``.

    PyTorch's fused CPU kernel is slow in bf16 under autograd: on the fifteen-minute Transformer's
    batches its forward and backward took five times as long as these steps, and a quarter of the
    recipe's training step went to its backward (``benchmarks/experiments/bf16_attention.py``;
    docs/experiments.md, "A training step's speed"). Float32 inside is what the fused kernel does
    too: the error against float64 is the same (``tests/test_functional.py``). Rounding the scores
    to bf16 was faster still, and on large logits far less accurate. float32 inputs keep the fused
    kernel, so float32 outputs (translation's, by default) stay bit for bit what they were, though on
    the same batches the plain steps were faster in float32 too.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    with torch.autocast("cpu", enabled=False):  # autocast would take the products back to bf16
        scores = _scaled_scores(q.float(), k.float(), scale)
        weights = masked_softmax(scores, mask, dim=-1)
        attended = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
        return torch.matmul(attended, v.float()).to(q.dtype)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q kᵀ · scale) v with a boolean mask (True = may attend).

    q: [..., Lq, d_k], k: [..., Lk, d_k], v: [..., Lk, d_v], mask broadcastable to [..., Lq, Lk].
    Returns ``(output [..., Lq, d_v], weights [..., Lq, Lk] or None)``.

    Without ``need_weights`` this calls PyTorch's fused kernel
    (``torch.nn.functional.scaled_dot_product_attention``; on CUDA not cuDNN's, which plans every
    new shape anew; for bf16 on a CPU, the same float32 arithmetic in plain steps, faster there).
    With ``need_weights`` it runs an
    explicit matmul–softmax–matmul and returns the weights (before dropout). Both paths give the
    same output; rows with no allowed key give zero weights and a zero output.
    """
    batch_shape = _check_qkv(q, k, v)
    if mask is not None:
        check_mask(mask, (*batch_shape, q.shape[-2], k.shape[-2]))
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")

    if not need_weights:  # the fused kernel's default scale is 1/√d_k as well
        if mask is None or _fused_handles_empty_rows():
            return _fused_attention(q, k, v, mask, dropout_p, scale), None
        has_key = mask.any(dim=-1, keepdim=True)
        out = _fused_attention(q, k, v, mask | ~has_key, dropout_p, scale)
        return out.masked_fill(~has_key, 0.0), None

    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = _scaled_scores(q, k, scale)
    weights = masked_softmax(scores, mask, dim=-1)
    attended = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return torch.matmul(attended, v), weights
