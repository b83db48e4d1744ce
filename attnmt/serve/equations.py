"""A built-in mechanism's equations as MathML, for the step-through of ``attnmt serve``: the rows of
``attnmt.attention.mechanisms.EQUATIONS`` (the one source its docstring and docs/mechanisms.md
show too), drawn by the browser itself (Chromium, Firefox and Safari render MathML), so the page
needs no script or font from a CDN. A user's mechanism has none: the page shows its docstring.

The rows are plain text with a few marks: ``x_s`` and ``x_{i,s}`` subscripts, ``x^Q`` and ``ᵀ``,
``²``, ``′`` superscripts, ``√d`` a root; ``for`` and ``else`` are words; anything else is a name,
a number or an operator.
"""

from __future__ import annotations

import html
import re
from typing import Any

from attnmt.attention.mechanisms import mechanism_equations

__all__ = ["equation_mathml", "row_mathml"]

_WORDS = ("for", "else")
_MARKS = {"ᵀ": "<mo>&#x22A4;</mo>", "²": "<mn>2</mn>", "′": "<mo>&#x2032;</mo>"}
_NAME = r"[A-Za-z]{2,}|[A-Za-zα-ω]\u0304?"  # a word (exp, tanh, head, for), or a letter (h̄ with its bar)
_TOKEN = re.compile(
    rf"(?P<root>√)?(?P<base>{_NAME}|\d+|\S)"
    r"(?:_(?:\{(?P<sub_group>[^}]*)\}|(?P<sub>[A-Za-z0-9α-ω]+′?)))?"
    r"(?:\^(?:\{(?P<sup_group>[^}]*)\}|(?P<sup>[A-Za-z0-9]))|(?P<mark>[ᵀ²′]))?"
)


def _atom(text: str) -> str:
    """One name, number or operator."""
    escaped = html.escape(text)
    if text.isdigit():
        return f"<mn>{escaped}</mn>"
    if text in _WORDS:
        return f"<mspace width='0.4em'/><mtext>{escaped}</mtext><mspace width='0.4em'/>"
    if re.fullmatch(_NAME, text):
        return f"<mi>{escaped}</mi>"
    return f"<mo>{escaped}</mo>"


def _script(text: str) -> str:
    """A subscript or superscript: names, numbers and operators in a row."""
    return "<mrow>" + "".join(_atom(part) for part in re.findall(rf"{_NAME}|\d+|\S", text)) + "</mrow>"


def row_mathml(row: str) -> str:
    """One equation row (as ``EQUATIONS`` writes it) as a MathML ``<mrow>``."""
    out = []
    for match in _TOKEN.finditer(row):
        parts: dict[str, Any] = match.groupdict()
        base = _atom(parts["base"])
        sub = parts["sub_group"] if parts["sub_group"] is not None else parts["sub"]
        sup = parts["sup_group"] if parts["sup_group"] is not None else parts["sup"]
        if parts["mark"]:
            sup = parts["mark"]
        sup_ml = None if sup is None else _MARKS.get(sup) or _script(sup)
        element = "munder" if parts["base"] == "Σ" else "msub"
        if sub is not None and sup_ml is not None:
            base = f"<msubsup>{base}{_script(sub)}{sup_ml}</msubsup>"
        elif sub is not None:
            base = f"<{element}>{base}{_script(sub)}</{element}>"
        elif sup_ml is not None:
            base = f"<msup>{base}{sup_ml}</msup>"
        out.append(f"<msqrt>{base}</msqrt>" if parts["root"] else base)
    return "<mrow>" + "".join(out) + "</mrow>"


def equation_mathml(mechanism: str, options: dict[str, Any] | None = None) -> str | None:
    """The MathML of a built-in mechanism (its canonical name, built with ``options``), one table
    row per equation; None for any other name."""
    rows = mechanism_equations(mechanism, options)
    if rows is None:
        return None
    lines = "".join(f"<mtr><mtd columnalign='left'>{row_mathml(row)}</mtd></mtr>" for row in rows)
    return f'<math xmlns="http://www.w3.org/1998/Math/MathML" display="block"><mtable>{lines}</mtable></math>'
