"""The adapter: a user's attention mechanism behind the built-ins' interface (``prepare`` /
``attend``), with what its code does while it runs contained.

The contract. A user mechanism is a ``torch.nn.Module`` whose constructor takes the keywords
``query_dim``, ``key_dim`` and ``value_dim`` (plus options of its own, from
``model.attention_options``), in one of three forms:

``forward``
    ``forward(query [B, Dq], keys [B, S, Dk], values [B, S, Dv], mask [B, S]) -> (context [B, Dv], weights [B, S])``,
    mask bool with True = may attend. The whole mechanism, as a course writes it.
``score``
    ``score(query [B, Dq], keys [B, S, Dk]) -> e [B, S]`` and no ``forward``: attnmt does the rest,
    ``α = softmax(e)`` over the allowed positions (0 elsewhere, all 0 on a row with none) and
    ``context = Σ_s α_s v_s``.
``prepared``
    a subclass of ``attnmt.attention.Attention`` (``prepare_keys`` / ``score(query [B, T, Dq], prepared)``,
    or ``prepare`` / ``attend`` themselves): the built-ins' speed path, which projects the keys once
    per sentence and answers all decoding steps of the ``parallel`` flow in one product.

The first two forms are asked one decoding step at a time: in the ``parallel`` flow the adapter
loops over the T steps (``benchmarks/experiments/user_attention.py`` measures what that costs).
The course handout's form, ``(enc_hid_dim, dec_hid_dim)`` with ``forward(hidden, encoder_outputs)``,
is adapted by ``attnmt.attention.handout``.

For the Transformer a user class gives ``score(q [B, h, T, d], k [B, h, S, d]) -> [B, h, T, S]``
(built with query_dim = key_dim = value_dim = d, the size of a head); it replaces ``q·kᵀ/√d`` in
every attention layer, and attnmt applies the padding and causal masks and the softmax.

Containment. Whatever a user's code raises while it runs (``sys.exit`` included), and an answer of
another form or shape, becomes a ``UserCodeFault`` that names the mechanism and points to
``attnmt check``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
from torch import nn

from attnmt.attention.functional import masked_softmax
from attnmt.attention.mechanisms import Attention, PreparedKeys
from attnmt.attention.user_code import UserCodeError, load_user_class, raised

__all__ = [
    "CONTRACT_KEYWORDS", "UserAttention", "UserCodeFault", "build_user_attention", "build_user_score",
    "checked_answer", "contract_form", "instantiate", "running_user_code",
]

#: The keywords every user mechanism's constructor takes.
CONTRACT_KEYWORDS = ("query_dim", "key_dim", "value_dim")


class UserCodeFault(UserCodeError):
    """A user mechanism's code raised, called ``sys.exit`` or broke the contract while it ran
    (``what`` says which, for ``attnmt check``'s table); the message names the mechanism and points
    to ``attnmt check``."""

    def __init__(self, label: str, what: str):
        super().__init__(f"attention {label!r}: {what}; run attnmt check {label} to see which property it breaks")
        self.what = what


@contextmanager
def running_user_code(label: str, method: str) -> Iterator[None]:
    """Around a call of a user's ``method``: anything it raises, ``SystemExit`` included, becomes a
    UserCodeFault naming ``label`` (a Ctrl-C still stops attnmt)."""
    try:
        yield
    except UserCodeFault:
        raise
    except (Exception, SystemExit) as error:
        raise UserCodeFault(label, f"{method} {raised(error)}") from None


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return "None" if value is None else f"a {type(value).__module__}.{type(value).__qualname__}"


def checked_answer(answer: Any, label: str, method: str, context_shape: tuple[int, ...],
                   weights_shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """``answer`` when it is ``(context, weights)``: two tensors of these shapes; else UserCodeFault."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        what = f"{len(answer)} values" if isinstance(answer, (tuple, list)) else _describe(answer)
        raise UserCodeFault(label, f"{method} returned {what}, not (context, weights)")
    for name, value, shape in (("context", answer[0], context_shape), ("weights", answer[1], weights_shape)):
        if not isinstance(value, torch.Tensor):
            raise UserCodeFault(label, f"{method} returned {_describe(value)} as its {name}, not a torch.Tensor")
        if tuple(value.shape) != shape:
            raise UserCodeFault(label, f"{method} returned {name} of shape {list(value.shape)}, expected {list(shape)}")
    return answer[0], answer[1]


# -- the adapter ---------------------------------------------------------------------------------


def contract_form(module: nn.Module) -> str:
    """Which form of the contract ``module`` follows: ``prepared``, ``forward`` or ``score``."""
    if isinstance(module, Attention):
        return "prepared"
    if type(module).forward is not nn.Module.forward:
        return "forward"
    if callable(getattr(module, "score", None)):
        return "score"
    raise UserCodeError(
        f"{type(module).__name__} defines neither forward(query, keys, values, mask) nor score(query, keys)"
    )


class UserAttention(Attention):
    """A user's ``forward``- or ``score``-form mechanism behind the ``prepare`` / ``attend`` interface.

    ``prepare`` keeps the keys and values as they are; ``attend`` asks the user's module one step
    at a time (T calls for ``query [B, T, Dq]``) and stacks the answers into [B, T, Dv], [B, T, S].
    The user's module is ``self.module``, so its parameters are ``attention.module.*``. What the
    module raises, or an answer of another form or shape, is a UserCodeFault naming ``label``.
    """

    def __init__(self, module: nn.Module, query_dim: int, key_dim: int, value_dim: int | None = None,
                 label: str | None = None):
        super().__init__(query_dim, key_dim, value_dim)
        self.module = module
        self.label = label or type(module).__name__
        self.form = contract_form(module)
        if self.form == "prepared":
            raise ValueError("UserAttention wraps forward- and score-form mechanisms; use an Attention directly")
        self.output_dim = int(getattr(module, "output_dim", self.value_dim))

    def attend(self, query: torch.Tensor, prepared: PreparedKeys, step: int | torch.Tensor | None = None) -> Any:
        if query.dim() == 2:
            return self._one_step(query, prepared)
        contexts, weights = zip(*(self._one_step(query[:, t], prepared) for t in range(query.shape[1])))
        return torch.stack(contexts, dim=1), torch.stack(weights, dim=1)

    def _one_step(self, query: torch.Tensor, prepared: PreparedKeys) -> tuple[torch.Tensor, torch.Tensor]:
        batch, source = prepared.mask.shape
        if self.form == "forward":
            with running_user_code(self.label, "forward"):
                answer = self.module(query, prepared.keys, prepared.values, prepared.mask)
            return checked_answer(answer, self.label, "forward", (batch, self.output_dim), (batch, source))
        score = cast(Callable[..., torch.Tensor], self.module.score)  # not a tensor, as nn.Module types it
        with running_user_code(self.label, "score"):
            scores = score(query, prepared.keys)  # [B, S]
        if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != (batch, source):
            raise UserCodeFault(self.label, f"score returned {_describe(scores)}, expected a tensor of shape "
                                            f"{[batch, source]}")
        weights = masked_softmax(scores, prepared.mask, dim=-1)
        return torch.bmm(weights.unsqueeze(1), prepared.values).squeeze(1), weights

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, form={self.form}"


def instantiate(cls: type, label: str, query_dim: int, key_dim: int, value_dim: int, **options: Any) -> nn.Module:
    """``cls(query_dim=…, key_dim=…, value_dim=…, **options)``; UserCodeError in one line when the
    constructor does not take these keywords or fails."""
    try:
        signature = inspect.signature(cls)
        signature.bind(query_dim=query_dim, key_dim=key_dim, value_dim=value_dim, **options)
    except TypeError as error:
        raise UserCodeError(
            f"attention {label!r}: {cls.__name__}(query_dim=..., key_dim=..., value_dim=...{_options_text(options)}) "
            f"does not fit its constructor: {error}; attnmt takes either form: (query_dim, key_dim, value_dim) with "
            "forward(query, keys, values, mask), or the handout's (enc_hid_dim, dec_hid_dim) with "
            "forward(hidden, encoder_outputs)"
        ) from None
    except ValueError:  # no signature to read (a C type): let the call say
        pass
    try:
        return cls(query_dim=query_dim, key_dim=key_dim, value_dim=value_dim, **options)
    except (Exception, SystemExit) as error:
        raise UserCodeError(
            f"attention {label!r}: {cls.__name__}(...) {raised(error)}; run attnmt check {label}"
        ) from None


def _options_text(options: dict) -> str:
    return "".join(f", {key}={value!r}" for key, value in options.items())


def build_user_attention(name: str, query_dim: int, key_dim: int, value_dim: int | None = None,
                         **options: Any) -> Attention:
    """The mechanism ``name`` names, built for these sizes and behind the built-ins' interface."""
    value_dim = key_dim if value_dim is None else value_dim
    cls = load_user_class(name)
    if isinstance(cls, type) and issubclass(cls, Attention):  # already the interface: contained in place
        return cast(Attention, instantiate(_contained_attention(cls, name), name, query_dim, key_dim, value_dim,
                                           **options))
    module = instantiate(cls, name, query_dim, key_dim, value_dim, **options)
    return UserAttention(module, query_dim, key_dim, value_dim, label=name)


def build_user_score(name: str, head_dim: int, **options: Any) -> nn.Module:
    """The Transformer form: the class ``name`` names, built with query_dim = key_dim = value_dim =
    ``head_dim``; its ``score(q [B, h, T, d], k [B, h, S, d]) -> [B, h, T, S]`` replaces q·kᵀ/√d."""
    cls = load_user_class(name)
    module = instantiate(_contained_score(cls, name) if callable(getattr(cls, "score", None)) else cls, name,
                         head_dim, head_dim, head_dim, **options)
    if not callable(getattr(module, "score", None)):
        raise UserCodeError(
            f"attention {name!r}: a Transformer takes a class with score(q [B, h, T, d], k [B, h, S, d]); "
            f"{type(module).__name__} has no score method"
        )
    return module


_CONTAINED: dict[tuple[type, str], type] = {}


def _contained_attention(cls: type, label: str) -> type:
    """A subclass of the user's ``Attention`` subclass whose ``prepare`` and ``attend`` turn what the
    user's code raises, and an answer of another shape, into a UserCodeFault. Being a subclass, it
    holds the same parameters under the same names as ``cls``, so checkpoints are unchanged."""
    if (cls, label) not in _CONTAINED:
        user: Any = cls

        def prepare(self: Any, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor | None = None) -> PreparedKeys:
            with running_user_code(label, "prepare"):
                return user.prepare(self, keys, values, mask)

        def attend(self: Any, query: torch.Tensor, prepared: PreparedKeys, step: Any = None) -> Any:
            with running_user_code(label, "attend"):
                answer = user.attend(self, query, prepared, step)
            batch, source = prepared.mask.shape
            steps = tuple(query.shape[1:2]) if query.dim() == 3 else ()
            return checked_answer(answer, label, "attend", (batch, *steps, self.output_dim), (batch, *steps, source))

        _CONTAINED[cls, label] = _subclass(cls, prepare=prepare, attend=attend)
    return _CONTAINED[cls, label]


def _contained_score(cls: type, label: str) -> type:
    """The Transformer form's class with its ``score`` contained, as ``_contained_attention`` does:
    scores must be a tensor of shape [B, h, T, S] for q [B, h, T, d] and k [B, h, S, d]."""
    if (cls, label) not in _CONTAINED:
        user: Any = cls

        def score(self: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            with running_user_code(label, "score"):
                scores = user.score(self, q, k)
            expected = (*q.shape[:-1], k.shape[-2])
            if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != expected:
                raise UserCodeFault(label, f"score returned {_describe(scores)}, expected [B, h, T, S] = "
                                           f"{list(expected)}")
            return scores

        _CONTAINED[cls, label] = _subclass(cls, score=score)
    return _CONTAINED[cls, label]


def _subclass(cls: type, **methods: Callable) -> type:
    """A subclass of ``cls`` with ``methods`` in place, named and placed as ``cls`` is."""
    namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__, **methods}
    return type(cls.__name__, (cls,), namespace)

