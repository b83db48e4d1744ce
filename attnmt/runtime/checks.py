"""Checks the config sections share: is a YAML value an integer, a finite number; rules a
section's values must keep, written as a table; and building a config dataclass from a mapping
with an error that names unknown keys.

A section's rules are a table of key -> ``Rule``; ``check_rules`` raises the ConfigError of the
first value that breaks its rule, e.g. ``training.lr: must be a number > 0, got -1``::

    RULES = {"lr": number(above=0), "max_steps": optional(integer(1)), "device": one_of(("cpu", "cuda"))}
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from attnmt.errors import ConfigError

__all__ = ["BOOLEAN", "Rule", "check_plain_name", "check_rules", "dataclass_from_dict", "integer", "is_int",
           "is_number", "number", "one_of", "optional"]


def is_int(value: Any) -> bool:
    """An integer that is not a bool (YAML's ``true`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: a name that becomes part of a file name (a split, a language, a mechanism's folder): no folder
#: separators, no "..", nothing a shell or a file system treats specially
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")


def check_plain_name(value: Any, what: str) -> str:
    """``value`` when it is a plain name (``PLAIN_NAME``, without ".."), else ConfigError naming
    ``what`` (where the value came from): a name read from a file or an option is a name, never a
    path, before it becomes part of one."""
    if not isinstance(value, str) or not PLAIN_NAME.fullmatch(value) or ".." in value:
        raise ConfigError(f"{what}: {value!r} is not a plain name (letters, digits, '_', '-', '+' and '.', "
                          "at most 100, from a letter or digit, no '..'); it becomes part of file names")
    return value


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


@dataclass(frozen=True)
class Rule:
    """What a value must be: ``check(value)`` is True, and ``wanted`` says it in words."""

    check: Callable[[Any], bool]
    wanted: str


#: the most torch threads attnmt asks for (a larger number is a typo; torch's own bound is 2**31 - 1,
#: and it starts every thread it is asked for)
MAX_THREADS = 1024


def integer(minimum: int, maximum: int | None = None) -> Rule:
    """An integer (not a bool) from ``minimum`` to ``maximum`` (None: no upper bound)."""
    if maximum is None:
        return Rule(lambda value: is_int(value) and value >= minimum, f"an integer >= {minimum}")
    return Rule(lambda value: is_int(value) and minimum <= value <= maximum,
                f"an integer from {minimum} to {maximum}")


def number(above: float | None = None, at_least: float | None = None, below: float | None = None,
           at_most: float | None = None) -> Rule:
    """A finite number (ints too, not bools) within the bounds given."""
    bounds = [(above, lambda v, b: v > b, "> {}"), (at_least, lambda v, b: v >= b, ">= {}"),
              (below, lambda v, b: v < b, "< {}"), (at_most, lambda v, b: v <= b, "<= {}")]
    given = [(bound, test, text) for bound, test, text in bounds if bound is not None]
    if len(given) == 2 and given[0][2][0] in "><" and given[1][2][0] in "<":
        low, high = given
        opening = "(" if low[2].startswith("> ") else "["
        closing = ")" if high[2].startswith("< ") else "]"
        wanted = f"a number in {opening}{low[0]:g}, {high[0]:g}{closing}"
    else:
        wanted = "a number" + "".join(f" {text.format(f'{bound:g}')}" for bound, _, text in given)
    return Rule(lambda value: is_number(value) and all(test(value, bound) for bound, test, _ in given), wanted)


def optional(rule: Rule) -> Rule:
    """``rule``, or null (None)."""
    return Rule(lambda value: value is None or rule.check(value), f"{rule.wanted} or null")


def one_of(choices: Iterable[Any]) -> Rule:
    """One of ``choices``."""
    choices = tuple(choices)
    return Rule(lambda value: value in choices, f"one of {', '.join(map(str, choices))}")


BOOLEAN = Rule(lambda value: isinstance(value, bool), "true or false")


def check_rules(values: Any, rules: Mapping[str, Rule], section: str) -> None:
    """ConfigError naming ``section.key``, the rule and the value, for the first attribute of
    ``values`` that breaks its rule (in the table's order)."""
    for key, rule in rules.items():
        value = getattr(values, key)
        if not rule.check(value):
            raise ConfigError(f"{section}.{key}: must be {rule.wanted}, got {value!r}")
