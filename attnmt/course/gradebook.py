"""A course's gradebook: one row per submission, written as CSV, markdown and one HTML page.

    out/grades.json      every row, as the grader keeps it between runs (JSON, no code)
    out/gradebook.csv    submission, points, max_points, result, reason, one column per check, with a
                         training its validation BLEU, perplexity and steps, seconds, sha256
    out/gradebook.md     the table of points and reasons, and how many passed each check
    out/gradebook.html   the same, with each submission's checks and one attention diagram

Every file is written atomically. A cell of the CSV that a spreadsheet would read as a formula
(starting with =, +, - or @, other than a lone -) gets a leading apostrophe: the reasons quote the students' code.
"""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnmt.course.rubric import points as earned_points
from attnmt.errors import ConfigError
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.reading import DataTooLarge, check_plain_data, read_text_bounded

__all__ = ["STATE_FILE", "Gradebook", "Row", "load_state", "save_state", "write_gradebook"]

STATE_FILE = "grades.json"
STATE_FORMAT = "attnmt grade"
MAX_STATE_BYTES = 256 * 2**20


@dataclass
class Row:
    """One submission as graded: its files' digest and the settings it was graded under (it is
    graded again when either changes), whether it loaded, each check's result, its diagram."""

    name: str
    file: str
    digest: str
    settings: str  # the grading settings, as JSON: a row is reused only under the same
    loaded: bool
    reason: str
    checks: dict[str, dict[str, str]]  # check -> {"status", "detail", "equation"}
    diagram: dict[str, Any] | None = None  # {"weights": [[...]], "source": [...], "steps": [...]}
    containment: str = ""
    seconds: float = 0.0
    training: dict[str, Any] | None = None  # {"bleu", "perplexity", "steps", "seconds", "stop_reason"}

    def statuses(self) -> dict[str, str]:
        return {name: check.get("status", "") for name, check in self.checks.items()}


@dataclass
class Gradebook:
    """The rows of a course under one rubric; ``points`` and ``result`` of a row follow from both."""

    class_name: str
    rubric: dict[str, float]
    checks: list[str]
    rows: list[Row]
    paths: dict[str, Path] = field(default_factory=dict)

    @property
    def trained(self) -> bool:
        """Whether the submissions were trained (the check ``trains``), so the BLEU has columns."""
        return "trains" in self.checks

    @property
    def max_points(self) -> float:
        return sum(self.rubric.values())

    def points(self, row: Row) -> float:
        return earned_points(row.statuses(), self.rubric) if row.loaded else 0.0

    def result(self, row: Row) -> str:
        if not row.loaded:
            return "does not load"
        return "passes" if all(s != "fail" for s in row.statuses().values()) else "fails"


def load_state(out: Path) -> dict[str, Row]:
    """The rows an earlier grading kept in ``out/grades.json`` ({} when there is none); ConfigError
    naming the file when it is not one attnmt grade wrote."""
    path = out / STATE_FILE
    if not path.exists():
        return {}
    try:
        state = json.loads(read_text_bounded(path, MAX_STATE_BYTES))
        check_plain_data(state, str(path))
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError("not a gradebook")
        return {name: Row(**row) for name, row in state["rows"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError, DataTooLarge) as error:
        raise ConfigError(f"{path} is not a gradebook attnmt grade wrote ({error}); move it away, or give "
                          "another --out") from None


def save_state(out: Path, state: dict[str, Row], names: list[str]) -> None:
    """Keep the rows of the submissions ``names`` (those still in the folder) in ``out/grades.json``."""
    rows = {name: asdict(state[name]) for name in names if name in state}
    write_text_atomic(out / STATE_FILE, json.dumps({"format": STATE_FORMAT, "rows": rows}, indent=1) + "\n")


def _cell(value: Any) -> str:
    text = str(value)
    return f"'{text}" if text[:1] in ("=", "+", "-", "@") and text != "-" else text


def _csv(gradebook: Gradebook) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    figures = ["val_bleu", "val_perplexity", "train_steps"] if gradebook.trained else []
    writer.writerow(["submission", "points", "max_points", "result", "reason", *gradebook.checks, *figures,
                     "seconds", "sha256"])
    for row in gradebook.rows:
        statuses = row.statuses()
        trained = [row.training.get(key, "") for key in ("bleu", "perplexity", "steps")] if row.training else \
            [""] * len(figures)
        writer.writerow([_cell(v) for v in (row.name, f"{gradebook.points(row):g}", f"{gradebook.max_points:g}",
                                            gradebook.result(row), row.reason,
                                            *(statuses.get(name, "-") for name in gradebook.checks),
                                            *trained[:len(figures)], f"{row.seconds:.1f}", row.digest)])
    return buffer.getvalue()


def _markdown_cell(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return text.replace("|", "\\|")


def _markdown(gradebook: Gradebook) -> str:
    lines = [f"# Gradebook: {gradebook.class_name}", "",
             f"{len(gradebook.rows)} submissions, {gradebook.max_points:g} points at most "
             f"(`gradebook.csv` has every check; `gradebook.html` the counterexamples and diagrams).", "",
             "| submission | points | result |" + (" validation BLEU |" if gradebook.trained else "") + " reason |",
             "|---|---|---|" + ("---|" if gradebook.trained else "") + "---|"]
    for row in gradebook.rows:
        bleu = (f" {row.training['bleu']:.2f} |" if row.training else " - |") if gradebook.trained else ""
        lines.append(f"| {_markdown_cell(row.name)} | {gradebook.points(row):g} / {gradebook.max_points:g} | "
                     f"{gradebook.result(row)} |{bleu} {_markdown_cell(row.reason)} |")
    lines += ["", "| check | points | passed | failed | n/a | not run |", "|---|---|---|---|---|---|"]
    for name in gradebook.checks:
        counts = [sum(row.statuses().get(name) == status for row in gradebook.rows)
                  for status in ("pass", "fail", "n/a")]
        missing = len(gradebook.rows) - sum(counts)
        lines.append(f"| {name} | {gradebook.rubric.get(name, 0):g} | {' | '.join(map(str, counts))} | {missing} |")
    return "\n".join(lines) + "\n"


def _svg_heatmap(diagram: dict[str, Any]) -> str:
    """The weights [steps, source] as an SVG grid, darker for more weight (0 to 1)."""
    weights, source, steps = diagram.get("weights", []), diagram.get("source", []), diagram.get("steps", [])
    cell, left, top = 34, 40, 24
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + cell * len(source) + 4}" '
             f'height="{top + cell * len(weights) + 4}" role="img">']
    for j, label in enumerate(source):
        parts.append(f'<text x="{left + j * cell + cell / 2}" y="16" text-anchor="middle">'
                     f'{html.escape(str(label))}</text>')
    for i, row in enumerate(weights):
        label = steps[i] if i < len(steps) else ""
        parts.append(f'<text x="{left - 6}" y="{top + i * cell + cell / 2 + 4}" text-anchor="end">'
                     f'{html.escape(str(label))}</text>')
        for j, value in enumerate(row):
            shade = min(max(float(value), 0.0), 1.0) if isinstance(value, (int, float)) else 0.0
            parts.append(f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell - 2}" height="{cell - 2}" '
                         f'fill="rgb(8,48,107)" fill-opacity="{shade:.3f}" stroke="#ccc">'
                         f'<title>{float(value):.3f}</title></rect>' if isinstance(value, (int, float)) else "")
    parts.append("</svg>")
    return "".join(parts)


