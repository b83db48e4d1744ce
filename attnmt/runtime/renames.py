"""Keys of an older version's files under their names now: ``renamed_keys`` reads a config's or a
checkpoint's keys (``tie_embeddings`` is ``tie_output`` since 0.2.0), so run folders written before
a rename keep loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnmt.errors import ConfigError

__all__ = ["renamed_keys"]

def renamed_keys(values: Mapping[str, Any], renames: Mapping[str, str], section: str) -> dict[str, Any]:
    """``values`` with the keys of older versions (``renames``: old name -> name now) under their
    names now. ConfigError when both names are given."""
    values = dict(values)
    for old, new in renames.items():
        if old in values:
            if new in values:
                raise ConfigError(f"{section}: {old} and {new} are one option ({old} is its name before 0.2.0); "
                                  f"give only {new}")
            values[new] = values.pop(old)
    return values

