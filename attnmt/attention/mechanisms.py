"""Single-query attention mechanisms for recurrent decoders.

A recurrent decoder asks one question per sentence and step: given its state ``h`` (the query)
and the encoder states ``h̄_1 … h̄_S`` (keys and values), which source positions matter now?
Every mechanism here answers it the same way,

    scores  e_s = score(h, h̄_s)                        (mechanism-specific)
    weights α = softmax(e) over the allowed positions    (mask True = may attend)
    context c = Σ_s α_s · value_s

behind one interface::

    prepared = attention.prepare(keys [B, S, Dk], values [B, S, Dv], mask [B, S])   # once per sentence
    context, weights = attention.attend(query [B, Dq], prepared, step=None)         # every step
    # -> context [B, output_dim], weights [B, S]
    context, weights = attention(query, keys, values, mask, step=None)              # both at once

``attend`` also takes all decoding steps of a sentence at once, ``query [B, T, Dq]`` →
``context [B, T, output_dim]``, ``weights [B, T, S]``, as one batched product: that is how the
``parallel`` decoder flow trains without a Python loop over time. ``prepare`` does everything that
depends only on the keys (their projections), so a decoding step costs O(S·d) instead of O(S·d²).

``attnmt.attention.registry`` makes one by name (``build_attention``), built-in or a user's own.
A row of ``mask`` with no True entry gives zero weights and a zero weighted sum of the values:
the context is 0, or, for ``multihead``, whose output projection follows the sum, that
projection's bias.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import nn

from attnmt.attention.functional import masked_softmax
from attnmt.attention.multihead import head_outputs

__all__ = [
    "BUILTIN_ALIASES",
    "BUILTIN_BUILDERS",
    "BUILTIN_NAMES",
    "EQUATIONS",
    "AdditiveAttention",
    "Attention",
    "DotAttention",
    "GeneralAttention",
    "LocalAttention",
    "MeanAttention",
    "MultiHeadSingleQueryAttention",
    "NoAttention",
    "PreparedKeys",
    "ScaledDotAttention",
    "mechanism_equations",
]


@dataclass
class PreparedKeys:
    """What a mechanism computes from the encoder states once per sentence.

    keys:    [B, S, *]  the keys as the mechanism scores them (projected where it projects them)
    values:  [B, S, *]  the values the context is averaged from (projected for ``multihead``)
    mask:    [B, S]     bool, True = may attend
    lengths: [B]        number of allowed positions (the source length S_b of each row)
    """

    keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor

    def index_select(self, index: torch.Tensor) -> PreparedKeys:
        """Rows ``index`` of every field (beam search expands and reorders sentences with it)."""
        return replace(self, **{f.name: getattr(self, f.name).index_select(0, index) for f in fields(self)})


def _check_inputs(name: str, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Validate the shapes of prepare()'s arguments; returns the mask (all True when None)."""
    if keys.dim() != 3 or values.dim() != 3:
        raise ValueError(
            f"{name}: keys and values must be [B, S, d], got keys {tuple(keys.shape)}, values {tuple(values.shape)}"
        )
    if keys.shape[:2] != values.shape[:2]:
        raise ValueError(
            f"{name}: keys {tuple(keys.shape)} and values {tuple(values.shape)} differ in [B, S]"
        )
    if mask is None:
        return torch.ones(keys.shape[:2], dtype=torch.bool, device=keys.device)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"{name}: mask must be a torch.bool tensor [B, S] (True = may attend), got {kind}")
    if mask.shape != keys.shape[:2]:
        raise ValueError(f"{name}: mask {tuple(mask.shape)} must be [B, S] = {tuple(keys.shape[:2])}")
    return mask