def _html(gradebook: Gradebook) -> str:
    e = html.escape
    body = [f"<h1>Gradebook: {e(gradebook.class_name)}</h1>",
            f"<p>{len(gradebook.rows)} submissions, {gradebook.max_points:g} points at most.</p>",
            "<table><tr><th>submission</th><th>points</th><th>result</th>"
            + ("<th>validation BLEU</th>" if gradebook.trained else "") + "<th>reason</th></tr>"]
    for row in gradebook.rows:
        bleu = (f"<td>{row.training['bleu']:.2f}</td>" if row.training else "<td>-</td>") if gradebook.trained else ""
        body.append(f'<tr><td><a href="#{e(row.digest[:12])}">{e(row.name)}</a></td>'
                    f"<td>{gradebook.points(row):g} / {gradebook.max_points:g}</td><td>{e(gradebook.result(row))}</td>"
                    f"{bleu}<td>{e(row.reason)}</td></tr>")
    body.append("</table>")
    for row in gradebook.rows:
        body.append(f'<h2 id="{e(row.digest[:12])}">{e(row.name)} ({e(row.file)}): {gradebook.points(row):g} / '
                    f"{gradebook.max_points:g}</h2>")
        if row.containment:
            body.append(f"<p class=note>contained by {e(row.containment)}; {row.seconds:.1f} s</p>")
        body.append("<table><tr><th>check</th><th>points</th><th>result</th><th>counterexample / measured</th>"
                    "<th>the handout's rule</th></tr>")
        for name in gradebook.checks:
            check = row.checks.get(name, {"status": "-", "detail": "not run: it did not load"})
            body.append(f"<tr class={e(check.get('status', '-').replace('/', ''))}><td>{e(name)}</td>"
                        f"<td>{gradebook.rubric.get(name, 0):g}</td><td>{e(check.get('status', ''))}</td>"
                        f"<td>{e(check.get('detail', ''))}</td><td>{e(check.get('equation', ''))}</td></tr>")
        body.append("</table>")
        if row.diagram:
            body.append("<p>Its weights α at initialisation (seed 0) on one fixed input: 5 decoding steps over 5 "
                        "source positions and 2 of padding. Each row must sum to 1, and padding get none.</p>")
            body.append(_svg_heatmap(row.diagram))
    style = ("body{font-family:sans-serif;margin:2em;max-width:75em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}"
             "tr.fail td{background:#fde8e8}.note{color:#555}svg text{font-size:12px}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Gradebook: '
            f"{e(gradebook.class_name)}</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def write_gradebook(out: Path, gradebook: Gradebook) -> dict[str, Path]:
    """Write the CSV, markdown and HTML gradebook into ``out`` (atomically) and return their paths."""
    files = {"csv": ("gradebook.csv", _csv), "markdown": ("gradebook.md", _markdown),
             "html": ("gradebook.html", _html)}
    return {kind: write_text_atomic(out / name, render(gradebook)) for kind, (name, render) in files.items()}
