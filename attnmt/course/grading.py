"""``attnmt grade``: mark a course's submissions, each in a contained process of its own.

    grade_course(submissions, class_name, out) -> Gradebook

For each submission (``attnmt.course.submissions``), in name order:

1. its files are copied into ``out/scratch/<name>/submission/``; it never sees another's;
2. ``python -m attnmt.course.worker`` runs in that scratch folder (``attnmt.course.containment``:
   memory and CPU limits, reads and writes confined), checks the class with ``attnmt check``'s
   properties and the handout's equations, and answers in JSON; what it prints is kept in
   ``out/scratch/<name>/output.txt``;
   with ``minutes``, it then trains the handout's model (recipe ``homework``, or ``config``)
   with the class for at most that long, seed 1, and reports the validation BLEU (check
   ``trains``);
3. past ``timeout`` seconds (plus the training's minutes and a margin) its whole process group is
   killed, and its row says so;
4. its row goes into ``out/grades.json`` at once (atomically), so an interrupted grading keeps
   the rows it finished, and a grading run again skips every submission whose files and settings
   are unchanged (by SHA-256).

At the end (and at an interrupt) the gradebook is written: ``gradebook.csv``, ``gradebook.md``
and ``gradebook.html`` (``attnmt.course.gradebook``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnmt._version import __version__
from attnmt.course.containment import SYSTEM_FOLDERS
from attnmt.course.gradebook import STATE_FILE, Gradebook, Row, load_state, save_state, write_gradebook
from attnmt.course.rubric import default_rubric, read_rubric
from attnmt.course.submissions import Submission, find_submissions
from attnmt.errors import ConfigError

__all__ = ["CHECKS", "TRAINS", "grade_course"]


def _check_names() -> list[str]:
    from attnmt.attention.conformance import HANDOUT_PROPERTIES

    return ["loads"] + [name for name, _ in HANDOUT_PROPERTIES if name != "speed"]


#: every check a submission gets, in the gradebook's order: it loads, then attnmt check's properties
CHECKS = _check_names()
#: the check of a short training (with ``minutes``): it trains, and its validation BLEU is measured
TRAINS = "trains"
#: seconds a training may take beyond its minutes: the data and vocabulary, the model, the last validation
TRAINING_MARGIN_SECONDS = 240

#: attnmt's own folder, which a worker reads
PACKAGE = Path(__file__).resolve().parents[1]

#: the most of a worker's answer the grader reads (a diagram and a report are a few kilobytes)
MAX_ANSWER_BYTES = 4 * 2**20


def _readable_folders(extra: list[str]) -> list[str]:
    """What a worker must read: the system, this Python and its packages, attnmt, the data folder,
    and ``extra`` (a training's config folder and the Multi30k cache)."""
    folders = {*SYSTEM_FOLDERS, sys.prefix, sys.base_prefix, sys.exec_prefix, str(PACKAGE), *extra}
    folders.update(site.getsitepackages())
    folders.add(site.getusersitepackages())
    folders.update(entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry)
    if os.environ.get("ATTNMT_DATA_DIR"):
        folders.add(os.environ["ATTNMT_DATA_DIR"])
    resolved = {os.path.realpath(folder) for folder in folders}
    return sorted(folders | resolved)


def _worker_environment(scratch: Path) -> dict[str, str]:
    cache = scratch / ".cache"
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                   "HOME": str(scratch), "TMPDIR": str(scratch), "XDG_CACHE_HOME": str(cache),
                   "MPLCONFIGDIR": str(cache / "matplotlib"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "torch"),
                   "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
                   "PYTHONHASHSEED": "0"}
    for name in ("PYTHONPATH", "ATTNMT_DATA_DIR"):
        if os.environ.get(name):
            environment[name] = os.environ[name]
    return environment


def _scratch_name(submission: Submission) -> str:
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', submission.name)[:60]}-{submission.digest[:8]}"


def _copy(submission: Submission, scratch: Path) -> Path:
    """The submission's files in ``scratch/submission``; returns the copy of its ``.py`` file."""
    target = scratch / "submission"
    if submission.path.is_dir():
        shutil.copytree(submission.path, target, symlinks=True)
        return target / submission.file
    target.mkdir(parents=True)
    shutil.copyfile(submission.path, target / submission.path.name)
    return target / submission.path.name


