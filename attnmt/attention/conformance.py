"""``attnmt check``: does an attention mechanism have the properties every built-in is tested for?

Each property is run on fresh random inputs (B sentences of up to S source positions, a padding
mask with True = may attend) and gives pass or fail with a counterexample (which row, which value):

    shapes        context [B, Dv] (output_dim) and weights [B, S], in the inputs' dtype
    weights       α ≥ 0, Σ_s α_s = 1 over the allowed positions, α = 0 exactly where the mask is False
    empty row     a row with no allowed position: weights 0, and a context that does not depend on
                  the row's query, keys or values (0, or an output projection's bias)
    large inputs  queries and keys × 1e4: everything finite, the weights still a distribution
    batch         a sentence's result is the same alone as inside its batch
    order         ... and the same wherever it stands in the batch (its rows permuted)
    padding       ... and the same with extra padding positions after it (their weights 0)
    gradcheck     float64 analytic gradients equal finite differences (torch.autograd.gradcheck)
    finite grads  float32 gradients of parameters and inputs finite, a fully masked row included
    all steps     attend(query [B, T, Dq]) equals T single steps (mechanisms that provide it)
    bf16          runs under CPU bf16 autocast, finite, weights within 0.02 of a distribution
    repeatable    two calls in eval mode give the same numbers
    speed         forward + backward time against the built-in scaled_dot at a stated size (info)

A class in the course handout's form (attnmt.attention.handout) is also checked by the handout's
equations, and each failure names the one it breaks (``HANDOUT_EQUATIONS``):

    scale         Eq. 1: α = softmax_j(q·k_j / √d), through its two nn.Linear projections (for a
                  class whose name says scaled dot-product, or with expect="scaled_dot")
    output        Eq. 2: attended_val = Σ_j α_j v_j with the α it returns, v_j being its answer for
                  source position j alone (where α_j = 1)
    values        Eq. 15: v_j = h̄_j, the encoder outputs themselves

For a Transformer score class (``model="transformer"``) the subject is a MultiHeadAttention layer
whose scores come from it (h heads of size d; the padding mask and softmax are attnmt's).
"""

from __future__ import annotations

import copy
import math
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import torch
from torch import nn

from attnmt.attention.handout import HandoutAttention, is_handout_form
from attnmt.attention.mechanisms import Attention
from attnmt.attention.multihead import MultiHeadAttention
from attnmt.attention.registry import build_attention, canonical_name, is_builtin
from attnmt.attention.user_adapter import UserCodeFault, build_user_score, contract_form
from attnmt.attention.user_code import UserCodeError, load_user_class, raised
from attnmt.errors import ConfigError
from attnmt.runtime.memory import available_ram

__all__ = ["CheckReport", "PropertyResult", "check_mechanism"]

MODELS = ("rnn", "transformer")
TOLERANCE = 1e-5  # float32 agreement (sums of weights, a row alone against in its batch)
SPEED_SIZE = {"batch": 64, "source": 24, "steps": 24, "dim": 256, "heads": 4}


@dataclass
class PropertyResult:
    """One property of a mechanism as ``attnmt check`` found it."""

    name: str
    status: str  # "pass", "fail", "n/a" or "info"
    detail: str = ""  # the counterexample of a failure, or what was measured
    equation: str = ""  # for the handout's form: the equation (or the handout's rule) the property stands for


@dataclass
class CheckReport:
    """Every property checked for one mechanism (``spec``) in one model kind and contract form."""

    spec: str
    model: str
    form: str
    results: list[PropertyResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(result.status != "fail" for result in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec, "model": self.model, "form": self.form, "passed": self.passed,
            "seconds": round(self.seconds, 2),
            "properties": [{"property": r.name, "status": r.status, "detail": r.detail,
                            **({"equation": r.equation} if r.equation else {})} for r in self.results],
        }

    def broken_equations(self) -> list[PropertyResult]:
        """The first failed property of each of the handout's equations it breaks (handout form only);
        only the shapes when those are wrong, since nothing else can be judged then."""
        first: dict[str, PropertyResult] = {}
        for result in self.results:
            if result.status == "fail" and result.equation:
                first.setdefault(result.equation, result)
        shapes = [result for result in first.values() if result.name == "shapes"]
        return shapes or list(first.values())

    def handout_verdict(self) -> str:
        """For a handout-form class: one line when it passes; else each equation it breaks, with its
        counterexample (or the property that failed, when it breaks none of them)."""
        broken = self.broken_equations()
        if self.passed:
            scale = next((r for r in self.results if r.name == "scale"), None)
            checked = "Eq. 1 with its 1/√d" if scale is not None and scale.status == "pass" else "Eq. 1"
            return (f"{self.spec} follows the handout: {checked}, Eq. 2 and Eq. 15, its shapes, and answers that do "
                    "not depend on the rest of the batch")
        if not broken:
            failed = [r for r in self.results if r.status == "fail"]
            return f"{failed[0].name}: {failed[0].detail}" if failed else ""
        return "\n".join(f"breaks {result.equation}:\n  {result.detail}" for result in broken)


class Failure(Exception):
    """A property does not hold; the message is the counterexample."""


@dataclass
class Inputs:
    query: torch.Tensor  # [B, Dq] (rnn) or [B, T, E] (transformer)
    keys: torch.Tensor  # [B, S, Dk]
    values: torch.Tensor  # [B, S, Dv]
    mask: torch.Tensor  # [B, S] bool, True = may attend

    def rows(self, index: slice, length: int | None = None) -> Inputs:
        """Rows ``index``, cut (or padded with masked random positions) to ``length`` source positions."""
        parts = [self.query[index], self.keys[index], self.values[index], self.mask[index]]
        if length is None:
            return Inputs(*parts)
        query, keys, values, mask = parts
        extra = length - keys.shape[1]
        if extra <= 0:
            return Inputs(query, keys[:, :length], values[:, :length], mask[:, :length])
        generator = torch.Generator().manual_seed(99)
        pad = lambda x: torch.cat(  # noqa: E731 (a two-line helper, used three times just below)
            [x, torch.randn(x.shape[0], extra, *x.shape[2:], generator=generator, dtype=x.dtype)], dim=1)
        return Inputs(query, pad(keys), pad(values), torch.cat([mask, mask.new_zeros(mask.shape[0], extra)], dim=1))

    def to(self, dtype: torch.dtype) -> Inputs:
        return Inputs(self.query.to(dtype), self.keys.to(dtype), self.values.to(dtype), self.mask)


class Subject:
    """What is checked: a module, how to call it, and the shapes it must give."""

    def __init__(self, spec: str, model: str, dims: tuple[int, int, int], heads: int, options: dict[str, Any],
                 expect: str | None = None):
        self.spec, self.model, self.dims, self.heads, self.options = spec, model, dims, heads, options
        self.expect = expect
        self.module = self.build(dims)
        if model == "transformer":
            self.form = "transformer score"
        elif isinstance(self.module, HandoutAttention):
            self.form = "handout"
        else:
            self.form = contract_form(self._user_part(self.module))

    def _user_part(self, module: nn.Module) -> nn.Module:
        return getattr(module, "module", module)

    @property
    def class_name(self) -> str:
        return type(self._user_part(self.module)).__name__

    @property
    def expects_scaled_dot(self) -> bool:
        """Asked for (``expect``), or said by the class's name (SingleQueryScaledDotProductAttention)."""
        return self.expect == "scaled_dot" or "scaleddot" in re.sub("[^a-z]", "", self.class_name.lower())

    def build(self, dims: tuple[int, int, int]) -> nn.Module:
        if self.model == "transformer":
            head_dim = dims[0]
            score = build_user_score(self.spec, head_dim, **self.options)
            return MultiHeadAttention(head_dim * self.heads, self.heads, score=score)
        return build_attention(self.spec, *dims, **self.options)

    def inputs(self, batch: int, source: int, generator: torch.Generator, scale: float = 1.0,
               dims: tuple[int, int, int] | None = None, lengths: list[int] | None = None) -> Inputs:
        query_dim, key_dim, value_dim = dims or self.dims
        if lengths is None:
            lengths = [max(1, source - (row * 2) % source) for row in range(batch)]
        mask = torch.arange(source)[None, :] < torch.tensor(lengths)[:, None]
        if self.model == "transformer":
            width = query_dim * self.heads
            query = torch.randn(batch, 3, width, generator=generator) * scale
            keys = torch.randn(batch, source, width, generator=generator) * scale
            return Inputs(query, keys, torch.randn(batch, source, width, generator=generator), mask)
        return Inputs(torch.randn(batch, query_dim, generator=generator) * scale,
                      torch.randn(batch, source, key_dim, generator=generator) * scale,
                      torch.randn(batch, source, value_dim, generator=generator), mask)

    def call(self, module: nn.Module, x: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """(context, weights): [B, Dv] and [B, S] (rnn), or [B, T, E] and [B, h, T, S] (transformer)."""
        if self.model == "transformer":
            output, weights = module(x.query, x.keys, x.values, key_padding_mask=x.mask, need_weights=True,
                                     average_weights=False)
            assert weights is not None
            return output, weights
        return module(x.query, x.keys, x.values, x.mask)

    def expected_shapes(self, module: nn.Module, x: Inputs) -> tuple[tuple[int, ...], tuple[int, ...]]:
        batch, source = x.mask.shape
        if self.model == "transformer":
            steps, width = x.query.shape[1], x.query.shape[2]
            return (batch, steps, width), (batch, self.heads, steps, source)
        return (batch, int(getattr(module, "output_dim", x.values.shape[-1]))), (batch, source)


def _mask_like(mask: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The [B, S] mask broadcast to the weights' shape [B, ..., S]."""
    return mask.view(mask.shape[0], *([1] * (weights.dim() - 2)), mask.shape[1]).expand_as(weights)


def _where(index: tuple[int, ...], weights: torch.Tensor) -> str:
    """'row b, position s' (with the head and step for the Transformer's [B, h, T, S])."""
    if weights.dim() == 2:
        return f"row {index[0]}, position {index[1]}"
    return f"row {index[0]}, head {index[1]}, step {index[2]}, position {index[3]}"


def _first(condition: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in condition.nonzero()[0])


def _check_distribution(weights: torch.Tensor, mask: torch.Tensor, tolerance: float, what: str = "") -> None:
    allowed = _mask_like(mask, weights)
    weights = weights.detach().float()
    if not torch.isfinite(weights).all():
        at = _first(~torch.isfinite(weights))
        raise Failure(f"{what}weight {weights[at].item()} at {_where(at, weights)}")
    leaked = (weights != 0) & ~allowed
    if leaked.any():
        at = _first(leaked)
        raise Failure(f"{what}weight {weights[at].item():.3g} at {_where(at, weights)}, where the mask is False")
    negative = weights < -tolerance
    if negative.any():
        at = _first(negative)
        raise Failure(f"{what}weight {weights[at].item():.3g} < 0 at {_where(at, weights)}")
    sums = weights.sum(dim=-1)
    has_any = allowed.any(dim=-1)
    off = ((sums - 1).abs() > tolerance) & has_any
    if off.any():
        at = _first(off)
        raise Failure(f"{what}weights of row {at[0]}{_step_text(at)} sum to {sums[at].item():.6g}, not 1")


def _step_text(at: tuple[int, ...]) -> str:
    return f", head {at[1]}, step {at[2]}" if len(at) == 3 else ""


def _check_finite(tensors: dict[str, torch.Tensor], what: str = "") -> None:
    for name, tensor in tensors.items():
        bad = ~torch.isfinite(tensor.detach())
        if bad.any():
            at = _first(bad)
            raise Failure(f"{what}{name} is {tensor.detach()[at].item()} at index {list(at)}")


def _close(name: str, got: torch.Tensor, want: torch.Tensor, where: str, tolerance: float = TOLERANCE) -> None:
    got, want = got.detach().double(), want.detach().double()
    difference = (got - want).abs()
    limit = tolerance * (1 + want.abs())
    if (difference > limit).any():
        at = _first(difference > limit)
        raise Failure(f"{where}: {name}[{', '.join(map(str, at))}] is {got[at].item():.6g}, "
                      f"expected {want[at].item():.6g}")


# -- the properties ------------------------------------------------------------------------------


def _shapes(subject: Subject, generator: torch.Generator) -> str:
    x = subject.inputs(4, 7, generator)
    context, weights = subject.call(subject.module, x)
    want_context, want_weights = subject.expected_shapes(subject.module, x)
    for name, tensor, shape in (("context", context, want_context), ("weights", weights, want_weights)):
        if not isinstance(tensor, torch.Tensor):
            raise Failure(f"{name} is a {type(tensor).__name__}, not a tensor")
        if tuple(tensor.shape) != shape:
            raise Failure(f"{name} has shape {list(tensor.shape)}, expected {list(shape)}")
        if tensor.dtype != x.keys.dtype:
            raise Failure(f"{name} is {tensor.dtype}, expected {x.keys.dtype} like the inputs")
    return ""


def _weights(subject: Subject, generator: torch.Generator) -> str:
    x = subject.inputs(6, 9, generator)
    _, weights = subject.call(subject.module, x)
    _check_distribution(weights, x.mask, TOLERANCE)
    return ""


def _empty_row(subject: Subject, generator: torch.Generator) -> str:
    x = subject.inputs(3, 5, generator, lengths=[0, 5, 3])
    context, weights = subject.call(subject.module, x)
    _check_finite({"context": context, "weights": weights})
    if (weights[0] != 0).any():
        raise Failure(f"row 0 has no allowed position, yet its weights are "
                      f"{weights[0].detach().flatten()[:5].tolist()}")
    other = subject.inputs(3, 5, generator, lengths=[0, 5, 3])  # row 0's query, keys and values drawn again
    query, keys, values = (torch.cat([new[:1], old[1:]]) for new, old in
                           zip((other.query, other.keys, other.values), (x.query, x.keys, x.values)))
    changed = Inputs(query, keys, values, x.mask)
    again, _ = subject.call(subject.module, changed)
    if not torch.allclose(again[0], context[0], rtol=0.0, atol=1e-6):
        before, after = (c[0].detach().flatten()[:4].tolist() for c in (context, again))
        raise Failure(f"row 0 has no allowed position, yet its context moves with its query, keys or values "
                      f"({before} becomes {after}); it must be 0, or a constant such as an output projection's bias")
    _check_distribution(weights, x.mask, TOLERANCE)
    return ""


def _large(subject: Subject, generator: torch.Generator) -> str:
    x = subject.inputs(4, 8, generator, scale=1e4)
    context, weights = subject.call(subject.module, x)
    _check_finite({"context": context, "weights": weights}, "queries and keys × 1e4: ")
    _check_distribution(weights, x.mask, TOLERANCE, "queries and keys × 1e4: ")
    return "queries and keys × 1e4"


def _batch(subject: Subject, generator: torch.Generator) -> str:
    # mostly one length, so that a handout-form class gets these rows in one call
    x = subject.inputs(5, 8, generator, lengths=[8, 8, 6, 8, 3])
    context, weights = subject.call(subject.module, x)
    for row in range(5):
        alone_context, alone_weights = subject.call(subject.module, x.rows(slice(row, row + 1)))
        _close("context", alone_context[0], context[row], f"row {row} alone differs from row {row} in the batch")
        _close("weights", alone_weights[0], weights[row], f"row {row} alone differs from row {row} in the batch")
    return ""


def _order(subject: Subject, generator: torch.Generator) -> str:
    x = subject.inputs(5, 6, generator, lengths=[6] * 5)
    context, weights = subject.call(subject.module, x)
    order = torch.tensor([3, 0, 4, 1, 2])
    permuted = Inputs(x.query[order], x.keys[order], x.values[order], x.mask[order])
    permuted_context, permuted_weights = subject.call(subject.module, permuted)
    where = "with the batch's rows in the order 3 0 4 1 2"
    _close("context", permuted_context, context[order], where)
    _close("weights", permuted_weights, weights[order], where)
    return ""


def _padding(subject: Subject, generator: torch.Generator) -> str:
    x = subject.inputs(4, 6, generator)
    context, weights = subject.call(subject.module, x)
    padded = x.rows(slice(None), length=10)
    padded_context, padded_weights = subject.call(subject.module, padded)
    _close("context", padded_context, context, "with 4 more padding positions")
    _close("weights", padded_weights[..., :6], weights, "with 4 more padding positions")
    extra = padded_weights[..., 6:]
    if (extra != 0).any():
        at = _first(extra != 0)
        raise Failure(f"with 4 more padding positions: weight {extra[at].item():.3g} on a padding position "
                      f"({_where(at, extra)} of the padding)")
    return ""


def _gradcheck(subject: Subject, generator: torch.Generator) -> str:
    # the handout's values are its keys, the encoder states (Eq. 15): value_dim = key_dim
    small = (3, 3, 3) if subject.model == "transformer" else (8, 8, 8) if subject.form == "handout" else (8, 8, 6)
    torch.manual_seed(0)
    module = subject.build(small).double().eval()
    x = subject.inputs(2, 4, generator, dims=small, lengths=[4, 2]).to(torch.float64)
    tensors = [t.detach().requires_grad_(True) for t in (x.query, x.keys, x.values)]

    def function(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> Any:
        return subject.call(module, Inputs(query, keys, values, x.mask))

    try:
        torch.autograd.gradcheck(function, tuple(tensors), eps=1e-6, atol=1e-5, rtol=1e-4)
    except RuntimeError as error:
        raise Failure(str(error).strip().splitlines()[0][:200]) from None
    return "float64, query, keys and values"


def _finite_gradients(subject: Subject, generator: torch.Generator) -> str:
    module = copy.deepcopy(subject.module).train()
    x = subject.inputs(3, 6, generator, scale=30.0, lengths=[0, 6, 2])
    tensors = [t.detach().requires_grad_(True) for t in (x.query, x.keys, x.values)]
    context, weights = subject.call(module, Inputs(tensors[0], tensors[1], tensors[2], x.mask))
    (context.sum() + (weights * torch.randn(weights.shape, generator=generator)).sum()).backward()
    gradients = {f"gradient of {name}": t.grad for name, t in zip(("query", "keys", "values"), tensors)
                 if t.grad is not None}
    gradients.update({f"gradient of parameter {name}": p.grad for name, p in module.named_parameters()
                      if p.grad is not None})
    _check_finite(gradients, "with a fully masked row 0 and inputs × 30: ")
    return "with a fully masked row and inputs × 30"


def _all_steps(subject: Subject, generator: torch.Generator) -> str:
    module = cast(Attention, subject.module)
    if subject.model == "transformer" or subject.form not in ("prepared", "handout"):
        raise NotApplicable("per-step path: attnmt asks it one decoding step at a time")
    x = subject.inputs(4, 7, generator)
    steps = 5
    queries = torch.randn(4, steps, x.query.shape[-1], generator=generator)
    prepared = module.prepare(x.keys, x.values, x.mask)
    context, weights = module.attend(queries, prepared)
    for step in range(steps):
        one_context, one_weights = module.attend(queries[:, step], prepared, step)
        _close("context", context[:, step], one_context, f"step {step} of all steps at once differs from it alone")
        _close("weights", weights[:, step], one_weights, f"step {step} of all steps at once differs from it alone")
    return ""


# -- the handout's equations (a class in the course handout's form) -------------------------------------


def _handout_values(subject: Subject, generator: torch.Generator) -> str:
    """Eq. 15: with one source position α_1 = 1, so the answer is v_1, which must be h̄_1 itself."""
    x = subject.inputs(4, 1, generator, lengths=[1] * 4)
    context, _ = subject.call(subject.module, x)
    _close("attended_val", context, x.values[:, 0],
           "with one source position α_1 = 1, so attended_val is v_1, which must be that encoder output h̄_1")
    return "v_j = h̄_j"


def _handout_output(subject: Subject, generator: torch.Generator) -> str:
    """Eq. 2: attended_val = Σ_j α_j v_j, with the α it returns and v_j its answer for position j alone."""
    batch, source = 3, 5
    x = subject.inputs(batch, source, generator, lengths=[source] * batch)
    context, weights = subject.call(subject.module, x)
    alone = torch.ones(batch, 1, dtype=torch.bool)
    values = torch.stack([subject.call(subject.module, Inputs(x.query, x.keys[:, j:j + 1], x.values[:, j:j + 1],
                                                              alone))[0] for j in range(source)], dim=1)
    _close("attended_val", context, (weights.unsqueeze(-1) * values).sum(dim=1),
           "attended_val is not Σ_j α_j v_j of the α it returns (v_j: its attended_val for position j alone)")
    return "a = Σ_j α_j v_j"


#: the sizes the 1/√d is checked at: dec_hid_dim 12, enc_hid_dim 8 (so 2 * enc_hid_dim = 16 ≠ 12)
SCALE_DIMS = (12, 16, 16)


def _handout_scale(subject: Subject, generator: torch.Generator) -> str:
    """Eq. 1: α = softmax_j(q·k_j / √d), q and k from the class's own two nn.Linear projections."""
    if not subject.expects_scaled_dot:
        raise NotApplicable(f"{subject.class_name} does not say it is scaled dot-product attention; "
                            "--expect scaled_dot checks its 1/√d")
    torch.manual_seed(0)
    attention = subject.build(SCALE_DIMS).double().eval()
    layers = {name.removeprefix("module."): layer for name, layer in attention.named_modules()
              if isinstance(layer, nn.Linear)}
    query_dim, key_dim, _ = SCALE_DIMS
    pairs = [(q, k) for q in layers if layers[q].in_features == query_dim for k in layers
             if layers[k].in_features == key_dim and layers[k].out_features == layers[q].out_features]
    if not pairs:
        raise NotApplicable("the 1/√d is checked through a query projection nn.Linear(dec_hid_dim, d) and a key "
                            f"projection nn.Linear(2 * enc_hid_dim, d); {subject.class_name} has no such pair")
    x = subject.inputs(3, 6, generator, dims=SCALE_DIMS, lengths=[6] * 3).to(torch.float64)
    with torch.no_grad():
        _, weights = subject.call(attention, x)
        fits = []
        for q, k in pairs:
            raw = torch.einsum("bd,bsd->bs", layers[q](x.query), layers[k](x.values))  # q·k_j
            d = layers[q].out_features
            expected = torch.softmax(raw / math.sqrt(d), dim=-1)
            if torch.allclose(weights, expected, rtol=0, atol=1e-6):
                return f"α = softmax(q·k_j / √d) with q from {q}, k from {k}, d = {d}"
            fits.append((q, k, d, raw, expected))
    q, k, d, raw, expected = fits[0]
    if bool((weights > 0).all()):
        # α = softmax(c · q·k_j) <=> log α_j − mean log α = c (s_j − mean s): fit c, see what it was
        centred_raw, logs = raw - raw.mean(-1, keepdim=True), weights.log()
        centred_log = logs - logs.mean(-1, keepdim=True)
        scale = float((centred_raw * centred_log).sum() / (centred_raw ** 2).sum())
        if float((centred_log - scale * centred_raw).abs().max()) < 1e-6:
            if abs(scale - 1) < 1e-6:
                raise Failure(f"the scores are not scaled: α = softmax(q·k_j), without the 1/√d "
                              f"(d = {d}, so 1/√d = {1 / math.sqrt(d):.4g}; q from {q}, k from {k})")
            told = " (1/d, not 1/√d)" if abs(scale - 1 / d) < 1e-6 else ""
            raise Failure(f"the scores are scaled by {scale:.4g}{told}; Eq. 1 scales them by 1/√d = "
                          f"{1 / math.sqrt(d):.4g} (d = {d}; q from {q}, k from {k})")
    at = _first(~((weights - expected).abs() <= 1e-6))  # NaN too
    raise Failure(f"α is not softmax(q·k_j / √d) of its layers {q} and {k}: at {_where(at, weights)} it is "
                  f"{weights[at].item():.6g}, Eq. 1 gives {expected[at].item():.6g}")


EQUATION_1 = "Eq. 1 (α = softmax_j(q·k_j / √d), a distribution over the source)"
OWN_ANSWER = "the handout's batch (each sentence's answer is its own, whatever else is in the batch, in any order)"

#: the handout's equation (or rule) each property stands for, named beside a handout-form class's failures
HANDOUT_EQUATIONS = {
    "shapes": "the handout's shapes (attended_val [batch_size, 2 * enc_hid_dim], alpha [batch_size, src_len])",
    "weights": EQUATION_1,
    "scale": EQUATION_1,
    "large inputs": EQUATION_1,
    "output": "Eq. 2 (attended_val = Σ_j α_j v_j, with the α it returns)",
    "values": "Eq. 15 (v_j = h̄_j, the encoder outputs themselves)",
    "batch": OWN_ANSWER,
    "order": OWN_ANSWER,
}


class NotApplicable(Exception):
    """The property does not apply to this form; the message says why."""


#: seconds each property (and building the mechanism) may take before it counts as hanging
TIME_LIMIT = 60.0


class TimeLimitReached(BaseException):
    """A mechanism's code ran past its time limit (a BaseException, so that the mechanism's own
    ``except Exception`` cannot swallow it)."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Within the block, TimeLimitReached once ``seconds`` pass (a SIGALRM timer: a forward that
    loops for ever in Python is stopped; one stuck inside a C call is stopped when it returns).
    Only in the main thread of a Unix process; elsewhere, or with ``seconds`` None, no limit."""
    if seconds is None or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    started = time.monotonic()
    previous = signal.getsignal(signal.SIGALRM)
    outer, _ = signal.getitimer(signal.ITIMER_REAL)  # a caller's own timer (0: none) keeps its moment

    spent = []  # the caller's timer, once it has fired

    def reached(signum: int, frame: Any) -> None:
        if outer and time.monotonic() - started >= outer - 1e-3:
            spent.append(True)
            if callable(previous):
                previous(signum, frame)  # the caller's deadline came first: its handler decides
        raise TimeLimitReached

    signal.signal(signal.SIGALRM, reached)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer) if outer else seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer and not spent:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))


def _bf16(subject: Subject, generator: torch.Generator) -> str:
    x = subject.inputs(4, 7, generator)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        context, weights = subject.call(subject.module, x)
    _check_finite({"context": context, "weights": weights}, "under bf16 autocast: ")
    _check_distribution(weights.float(), x.mask, 2e-2, "under bf16 autocast: ")
    return f"weights in {str(weights.dtype).removeprefix('torch.')}"


def _repeatable(subject: Subject, generator: torch.Generator) -> str:
    module = subject.module.eval()
    x = subject.inputs(4, 7, generator)
    first, second = subject.call(module, x), subject.call(module, x)
    for name, a, b in zip(("context", "weights"), first, second):
        if not torch.equal(a, b):
            at = _first(a != b)
            raise Failure(f"{name}[{', '.join(map(str, at))}] is {a[at].item():.8g}, then {b[at].item():.8g}")
    return ""


def _speed(subject: Subject, generator: torch.Generator) -> str:
    size = SPEED_SIZE
    batch, source, steps, dim, heads = size["batch"], size["source"], size["steps"], size["dim"], size["heads"]
    if subject.model == "transformer":
        mine: nn.Module = MultiHeadAttention(
            dim, heads, score=build_user_score(subject.spec, dim // heads, **subject.options))
        builtin: nn.Module = MultiHeadAttention(dim, heads)
        query = torch.randn(batch, steps, dim, generator=generator)

        def run(module: Any) -> Any:
            return module(query, keys, keys, key_padding_mask=mask, need_weights=True)
    else:
        mine = build_attention(subject.spec, dim, dim, dim, **subject.options)
        builtin = build_attention("scaled_dot", dim, dim, dim)
        query = torch.randn(batch, steps, dim, generator=generator)

        def run(module: Any) -> Any:
            return module.attend(query, module.prepare(keys, keys, mask))
    keys = torch.randn(batch, source, dim, generator=generator, requires_grad=True)
    mask = torch.ones(batch, source, dtype=torch.bool)
    times = {}
    for name, module in (("mine", mine), ("builtin", builtin)):
        times[name] = _median_seconds(partial(_forward_backward, run, module))
    what = ("one MultiHeadAttention layer" if subject.model == "transformer"
            else f"{steps} decoding steps")
    return (f"{times['mine'] / times['builtin']:.2f}× the time of the built-in scaled_dot "
            f"({times['mine'] * 1e3:.1f} ms against {times['builtin'] * 1e3:.1f} ms, forward and backward of "
            f"{what}, B={batch}, S={source}, d={dim})")


def _forward_backward(run: Callable[[nn.Module], Any], module: nn.Module) -> None:
    context, weights = run(module)
    (context.sum() + weights.sum()).backward()


def _median_seconds(work: Callable[[], None], repeats: int = 5) -> float:
    work()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


PROPERTIES: list[tuple[str, Callable[[Subject, torch.Generator], str]]] = [
    ("shapes", _shapes),
    ("weights", _weights),
    ("empty row", _empty_row),
    ("large inputs", _large),
    ("batch", _batch),
    ("order", _order),
    ("padding", _padding),
    ("gradcheck", _gradcheck),
    ("finite grads", _finite_gradients),
    ("all steps", _all_steps),
    ("bf16", _bf16),
    ("repeatable", _repeatable),
    ("speed", _speed),
]


#: a handout-form class gets the handout's equations after its weights
HANDOUT_PROPERTIES = PROPERTIES[:2] + [("scale", _handout_scale), ("output", _handout_output),
                                       ("values", _handout_values)] + PROPERTIES[2:]


#: the largest sizes ``check`` builds a mechanism with (a size beyond is a typo, not a test)
MAX_DIM, MAX_HEADS = 65536, 1024


def _check_memory(name: str, model: str, dims: tuple[int, int, int], heads: int, options: dict[str, Any]) -> None:
    """ConfigError before anything is allocated when the sizes cannot fit: each within bounds, and
    the mechanism's parameters (counted on the meta device) with their float64 copies and gradients
    within half the free memory. A user mechanism that cannot be built on meta is built for real."""
    if not all(1 <= size <= MAX_DIM for size in dims) or not 1 <= heads <= MAX_HEADS:
        raise ConfigError(f"dims={' '.join(map(str, dims))} heads={heads}: each size must be from 1 to {MAX_DIM}, "
                          f"the heads from 1 to {MAX_HEADS}")
    try:
        with torch.device("meta"):
            module = Subject(name, model, dims, heads, options).module
    except UserCodeError:
        raise
    except TypeError as error:  # a built-in's constructor: an option it does not take
        raise ConfigError(f"{error} (an option given to it)") from None
    except Exception:  # noqa: BLE001 - a user's code that does not run on meta: let the real build decide
        return
    needed = 32 * sum(parameter.numel() for parameter in module.parameters())  # float32 and float64, with grads
    free = available_ram()
    if free is not None and needed > free // 2:
        given = ", ".join(f"{key}={value!r}" for key, value in options.items())
        raise ConfigError(f"{name!r} built with sizes {' '.join(map(str, dims))}, {heads} heads"
                          f"{f' and the options {given}' if given else ''} would hold "
                          f"{needed / 2**30:.1f} GiB of parameters and gradients, more than half of the "
                          f"{free / 2**30:.1f} GiB free; choose smaller sizes")


HUNG = "did not return within"


def _checked_property(property_name: str, test: Callable, subject: Subject, generator: torch.Generator,
                      seconds: float | None) -> PropertyResult:
    """One property's result: pass (info for the speed), fail with its counterexample, or n/a."""
    try:
        with time_limit(seconds):
            detail = test(subject, generator)
        status = "info" if property_name == "speed" else "pass"
    except TimeLimitReached:
        status, detail = "fail", f"{HUNG} {seconds:g} s (a forward that never ends?)"
    except Failure as failure:
        status, detail = "fail", str(failure)
    except NotApplicable as reason:
        status, detail = "n/a", str(reason)
    except UserCodeFault as fault:  # the mechanism raised or answered out of its contract
        status, detail = "fail", fault.what
    except (Exception, SystemExit) as error:  # the mechanism's own code raised: that is the counterexample
        status, detail = "fail", raised(error)
    return PropertyResult(property_name, status, detail)


def check_mechanism(  # noqa: PLR0913 (the options of `attnmt check`, each a keyword)
    spec: str, model: str = "rnn", dims: tuple[int, int, int] = (32, 32, 24), heads: int = 4,
    options: dict[str, Any] | None = None, speed: bool = True, seed: int = 0, seconds: float | None = TIME_LIMIT,
    expect: str | None = None,
) -> CheckReport:
    """Run every property on the mechanism ``spec`` (a built-in name too) and return the report.

    dims: (query_dim, key_dim, value_dim) of the RNN form; for the Transformer, dims[0] is the size
    of a head and ``heads`` their number. ``options`` go to its constructor. A mechanism that cannot
    be loaded or built raises UserCodeError (a ConfigError), and so does one whose constructor runs
    past ``seconds``. A property that runs past ``seconds`` fails, and those after it are not run
    (the mechanism's code may be stuck for ever). A class in the handout's form is also checked by
    its equations, each result naming its own (``expect="scaled_dot"`` asks for the 1/√d of Eq. 1
    whatever the class is called)."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    started = time.perf_counter()
    try:
        name = canonical_name(spec)
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None
    if name == "none":
        raise ConfigError("'none' attends to nothing (its weights are all 0): it has no weights to check")
    if model == "transformer" and is_builtin(name):
        raise ConfigError(f"{spec!r} is a built-in mechanism; model='transformer' checks your own score(q, k) class "
                          "(path/to/file.py:Class), used in every layer of a Transformer")
    options = dict(options or {})
    if model == "rnn" and not is_builtin(name) and is_handout_form(load_user_class(name)):
        dims = (dims[0], dims[1], dims[1])  # the handout's values are the encoder states themselves (Eq. 15)
    _check_memory(name, model, dims, heads, options)
    torch.manual_seed(seed)
    try:
        with time_limit(seconds):
            subject = Subject(name, model, dims, heads, options, expect)
    except TimeLimitReached:
        raise ConfigError(f"{spec}: building it did not return within {seconds:g} s (its constructor seems to "
                          "hang); nothing was checked") from None
    report = CheckReport(spec=name, model=model, form=subject.form)
    hung = None
    handout = subject.form == "handout"
    for property_name, test in HANDOUT_PROPERTIES if handout else PROPERTIES:
        if property_name == "speed" and not speed:
            continue
        if hung is not None:
            report.results.append(PropertyResult(property_name, "n/a", f"not run: {hung} ran past the time limit"))
            continue
        generator = torch.Generator().manual_seed(seed + len(report.results))
        subject.module.train(property_name == "finite grads")
        result = _checked_property(property_name, test, subject, generator, seconds)
        if result.detail.startswith(HUNG):
            hung = property_name
        if handout and hung is None:  # a forward that never returns breaks no equation in particular
            result.equation = HANDOUT_EQUATIONS.get(property_name, "")
        report.results.append(result)
    subject.module.eval()
    report.seconds = time.perf_counter() - started
    return report