class Attention(nn.Module):
    """Base class: subclasses define ``prepare_keys`` / ``prepare_values`` and ``score``.

    Attributes: ``query_dim``, ``key_dim``, ``value_dim`` (inputs) and ``output_dim`` (the size of
    the context vector it returns), ``num_heads`` (1 except for ``multihead``).
    """

    num_heads = 1

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None):
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.value_dim = key_dim if value_dim is None else value_dim
        self.output_dim = self.value_dim

    # -- what subclasses override -------------------------------------------------------------
    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """Keys as ``score`` wants them: [B, S, Dk] -> [B, S, *]. Identity by default."""
        return keys

    def prepare_values(self, values: torch.Tensor) -> torch.Tensor:
        """Values the context averages: [B, S, Dv] -> [B, S, output_dim]. Identity by default."""
        return values

    def score(self, query: torch.Tensor, prepared: PreparedKeys) -> torch.Tensor:
        """Unnormalised scores: query [B, T, Dq] -> [B, T, S]."""
        raise NotImplementedError

    def normalize(
        self, scores: torch.Tensor, query: torch.Tensor, prepared: PreparedKeys, steps: torch.Tensor
    ) -> torch.Tensor:
        """Scores [B, T, S] -> weights [B, T, S]: a softmax over the allowed positions.

        ``query`` [B, T, Dq] and ``steps`` [B, T] are there for the local mechanisms."""
        return masked_softmax(scores, prepared.mask.unsqueeze(1), dim=-1)

    # -- the shared interface ------------------------------------------------------------------
    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None) -> PreparedKeys:
        """Once per sentence: keys [B, S, Dk], values [B, S, Dv], mask [B, S] -> PreparedKeys."""
        mask = _check_inputs(type(self).__name__, keys, values, mask)
        if keys.shape[-1] != self.key_dim or values.shape[-1] != self.value_dim:
            raise ValueError(
                f"{type(self).__name__} was built for key_dim={self.key_dim}, value_dim={self.value_dim}; "
                f"got keys {tuple(keys.shape)}, values {tuple(values.shape)}"
            )
        return PreparedKeys(
            keys=self.prepare_keys(keys),
            values=self.prepare_values(values),
            mask=mask,
            lengths=mask.sum(dim=1),
        )

    def attend(
        self, query: torch.Tensor, prepared: PreparedKeys, step: int | torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step, query [B, Dq] -> (context [B, output_dim], weights [B, S]), or all steps,
        query [B, T, Dq] -> (context [B, T, output_dim], weights [B, T, S]).

        ``step`` is the decoding step (0 for the first output token): an int, a [B] tensor for one
        query per row, or a [B, T] tensor; for ``query [B, T, Dq]`` it defaults to 0 … T-1. Only
        the local mechanisms use it.
        """
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)
        if query.dim() != 3 or query.shape[0] != prepared.mask.shape[0] or query.shape[-1] != self.query_dim:
            raise ValueError(
                f"{type(self).__name__}: query must be [B, Dq] or [B, T, Dq] with B={prepared.mask.shape[0]}, "
                f"Dq={self.query_dim}; got {tuple(query.shape) if not single else tuple(query.shape[::2])}"
            )
        steps = self._steps(step, query.shape[0], query.shape[1], query.device)
        scores = self.score(query, prepared)
        expected = (query.shape[0], query.shape[1], prepared.mask.shape[1])
        if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != expected:  # never broadcast silently
            found = list(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
            raise ValueError(f"{type(self).__name__}.score gave {found}, expected scores [B, T, S] = {list(expected)}")
        weights = self.normalize(scores, query, prepared, steps)
        context = torch.bmm(weights, prepared.values)
        if single:
            return context.squeeze(1), weights.squeeze(1)
        return context, weights

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None = None,
        step: int | torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``attend(query, prepare(keys, values, mask), step)``."""
        return self.attend(query, self.prepare(keys, values, mask), step)

    @staticmethod
    def _steps(step: int | torch.Tensor | None, batch: int, length: int, device: torch.device) -> torch.Tensor:
        """The decoding step of every query as a [B, T] long tensor."""
        if step is None:
            return torch.arange(length, device=device).expand(batch, length)
        step = torch.as_tensor(step, device=device)
        if step.dim() == 0:
            return (step + torch.arange(length, device=device)).expand(batch, length)
        if step.dim() == 1:
            return step.unsqueeze(1) + torch.arange(length, device=device)
        return step

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}, value_dim={self.value_dim}"


