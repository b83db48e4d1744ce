"""Propose the keys of the figures of a docs block, for its ``<!-- figures from ... -->`` marker.

    python scripts/figure_keys.py docs/results.md 40          # the block starting at (or after) line 40
    python scripts/figure_keys.py docs/results.md 40 --from alignment.json:students_plustest_120

For every figure of the block (in the order ``tests/test_results_docs.py`` reads them) it lists
the keys of the results file (below the base, when one is given) whose value prints as the figure,
and proposes the one whose path shares the most with the key chosen before it. A figure with no
candidate is shown with ``?``: a setting to mark ``=``, or a figure that is not in the file. Read
the proposal before pasting it: a figure can print like the value of an unrelated key.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def _docs_test():
    spec = importlib.util.spec_from_file_location("docs_test", PROJECT / "tests" / "test_results_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def leaves(value, path=""):
    """(path, number) of every number in a JSON value."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}/{escape(key)}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}/{index}")


def escape(key: str) -> str:
    """A JSON key as one step of a path: ``/`` as ``~1``, ``~`` as ``~0`` (a JSON pointer's escapes)."""
    return key.replace("~", "~0").replace("/", "~1")


def shared(a: str, b: str) -> int:
    return len(os.path.commonprefix([a.split("/"), b.split("/")]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("doc", type=Path)
    parser.add_argument("line", type=int, help="the block's first line (a marker, or its first text line)")
    parser.add_argument("--from", dest="source", default=None, metavar="FILE[:BASE]",
                        help="the results file (and base) to search; default: the block's marker")
    parser.add_argument("--also", nargs="+", default=[], metavar="FILE",
                        help="other results files to search; their keys are written FILE:/path")
    args = parser.parse_args()
    docs = _docs_test()
    lines = args.doc.read_text(encoding="utf-8").split("\n")[args.line - 1:]
    while lines and not lines[0].strip():
        lines = lines[1:]
    marker = ""
    if lines[0].startswith("<!--"):
        end = next(index for index, line in enumerate(lines) if line.rstrip().endswith("-->"))
        marker, lines = " ".join(lines[: end + 1]), lines[end + 1:]
    block = [line for line in lines[: next((k for k, line in enumerate(lines) if not line.strip()), len(lines))]]
    source = args.source or (marker.split("figures from", 1)[1].split()[0].strip(":") if "figures from" in marker
                             else None)
    if source is None:
        parser.error("give --from FILE[:BASE]: the block has no marker")
    file, _, base = source.partition(":")
    data = json.loads((docs.RESULTS / file).read_text(encoding="utf-8"))
    root = docs._lookup(file, base) if base else data
    numbers = [path.lstrip("/") for path, _ in leaves(root)]
    for other in args.also:
        numbers += [f"{other}:{path}" for path, _ in leaves(json.loads((docs.RESULTS / other).read_text("utf-8")))]
    chosen, previous = [], ""
    for sign, number, unit in docs._figures(block):
        candidates = [path for path in numbers if docs._check((sign, number, unit), path, file, base) is None]
        best = max(candidates, key=lambda path: shared(path, previous), default=None)
        others = [path for path in candidates if path != best][:4]
        print(f"{sign}{number}{unit:<4} {best or '?'}" + (f"   (also: {', '.join(others)})" if others else ""))
        chosen.append(best or "=")
        previous = best or previous
    print()
    print(f"<!-- figures from {source}")
    print(" ".join(shlex.quote(key) for key in chosen))
    print("-->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
