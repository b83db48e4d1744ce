"""Write the results pages from their templates and the result files: every measured figure of
docs/results.md and docs/experiments.md is read from a JSON file of benchmarks/results/ when the
page is written, never typed.

    python scripts/render_docs.py            # write docs/<page>.md from docs/templates/<page>.md
    python scripts/render_docs.py --check    # exit 1 when a committed page is not what it writes

A template is Markdown with two kinds of placeholder:

- ``{{FILE#/json/pointer|SPEC}}``: the number at that JSON pointer of ``benchmarks/results/FILE``
  (``~1`` stands for ``/`` and ``~0`` for ``~`` inside a key, as in a JSON pointer; list indices
  are numbers), formatted with the Python format ``SPEC`` (``.2f``, ``,.0f``, ...). ``SPEC`` may
  start with a unit, which scales the value and follows it: ``%`` (× 100), ``M`` (millions),
  ``µs`` (× 10⁶). A negative number is printed with a minus sign (−).
- ``{=TEXT}``: TEXT as it is: a setting, a target or a published figure, not measured here.

Outside code spans and placeholders a template holds no decimal number and no percentage
(``check_template``), so that every such figure on the page comes from a result file;
``tests/test_results_docs.py`` runs both checks.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import cache
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
TEMPLATES = PROJECT / "docs" / "templates"
DOCS = PROJECT / "docs"

PLACEHOLDER = re.compile(r"\{\{([^#{}]+)#([^|{}]*)\|([^{}]*)\}\}")
LITERAL = re.compile(r"\{=([^{}]*)\}")
UNITS = {"%": (100.0, "%"), "M": (1e-6, "M"), "µs": (1e6, " µs")}
BARE_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?!\w)|\d%")


class TemplateError(ValueError):
    """A placeholder that names no number, or a figure typed into a template."""


@cache
def _results(name: str):
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def lookup(name: str, pointer: str):
    """The value at a JSON pointer of a result file."""
    value = _results(name)
    for escaped in filter(None, pointer.split("/")):
        key = escaped.replace("~1", "/").replace("~0", "~")
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def format_figure(value: float, spec: str) -> str:
    """``value`` printed by ``spec`` (``[unit]format``), negatives with a minus sign."""
    for unit, (scale, suffix) in UNITS.items():
        if spec.startswith(unit):
            return format_figure(value * scale, spec[len(unit):]) + suffix
    text = format(value, spec)
    return "−" + text[1:] if text.startswith("-") else text


def _figure(match: re.Match, template: Path) -> str:
    name, pointer, spec = match.group(1).strip(), match.group(2).strip(), match.group(3).strip()
    try:
        value = lookup(name, pointer)
    except (OSError, KeyError, IndexError, ValueError, TypeError):
        raise TemplateError(f"{template.name}: {name}#{pointer} is not in benchmarks/results/") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TemplateError(f"{template.name}: {name}#{pointer} is {value!r}, not a number")
    return format_figure(value, spec)


def render(template: Path) -> str:
    """The page ``template`` writes, with a first line saying where it comes from."""
    text = template.read_text(encoding="utf-8")
    check_template(template, text)
    body = PLACEHOLDER.sub(lambda match: _figure(match, template), text)
    body = LITERAL.sub(lambda match: match.group(1), body)
    header = (f"<!-- written by scripts/render_docs.py from docs/templates/{template.name} and "
              f"benchmarks/results/: edit those, not this page -->\n")
    return header + body


def check_template(template: Path, text: str) -> None:
    """TemplateError for a decimal figure or a percentage typed outside placeholders and code."""
    bare = LITERAL.sub("", PLACEHOLDER.sub("", text))
    bare = re.sub(r"```.*?```", "", bare, flags=re.DOTALL)
    bare = re.sub(r"`[^`\n]*`", "", bare)
    typed = BARE_FIGURE.search(bare)
    if typed is not None:
        number = typed.group(0)
        raise TemplateError(f"{template.name}: {number!r} is typed, not read from a result file "
                            f"(write {{{{FILE#/pointer|SPEC}}}}, or {{={number}}} for a setting)")


def pages() -> list[tuple[Path, Path]]:
    """(template, page) of every template."""
    return [(template, DOCS / template.name) for template in sorted(TEMPLATES.glob("*.md"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which pages differ from what they would be")
    args = parser.parse_args()
    stale = []
    for template, page in pages():
        try:
            text = render(template)
        except TemplateError as error:
            print(f"render_docs: {error}", file=sys.stderr)
            return 2
        if args.check:
            if not page.is_file() or page.read_text(encoding="utf-8") != text:
                stale.append(page)
        else:
            page.write_text(text, encoding="utf-8")
            print(f"wrote {page.relative_to(PROJECT)} ({text.count(chr(10))} lines)")
    for page in stale:
        print(f"render_docs: {page.relative_to(PROJECT)} is not what its template writes; "
              "run python scripts/render_docs.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