class NoAttention(Attention):
    """``none``: attends to nothing.

        α_s = 0
        c = 0

    context [B, Dv] and weights [B, S] are zeros. The no-attention baseline: the decoder sees the
    source only through its initial state.
    """

    def attend(
        self, query: torch.Tensor, prepared: PreparedKeys, step: int | torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        shape = query.shape[:-1]
        weights = prepared.mask.new_zeros((*shape, prepared.mask.shape[1]), dtype=prepared.values.dtype)
        return prepared.values.new_zeros((*shape, self.output_dim)), weights


class MeanAttention(Attention):
    """``mean``: the average of the allowed values.

        α_s = 1 / S_b
        c = Σ_s α_s h̄_s

    for every real position s < S_b; context [B, Dv]. It does not depend on the query.
    """

    def score(self, query: torch.Tensor, prepared: PreparedKeys) -> torch.Tensor:
        return query.new_zeros(query.shape[0], query.shape[1], prepared.keys.shape[1])


class DotAttention(Attention):
    """``dot`` (Luong et al. 2015, Eq. 8):

        e_s = hᵀ h̄_s
        α_s = exp(e_s) / Σ_s′ exp(e_s′)
        c = Σ_s α_s h̄_s

    Needs query_dim == key_dim; no parameters, no scaling."""

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None):
        super().__init__(query_dim, key_dim, value_dim)
        if query_dim != key_dim:
            raise ValueError(
                f"dot attention needs query_dim == key_dim, got query_dim={query_dim}, key_dim={key_dim}; "
                "use 'general' or 'scaled_dot', which project"
            )

    def score(self, query: torch.Tensor, prepared: PreparedKeys) -> torch.Tensor:
        return torch.bmm(query, prepared.keys.transpose(1, 2))


class ScaledDotAttention(Attention):
    """``scaled_dot`` / ``sdp``: projected single-query scaled dot-product (Vaswani et al. 2017).

        q = W_q h + b_q
        k_s = W_k h̄_s + b_k
        e_s = qᵀ k_s / √d
        α_s = exp(e_s) / Σ_s′ exp(e_s′)
        c = Σ_s α_s h̄_s

    d = ``kq_dim``. Eq. (1) of the paper for one query and one head, the values the encoder states
    themselves; the biases b_q and b_k are attnmt's.

    h: [B, Dq], h̄: [B, S, Dk]; W_q: [kq_dim, Dq], W_k: [kq_dim, Dk]; the keys are projected once
    per sentence in ``prepare``.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None, kq_dim: int = 512):
        super().__init__(query_dim, key_dim, value_dim)
        self.kq_dim = kq_dim
        self.query_proj = nn.Linear(query_dim, kq_dim)
        self.key_proj = nn.Linear(key_dim, kq_dim)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)

    def score(self, query: torch.Tensor, prepared: PreparedKeys) -> torch.Tensor:
        q = self.query_proj(query) * (1.0 / math.sqrt(self.kq_dim))
        return torch.bmm(q, prepared.keys.transpose(1, 2))


class GeneralAttention(Attention):
    """``general`` (Luong et al. 2015, Eq. 8):

        e_s = hᵀ W_a h̄_s
        α_s = exp(e_s) / Σ_s′ exp(e_s′)
        c = Σ_s α_s h̄_s

    W_a: [Dq, Dk]. ``prepare`` computes W_a h̄_s once per sentence."""

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None):
        super().__init__(query_dim, key_dim, value_dim)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)

    def score(self, query: torch.Tensor, prepared: PreparedKeys) -> torch.Tensor:
        return torch.bmm(query, prepared.keys.transpose(1, 2))


class AdditiveAttention(Attention):
    """``additive`` / ``bahdanau`` / ``concat`` (Bahdanau et al. 2015; Luong's concat):

        e_s = vᵀ tanh(W_q h + W_k h̄_s + b)
        α_s = exp(e_s) / Σ_s′ exp(e_s′)
        c = Σ_s α_s h̄_s

    W_q: [A, Dq], W_k: [A, Dk], v: [A], A = ``attention_dim`` (default Dq). ``prepare``
    computes W_k h̄_s + b once per sentence; a step then costs O(S·A). The bias b is attnmt's:
    Bahdanau's vᵀ tanh(W s + U h) (Appendix A.1.2) and Luong's v_aᵀ tanh(W_a [h; h̄]) (Eq. 8) have
    none, and Luong's W_a [h; h̄] is W_q h + W_k h̄ with W_a split in two.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None, attention_dim: int | None = None):
        super().__init__(query_dim, key_dim, value_dim)
        attention_dim = attention_dim or query_dim
        self.attention_dim = attention_dim
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, attention_dim)
        self.energy = nn.Linear(attention_dim, 1, bias=False)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)

    def score(self, query: torch.Tensor, prepared: PreparedKeys) -> torch.Tensor:
        hidden = torch.tanh(self.query_proj(query).unsqueeze(2) + prepared.keys.unsqueeze(1))  # [B, T, S, A]
        return self.energy(hidden).squeeze(-1)


