"""``attnmt homework CLASS --out DIR``: Part 2 of the course handout, end to end, into a report a
student can hand in.

    check      the class by the handout's equations (attnmt check), before anything trains
    Part 1     the numeric demonstrations of attnmt explore, in DIR/part1.md and DIR/part1/*.png
    Task 2.3   none, mean and the class, trained ``runs`` times each (seeds 1..N, ``minutes`` each,
               recipe ``homework``), with the mean and variance of test perplexity, BLEU and chrF:
               attnmt compare, in DIR/compare/
    Task 2.1   the class's seed-1 run of that comparison: its test perplexity and BLEU
    Task 2.2   attention diagrams of the first ``examples`` test sentences, from that run
    Task 2.EC  that run's BLEU at beam sizes 5, 10, 20 and 50 (attnmt evaluate --beam)

It writes DIR/report.md and DIR/report.html (the figures inside it), each table with the command
that made it. Stopped and run again, it continues: the comparison resumes its runs, and a beam
table already made for the same checkpoint is reused.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnmt.attention.conformance import check_mechanism
from attnmt.attention.registry import canonical_name
from attnmt.data import load_split
from attnmt.decoding.translator import Translator
from attnmt.errors import ConfigError
from attnmt.evaluation.evaluate import evaluate_beam_sizes
from attnmt.evaluation.summary import Comparison
from attnmt.runs.folder import beam_table_path, data_of_run
from attnmt.runs.recipes import config_path
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.reading import read_text_bounded
from attnmt.training.comparison import run_folder
from attnmt.visual.heatmap import plot_attention
from attnmt.workflows import compare_mechanisms

__all__ = ["BEAMS", "HomeworkReport", "run_homework"]

#: the beam sizes of Task 2.EC
BEAMS = (5, 10, 20, 50)
BASELINES = ("none", "mean")
#: what marks a folder as a homework's (so that a second run continues it)
MARKER = "homework.json"


@dataclass
class HomeworkReport:
    """What ``run_homework`` made: the report's files, and the figures in them."""

    out: Path
    verdict: str
    comparison: Comparison
    mine: Path  # the class's seed-1 run
    beam_table: str
    diagrams: list[Path] = field(default_factory=list)
    paths: dict[str, Path] = field(default_factory=dict)


def _check_out(out: Path, spec: str) -> None:
    """A new or empty folder, or one an earlier ``attnmt homework`` of the same class wrote."""
    marker = out / MARKER
    if marker.exists():
        try:
            before = json.loads(read_text_bounded(marker)).get("class")
        except (OSError, ValueError, AttributeError):
            before = None
        if before != spec:
            raise ConfigError(f"--out {out} holds the homework of {before!r}; give another --out for {spec!r}")
    elif out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"--out {out} holds files that are not a homework attnmt wrote; choose a new or empty folder")


def _part1(out: Path) -> Path:
    """Part 1: attnmt explore's four demonstrations (copy, average, noisy keys, two heads)."""
    from attnmt import explore

    figures = out / "part1"
    figures.mkdir(parents=True, exist_ok=True)
    runs: list[tuple[Any, Callable[[Any, Path], Any], str]] = [
        (explore.copy_demo(), explore.plot_copy, "copy"), (explore.average_demo(), explore.plot_average, "average"),
        (explore.noisy_demo(), explore.plot_noisy, "noisy"), (explore.multihead_demo(), explore.plot_multihead,
                                                               "multihead")]
    parts = ["# Part 1: what one head of scaled dot-product attention computes", "",
             "Made by `attnmt explore all --plot part1` (seed 0, d = 64, 8 keys, 1000 noise samples).", ""]
    for result, plot, name in runs:
        plot(result, figures / f"{name}.png")
        parts += ["```", result.report(), "```", "", f"![{name}](part1/{name}.png)", ""]
    return write_text_atomic(out / "part1.md", "\n".join(parts))


