"""Small checks the config sections share: is a YAML value an integer, a finite number; and
building a config dataclass from a mapping with an error that names unknown keys."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from attnmt.errors import ConfigError

__all__ = ["dataclass_from_dict", "is_int", "is_number"]


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def dataclass_from_dict(cls, values: dict | None, section: str):
    """``cls(**values)``; ConfigError naming the ``section`` for a non-mapping or unknown keys."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{section}: must be a mapping of keys to values, got {values!r}")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"{section}: unknown key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(known)}")
    try:
        return cls(**values)
    except TypeError as error:  # pragma: no cover - keys were checked above
        raise ConfigError(f"{section}: {error}") from None
