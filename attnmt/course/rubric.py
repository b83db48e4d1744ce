"""How many points each check of a submission is worth: a YAML mapping, check name -> points.

    loads: 1       # the file imports and the class builds
    shapes: 2      # the handout's shapes
    weights: 2     # Eq. 1: a distribution over the source
    scale: 2       # Eq. 1: the 1/√d
    output: 2      # Eq. 2
    values: 2      # Eq. 15

A check the rubric does not name is shown in the gradebook and worth 0 points. Without a rubric
every check is worth 1 point. A check earns its points when it passes, or when it does not apply
to the submission (its row says why); a failure, or a submission that does not load, earns 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from attnmt.errors import ConfigError
from attnmt.runtime.reading import DataTooLarge, read_text_bounded

__all__ = ["EARNING", "default_rubric", "points", "read_rubric"]

#: the results of a check that earn its points
EARNING = ("pass", "n/a")


def default_rubric(checks: list[str]) -> dict[str, float]:
    """One point per check."""
    return dict.fromkeys(checks, 1.0)


def _lines(text: str) -> dict[str, int]:
    """The line of each top-level key of the YAML ``text`` (1-based), where it can be told."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(key.value): key.start_mark.line + 1 for key, _ in node.value}


def read_rubric(path: str | Path, checks: list[str]) -> dict[str, float]:
    """The points of each check ``path`` names; ConfigError naming the file and line for anything
    else: a file that cannot be read, not a mapping, an unknown check, points that are not a
    number from 0 to 1000."""
    where = f"--rubric {path}"
    try:
        text = read_text_bounded(path)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except (OSError, DataTooLarge, UnicodeDecodeError) as error:
        raise ConfigError(f"{where}: cannot be read ({getattr(error, 'strerror', None) or error})") from None
    try:
        rubric = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}{line}: not YAML ({getattr(error, 'problem', None) or error})") from None
    if not isinstance(rubric, dict) or not rubric:
        raise ConfigError(f"{where}: write one 'check: points' per line, e.g. 'scale: 2'; the checks are "
                          f"{', '.join(checks)}")
    lines = _lines(text)
    result = {}
    for name, value in rubric.items():
        at = f"{where}, line {lines[str(name)]}" if str(name) in lines else where
        if str(name) not in checks:
            raise ConfigError(f"{at}: {name!r} is not a check; the checks are {', '.join(checks)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 <= value <= 1000:
            raise ConfigError(f"{at}: the points of {name!r} must be a number from 0 to 1000, got {value!r}")
        result[str(name)] = float(value)
    return result


def points(statuses: dict[str, str], rubric: dict[str, float]) -> float:
    """The points a submission earns: the sum of the rubric's points of its checks in ``EARNING``."""
    return sum(value for name, value in rubric.items() if statuses.get(name) in EARNING)
