"""Every figure in a table of docs/results.md is in the result file the table names.

A table is preceded by ``<!-- figures from: benchmarks/results/A.json [B.json ...] -->``. Each
number in its cells (not the first column, which labels the row, nor a column of settings, nor a
target written in parentheses) must equal, at the decimals it is printed with, a number in one of
those files. Result files name no absolute path of the machine that wrote them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
RESULTS_DOC = PROJECT / "docs" / "results.md"
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


def _tables():
    lines = RESULTS_DOC.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        match = MARKER.search(line)
        if not match:
            continue
        table = []
        for row in lines[index + 1:]:
            if not row.startswith("|"):
                break
            table.append([cell.strip() for cell in row.strip("|").split("|")])
        yield match.group(1).split(), table


def test_every_result_table_names_its_files():
    tables = list(_tables())
    assert len(tables) == RESULTS_DOC.read_text(encoding="utf-8").count("\n|---") >= 6  # every table is marked
    assert all(len(table) > 2 for _, table in tables)


@pytest.mark.parametrize("files,table", list(_tables()), ids=[Path(files[0]).stem for files, _ in _tables()])
def test_every_figure_of_a_table_is_in_its_result_file(files, table):
    values = [n for name in files for n in _numbers_in(json.loads((PROJECT / name).read_text(encoding="utf-8")))]
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
                if not any(abs(round(value, decimals) - figure) < 1e-9 for value in values):
                    missing.append(f"{row[0]} / {header[column]}: {text}")
    assert not missing, f"not in {', '.join(files)}: {missing}"


def test_result_files_hold_no_absolute_paths_of_this_machine():
    for path in sorted((PROJECT / "benchmarks" / "results").glob("*.json")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r'"/(work|root|home|tmp)/', text) and "/work/" not in text, path.name