def _beam_table(run: Path, beams: Sequence[int], log: Callable[[str], None], progress: bool) -> str:
    """The markdown beam table of ``run`` on the test split: made by evaluate_beam_sizes (with a
    progress bar per beam size when ``progress``), or reused when one exists for the same beams and
    checkpoint step."""
    translator = Translator.load(run, "best")
    assert translator.run_config is not None
    split = data_of_run(run, translator.run_config.data).canonical_split("test")
    json_path = beam_table_path(run, split, translator.precision, ".json")
    markdown_path = beam_table_path(run, split, translator.precision, ".md")
    try:
        kept = json.loads(read_text_bounded(json_path))
        if [r["beam"] for r in kept["results"]] == list(beams) and kept["step"] == translator.step \
                and markdown_path.exists():
            log(f"beam sizes {' '.join(map(str, beams))}: reused {markdown_path}")
            return read_text_bounded(markdown_path)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    log(f"beam sizes {' '.join(map(str, beams))}: decoding the test split ...")
    return evaluate_beam_sizes(run, beams, split="test", progress=progress).markdown_path.read_text(encoding="utf-8")


def _diagrams(run: Path, folder: Path, examples: int) -> list[Path]:
    """Heatmaps of the run's attention over its first ``examples`` test sentences."""
    translator = Translator.load(run, "best")
    assert translator.run_config is not None
    corpus = load_split(data_of_run(run, translator.run_config.data), "test")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, translation in enumerate(translator.translate(corpus.src[:examples], return_attention=True), 1):
        paths.append(plot_attention(translation.attention, translation.src_pieces, translation.out_pieces,
                                    folder / f"test-{number}.png", title=f"test sentence {number}",
                                    merge_pieces=True))
    return paths


def _task_21(comparison: Comparison, name: str) -> str:
    mine = next((o for o in comparison.outcomes if o.mechanism == name and o.seed == 1), None)
    if mine is None:
        return "(its run did not finish)"
    return (f"| test perplexity | test BLEU | test chrF | steps | run |\n|---|---|---|---|---|\n"
            f"| {mine.perplexity:.2f} | {mine.bleu:.2f} | {mine.chrf:.2f} | {mine.step} | `{mine.run_dir}` |")


def _markdown(report: HomeworkReport, spec: str, command: str, minutes: float | None, runs: int,
              config: str) -> str:
    comparison = report.comparison
    name = canonical_name(spec)
    beams = report.beam_table.split("\n", 2)[-1].strip() if report.beam_table.startswith("# ") else report.beam_table
    lines = [f"# Homework: {spec}", "", f"Made by `{command}`.", "",
             "## The class, checked by the handout's equations", "", "```", report.verdict, "```", "",
             "Part 1 (what one head computes, and what two fix): [part1.md](part1.md).", "",
             "## Task 2.1: training with the class", "",
             f"The config `{config}` (the recipe `homework` is the handout's model: a BiLSTM encoder, the "
             f"decoder LSTM, the class's attention, softmax(W_d[a_i; h_i] + b_d)), seed 1, "
             f"{f'{minutes:g} minutes' if minutes else 'to its limits'}; scores on the test split, greedy "
             "search:", "", _task_21(comparison, name), "",
             "## Task 2.2: attention diagrams", ""]
    for path in report.diagrams:
        lines += [f"![{path.stem}]({path.relative_to(report.out).as_posix()})", ""]
    lines += [f"## Task 2.3: none, mean and the class, {runs} runs each", "",
              "Mean ± sample standard deviation and sample variance over the seeds, test split:", "",
              comparison.summary_table(), "", comparison.runs_table(), "",
              "![the runs](compare/summary.png)", "",
              "## Task 2.EC: beam search", "", beams, ""]
    return "\n".join(lines)


def _html(markdown: str, out: Path) -> str:
    """The report as one self-contained page: its tables as tables, its figures inside it."""
    body: list[str] = []
    table: list[str] = []
    code = False

    def close_table() -> None:
        if table:
            rows = [row for row in table if not re.fullmatch(r"\|[-|: ]+\|", row)]
            cells = [[html.escape(cell.strip()) for cell in row.strip("|").split("|")] for row in rows]
            body.append("<table>" + "".join(
                "<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{c}</{'th' if i == 0 else 'td'}>" for c in row) + "</tr>"
                for i, row in enumerate(cells)) + "</table>")
            table.clear()

    for line in markdown.splitlines():
        if line.startswith("```"):
            close_table()
            body.append("</pre>" if code else "<pre>")
            code = not code
        elif code:
            body.append(html.escape(line) + "\n")
        elif line.startswith("|"):
            table.append(line)
        else:
            close_table()
            image = re.fullmatch(r"!\[([^\]]*)\]\(([^)]+)\)", line)
            heading = re.match(r"(#+) (.*)", line)
            if image and (out / image.group(2)).is_file():
                data = base64.b64encode((out / image.group(2)).read_bytes()).decode("ascii")
                body.append(f'<p><img alt="{html.escape(image.group(1))}" src="data:image/png;base64,{data}"></p>')
            elif heading:
                level = len(heading.group(1))
                body.append(f"<h{level}>{html.escape(heading.group(2))}</h{level}>")
            elif line.strip():
                text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(line))
                text = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', text)
                body.append(f"<p>{text}</p>")
    close_table()
    style = ("body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:.3em .6em}img{max-width:100%}pre{background:#f6f6f6;padding:1em}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Homework</title><style>{style}'
            f"</style></head><body>{''.join(body)}</body></html>\n")


def run_homework(  # noqa: PLR0913 (the options of `attnmt homework`, each a keyword)
    spec: str, out: str | Path, minutes: float | None = 8.0, runs: int = 3, config: str | Path = "homework",
    beams: Sequence[int] = BEAMS, examples: int = 3, limits: dict[str, Any] | None = None,
    set_options: Sequence[str] = (), show_progress: bool = True, log: Callable[[str], None] = print,
    command: str = "",
) -> HomeworkReport:
    """Do Part 2 of the handout with the class ``spec`` (the module docstring says what) into ``out``.
    ``limits`` add to ``minutes`` (``{"max_steps": N}``, for a quick try). ConfigError before any
    training for a class that does not load, sizes out of range, or an ``out`` that is not a homework's."""
    if not 1 <= runs <= 20:
        raise ConfigError(f"--runs must be from 1 to 20, got {runs}")
    if minutes is not None and not 0 < minutes <= 24 * 60:
        raise ConfigError(f"--minutes must be more than 0 and at most {24 * 60}, got {minutes}")
    if not beams or any(not 1 <= beam <= 200 for beam in beams):
        raise ConfigError(f"--beams must be sizes from 1 to 200, got {' '.join(map(str, beams))}")
    if not 0 <= examples <= 20:
        raise ConfigError(f"--examples must be from 0 to 20, got {examples}")
    out = Path(out)
    _check_out(out, spec)
    recipe = config_path(str(config))
    verdict = check_mechanism(spec, speed=False)
    shown = verdict.handout_verdict() if verdict.form == "handout" else (
        f"{verdict.spec}: {'all properties hold' if verdict.passed else 'FAILS attnmt check'}")
    log(shown.splitlines()[0])
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / MARKER, json.dumps({"class": spec, "command": command}) + "\n")
    _part1(out)
    comparison = compare_mechanisms(recipe, [*BASELINES, spec], runs, out / "compare",
                                    limits={"max_minutes": minutes, **(limits or {})}, set_options=list(set_options),
                                    show_progress=show_progress, log=log)
    mine = run_folder(out / "compare", spec, 1)
    report = HomeworkReport(out=out, verdict=shown, comparison=comparison, mine=mine,
                            beam_table=_beam_table(mine, beams, log, show_progress),
                            diagrams=_diagrams(mine, out / "diagrams", examples))
    markdown = _markdown(report, spec, command or f"attnmt homework {spec} --out {out}", minutes, runs, str(config))
    report.paths["markdown"] = write_text_atomic(out / "report.md", markdown)
    report.paths["html"] = write_text_atomic(out / "report.html", _html(markdown, out))
    return report