def _read_answer(read_end: int, chunks: list[bytes]) -> None:
    with os.fdopen(read_end, "rb") as channel:
        size = 0
        while size <= MAX_ANSWER_BYTES:
            chunk = channel.read(65536)
            if not chunk:
                return
            chunks.append(chunk)
            size += len(chunk)


def _ended_without_answer(status: int, settings: dict[str, Any], output: Path) -> str:
    if status < 0:
        name = signal.Signals(-status).name
        if -status == signal.SIGXCPU:
            return f"used more CPU time than its limit ({settings['cpu_seconds']} s)"
        return (f"its process was ended by {name} (memory beyond --memory {settings['memory_gib']:g} GiB ends "
                "so, or a crash in native code)")
    last = ""
    try:
        lines = output.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        last = f"; its last line: {lines[-1][:200]}" if lines else ""
    except OSError:
        pass
    return f"its process exited (status {status}) before it answered: does it exit at import?{last}"


def _run_worker(submission: Submission, scratch: Path, settings: dict[str, Any], private: list[Path]) -> dict:
    """The worker's answer for ``submission``, or ``{"reason": ...}`` when it gave none."""
    spec = f"{_copy(submission, scratch)}:{settings['class']}"
    training = settings["training"]
    extra = [str(Path(training["config"]).parent), training["cache"]] if training else []
    request = {"spec": spec, "scratch": str(scratch), "readable": _readable_folders(extra),
               "private": [str(folder) for folder in private], "memory_bytes": int(settings["memory_gib"] * 2**30),
               "cpu_seconds": settings["cpu_seconds"], "property_seconds": settings["property_seconds"],
               "expect": settings["expect"], "training": training}
    read_end, write_end = os.pipe()
    output = scratch / "output.txt"
    chunks: list[bytes] = []
    with open(output, "wb") as log:
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "attnmt.course.worker", json.dumps(request), str(write_end)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=scratch,
                env=_worker_environment(scratch), pass_fds=(write_end,), start_new_session=True)
        finally:
            os.close(write_end)
        reader = threading.Thread(target=_read_answer, args=(read_end, chunks), daemon=True)
        reader.start()
        try:
            status = process.wait(timeout=settings["wall_seconds"])
        except subprocess.TimeoutExpired:
            _kill_group(process)
            training = f" and its training ({training['minutes']:g} min and a margin)" if training else ""
            return {"reason": f"did not finish within --timeout {settings['timeout']:g} s{training} (an endless "
                              "loop, or work too slow for the limit)"}
        except BaseException:  # an interrupt: the submission's processes go with the grader
            _kill_group(process)
            raise
        _kill_group(process)  # whatever it left running
        reader.join(timeout=5)
    try:  # its reasons name its own files, not the scratch copy's path
        text = b"".join(chunks).decode("utf-8").replace(json.dumps(f"{scratch / 'submission'}/")[1:-1], "")
        answer = json.loads(text) if chunks else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        answer = None
    if not isinstance(answer, dict):
        return {"reason": _ended_without_answer(status, settings, output)}
    return answer


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _training_check(answer: dict[str, Any]) -> dict[str, str]:
    """The ``trains`` check of a worker's answer: its validation BLEU, or why there is none."""
    training = answer.get("training")
    if not isinstance(training, dict):
        return {"status": "not run", "detail": "not run: a check did not return" if answer.get("report")
                else "not run: it did not load", "equation": ""}
    if "error" in training:
        return {"status": "fail", "detail": f"training failed: {training['error']}"[:2000], "equation": ""}
    return {"status": "pass", "equation": "",
            "detail": f"validation BLEU {float(training.get('bleu', 0)):.2f}, perplexity "
                      f"{float(training.get('perplexity', 0)):.2f} after {int(training.get('steps', 0))} steps "
                      f"({float(training.get('seconds', 0)) / 60:.1f} min, seed 1)"}


