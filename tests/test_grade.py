"""``attnmt grade``: a course's submissions, each checked in a contained process of its own, marked
by the handout's equations, into a gradebook that a second grading only updates."""

from __future__ import annotations

import csv
import ctypes
import json
from pathlib import Path

import pytest

from attnmt.course import CHECKS, TRAINS, grade_course
from attnmt.errors import ConfigError

from helpers import HANDOUT_CLASS, PLANTED, SUBMISSIONS, save_yaml, submission, tiny_run_config

#: each planted submission: the points it must earn (of one per check), and words of its reason
EXPECTED = {
    "correct": (len(CHECKS), ""),
    "no_scale": (len(CHECKS) - 1, "breaks Eq. 1"),
    "softmax_over_batch": (None, "breaks Eq. 1"),
    "projected_values": (len(CHECKS) - 1, "breaks Eq. 15"),
    "alpha_time_first": (None, "breaks the handout's shapes"),
    "exits_at_import": (0, "called sys.exit('bye')"),
    "endless_loop": (1, "did not return within"),  # it loads; nothing after the hung property earns
    "syntax_error": (0, "syntax error"),
    "imports_missing": (0, "No module named 'attention_helpers_from_my_laptop'"),
    "allocates_without_bound": (None, "more memory than --memory 2 GiB allows"),
    "writes_outside": (0, "may write only in its own folder"),
    "=formula": (0, "has no class 'SingleQueryScaledDotProductAttention'"),
}

WRITES_OUTSIDE = '''import os
from pathlib import Path

import torch
from torch import nn

Path(os.environ.get("ESCAPE_TO", "/nonexistent"), "escaped.txt").write_text("written outside its folder")


class SingleQueryScaledDotProductAttention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim):
        super().__init__()
'''


def _course(folder: Path) -> Path:
    """The planted submissions in ``folder``: files, one in a folder of its own, one named like a formula."""
    folder.mkdir()
    for name in EXPECTED:
        if name in PLANTED:
            submission(name, folder)
        elif (SUBMISSIONS / f"{name}.py").exists():
            (folder / f"{name}.py").write_bytes((SUBMISSIONS / f"{name}.py").read_bytes())
    (folder / "writes_outside").mkdir()
    escape = str(folder.parent).replace("\\", "\\\\")
    (folder / "writes_outside" / "attention.py").write_text(
        WRITES_OUTSIDE.replace('os.environ.get("ESCAPE_TO", "/nonexistent")', repr(escape)))
    (folder / "writes_outside" / "notes.txt").write_text("a student's notes, not code\n")
    (folder / "=formula.py").write_text("x = 1\n")
    return folder


@pytest.mark.slow
def test_a_course_of_planted_submissions_is_graded_as_the_handout_would(tmp_path):
    lines: list[str] = []
    gradebook = grade_course(_course(tmp_path / "submissions"), HANDOUT_CLASS, tmp_path / "grades", timeout=20,
                             memory_gib=2, log=lines.append)
    rows = {row.name: row for row in gradebook.rows}
    assert sorted(rows) == sorted(EXPECTED)
    for name, (points, words) in EXPECTED.items():
        row = rows[name]
        assert words in row.reason, (name, row.reason)
        if points is not None:
            assert gradebook.points(row) == points, (name, row.checks)
    assert not (tmp_path / "escaped.txt").exists()  # the write outside its folder never happened
    assert gradebook.max_points == len(CHECKS) and len(lines) == len(EXPECTED)

    # the gradebook: a row per submission, a column per check, cells a spreadsheet cannot run
    with open(tmp_path / "grades" / "gradebook.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert [row["submission"] for row in table] == [f"'{row.name}" if row.name.startswith("=") else row.name
                                                     for row in gradebook.rows]
    assert set(CHECKS) <= set(table[0])
    no_scale = next(row for row in table if row["submission"] == "no_scale")
    assert no_scale["scale"] == "fail" and no_scale["values"] == "pass" and "1/√d" in no_scale["reason"]
    page = (tmp_path / "grades" / "gradebook.html").read_text(encoding="utf-8")
    assert page.count("<svg") == sum(row.diagram is not None for row in gradebook.rows) >= 3
    assert "Eq. 15 (v_j = h̄_j" in page and "<script" not in page
    summary = (tmp_path / "grades" / "gradebook.md").read_text(encoding="utf-8")
    assert f"| correct | {len(CHECKS)} / {len(CHECKS)} | passes |" in summary
    state = json.loads((tmp_path / "grades" / "grades.json").read_text(encoding="utf-8"))
    assert sorted(state["rows"]) == sorted(EXPECTED)


