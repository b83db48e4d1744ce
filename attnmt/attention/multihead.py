"""Multi-head attention (Vaswani et al., 2017), batch-first, with boolean masks (True = may attend).

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O
    head_i             = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    Attention(Q, K, V) = softmax(Q Kᵀ / √d_head) V,          d_head = embed_dim / h

    query: [B, Lq, E]   key: [B, Lk, kdim]   value: [B, Lk, vdim]   (E = embed_dim)
    W_i^Q: [E, d_head]  W_i^K: [kdim, d_head]  W_i^V: [vdim, d_head]  W^O: [h·d_head = E, E]
    output: [B, Lq, E]  weights: [B, Lq, Lk] (mean over heads) or [B, h, Lq, Lk] (per head)

The h projections W_1^Q … W_h^Q are stored side by side as one [E, E] matrix (and likewise for
keys and values), so projecting all heads is one matrix product followed by a reshape
[B, L, E] → [B, h, L, d_head]. The parameters are laid out and named as in
``torch.nn.MultiheadAttention``: one packed ``in_proj_weight`` [3E, E] when kdim = vdim = E
(self-attention then needs a single matrix product for Q, K and V), else ``q_proj_weight``,
``k_proj_weight``, ``v_proj_weight``; ``in_proj_bias`` [3E]; ``out_proj`` is W^O.

The three steps are separate public methods so that an incremental (step-by-step) decoder can
project the encoder's keys and values once and cache its own past keys and values:
``project_query`` → ``project_key_value`` → ``attend``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.attention.functional import masked_softmax, scaled_dot_product_attention

__all__ = ["MultiHeadAttention", "head_outputs"]


def head_outputs(v_heads: torch.Tensor, out_weight: torch.Tensor) -> torch.Tensor:
    """Each head's values through its share of W^O: f^i(v_l) = v_{i,l} W^O_iᵀ, where W^O_i are the
    d_head columns of W^O that multiply head i.

    v_heads: [B, h, L, d_head], out_weight W^O: [D, h·d_head] -> [B, h, L, D]. Over the heads,
    Σ_i Σ_l α^i_{t,l} f^i(v_l) + b^O is the output at query t: what value norms and ALTI+ split by
    head and token, for both multi-head classes (this and ``multihead``, the single-query one).
    """
    heads = v_heads.shape[1]
    if heads == 0:  # a layer whose heads were all pruned
        return v_heads.new_zeros(*v_heads.shape[:3], out_weight.shape[0])
    return torch.einsum("bhld,ehd->bhle", v_heads, out_weight.view(out_weight.shape[0], heads, -1))


def _check_bool_mask(mask: torch.Tensor, name: str) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(
            f"{name} must be a torch.bool tensor with True = may attend (the opposite of "
            f"torch.nn.MultiheadAttention's boolean masks), got {kind}"
        )


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention; see the module docstring for the equations.

    Args:
        embed_dim: E, the size of queries and outputs; must be divisible by ``num_heads``.
        num_heads: h, the number of heads; each works in d_head = E / h dimensions.
        kdim, vdim: sizes of the keys and values (default E).
        dropout: dropout probability on the attention weights, active in training mode only.
        bias: add biases to the input and output projections.
        score: a module whose ``score(q [B, h, Lq, d_head], k [B, h, Lk, d_head])`` gives the scores
            [B, h, Lq, Lk] in place of q·kᵀ/√d_head (a user's mechanism); the masks and the softmax stay.
        head_dim: d_head when a layer holds fewer heads than E / d_head: a layer some of whose heads
            were pruned (``attnmt prune``) has h·d_head < E, its projections W^Q, W^K, W^V are
            [h·d_head, ·] and W^O is [E, h·d_head]; with h = 0 its output is W^O's bias. Default E / h.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        kdim: int | None = None,
        vdim: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        score: nn.Module | None = None,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        if head_dim is None:
            if embed_dim <= 0 or num_heads <= 0:
                raise ValueError(f"embed_dim and num_heads must be positive, got {embed_dim} and {num_heads}")
            if embed_dim % num_heads:
                raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
        elif embed_dim <= 0 or num_heads < 0 or head_dim <= 0 or num_heads * head_dim > embed_dim:
            raise ValueError(f"a pruned layer needs 0 <= num_heads * head_dim <= embed_dim, got {num_heads} heads of "
                             f"{head_dim} for embed_dim={embed_dim}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads if head_dim is None else head_dim
        self.inner_dim = self.num_heads * self.head_dim  # h·d_head: E, or less in a pruned layer
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout = dropout
        self.packed_projection = self.kdim == embed_dim and self.vdim == embed_dim and self.inner_dim == embed_dim
        inner = self.inner_dim

        if self.packed_projection:
            self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = nn.Parameter(torch.empty(inner, embed_dim))
            self.k_proj_weight = nn.Parameter(torch.empty(inner, self.kdim))
            self.v_proj_weight = nn.Parameter(torch.empty(inner, self.vdim))
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * inner))
        else:
            self.register_parameter("in_proj_bias", None)
        with warnings.catch_warnings():  # a layer whose heads were all pruned has an empty W^O: nothing to draw
            warnings.filterwarnings("ignore", message="Initializing zero-element tensors is a no-op")
            self.out_proj = nn.Linear(inner, embed_dim, bias=bias)
        # A user's score(q [B, h, Lq, d_head], k [B, h, Lk, d_head]) -> [B, h, Lq, Lk] in place of q·kᵀ/√d_head.
        self.score = score
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform input projections and zero biases, as torch.nn.MultiheadAttention."""
        if self.inner_dim == 0:  # a layer whose heads were all pruned: only W^O's bias is left
            if self.out_proj.bias is not None:
                nn.init.zeros_(self.out_proj.bias)
            return
        if self.packed_projection:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            nn.init.xavier_uniform_(self.q_proj_weight)
            nn.init.xavier_uniform_(self.k_proj_weight)
            nn.init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    # ----------------------------------------------------------------------------------------
    # The projections W^Q, W^K, W^V, as (weight [h·d_head, in_dim], bias [h·d_head] or None) pairs.

    def _projection(self, index: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Weight and bias of the query (0), key (1) or value (2) projection of all heads."""
        inner = self.inner_dim
        if self.packed_projection:
            weight = self.in_proj_weight[index * inner:(index + 1) * inner]
        else:
            weight = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[index]
        bias = None if self.in_proj_bias is None else self.in_proj_bias[index * inner:(index + 1) * inner]
        return weight, bias

    def _split_heads(self, projected: torch.Tensor, parts: int = 1) -> torch.Tensor:
        """[B, L, parts·E] → [parts, B, h, L, d_head] (a view: no copy)."""
        batch, length, _ = projected.shape
        heads = projected.view(batch, length, parts, self.num_heads, self.head_dim)
        return heads.permute(2, 0, 3, 1, 4)

    def _check_input(self, tensor: torch.Tensor, name: str, last_dim: int) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 3 or tensor.shape[-1] != last_dim:
            raise ValueError(
                f"{name} must have shape [B, L, {last_dim}] (batch first), got {tuple(tensor.shape)}"
            )

    def project_query(self, query: torch.Tensor) -> torch.Tensor:
        """Q W^Q split into heads: query [B, Lq, E] → [B, h, Lq, d_head]."""
        self._check_input(query, "query", self.embed_dim)
        weight, bias = self._projection(0)
        return self._split_heads(F.linear(query, weight, bias))[0]

    def project_key_value(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K W^K and V W^V split into heads.

        key: [B, Lk, kdim], value: [B, Lk, vdim] → (k_heads, v_heads), each [B, h, Lk, d_head].
        When ``key is value`` (attending over encoder states) both come from one matrix product.
        """
        self._check_input(key, "key", self.kdim)
        self._check_input(value, "value", self.vdim)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key and value must have the same batch size and length [B, Lk]: "
                f"key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        E = self.embed_dim
        if key is value and self.packed_projection:
            bias = None if self.in_proj_bias is None else self.in_proj_bias[E:]
            k_heads, v_heads = self._split_heads(F.linear(key, self.in_proj_weight[E:], bias), parts=2)
            return k_heads, v_heads
        k_weight, k_bias = self._projection(1)
        v_weight, v_bias = self._projection(2)
        k_heads = self._split_heads(F.linear(key, k_weight, k_bias))[0]
        v_heads = self._split_heads(F.linear(value, v_weight, v_bias))[0]
        return k_heads, v_heads

    def attend(
        self,
        q_heads: torch.Tensor,
        k_heads: torch.Tensor,
        v_heads: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention in every head, heads concatenated, then W^O.

        q_heads: [B, h, Lq, d_head], k_heads and v_heads: [B, h, Lk, d_head] (from the project_*
        methods, possibly cached), mask: bool broadcastable to [B, h, Lq, Lk], True = may attend.
        Returns ``(output [B, Lq, E], weights [B, h, Lq, Lk] or None)``; the weights are before
        dropout. A query row with no allowed key gets zero weights and its head outputs are 0
        (the output row is then W^O's bias).
        """
        if self.num_heads == 0:  # every head pruned: W^O · 0 + b^O at every query
            batch, _, query_length, _ = q_heads.shape
            empty = q_heads.new_zeros(batch, query_length, 0)
            none = q_heads.new_zeros(batch, 0, query_length, k_heads.shape[2]) if need_weights else None
            return self.out_proj(empty), none
        dropout_p = self.dropout if self.training else 0.0
        weights: torch.Tensor | None
        if self.score is not None:
            heads, weights = self._attend_user_score(q_heads, k_heads, v_heads, mask, dropout_p)
            weights = weights if need_weights else None
        else:
            heads, weights = scaled_dot_product_attention(
                q_heads, k_heads, v_heads, mask, dropout_p=dropout_p, need_weights=need_weights
            )
        batch, _, query_length, _ = heads.shape
        concatenated = heads.transpose(1, 2).reshape(batch, query_length, self.inner_dim)
        return self.out_proj(concatenated), weights

    def head_outputs(self, v_heads: torch.Tensor) -> torch.Tensor:
        """Each head's values through its share of W^O (:func:`head_outputs`): v_heads
        [B, h, Lk, d_head] -> [B, h, Lk, E]."""
        return head_outputs(v_heads, self.out_proj.weight)

    def _attend_user_score(self, q_heads: torch.Tensor, k_heads: torch.Tensor, v_heads: torch.Tensor,
                           mask: torch.Tensor | None, dropout_p: float) -> tuple[torch.Tensor, torch.Tensor]:
        """softmax over the allowed keys of the user's scores, then the weighted sum of the values."""
        user: Any = self.score  # the user's module: its score method is its own
        scores = user.score(q_heads, k_heads)
        expected = (*q_heads.shape[:-1], k_heads.shape[-2])
        if tuple(scores.shape) != expected:
            raise ValueError(f"{type(self.score).__name__}.score gave scores of shape {tuple(scores.shape)}; "
                             f"expected [B, h, Lq, Lk] = {expected}")
        weights = masked_softmax(scores, mask, dim=-1)
        attended = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
        return torch.matmul(attended.to(v_heads.dtype), v_heads), weights

    def combine_masks(
        self,
        key_padding_mask: torch.Tensor | None,
        attn_mask: torch.Tensor | None,
        batch_size: int,
        query_length: int,
        key_length: int,
    ) -> torch.Tensor | None:
        """One bool mask broadcastable to [B, h, Lq, Lk] from the two optional masks (True = may attend).

        key_padding_mask: [B, Lk]. attn_mask: [Lq, Lk]; [B·h, Lq, Lk] (per batch row and head, in
        torch's order) or [B, Lq, Lk] (per batch row), or a 1 in place of B·h / B; or 4-D
        broadcastable to [B, h, Lq, Lk]. A position may be attended only if both masks allow it.
        """
        B, H, Lq, Lk = batch_size, self.num_heads, query_length, key_length
        combined = None
        if key_padding_mask is not None:
            _check_bool_mask(key_padding_mask, "key_padding_mask")
            if tuple(key_padding_mask.shape) != (B, Lk):
                raise ValueError(
                    f"key_padding_mask must have shape [B, Lk] = {(B, Lk)}, got {tuple(key_padding_mask.shape)}"
                )
            combined = key_padding_mask.view(B, 1, 1, Lk)
        if attn_mask is not None:
            _check_bool_mask(attn_mask, "attn_mask")
            shape = tuple(attn_mask.shape)
            if attn_mask.dim() == 2 and shape == (Lq, Lk):
                attn_mask = attn_mask.view(1, 1, Lq, Lk)
            elif attn_mask.dim() == 3 and shape[1:] == (Lq, Lk) and shape[0] in (B * H, B, 1):
                if shape[0] == B * H:
                    attn_mask = attn_mask.view(B, H, Lq, Lk)
                else:
                    attn_mask = attn_mask.unsqueeze(1)
            elif attn_mask.dim() == 4 and all(
                size in (1, full) for size, full in zip(shape, (B, H, Lq, Lk))
            ):
                pass
            else:
                raise ValueError(
                    f"attn_mask of shape {shape} does not fit Lq={Lq}, Lk={Lk}, B={B}, heads={H}: "
                    f"expected [Lq, Lk], [B·heads, Lq, Lk], [B, Lq, Lk] or [B, heads, Lq, Lk]"
                )
            combined = attn_mask if combined is None else combined & attn_mask
        return combined

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        average_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """MultiHead(query, key, value).

        query: [B, Lq, E], key: [B, Lk, kdim], value: [B, Lk, vdim];
        key_padding_mask: [B, Lk] bool, True = a real key (may attend);
        attn_mask: bool, True = may attend, shaped as :meth:`combine_masks` accepts.
        Returns ``(output [B, Lq, E], weights)``, weights being None unless ``need_weights``;
        then [B, Lq, Lk] averaged over heads, or [B, h, Lq, Lk] if ``average_weights`` is False.
        Without weights the attention runs in PyTorch's fused kernel.
        """
        self._check_input(query, "query", self.embed_dim)
        self._check_input(key, "key", self.kdim)
        self._check_input(value, "value", self.vdim)
        if key.shape[0] != query.shape[0] or value.shape[:2] != key.shape[:2]:
            raise ValueError(
                f"query, key and value must share the batch size B, and key and value the length "
                f"Lk: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        if query is key and key is value and self.packed_projection:
            # Self-attention: Q, K and V from a single matrix product with the packed weight.
            q_heads, k_heads, v_heads = self._split_heads(
                F.linear(query, self.in_proj_weight, self.in_proj_bias), parts=3
            )
        else:
            k_heads, v_heads = self.project_key_value(key, value)
            q_heads = self.project_query(query)
        mask = self.combine_masks(key_padding_mask, attn_mask, query.shape[0], query.shape[1], key.shape[1])
        output, weights = self.attend(q_heads, k_heads, v_heads, mask, need_weights=need_weights)
        if weights is not None and average_weights:
            weights = weights.mean(dim=1)
        return output, weights

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A MultiHeadAttention with the weights of ``module`` (a ``torch.nn.MultiheadAttention``).

        Both of torch's layouts are read (packed ``in_proj_weight`` or separate
        ``q/k/v_proj_weight``). The copy is always batch-first and takes boolean masks with
        True = may attend, whatever ``module.batch_first`` is; torch's boolean masks mean the
        opposite (True = masked out), so pass ``~mask``. The copy is on the same device and
        dtype as ``module`` and in the same train/eval mode.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"from_torch expects a torch.nn.MultiheadAttention, got {type(module).__name__}")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("from_torch: add_bias_kv and add_zero_attn are not supported by MultiHeadAttention")
        bias = module.in_proj_bias is not None
        copy = cls(module.embed_dim, module.num_heads, kdim=module.kdim, vdim=module.vdim,
                   dropout=module.dropout, bias=bias)
        reference = module.out_proj.weight
        copy.to(device=reference.device, dtype=reference.dtype)
        E = module.embed_dim
        if module.in_proj_weight is not None:
            torch_weights = module.in_proj_weight.split(E)
        else:
            torch_weights = (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
        with torch.no_grad():
            for index, source in enumerate(torch_weights):
                copy._projection(index)[0].copy_(source)
            if bias:
                copy.in_proj_bias.copy_(module.in_proj_bias)
                copy.out_proj.bias.copy_(module.out_proj.bias)
            copy.out_proj.weight.copy_(module.out_proj.weight)
        return copy.train(module.training)
