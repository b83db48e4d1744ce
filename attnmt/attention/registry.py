"""The one registry of mechanism names, used by the library, the configs and the command line.

Built-in names (``ATTENTION_TYPES``, aliases included) build the mechanisms of
``attnmt.attention.mechanisms``. Any other name is a user's mechanism (found and imported by
``attnmt.attention.user_code``, adapted by ``attnmt.attention.user_adapter``):
``path/to/file.py:Class``, ``package.module:Class``, a ``register_attention`` name or an entry
point of the group ``attnmt.attention``; its class follows attnmt's contract or the course
handout's form (``attnmt.attention.handout``). Built-in names win: no user name can take one.

    build_attention(name, query_dim, key_dim, value_dim=None, **options) -> Attention
        behind one interface: prepare(keys [B, S, Dk], values [B, S, Dv], mask [B, S]) once per
        sentence, attend(query [B, Dq] or [B, T, Dq], prepared) -> (context, weights)
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from attnmt.attention.handout import build_handout_attention, is_handout_form
from attnmt.attention.mechanisms import BUILTIN_ALIASES, BUILTIN_BUILDERS, BUILTIN_NAMES, Attention
from attnmt.attention.user_adapter import build_user_attention
from attnmt.attention.user_code import is_user_name, load_user_class, register_attention, registered_names
from attnmt.runtime.checks import check_plain_name

__all__ = ["ATTENTION_TYPES", "build_attention", "canonical_name", "folder_label", "is_builtin",
           "register_attention", "registered_names", "short_name"]

#: Every built-in name ``build_attention`` accepts: the mechanisms, then their aliases.
ATTENTION_TYPES: tuple[str, ...] = BUILTIN_NAMES


def is_builtin(name: str) -> bool:
    """Whether ``name`` (any case, aliases included) is a built-in mechanism."""
    return isinstance(name, str) and name.strip().lower() in BUILTIN_NAMES


def canonical_name(name: str) -> str:
    """The registry name behind ``name``: ``sdp`` -> ``scaled_dot``; a user's name or spec as given
    (without surrounding spaces). ValueError when it is neither; never imports user code."""
    if not isinstance(name, str):
        raise TypeError(f"attention name must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    if key in BUILTIN_NAMES:
        return BUILTIN_ALIASES.get(key, key)
    if is_user_name(name):
        return name.strip()
    known = [*ATTENTION_TYPES, *registered_names()]
    raise ValueError(
        f"unknown attention mechanism {name!r}; known names: {', '.join(known)}, "
        "or your own as path/to/file.py:ClassName or package.module:ClassName"
    )


def folder_label(name: str) -> str:
    """A mechanism's name as one folder name: a spec's file (or module) and class joined by '-'
    (``examples/my_attention.py:MyAttention`` -> ``my_attention.py-MyAttention``)."""
    target, _, class_name = name.strip().rpartition(":")
    label = f"{PurePath(target).name}-{class_name}" if target else name.strip().replace("/", "_").replace("\\", "_")
    return check_plain_name(label, f"attention {name!r} as a folder name")


def short_name(name: str) -> str:
    """A mechanism's name for a figure: a spec without the folders of its file
    (``examples/my_attention.py:MyAttention`` -> ``my_attention.py:MyAttention``)."""
    target, _, class_name = name.strip().rpartition(":")
    return f"{PurePath(target).name}:{class_name}" if target else name.strip()


def build_attention(name: str, query_dim: int, key_dim: int, value_dim: int | None = None,
                    **options: Any) -> Attention:
    """Build the mechanism called ``name`` (a built-in of ``ATTENTION_TYPES`` or a user's own).

    ``options`` go to its constructor: ``kq_dim`` (scaled_dot), ``attention_dim`` (additive),
    ``window`` and ``position_dim`` (local-m, local-p), ``num_heads`` and ``model_dim`` (multihead),
    or a user mechanism's own. An option the mechanism does not take raises a TypeError naming it
    (a UserCodeError, which is a ConfigError, for a user mechanism). Naming a user spec imports it.
    """
    key = canonical_name(name)
    if key not in BUILTIN_BUILDERS:
        cls = load_user_class(key)
        if is_handout_form(cls):  # the course handout's (enc_hid_dim, dec_hid_dim): attnmt.attention.handout
            return build_handout_attention(cls, key, query_dim, key_dim, key_dim if value_dim is None else value_dim,
                                           **options)
        return build_user_attention(key, query_dim, key_dim, value_dim, **options)
    try:
        return BUILTIN_BUILDERS[key](query_dim, key_dim, value_dim, **options)
    except TypeError as error:
        raise TypeError(f"attention {key!r}: {error}") from None
