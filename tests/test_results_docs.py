"""Every figure in docs/results.md and README.md is in the result file its table or paragraph names.

A table or a paragraph is preceded by ``<!-- figures from: benchmarks/results/A.json [B.json ...] -->``.
In a table, each number in its cells (not the first column, which labels the row, nor a column of
settings, nor a target written in parentheses) must equal, at the decimals it is printed with, a
number in one of those files. In a paragraph, every number must too (as a percentage, in
microseconds or in millions when it says so), but for counts below 10 ("2 cores", "beam 5"); code
spans (commands, settings, signatures) are not figures. Result files name no absolute path of the
machine that wrote them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
RESULTS_DOC = PROJECT / "docs" / "results.md"
DOCS = (RESULTS_DOC, PROJECT / "README.md")
MARKER = re.compile(r"<!-- figures from: ([^>]+?) -->")
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
SETTING_COLUMNS = ("shapes", "method")


def _numbers_in(value) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers_in(item)]
    if isinstance(value, list):
        return [n for item in value for n in _numbers_in(item)]
    return []


def _blocks():
    """(files, lines) of every marked block of the docs: the lines after a marker, up to a blank line."""
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            match = MARKER.search(line)
            if match:
                block = []
                for following in lines[index + 1:]:
                    if not following.strip():
                        break
                    block.append(following)
                yield match.group(1).split(), block


def _tables():
    for files, block in _blocks():
        if block[0].startswith("|"):
            yield files, [[cell.strip() for cell in row.strip("|").split("|")] for row in block if row.startswith("|")]


def _paragraphs():
    for files, block in _blocks():
        if not block[0].startswith("|"):
            yield files, " ".join(block)


def _found(figure: float, decimals: int, values: list[float]) -> bool:
    """A value that prints as ``figure`` with ``decimals`` decimals (a tie may round either way)."""
    return any(abs(value - figure) <= 0.5 * 10 ** -decimals + 1e-9 for value in values)


def _values(files: list[str]) -> list[float]:
    return [n for name in files for n in _numbers_in(json.loads((PROJECT / name).read_text(encoding="utf-8")))]


def test_every_result_table_names_its_files():
    tables = list(_tables())
    assert len(tables) == RESULTS_DOC.read_text(encoding="utf-8").count("\n|---") >= 6  # every table is marked
    assert all(len(table) > 2 for _, table in tables)
    assert len(list(_paragraphs())) >= 1


@pytest.mark.parametrize("files,table", list(_tables()), ids=[Path(files[0]).stem for files, _ in _tables()])
def test_every_figure_of_a_table_is_in_its_result_file(files, table):
    values = _values(files)
    header, rows = table[0], table[2:]
    missing = []
    for row in rows:
        for column, cell in enumerate(row[1:], start=1):
            if any(word in header[column].lower() for word in SETTING_COLUMNS):
                continue
            cell = re.sub(r"\([^)]*\)", "", cell)  # "(≤ 1.10)": a target, not a measurement
            for text in NUMBER.findall(cell):
                decimals = len(text.split(".")[1]) if "." in text else 0
                figure = float(text.replace(",", ""))
                if not _found(figure, decimals, values):
                    missing.append(f"{row[0]} / {header[column]}: {text}")
    assert not missing, f"not in {', '.join(files)}: {missing}"


PROSE_FIGURE = re.compile(r"(?<![\w.,-])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(M|%| µs)?(?![\w.,])")
UNITS = {"": 1.0, "M": 1e-6, "%": 100.0, " µs": 1e6}  # how a stored value is scaled to print with the unit


@pytest.mark.parametrize("files,text", list(_paragraphs()), ids=[Path(files[0]).stem for files, _ in _paragraphs()])
def test_every_figure_of_a_paragraph_is_in_its_result_file(files, text):
    values = _values(files)
    text = re.sub(r"`[^`]*`", "", text)  # commands, config names and signatures are not figures
    missing = []
    for number, unit in PROSE_FIGURE.findall(text):
        decimals = len(number.split(".")[1]) if "." in number else 0
        figure = float(number.replace(",", ""))
        if decimals == 0 and figure < 10 and not unit:
            continue  # small counts ("2 cores", "beam 5") are settings, not measurements
        if not _found(figure, decimals, [value * UNITS[unit or ""] for value in values]):
            missing.append(number + (unit or ""))
    assert not missing, f"not in {', '.join(files)}: {missing}"


def test_result_files_hold_no_absolute_paths_of_this_machine():
    for path in sorted((PROJECT / "benchmarks" / "results").glob("*.json")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w.])/(work|root|home|tmp)/", text), path.name
