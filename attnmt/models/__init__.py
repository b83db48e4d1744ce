"""attnmt.models: the translators, and the contract every one of them keeps.

B sentences, S source and T target positions, V the target vocabulary, N rows in search,
L layers and h heads of attention over the source::

    logits, attention = model(src [B, S], src_mask [B, S], tgt_in [B, T], return_attention=False, tgt_mask=None)
        teacher forcing; logits [B, T, V], or [N, V] at the N True positions of tgt_mask [B, T];
        return_attention=True gives [B, T, S] (the weights search returns), "heads" gives the
        cross-attention of every layer and head in one shape for every model: [B, L, h, T, S]
    model.cross_attention_layers (L), model.attention_heads (h)
    model.state_bytes_per_token     bytes a search row's decoder state grows by per output token
    encoded = model.encode(src, src_mask)               .index_select(index) -> same type
    state = model.init_decoder_state(encoded)           .index_select(index) -> same type
    log_probs [N, V], weights [N, S], state = model.decode_step(prev_tokens [N], state, encoded, step)

Masks are bool with True = a real token; token ids are those of ``attnmt.data.special_tokens``.
Reading a model's attention for a given output (force-decoding) is ``attnmt.models.readout``. A model
keeps ``model.config``, its config dataclass (``RNNConfig`` or ``TransformerConfig``: the ``model:``
section of a run config, chosen by its ``type``).

Adding a model type: write ``attnmt/models/<module>.py`` with a config dataclass that subclasses
``ModelConfig`` (``attnmt.models.config``: its ``type``, its fields, a ``validate`` built from the
shared checks, so reading, unknown keys and errors are those of every model) and an ``nn.Module``
taking ``(config, src_vocab_size, tgt_vocab_size)``, then name both in ``MODEL_TYPES`` below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnmt.errors import ConfigError
from attnmt.models.common import check_target_mask, count_parameters, log_probabilities
from attnmt.models.config import ModelConfig
from attnmt.models.readout import ForcedReading, SpecialIds, force_decode
from attnmt.models.rnn import RNNConfig, RNNSeq2Seq
from attnmt.models.transformer import Transformer, TransformerConfig
from attnmt.runtime.device import available_memory, memory_size

__all__ = [
    "MODEL_TYPES", "RENAMED_MODEL_KEYS", "ForcedReading", "ModelConfig", "RNNConfig", "SpecialIds",
    "TransformerConfig", "build_model", "check_model_fits", "check_target_mask", "count_parameters", "force_decode",
    "log_probabilities", "model_config",
]

#: model type (the ``type`` key of a model config) -> (its config class, its module class)
MODEL_TYPES: dict[str, tuple[Any, type]] = {
    "rnn": (RNNConfig, RNNSeq2Seq),
    "transformer": (TransformerConfig, Transformer),
}
#: model type -> its options named otherwise before 0.2.0 (old name -> name now; saved runs use them)
RENAMED_MODEL_KEYS: dict[str, dict[str, str]] = {name: config.RENAMED_KEYS for name, (config, _) in MODEL_TYPES.items()}


def model_config(values: dict[str, Any] | ModelConfig | None) -> ModelConfig:
    """The config dataclass of a ``model:`` section (a dict with ``type``; None = the RNN's defaults).

    Raises ConfigError for an unknown ``type`` and for the options that type rejects.
    """
    if isinstance(values, ModelConfig):
        return values
    if values is None:
        values = {"type": "rnn"}
    if not isinstance(values, dict):
        raise ConfigError(f"model: must be a mapping with a 'type', got {values!r}")
    model_type = values.get("type")
    if model_type is None:
        raise ConfigError(f"model config needs a 'type' ({', '.join(MODEL_TYPES)})")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise ConfigError(f"unknown model.type {model_type!r}; known types: {', '.join(MODEL_TYPES)}")
    return MODEL_TYPES[model_type][0].from_dict(values)


def check_model_fits(config: dict[str, Any] | ModelConfig, src_vocab_size: int, tgt_vocab_size: int,
                     needs: Sequence[tuple[torch.device, int]]) -> None:
    """ConfigError, before any weight is allocated, when the model ``config`` describes cannot fit:
    it is built on the ``meta`` device (shapes, no storage) to count its P parameters, and each
    ``(device, bytes per parameter)`` of ``needs`` must find P times that free (training: the
    weights, their gradient and Adam's two moments, 16 bytes; loading: the float32 weights, 4).
    Asking the allocator instead is not enough: where the kernel overcommits memory, a huge
    allocation succeeds and the first write to it gets the process killed."""
    try:
        with torch.device("meta"):
            parameters = count_parameters(build_model(config, src_vocab_size, tgt_vocab_size), trainable_only=False)
    except Exception:  # noqa: BLE001 - a user's attention that cannot be built on meta: the allocator decides
        return
    for where, per_parameter in needs:
        needed, available = per_parameter * parameters, available_memory(where)
        if available is not None and needed > available:
            raise ConfigError(
                f"model: the model this config describes does not fit in the memory of {where}: its "
                f"{parameters:,} parameters need about {memory_size(needed)} there, and "
                f"{memory_size(available)} is free; make it smaller")


def build_model(config: dict[str, Any] | ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Any:
    """The model ``config`` describes (a config dataclass, or a ``model:`` dict)."""
    config = model_config(config)
    module_class = next(module for config_class, module in MODEL_TYPES.values() if isinstance(config, config_class))
    return module_class(config, src_vocab_size, tgt_vocab_size)