def test_a_second_grading_grades_only_what_changed_and_the_rubric_sets_the_points(tmp_path):
    out = tmp_path / "grades"
    course = tmp_path / "submissions"
    course.mkdir()
    for name in ("correct", "syntax_error"):
        (course / f"{name}.py").write_bytes((SUBMISSIONS / f"{name}.py").read_bytes())
    (tmp_path / "rubric.yaml").write_text("loads: 1\nscale: 2\nvalues: 3\n")
    first = grade_course(course, HANDOUT_CLASS, out, rubric=tmp_path / "rubric.yaml", timeout=20, log=lambda _: None)
    assert [first.points(row) for row in first.rows] == [6, 0] and first.max_points == 6
    (course / "syntax_error.py").write_bytes((SUBMISSIONS / "correct.py").read_bytes())  # fixed
    lines: list[str] = []
    second = grade_course(course, HANDOUT_CLASS, out, rubric=tmp_path / "rubric.yaml", timeout=20, log=lines.append)
    assert "unchanged" in lines[0] and "unchanged" not in lines[1]
    assert [second.points(row) for row in second.rows] == [6, 6]


def test_an_interrupted_grading_keeps_the_rows_it_finished(tmp_path):
    course = tmp_path / "submissions"
    course.mkdir()
    for name in ("correct", "syntax_error"):
        (course / f"{name}.py").write_bytes((SUBMISSIONS / f"{name}.py").read_bytes())

    def stop_after_the_first(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        grade_course(course, HANDOUT_CLASS, tmp_path / "grades", timeout=20, log=stop_after_the_first)
    table = (tmp_path / "grades" / "gradebook.csv").read_text(encoding="utf-8").splitlines()
    assert len(table) == 2 and table[1].startswith("correct,")
    assert not [p for p in (tmp_path / "grades").iterdir() if p.name.startswith(".")]  # no temporary left
    lines: list[str] = []
    grade_course(course, HANDOUT_CLASS, tmp_path / "grades", timeout=20, log=lines.append)
    assert "unchanged" in lines[0] and "syntax error" in lines[1]


@pytest.mark.slow
def test_with_minutes_each_submission_trains_and_its_validation_bleu_is_in_the_gradebook(tmp_path):
    (tmp_path / "data").mkdir()
    config = tiny_run_config(tmp_path / "data", train_pairs=40, valid_pairs=4, bleu_max_sentences=4, examples=0)
    config_file = save_yaml(tmp_path / "data", config, "tiny.yaml")
    course = tmp_path / "submissions"
    course.mkdir()
    (course / "correct.py").write_bytes((SUBMISSIONS / "correct.py").read_bytes())
    submission("alpha_time_first", course)
    (tmp_path / "rubric.yaml").write_text("loads: 1\ntrains: 5\n")
    gradebook = grade_course(course, HANDOUT_CLASS, tmp_path / "grades", rubric=tmp_path / "rubric.yaml",
                             timeout=20, minutes=1, config=config_file, set_options=["training.max_steps=3"],
                             log=lambda _: None)
    rows = {row.name: row for row in gradebook.rows}
    assert gradebook.checks == [*CHECKS, TRAINS] and gradebook.max_points == 6
    correct = rows["correct"]
    assert correct.checks[TRAINS]["status"] == "pass" and correct.training is not None
    assert correct.training["steps"] == 3 and 0 <= correct.training["bleu"] <= 100 and gradebook.points(correct) == 6
    assert "validation BLEU" in correct.checks[TRAINS]["detail"]
    time_first = rows["alpha_time_first"]
    assert time_first.checks[TRAINS]["status"] == "fail" and gradebook.points(time_first) == 1
    with open(tmp_path / "grades" / "gradebook.csv", newline="", encoding="utf-8") as handle:
        table = {row["submission"]: row for row in csv.DictReader(handle)}
    assert float(table["correct"]["val_bleu"]) == correct.training["bleu"] and table["correct"]["train_steps"] == "3"
    assert "| validation BLEU |" in (tmp_path / "grades" / "gradebook.md").read_text(encoding="utf-8")
    with pytest.raises(ConfigError, match="'trains' is marked only when each submission trains; give --minutes"):
        grade_course(course, HANDOUT_CLASS, tmp_path / "other", rubric=tmp_path / "rubric.yaml", log=lambda _: None)


def _kernel_has_landlock() -> bool:
    return ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) >= 1


@pytest.mark.skipif(not _kernel_has_landlock(), reason="this kernel has no Landlock; only the audit hook contains")
def test_the_kernel_refuses_a_write_or_a_read_that_goes_around_python(tmp_path):
    course = tmp_path / "submissions"
    course.mkdir()
    (course / "other.py").write_text("secret = 42\n")
    target = tmp_path / "native.txt"
    (course / "native.py").write_text(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"wrote = libc.open({str(target).encode()!r}, 0o101, 0o644) >= 0\n"
        f"read = libc.open({str(course / 'other.py').encode()!r}, 0, 0) >= 0\n"
        "raise SystemExit(f'wrote={wrote} read={read}')\n")
    gradebook = grade_course(course, "Anything", tmp_path / "grades", timeout=20, log=lambda _: None)
    native = next(row for row in gradebook.rows if row.name == "native")
    assert "wrote=False read=False" in native.reason and not target.exists()
    assert native.containment.startswith("Landlock")


@pytest.mark.parametrize("arguments, message", [
    (["grade", "{empty}", "--class", HANDOUT_CLASS, "--out", "{out}"], "holds no submission"),
    (["grade", "{course}", "--out", "{out}"], "the following arguments are required: --class"),
    (["grade", "{course}", "--class", "not a name", "--out", "{out}"], "is not a Python class name"),
    (["grade", "{course}", "--class", HANDOUT_CLASS, "--out", "{out}", "--rubric", "{rubric}"],
     "line 2: 'sclae' is not a check; the checks are loads, shapes"),
    (["grade", "{missing}", "--class", HANDOUT_CLASS, "--out", "{out}"], "no such folder"),
    (["grade", "{course}", "--class", HANDOUT_CLASS, "--out", "{notes}"], "holds files that are not a gradebook"),
])
def test_bad_input_is_one_line_and_exit_2(attnmt_cli, capsys, tmp_path, arguments, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "correct.py").write_bytes((SUBMISSIONS / "correct.py").read_bytes())
    (tmp_path / "rubric.yaml").write_text("loads: 1\nsclae: 2\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me\n")
    places = {"empty": tmp_path / "empty", "course": tmp_path / "course", "out": tmp_path / "grades",
              "rubric": tmp_path / "rubric.yaml", "missing": tmp_path / "nowhere", "notes": tmp_path / "notes"}
    try:
        done = attnmt_cli(*(argument.format(**places) for argument in arguments))
        status, error = done.returncode, done.stderr
    except SystemExit as stop:  # argparse's own errors end the parsing
        status, error = stop.code, capsys.readouterr().err
    assert status == 2 and message in error, error
    assert len(error.strip().splitlines()) == 1 and "Traceback" not in error
    assert not (tmp_path / "grades").exists() and (tmp_path / "notes" / "mine.txt").read_text() == "keep me\n"
