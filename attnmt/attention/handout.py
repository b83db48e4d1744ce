"""The course handout's form of a mechanism, accepted wherever a mechanism goes.

The course task attnmt grew from has students complete one class, in a form of its own:

    class SingleQueryScaledDotProductAttention(nn.Module):
        def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=512): ...
        def forward(self, hidden, encoder_outputs): ...
            return attended_val, alpha

    hidden:          [B, dec_hid_dim]            the decoder state h_i, the query
    encoder_outputs: [S, B, 2 * enc_hid_dim]     the encoder states h̄_s, time first (a BiLSTM's)
    attended_val:    [B, 2 * enc_hid_dim]        a = Σ_s α_s v_s            (Eq. 2 of the handout)
    alpha:           [B, S]                      α = softmax_s(q·k_s / √d)  (Eq. 1)

and no mask. attnmt recognises the form by its constructor: it takes ``enc_hid_dim`` and
``dec_hid_dim`` (and options of its own, from ``model.attention_options``), not attnmt's
``query_dim`` / ``key_dim`` / ``value_dim``. It is built with enc_hid_dim = the encoder's size per
direction (half of the encoder states' size) and dec_hid_dim = the decoder's.

Without a mask, the class must never see padding. ``HandoutAttention`` therefore calls it once per
group of sentences of one source length in the batch, with only their real positions, time first;
the decoding steps of the group (all T of them in the ``parallel`` flow) are folded into its batch,
so a batch costs one call per distinct length. The weights come back padded with zeros to the
batch's S, and a row without a source position gets a zero context and zero weights. Padding can
then never receive weight, and a sentence's answer does not depend on the other sentences of its
batch, as long as the class treats the rows of its batch independently (``attnmt check`` tests that).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from attnmt.attention.mechanisms import Attention, PreparedKeys
from attnmt.attention.user_adapter import CONTRACT_KEYWORDS, UserCodeFault, checked_answer, running_user_code
from attnmt.attention.user_code import UserCodeError, raised

__all__ = ["HANDOUT_KEYWORDS", "HandoutAttention", "build_handout_attention", "handout_answer", "is_handout_form"]

#: The keywords the handout's constructor takes.
HANDOUT_KEYWORDS = ("enc_hid_dim", "dec_hid_dim")


def is_handout_form(cls: Any) -> bool:
    """Whether ``cls``'s constructor is the handout's: it names enc_hid_dim and dec_hid_dim and none
    of attnmt's own keywords."""
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return all(name in parameters for name in HANDOUT_KEYWORDS) and not any(
        name in parameters for name in CONTRACT_KEYWORDS)


def build_handout_attention(cls: type, label: str, query_dim: int, key_dim: int, value_dim: int,
                            **options: Any) -> HandoutAttention:
    """``cls(enc_hid_dim=key_dim // 2, dec_hid_dim=query_dim, **options)`` behind the built-ins'
    interface; UserCodeError in one line when the sizes cannot be the handout's (its values are the
    encoder states themselves, Eq. 15, of a bidirectional encoder) or the constructor fails."""
    if key_dim != value_dim or key_dim % 2:
        raise UserCodeError(
            f"attention {label!r}: {cls.__name__} is in the handout's form (enc_hid_dim, dec_hid_dim), whose keys "
            f"and values are the states of a bidirectional encoder, of an even size 2 * enc_hid_dim; here they "
            f"are {key_dim} and {value_dim}")
    sizes = {"enc_hid_dim": key_dim // 2, "dec_hid_dim": query_dim}
    try:
        inspect.signature(cls).bind(**sizes, **options)
    except TypeError as error:
        shown = "".join(f", {key}={value!r}" for key, value in options.items())
        raise UserCodeError(f"attention {label!r}: {cls.__name__}(enc_hid_dim=..., dec_hid_dim=...{shown}) does not "
                            f"fit its constructor: {error}") from None
    try:
        module = cls(**sizes, **options)
    except (Exception, SystemExit) as error:
        raise UserCodeError(f"attention {label!r}: {cls.__name__}(...) {raised(error)}; run attnmt check {label}") \
            from None
    if not isinstance(module, nn.Module) or type(module).forward is nn.Module.forward:
        raise UserCodeError(f"attention {label!r}: {cls.__name__} in the handout's form needs "
                            "forward(hidden, encoder_outputs)")
    return HandoutAttention(module, query_dim, key_dim, label=label)


def handout_answer(answer: Any, label: str, batch: int, source: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(attended_val, alpha)`` when ``answer`` is two tensors in the handout's shapes
    [batch_size, 2 * enc_hid_dim] and [batch_size, src_len]; else UserCodeFault naming them."""
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        for name, value, shape, meaning in (
                ("attended_val", answer[0], (batch, dim), "[batch_size, 2 * enc_hid_dim]"),
                ("alpha", answer[1], (batch, source), "[batch_size, src_len]")):
            if isinstance(value, torch.Tensor) and tuple(value.shape) != shape:
                hint = " (time first? the handout returns it batch first)" if tuple(value.shape) == shape[::-1] else ""
                raise UserCodeFault(label, f"forward returned {name} of shape {list(value.shape)}; the handout's "
                                           f"shape is {meaning} = {list(shape)}{hint}")
    return checked_answer(answer, label, "forward", (batch, dim), (batch, source))


class HandoutAttention(Attention):
    """A handout-form module behind ``prepare`` / ``attend`` (the module docstring says how it is
    called). ``self.module`` is the student's, so its parameters are ``attention.module.*``."""

    form = "handout"

    def __init__(self, module: nn.Module, query_dim: int, key_dim: int, label: str | None = None):
        super().__init__(query_dim, key_dim, key_dim)
        self.module = module
        self.label = label or type(module).__name__

    def attend(self, query: torch.Tensor, prepared: PreparedKeys, step: int | torch.Tensor | None = None) -> Any:
        """query [B, Dq] (one step) or [B, T, Dq] (all steps) -> context [B, (T,) Dv], weights [B, (T,) S]."""
        one_step = query.dim() == 2
        queries = query.unsqueeze(1) if one_step else query
        batch, steps, _ = queries.shape
        source = prepared.mask.shape[1]
        values = prepared.values  # [B, S, Dv]: the encoder states themselves (Eq. 15)
        dim = values.shape[-1]
        context = values.new_zeros(batch, steps, dim)
        weights = values.new_zeros(batch, steps, source)
        lengths = prepared.mask.sum(dim=1)
        for length in sorted(set(lengths.tolist()) - {0}):
            rows = (lengths == length).nonzero().squeeze(1)
            group = rows.numel()
            positions = prepared.mask[rows].nonzero()[:, 1].view(group, length)  # the real positions of each row
            states = values[rows].gather(1, positions.unsqueeze(-1).expand(group, length, dim))  # [b, L, Dv]
            encoder_outputs = states.unsqueeze(1).expand(group, steps, length, dim).reshape(group * steps, length, dim)
            hidden = queries[rows].reshape(group * steps, -1)
            with running_user_code(self.label, "forward"):
                answer = self.module(hidden, encoder_outputs.transpose(0, 1))  # time first, as the handout has it
            attended, alpha = handout_answer(answer, self.label, group * steps, length, dim)
            context = context.index_copy(0, rows, attended.view(group, steps, dim).to(context.dtype))
            spread = alpha.new_zeros(group, steps, source).scatter(
                2, positions.unsqueeze(1).expand(group, steps, length), alpha.view(group, steps, length))
            weights = weights.index_copy(0, rows, spread.to(weights.dtype))
        return (context[:, 0], weights[:, 0]) if one_step else (context, weights)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, form=handout"
