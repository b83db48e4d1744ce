"""Tables for the terminal and for Markdown files: the one formatter every command and report uses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["format_table"]


def _is_numeric(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    try:
        float(str(value).replace(",", ""))
    except ValueError:
        return False
    return True


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 2) -> str:
    """A Markdown table, readable as plain text too: numeric columns right-aligned, floats with
    ``digits`` decimals (NaN as "–"); cells already formatted as strings are kept as they are."""
    if any(len(row) != len(headers) for row in rows):
        raise ValueError(f"format_table: every row needs {len(headers)} cells")

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "–" if math.isnan(value) else f"{value:.{digits}f}"
        return str(value)

    cells = [[cell(value) for value in row] for row in rows]
    numeric = [bool(rows) and all(_is_numeric(row[column]) for row in rows) for column in range(len(headers))]
    widths = [max([len(str(h))] + [len(row[c]) for row in cells]) for c, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        padded = [v.rjust(w) if numeric[c] else v.ljust(w) for c, (v, w) in enumerate(zip(values, widths))]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if numeric[c] else ("-" * (w + 2)) for c, w in enumerate(widths)) + "|"
    return "\n".join([line([str(h) for h in headers]), rule] + [line(row) for row in cells])