class LocalAttention(GeneralAttention):
    """``local-m`` and ``local-p`` (Luong et al. 2015, §3.2): attend within a window [p_t − D, p_t + D].

    local-m (Eq. 7 inside the window)::

        p_t = min(t, S_b − 1)
        e_s = hᵀ W_a h̄_s
        α_s = exp(e_s) / Σ_s′ exp(e_s′) for |s − p_t| ≤ D, else 0
        c = Σ_s α_s h̄_s

    local-p (Eq. 9 and 10, renormalised)::

        p_t = S_b · sigmoid(v_pᵀ tanh(W_p h))
        e_s = hᵀ W_a h̄_s − (s − p_t)² / (2σ²)
        α_s = exp(e_s) / Σ_s′ exp(e_s′) for |s − p_t| ≤ D, else 0
        σ = D / 2
        c = Σ_s α_s h̄_s

    hᵀ W_a h̄_s is the ``general`` score (Eq. 8); the sums run over the window and s < S_b.
    Positions count from 0: t is the decoding step (0 for the first output token) and s the source
    position, so local-m's window is centred on the source word of the same index, and a target
    longer than its source keeps the window on the last source word (attnmt's choice; the paper
    does not say). local-p's p_t lies in (0, S_b): its window can reach one past the last word but
    the first word only at its edge. The Gaussian term carries p_t's gradient. Luong multiplies the
    window's softmax by the Gaussian and leaves the weights unnormalised; attnmt adds the
    Gaussian's logarithm to the scores before the softmax instead, so the weights sum to 1 like
    every other mechanism's, with the same shape inside the window.

    ``gaussian=True`` gives local-m the Gaussian as well: the form attnmt's ``local-m`` had before
    it followed the paper, which runs trained with it record (``attnmt.runs.run_config``).
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        window: int = 5,
        predictive: bool = False,
        position_dim: int | None = None,
        gaussian: bool | None = None,
    ):
        super().__init__(query_dim, key_dim, value_dim)
        if window < 1:
            raise ValueError(f"local attention: window (half-width D) must be >= 1, got {window}")
        if predictive and gaussian is False:
            raise ValueError("local-p: gaussian=False is not an option (its learnt position gets its gradient "
                             "through the Gaussian)")
        if not isinstance(gaussian, (bool, type(None))):
            raise ValueError(f"local attention: gaussian must be true or false, got {gaussian!r}")
        self.window = window
        self.sigma = window / 2.0
        self.predictive = predictive
        self.gaussian = predictive or bool(gaussian)
        if predictive:
            position_dim = position_dim or query_dim
            self.position_proj = nn.Linear(query_dim, position_dim, bias=False)
            self.position_energy = nn.Linear(position_dim, 1, bias=False)

    def positions(self, query: torch.Tensor, prepared: PreparedKeys, steps: torch.Tensor) -> torch.Tensor:
        """The window centre p_t of every query: [B, T] float."""
        last = (prepared.lengths - 1).clamp_min(0).unsqueeze(1).to(query.dtype)
        if self.predictive:
            gate = torch.sigmoid(self.position_energy(torch.tanh(self.position_proj(query)))).squeeze(-1)
            return prepared.lengths.unsqueeze(1).to(query.dtype) * gate
        return torch.minimum(steps.to(query.dtype), last)

    def normalize(
        self, scores: torch.Tensor, query: torch.Tensor, prepared: PreparedKeys, steps: torch.Tensor
    ) -> torch.Tensor:
        centre = self.positions(query, prepared, steps).unsqueeze(-1)  # [B, T, 1]
        source_positions = torch.arange(scores.shape[-1], device=scores.device, dtype=scores.dtype)
        distance = source_positions - centre  # [B, T, S]
        in_window = (distance.abs() <= self.window) & prepared.mask.unsqueeze(1)
        if self.gaussian:
            scores = scores - distance**2 / (2.0 * self.sigma**2)
        return masked_softmax(scores, in_window, dim=-1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window={self.window}, predictive={self.predictive}, gaussian={self.gaussian}"


class MultiHeadSingleQueryAttention(Attention):
    """``multihead``: h heads of scaled dot-product attention, then an output projection.

        q_i = W_i^Q h + b_i^Q
        k_{i,s} = W_i^K h̄_s + b_i^K
        v_{i,s} = W_i^V h̄_s + b_i^V
        head_i = Σ_s softmax_s(q_iᵀ k_{i,s} / √d_h) v_{i,s}
        c = W^O [head_1; …; head_h] + b^O

    d_h = model_dim / h with ``model_dim`` (default query_dim) divisible by ``num_heads`` (default 4).
    The context has output_dim = value_dim. A row with nothing to attend to has zero weights and
    zero heads, so its context is W^O·0 + b^O = b^O, as in ``MultiHeadAttention`` (the rule of
    docs/mechanisms.md, "A row with nothing to attend to").
    ``weights`` are averaged over heads;
    ``attend_heads`` returns them per head, [B, h, S] or [B, h, T, S].
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        num_heads: int = 4,
        model_dim: int | None = None,
    ):
        super().__init__(query_dim, key_dim, value_dim)
        model_dim = model_dim or query_dim
        if model_dim % num_heads:
            raise ValueError(f"multihead: model_dim={model_dim} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = model_dim // num_heads
        self.query_proj = nn.Linear(query_dim, model_dim)
        self.key_proj = nn.Linear(key_dim, model_dim)
        self.value_proj = nn.Linear(self.value_dim, model_dim)
        self.output_proj = nn.Linear(model_dim, self.value_dim)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, L, h·d_h] -> [B, h, L, d_h]"""
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self._split_heads(self.key_proj(keys))

    def prepare_values(self, values: torch.Tensor) -> torch.Tensor:
        return self._split_heads(self.value_proj(values))

    def attend_heads(
        self, query: torch.Tensor, prepared: PreparedKeys, step: int | torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like ``attend`` but the weights are per head: [B, h, S] (or [B, h, T, S])."""
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)
        q = self._split_heads(self.query_proj(query)) * (1.0 / math.sqrt(self.head_dim))  # [B, h, T, d_h]
        scores = torch.matmul(q, prepared.keys.transpose(-2, -1))  # [B, h, T, S]
        weights = masked_softmax(scores, prepared.mask[:, None, None, :], dim=-1)
        heads = torch.matmul(weights, prepared.values)  # [B, h, T, d_h]
        context = self.output_proj(heads.transpose(1, 2).reshape(query.shape[0], query.shape[1], -1))
        if single:
            return context.squeeze(1), weights.squeeze(2)
        return context, weights

    def attend(
        self, query: torch.Tensor, prepared: PreparedKeys, step: int | torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        context, weights = self.attend_heads(query, prepared, step)
        return context, weights.mean(dim=1)

    def head_outputs(self, v_heads: torch.Tensor) -> torch.Tensor:
        """Each head's prepared values through its share of W^O, the one product both multi-head
        classes share (``attnmt.attention.multihead.head_outputs``): [B, h, S, d_h] -> [B, h, S, Dv]."""
        return head_outputs(v_heads, self.output_proj.weight)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_heads={self.num_heads}, head_dim={self.head_dim}"


def _local(predictive: bool) -> Callable[..., Attention]:
    def build(query_dim: int, key_dim: int, value_dim: int | None = None, **options: Any) -> Attention:
        return LocalAttention(query_dim, key_dim, value_dim, predictive=predictive, **options)

    return build


#: The built-in mechanisms: name -> constructor (query_dim, key_dim, value_dim=None, **options).
BUILTIN_BUILDERS: dict[str, Callable[..., Attention]] = {
    "none": NoAttention,
    "mean": MeanAttention,
    "dot": DotAttention,
    "scaled_dot": ScaledDotAttention,
    "general": GeneralAttention,
    "additive": AdditiveAttention,
    "local-m": _local(predictive=False),
    "local-p": _local(predictive=True),
    "multihead": MultiHeadSingleQueryAttention,
}
_SOFTMAX = "α_s = exp(e_s) / Σ_s′ exp(e_s′)"
_WINDOW = "α_s = exp(e_s) / Σ_s′ exp(e_s′) for |s − p_t| ≤ D, else 0"
_CONTEXT = "c = Σ_s α_s h̄_s"
_LOCAL_M_CENTRE = "p_t = min(t, S_b − 1)"
_GAUSSIAN = ("e_s = hᵀ W_a h̄_s − (s − p_t)² / (2σ²)", _WINDOW, "σ = D / 2", _CONTEXT)

#: Each built-in mechanism's equations, a row each, as its code computes them: the one source that
#: its class docstring, docs/mechanisms.md and serve's step-through show (tests/test_mechanisms.py
#: holds the first two to it). h is the query (the decoder state), h̄_s the encoder states (keys
#: and values), S_b the sentence's real length, t the decoding step.
EQUATIONS: dict[str, tuple[str, ...]] = {
    "none": ("α_s = 0", "c = 0"),
    "mean": ("α_s = 1 / S_b", _CONTEXT),
    "dot": ("e_s = hᵀ h̄_s", _SOFTMAX, _CONTEXT),
    "scaled_dot": ("q = W_q h + b_q", "k_s = W_k h̄_s + b_k", "e_s = qᵀ k_s / √d", _SOFTMAX, _CONTEXT),
    "general": ("e_s = hᵀ W_a h̄_s", _SOFTMAX, _CONTEXT),
    "additive": ("e_s = vᵀ tanh(W_q h + W_k h̄_s + b)", _SOFTMAX, _CONTEXT),
    "local-m": (_LOCAL_M_CENTRE, "e_s = hᵀ W_a h̄_s", _WINDOW, _CONTEXT),
    "local-p": ("p_t = S_b · sigmoid(v_pᵀ tanh(W_p h))", *_GAUSSIAN),
    "multihead": ("q_i = W_i^Q h + b_i^Q", "k_{i,s} = W_i^K h̄_s + b_i^K", "v_{i,s} = W_i^V h̄_s + b_i^V",
                  "head_i = Σ_s softmax_s(q_iᵀ k_{i,s} / √d_h) v_{i,s}", "c = W^O [head_1; …; head_h] + b^O"),
}


def mechanism_equations(name: str, options: dict[str, Any] | None = None) -> tuple[str, ...] | None:
    """The rows of ``EQUATIONS`` for a built-in mechanism's canonical ``name`` built with
    ``options`` (local-m with ``gaussian: true``, as runs from before it followed the paper, has
    local-p's Gaussian around its own p_t); None for any other name."""
    if name == "local-m" and (options or {}).get("gaussian"):
        return (_LOCAL_M_CENTRE, *_GAUSSIAN)
    return EQUATIONS.get(name)


#: Other names of built-in mechanisms.
BUILTIN_ALIASES = {"sdp": "scaled_dot", "bahdanau": "additive", "concat": "additive"}
#: Every built-in name: the mechanisms, then their aliases (a user mechanism never takes one).
BUILTIN_NAMES: tuple[str, ...] = tuple(BUILTIN_BUILDERS) + tuple(BUILTIN_ALIASES)
