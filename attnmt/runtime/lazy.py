"""Public names of a package, imported from their modules when first used (PEP 562).

A package's ``__init__`` names where each public name lives; ``import attnmt`` and the command line
then stay fast (no torch, matplotlib or NumPy until a name that needs them is used), and
``dir()`` and tab completion in notebooks still list every name::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"Translator": "attnmt.decoding.translator"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, str], eager: Mapping[str, Any] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: ``homes`` maps each public name to the
    module that defines it (absolute, or relative to ``package`` when it has no dot); ``eager``
    holds names the package already defines."""
    names = sorted({*homes, *(eager or {})})

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(home if "." in home else f"{package}.{home}")
        value = getattr(module, name)
        setattr(sys.modules[package], name, value)  # later uses skip this function
        return value

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names
