"""Result files name paths the way any machine can read them: relative to the project, or to the
data folder as ``$ATTNMT_DATA/...``; never the absolute path of the machine that wrote them."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ATTNMT_SHARED_DATA", PROJECT.parent / "shared" / "data")).resolve()
_ABSOLUTE = re.compile(r"(?<![\w.])(/[^\s,;:'\"()]+)")


def _relative(match: re.Match) -> str:
    path = Path(os.path.normpath(match.group(1)))
    for root, name in ((DATA, "$ATTNMT_DATA"), (PROJECT, None)):
        try:
            inside = path.relative_to(root)
        except ValueError:
            continue
        return f"{name}/{inside}" if name else str(inside)
    return match.group(1)


def portable(value: Any) -> Any:
    """``value`` (JSON-ready data) with every absolute path inside its strings made relative."""
    if isinstance(value, str):
        return _ABSOLUTE.sub(_relative, value)
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item) for item in value]
    return value