def _row(submission: Submission, answer: dict[str, Any], seconds: float, settings_key: str,
         trained: bool = False) -> Row:
    report = answer.get("report") if isinstance(answer.get("report"), dict) else None
    checks: dict[str, dict[str, str]] = {"loads": {"status": "pass" if report else "fail",
                                                   "detail": "" if report else str(answer.get("reason", ""))}}
    for result in (report or {}).get("properties", []):
        if isinstance(result, dict) and result.get("property") in CHECKS:
            check = {key: str(result.get(key, "")) for key in ("status", "detail", "equation")}
            if check["status"] == "n/a" and check["detail"].startswith("not run"):
                check["status"] = "not run"  # after a property that hung: it earns nothing
            checks[str(result["property"])] = check
    if trained:
        checks[TRAINS] = _training_check(answer)
    diagram = answer.get("diagram") if isinstance(answer.get("diagram"), dict) else None
    training = answer.get("training") if isinstance(answer.get("training"), dict) else None
    reason = _reason(report, answer)
    if trained and not reason and checks[TRAINS]["status"] == "fail":
        reason = checks[TRAINS]["detail"]
    return Row(name=submission.name, file=submission.file or submission.path.name, digest=submission.digest,
               settings=settings_key, loaded=report is not None, reason=reason, checks=checks,
               diagram=diagram, containment=str(answer.get("containment", "")), seconds=round(seconds, 2),
               training=training if training and "error" not in training else None)


def _reason(report: dict[str, Any] | None, answer: dict[str, Any]) -> str:
    """Why a submission loses points: why it does not load, else the first equation it breaks (or
    the first property it fails), with the counterexample; "" when everything holds."""
    if report is None:  # attnmt's sentence, less the mechanism's label and the advice to run attnmt check
        reason = re.sub(r"^attention '[^']*': ", "", str(answer.get("reason", "it did not load")))
        return re.sub(r"; run attnmt check \S+( to see [a-z ]+)?$", "", reason)
    failures = [r for r in report.get("properties", []) if isinstance(r, dict) and r.get("status") == "fail"]
    with_equation = [r for r in failures if r.get("equation")]
    if with_equation:
        shapes = [r for r in with_equation if r.get("property") == "shapes"]
        first = (shapes or with_equation)[0]
        return f"breaks {first['equation']}: {first.get('detail', '')}"
    if failures:
        return f"{failures[0].get('property')}: {failures[0].get('detail', '')}"
    return ""


def _training(minutes: float | None, config: str | Path, set_options: list[str]) -> dict[str, Any] | None:
    """What a worker trains with ``minutes``: the config (read here first, so that a mistake in it is
    one error before any submission runs), seed 1, the ``--set`` options."""
    if minutes is None:
        return None
    from attnmt.data.multi30k import cache_dir
    from attnmt.runs.recipes import config_path
    from attnmt.runs.run_config import load_config

    path = config_path(str(config))
    load_config(path, {"max_minutes": minutes}, list(set_options))
    return {"minutes": minutes, "config": str(Path(path).resolve()), "set": list(set_options), "seed": 1,
            "cache": str(cache_dir())}


def _settings(class_name: str, timeout: float, memory_gib: float, expect: str | None,
              training: dict[str, Any] | None) -> dict[str, Any]:
    wall = timeout + (training["minutes"] * 60 * 1.25 + TRAINING_MARGIN_SECONDS if training else 0)
    return {"class": class_name, "timeout": timeout, "memory_gib": memory_gib, "expect": expect,
            "property_seconds": max(1.0, min(30.0, timeout / 4)), "wall_seconds": wall,
            "cpu_seconds": int(2 * wall + 10), "training": training, "attnmt": __version__}


def _check_out(out: Path, overwrite: bool) -> None:
    from attnmt.runtime.outputs import check_not_run_folder, check_writable_folder

    check_not_run_folder(out, "--out")
    check_writable_folder(out, f"--out {out}")
    if out.is_dir() and any(out.iterdir()) and not (out / STATE_FILE).exists() and not overwrite:
        raise ConfigError(f"--out {out} holds files that are not a gradebook attnmt grade wrote; choose a new or "
                          "empty folder")


def grade_course(  # noqa: PLR0913 (the options of `attnmt grade`, each a keyword)
    submissions_folder: str | Path, class_name: str, out: str | Path, rubric: str | Path | None = None,
    timeout: float = 120.0, memory_gib: float = 4.0, expect: str | None = None, overwrite: bool = False,
    minutes: float | None = None, config: str | Path = "homework", set_options: list[str] | tuple[str, ...] = (),
    log: Callable[[str], None] = print,
) -> Gradebook:
    """Grade every submission of ``submissions_folder`` (the module docstring says how) and write the
    gradebook into ``out``; with ``minutes``, each also trains ``config`` that long (check
    ``trains``, its validation BLEU). ConfigError before any work for a class name that is not a
    Python name, an empty folder, a rubric naming an unknown check, a config that does not read,
    or an ``out`` that is not a gradebook's."""
    if not class_name.isidentifier():
        raise ConfigError(f"--class {class_name!r} is not a Python class name "
                          "(e.g. SingleQueryScaledDotProductAttention)")
    if not 1 <= timeout <= 86400:
        raise ConfigError(f"--timeout must be from 1 to 86400 seconds, got {timeout}")
    if not 0.5 <= memory_gib <= 1024:
        raise ConfigError(f"--memory must be from 0.5 to 1024 GiB, got {memory_gib}")
    if minutes is not None and not 0 < minutes <= 24 * 60:
        raise ConfigError(f"--minutes must be more than 0 and at most {24 * 60}, got {minutes}")
    folder, out = Path(submissions_folder).absolute(), Path(out).absolute()
    checks = [*CHECKS, TRAINS] if minutes is not None else list(CHECKS)
    points = read_rubric(rubric, [*CHECKS, TRAINS]) if rubric is not None else default_rubric(checks)
    if TRAINS in points and minutes is None:
        raise ConfigError(f"--rubric {rubric}: {TRAINS!r} is marked only when each submission trains; give "
                          "--minutes M")
    training = _training(minutes, config, list(set_options))
    submissions = find_submissions(folder, class_name)
    _check_out(out, overwrite)
    if folder.resolve() == out.resolve() or folder.resolve() in out.resolve().parents:
        raise ConfigError(f"--out {out} is inside SUBMISSIONS {folder}; write the gradebook elsewhere")
    settings = _settings(class_name, timeout, memory_gib, expect, training)
    settings_key = json.dumps(settings, sort_keys=True)
    out.mkdir(parents=True, exist_ok=True)
    state = load_state(out)
    gradebook = Gradebook(class_name=class_name, rubric=points, checks=checks, rows=[])
    private = [folder.resolve(), out.resolve()]
    try:
        for number, submission in enumerate(submissions, start=1):
            before = state.get(submission.name)
            if before is not None and before.digest == submission.digest and before.settings == settings_key:
                gradebook.rows.append(before)
                log(f"[{number}/{len(submissions)}] {submission.name}: unchanged, "
                    f"{gradebook.points(before):g}/{gradebook.max_points:g} points (graded before)")
                continue
            started = time.perf_counter()
            if submission.problem:
                row = _row(submission, {"reason": submission.problem}, 0.0, settings_key, bool(training))
            else:
                scratch = out / "scratch" / _scratch_name(submission)
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
                if training:
                    log(f"[{number}/{len(submissions)}] {submission.name}: checking, then training for at most "
                        f"{training['minutes']:g} min ...")
                row = _row(submission, _run_worker(submission, scratch, settings, private),
                           time.perf_counter() - started, settings_key, bool(training))
            if "MemoryError" in row.reason:
                row.reason += f" (it asked for more memory than --memory {memory_gib:g} GiB allows)"
            gradebook.rows.append(row)
            state[submission.name] = row
            save_state(out, state, [s.name for s in submissions])
            shown = f"; {row.reason[:120]}" if row.reason else ""
            log(f"[{number}/{len(submissions)}] {submission.name}: {gradebook.points(row):g}/"
                f"{gradebook.max_points:g} points{shown} ({row.seconds:.1f} s)")
    finally:  # at an interrupt too: the rows finished, and those an earlier grading kept
        graded = {row.name for row in gradebook.rows}
        kept = [state[s.name] for s in submissions if s.name not in graded and s.name in state
                and state[s.name].digest == s.digest]
        order = {s.name: number for number, s in enumerate(submissions)}
        gradebook.rows = sorted(gradebook.rows + kept, key=lambda row: order[row.name])
        gradebook.paths = write_gradebook(out, gradebook)
    return gradebook
