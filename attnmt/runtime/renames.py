"""Names of an older version that keep working for one more version, with a warning.

- ``renamed_keys``: a config's or checkpoint's keys under their names now (``tie_embeddings`` is
  ``tie_output``): run folders written before a rename keep loading.
- ``renamed_parameters``: a function called with a parameter's old name (``beam_size=5``) runs as
  if called with the new one (``beam=5``) and warns once per call site.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from attnmt.errors import ConfigError

__all__ = ["renamed_keys", "renamed_parameters"]

P = ParamSpec("P")
R = TypeVar("R")


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


def renamed_parameters(**renames: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator: keyword arguments given by their names before 0.2.0 (``old="new"``) are passed
    under their new names with a DeprecationWarning (the old names go in 0.3). TypeError when a call
    gives both names."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{function.__qualname__}() got both {old} and {new} "
                                        f"({old} is {new}'s name before 0.2.0)")
                    warnings.warn(f"{function.__qualname__}({old}=...) is {function.__qualname__}({new}=...) "
                                  "since attnmt 0.2.0; the old name goes in 0.3", DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate
