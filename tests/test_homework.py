"""``attnmt homework``: Part 2 of the course handout with the student's class, end to end, on tiny
runs of a few steps over made-up data: a report with every task's table and figure, continued
when run again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnmt.course.homework import run_homework
from attnmt.errors import ConfigError

from helpers import (
    HANDOUT_CLASS,
    SUBMISSIONS,
    execute_notebook,
    save_yaml,
    streamed_text,
    tiny_run_config,
    write_corpus,
)

pytestmark = pytest.mark.slow  # trains six tiny runs

CLASS = f"{SUBMISSIONS / 'correct.py'}:{HANDOUT_CLASS}"
NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "homework.ipynb"


@pytest.fixture(scope="module")
def config_path(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("homework-data")
    config = tiny_run_config(folder, train_pairs=40, valid_pairs=4, checkpoint_every=2, log_every=2,
                             bleu_max_sentences=0, examples=0)
    config["data"]["test"] = {"made_up": write_corpus(folder, "test", 6, seed=3)}
    config["search"] = {"max_len_a": 1.0, "max_len_b": 3}
    return save_yaml(folder, config, "tiny.yaml")


def homework(config_path: Path, out: Path, lines: list[str]):
    return run_homework(CLASS, out, minutes=None, runs=2, config=config_path, beams=(1, 2), examples=2,
                        limits={"max_steps": 3}, show_progress=False, log=lines.append, command="attnmt homework ...")


def test_the_report_has_every_task_and_a_second_run_continues_it(config_path, tmp_path):
    lines: list[str] = []
    report = homework(config_path, tmp_path / "report", lines)
    assert "follows the handout" in lines[0]
    markdown = report.paths["markdown"].read_text(encoding="utf-8")
    for section in ("checked by the handout's equations", "Part 1", "Task 2.1", "Task 2.2", "Task 2.3: ",
                    "Task 2.EC", "Made by `attnmt homework ...`"):
        assert section in markdown, section
    assert markdown.count("| none ") >= 1 and markdown.count("| mean ") >= 1
    assert len(report.comparison.outcomes) == 6 and {o.mechanism for o in report.comparison.outcomes} >= {"none",
                                                                                                        "mean"}
    assert len(report.diagrams) == 2 and all(path.is_file() for path in report.diagrams)
    assert re.search(r"^\|\s+1 \|", report.beam_table, re.MULTILINE) and re.search(r"^\|\s+2 \|", report.beam_table,
                                                                                   re.MULTILINE)
    assert (tmp_path / "report" / "part1.md").is_file() and (tmp_path / "report" / "part1" / "copy.png").is_file()
    page = report.paths["html"].read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") >= 3 and "<table>" in page and "<script" not in page

    again: list[str] = []
    homework(config_path, tmp_path / "report", again)
    assert sum("reused" in line for line in again) >= 7  # six runs and the beam table, nothing trained again


def test_a_class_that_does_not_load_or_a_foreign_folder_stops_before_any_training(config_path, tmp_path):
    (tmp_path / "broken.py").write_text("class SingleQueryScaledDotProductAttention(\n")
    with pytest.raises(ConfigError, match="syntax error"):
        run_homework(f"{tmp_path / 'broken.py'}:{HANDOUT_CLASS}", tmp_path / "report", config=config_path,
                     log=lambda _: None)
    assert not (tmp_path / "report").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep\n")
    with pytest.raises(ConfigError, match="not a homework attnmt wrote"):
        run_homework(CLASS, tmp_path / "mine", config=config_path, log=lambda _: None)
    with pytest.raises(ConfigError, match="--runs must be from 1 to 20"):
        run_homework(CLASS, tmp_path / "other", runs=0, config=config_path, log=lambda _: None)


def test_the_notebook_checks_the_class_in_its_cell_and_shows_the_report(config_path, tmp_path, monkeypatch):
    """examples/homework.ipynb in a real kernel: its cell writes the class, `attnmt check` passes it,
    `attnmt homework` (one run each, 3 steps) writes the report, and the report shows with its figures."""
    code = execute_notebook(NOTEBOOK, tmp_path, monkeypatch, "ATTNMT_HOMEWORK", {
        "CONFIG": config_path, "MINUTES": 1, "RUNS": 1, "BEAMS": "1 2", "MAX_STEPS": 3, "OUT": tmp_path / "report"})
    text = [streamed_text(cell) for cell in code]
    assert (tmp_path / "my_homework.py").read_text(encoding="utf-8").count("class ") == 1
    assert "follows the handout" in text[2]                                    # attnmt check
    assert (tmp_path / "report" / "report.md").is_file()                       # attnmt homework
    shown = [output.get("data", {}) for output in code[4].outputs]
    markdown = "".join(data.get("text/markdown", "") for data in shown)
    assert "Task 2.1" in markdown and "Task 2.EC" in markdown and "![" not in markdown
    diagrams = list((tmp_path / "report" / "diagrams").glob("*.png"))
    assert diagrams and sum("image/png" in data for data in shown) == len(diagrams) + 1  # and the runs' summary
