"""The base of every model config (the ``model:`` section of a run config): reading it from a
mapping, the keys it knows, and the checks of its values, with one set of errors for all models.

A model's config is a dataclass that subclasses ``ModelConfig``, names its ``type`` and, where an
option was renamed, its old names (``RENAMED_KEYS``), and checks its values in ``validate`` with
the helpers here. Every mistake is a ``ConfigError`` that names the option as ``model.NAME`` and
the value it got, whichever model it is.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from attnmt.attention.registry import canonical_name
from attnmt.errors import ConfigError
from attnmt.models.common import MAX_SIZE
from attnmt.runtime.renames import renamed_keys

__all__ = ["ModelConfig"]

ConfigT = TypeVar("ConfigT", bound="ModelConfig")


@dataclass
class ModelConfig:
    """A model's options. Subclasses are dataclasses with a ``type`` (the ``model.type`` that
    selects them) and a ``validate()`` that ``__post_init__`` calls."""

    type: ClassVar[str]
    #: options named otherwise in earlier versions: old name -> name now (read with a warning)
    RENAMED_KEYS: ClassVar[dict[str, str]] = {}
    if TYPE_CHECKING:  # every model names its mechanism; each subclass places these fields itself
        attention: str
        attention_options: dict[str, Any]

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid option; may normalise values."""

    # -- (de)serialisation ------------------------------------------------------------------------
    @classmethod
    def from_dict(cls: builtins.type[ConfigT], values: Mapping[str, Any]) -> ConfigT:
        """Build from a mapping (a YAML ``model:`` section). ``type``, if present, must be this
        config's; missing keys take the defaults. ConfigError names a key it does not know, or the
        first invalid value."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"the model config must be a mapping, got {builtins.type(values).__name__}")
        options = renamed_keys(dict(values), cls.RENAMED_KEYS, "model")
        model_type = options.pop("type", cls.type)
        if model_type != cls.type:
            raise ConfigError(f"model.type must be {cls.type!r} for {cls.__name__}, got {model_type!r}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(str(key) for key in options if key not in known)
        if unknown:
            raise ConfigError(f"unknown model option(s) {', '.join(map(repr, unknown))} for type {cls.type!r}; "
                              f"known: type, {', '.join(known)}")
        return cls(**options)

    def to_dict(self) -> dict[str, Any]:
        """A plain mapping with ``type`` first; ``from_dict(to_dict())`` gives back an equal config."""
        values: dict[str, Any] = {"type": self.type}
        for f in fields(self):
            value = getattr(self, f.name)
            values[f.name] = dict(value) if isinstance(value, dict) else value
        return values

    # -- the checks validate() uses -----------------------------------------------------------------
    def check_size(self, name: str) -> None:
        """``model.NAME`` is an integer from 1 to MAX_SIZE (bools are not integers here)."""
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise ConfigError(f"model.{name} must be an integer from 1 to {MAX_SIZE:,}, got {value!r}")

    def check_fraction(self, name: str) -> None:
        """``model.NAME`` is a number in [0, 1) (a dropout rate); stored as a float."""
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ConfigError(f"model.{name} must be a number in [0, 1), got {value!r}")
        setattr(self, name, float(value))

    def check_choice(self, name: str, choices: tuple[str, ...]) -> None:
        """``model.NAME`` is one of ``choices``, in any case and with spaces around; stored as the choice."""
        value = getattr(self, name)
        key = value.strip().lower() if isinstance(value, str) else value
        if key not in choices:
            raise ConfigError(f"model.{name} must be one of {', '.join(choices)}, got {value!r}")
        setattr(self, name, key)

    def check_flag(self, name: str) -> None:
        """``model.NAME`` is true or false."""
        if not isinstance(getattr(self, name), bool):
            raise ConfigError(f"model.{name} must be true or false, got {getattr(self, name)!r}")

    def check_attention_name(self) -> None:
        """``model.attention`` is a mechanism's name (stored as its canonical name) and
        ``model.attention_options`` a mapping of option names to values."""
        try:
            self.attention = canonical_name(self.attention)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"model.attention: {error}") from None
        options = self.attention_options
        if not isinstance(options, dict) or not all(isinstance(key, str) for key in options):
            raise ConfigError(f"model.attention_options must be a mapping of option names to values, got {options!r}")
