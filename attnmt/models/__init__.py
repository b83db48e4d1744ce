"""attnmt.models: the translators. ``build_model`` makes one from the ``model:`` section of a config.

Every model implements one contract, which training, evaluation, search and the viewers rely on
(B sentences, S source and T target positions, V target vocabulary; N rows in search)::

    logits, attention = model(src [B, S], src_mask [B, S], tgt_in [B, T], return_attention=False, tgt_mask=None)
        teacher forcing; logits [B, T, V], or [N, V] at the N True positions of tgt_mask [B, T]
    encoded = model.encode(src, src_mask)               .index_select(index) -> same type
    state = model.init_decoder_state(encoded)           .index_select(index) -> same type
    log_probs [N, V], weights [N, S], state = model.decode_step(prev_tokens [N], state, encoded, step)

Masks are bool with True = a real token; token ids 0, 1, 2, 3 are PAD, UNK, BOS, EOS. A model
also keeps ``model.config`` (its config dataclass) and ``model.model_type``.

Adding a model type: write ``attnmt/models/<module>.py`` with a config dataclass
(``from_dict`` / ``to_dict``, ConfigError on bad input) and a module-level
``build(model_config: dict, src_vocab_size: int, tgt_vocab_size: int) -> nn.Module``, then name
the module in ``MODEL_MODULES`` below. Modules are imported only when their type is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

from attnmt.errors import ConfigError

__all__ = ["MODEL_MODULES", "build_model", "check_target_mask", "count_parameters", "log_probabilities"]

#: model type (the ``type`` key of a model config) -> module defining ``build(...)``
MODEL_MODULES: dict[str, str] = {
    "rnn": "attnmt.models.rnn",
    "transformer": "attnmt.models.transformer",
}


def build_model(model_config: dict[str, Any], src_vocab_size: int, tgt_vocab_size: int):
    """The model described by ``model_config`` (a dict with ``type`` and that type's options).

    Raises ConfigError for a missing or unknown ``type`` and for the options the type rejects.
    """
    if not isinstance(model_config, dict):
        raise ConfigError(f"model config must be a mapping, got {type(model_config).__name__}")
    model_type = model_config.get("type")
    if model_type is None:
        raise ConfigError(f"model config needs a 'type' ({', '.join(MODEL_MODULES)})")
    if model_type not in MODEL_MODULES:
        raise ConfigError(f"unknown model.type {model_type!r}; known types: {', '.join(MODEL_MODULES)}")
    module_name = MODEL_MODULES[model_type]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise ConfigError(f"model.type {model_type!r} needs {module_name}, which this installation lacks") from None
    return module.build(model_config, src_vocab_size, tgt_vocab_size)


def count_parameters(model, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters; a tied weight counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def check_target_mask(tgt_mask, tgt_in):
    """``forward``'s ``tgt_mask`` must be a bool tensor shaped like ``tgt_in`` [B, T]; returns it."""
    import torch

    if not isinstance(tgt_mask, torch.Tensor) or tgt_mask.dtype != torch.bool or tgt_mask.shape != tgt_in.shape:
        raise ValueError(
            f"tgt_mask must be a bool tensor of tgt_in's shape {tuple(tgt_in.shape)}, got "
            f"{getattr(tgt_mask, 'dtype', type(tgt_mask).__name__)} {tuple(getattr(tgt_mask, 'shape', ()))}"
        )
    return tgt_mask


def log_probabilities(logits):
    """log_softmax over the last axis, in float32 when the products ran in a 16-bit type (autocast),
    else in the logits' own precision (float64 models stay float64)."""
    import torch

    if logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()
    return torch.log_softmax(logits, dim=-1)
