"""How attnmt holds up when things go wrong, measured in bulk.

1. Killed training. One small training (a made-up task, one thread, a checkpoint every 3 steps) is
   SIGKILLed at ``--kills`` random moments; every fourth kill waits for a checkpoint being written
   (its temporary file in the folder) and kills then. After each kill every checkpoint left must
   load, and ``--resume`` must end with exactly the weights and metrics of the run never stopped.
2. Damaged run folders. A truncated, corrupt, empty or foreign ``last.pt`` / ``best.pt``, or a
   missing ``last.pt``: ``translate``, ``evaluate`` and ``train --resume`` must each end with one
   line naming the file, exit status 2.
3. A full disk. ``--disk`` cases over the eight commands that write files (train, evaluate, view,
   translate --plot, align, embed, explore --plot, compare): the output folder's file system is
   full after a random number of bytes (simulated: ``attnmt.runtime.full_disk.FullDisk`` makes writes
   there fail with ENOSPC). Every output must keep its previous version or hold its complete new
   one, no temporary file may be left, and the command must end with one line saying so; a killed
   training's checkpoints must load and ``--resume`` must end as the run never stopped.
4. Two writers. A second ``train`` (new, or ``--resume``) into a run folder another process is
   training into, and a second ``compare`` into a comparison folder in use: refused in one line,
   and the first writer ends as if it were alone.
5. Fuzzed input. ``--fuzz`` generated cases (default 500) over ``translate`` (arguments and standard
   input: invalid UTF-8, NUL bytes, CR and CRLF, a byte-order mark, empty, blank and 10,000-word
   lines), ``train`` (configs with unknown keys, wrong types and absurd values; data files missing,
   of different lengths, truncated .gz, not UTF-8), ``evaluate``, ``view``, ``embed``, ``align``,
   ``align-words``, ``compare``, ``explore`` and ``curves``, with absurd option values. Each runs in this process
   under a time limit; each must end with a result or with a one-line error, exit status 2.
6. Hostile files, outputs aimed at inputs, odd numbers for every numeric option, mutated files of
   each structured format, and SIGINT / SIGTERM at random moments: ``fault_data/cases.py`` says how each
   is made. A hostile file's code would create a marker file; the marker must never appear. An
   input of a case (or a file its run needs) must hold the same bytes after it as before.
7. Read-only folders: every writing command aimed into a folder mounted read-only (``unshare -m``,
   where the machine allows it: root ignores ``chmod``); one line, status 2, the folder unchanged.
8. Run folders as untrusted input (``fault_data/untrusted.py``): a run's config.yaml edited at one key
   (every key, other types, path forms, a hostile spec), its checkpoints edited at one entry (their
   config, progress, format, weights, and the record of a user mechanism's code pointed at hostile
   code with its real SHA-256), and user mechanisms that misbehave in each form, at import, in their
   constructor or when called, run by check, train, compare and the loading commands. Nothing may
   run without --trust-run-code, nothing be written outside the case's folder, and a misbehaving
   mechanism never ends with status 0 (check: 1, a failing property).

9. What a new user's probe found (``fault_data/probe.py``): requests against a real ``attnmt
   serve`` (smuggled, pipelined, odd JSON and paths, hang-ups, SIGINT during work), special files
   (FIFOs, devices, links to /dev/zero) where a config is read or an output written, YAML alias
   bombs, deep nesting, long numbers and files of megabytes in three places, and standard output on
   a full disk.
10. What a second probe found (``fault_data/streams.py``): a file that appears at an output's name
   while the command works, standard input that is not UTF-8, upper-case suffixes, a closed standard
   output, devices and FIFOs as corpora; seeds out of range, titles with ``$``, a checkpoint asking
   for a huge model under ``ulimit -v``, words that must name the right thing, a check of a forward
   that never returns, a run folder as an output folder; and serve's queues and request bodies.
   ``--only`` runs some categories and puts their rows into the existing JSON, which
   then says which commit measured each category.

Outcomes per case: "correct" (a right result), "clear error" (one line, status 2), "traceback",
"unreadable checkpoint", "different result", "partial file left" (a temporary file a killed write
left that the resumed run did not remove, or a command left), "lost" (an output neither its old nor
its new self, a run that cannot resume to the same end, or a file written outside the case's
folder), "hang" (past the time limit), "ran code" (a file's code ran), "user file changed" (an
input was changed); "different result" also counts a misbehaving mechanism that ends with status
0 and a damaged checkpoint that translates into nothing but unknown pieces. The table and
``benchmarks/results/faults/faults.json`` count them.

    python benchmarks/faults.py                 # writes benchmarks/results/faults/faults.json (about 25 minutes)
    python benchmarks/faults.py --only "serve over HTTP" "special files" "bombs and oversized configs" \
        "standard output on a full disk"        # the probe's kinds alone, merged into the JSON
    python benchmarks/faults.py --kills 5 --disk 8 --fuzz 50 --hostile 16 --onto 22 --numbers 40 \\
        --formats 15 --signals 5 --configs 40 --checkpoints 60 --mechanisms 40    # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import io
import json
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from attnmt.attention.trusted_code import TRUST_FILE_VARIABLE
from attnmt.cli import main as cli_main
from attnmt.data.toy import toy_run_config as tiny_run_config
from attnmt.errors import CheckpointError
from attnmt.runs.checkpoint import load_checkpoint
from attnmt.runs.folder import machine_free as comparable
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.full_disk import FullDisk
from attnmt.runtime.tables import format_table

from common import portable
from fault_data.cases import (
    classify,
    hostile_files,
    odd_numbers,
    outputs_onto_inputs,
    read_only_folders,
    read_only_mounts_work,
    signals,
    structured_formats,
)
from fault_data.probe import bombs, serve_http, special_files, special_unchanged, stdout_full
from fault_data.streams import files_and_streams, serve_queues_and_bodies, values_and_words
from fault_data.untrusted import edited_checkpoints, edited_configs, misbehaving_mechanisms

PROJECT = Path(__file__).resolve().parents[1]


RESULTS = PROJECT / "benchmarks" / "results" / "faults" / "faults.json"


def save_yaml(folder: Path, config: dict, name: str) -> Path:
    """``config`` written as ``folder/name``."""
    path = folder / name
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


ENV = {**os.environ, "PYTHONPATH": str(PROJECT), "OMP_NUM_THREADS": "1"}


def train_command(config: Path, out: Path, resume: bool = False) -> list[str]:
    return [sys.executable, "-m", "attnmt", "train", "--config", str(config), "--out", str(out), "--no-progress"] + \
        (["--resume"] if resume else [])


def same_run(a: Path, b: Path) -> bool:
    """The same final weights and the same metric records (times aside)."""
    last_a, last_b = load_checkpoint(a / "last.pt"), load_checkpoint(b / "last.pt")
    if last_a["progress"]["step"] != last_b["progress"]["step"]:
        return False
    if any(not torch.equal(last_a["model"][name], tensor) for name, tensor in last_b["model"].items()):
        return False
    def epochs(history):  # a stop by kill never adds records; compare what both runs wrote per epoch
        return [r for r in comparable(history) if r["type"] == "epoch"]
    return epochs(last_a["history"]) == epochs(last_b["history"])


def kills(folder: Path, config: Path, reference: Path, count: int, seconds: float, rng: random.Random) -> list[dict]:
    cases = []
    for number in range(1, count + 1):
        run = folder / f"killed-{number}"
        during_write = number % 4 == 0
        process = subprocess.Popen(train_command(config, run), env=ENV, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + (seconds * 2 if during_write else rng.uniform(0.2, seconds * 0.95))
        while process.poll() is None and time.monotonic() < deadline:
            if during_write and run.is_dir() and any(p.name.endswith(".tmp") for p in run.iterdir()):
                break
            time.sleep(0.002)
        killed = process.poll() is None
        if killed:
            process.send_signal(signal.SIGKILL)
        process.wait()
        unreadable = []
        for path in sorted(run.glob("*.pt")) if run.is_dir() else []:
            try:
                load_checkpoint(path)
            except CheckpointError:
                unreadable.append(path.name)
        leftover = [p.name for p in run.iterdir() if p.name.endswith(".tmp")] if run.is_dir() else []
        resumed = subprocess.run(train_command(config, run, resume=True), env=ENV, capture_output=True, text=True)
        after = [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
        if unreadable:
            outcome = "unreadable checkpoint"
        elif resumed.returncode != 0:
            outcome = "traceback" if "Traceback" in resumed.stderr else "error"
        elif after:
            outcome = "partial file left"
        else:
            outcome = "correct" if same_run(run, reference) else "different result"
        cases.append({"case": f"kill {number}" + (" while writing a checkpoint" if during_write else ""),
                      "killed": killed, "outcome": outcome, "temporary_files_after_kill": leftover,
                      "temporary_files_after_resume": after})
        print(f"  kill {number}: {'killed' if killed else 'ended before the kill'}"
              f"{' during a checkpoint write' if during_write else ''} -> {outcome}"
              + (f" (the kill left {len(leftover)} temporary file(s); the resume removed them)"
                 if leftover and not after else ""), flush=True)
    return cases


class Hang(Exception):
    """A fuzzed case ran past its time limit."""


def _alarm(signum, frame):
    raise Hang()


def run_cli(argv: list[str], stdin: bytes | None = None, limit: int = 120) -> tuple[int, str, str]:
    """``attnmt ARGV`` in this process, with ``stdin`` as standard input: (exit status, stdout,
    stderr). An exception escaping is a traceback (status -1), a run past ``limit`` s a hang (-2)."""
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""))
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = cli_main(argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
    except Hang:
        return -2, out.getvalue(), err.getvalue() + "hang"
    except Exception as error:  # any exception: that is what is measured
        return -1, out.getvalue(), f"Traceback: {type(error).__name__}: {error}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdin = saved_stdin
    return code, out.getvalue(), err.getvalue()


def damaged(folder: Path, reference: Path) -> list[dict]:
    damages = {
        "truncated last.pt": ("last.pt", lambda data: data[: len(data) // 2]),
        "corrupt best.pt": ("best.pt",
                            lambda data: data[:100] + bytes(random.Random(1).randrange(256) for _ in range(500))),
        "empty best.pt": ("best.pt", lambda data: b""),
        "foreign last.pt": ("last.pt", None),
        "missing last.pt": ("last.pt", "delete"),
    }
    commands = {
        "translate": lambda run, name: ["translate", str(run), "Ein Hund.", "--checkpoint", name[:-3]],
        "evaluate": lambda run, name: ["evaluate", str(run), "--split", "valid", "--checkpoint", name[:-3], "-n", "0",
                                       "--no-progress"],
        "train --resume": lambda run, name: ["train", "--out", str(run), "--resume", "--no-progress"],
    }
    cases = []
    for damage, (name, change) in damages.items():
        for command, argv in commands.items():
            if command == "train --resume" and name != "last.pt":
                continue  # resuming reads last.pt only
            run = folder / f"damaged-{len(cases)}"
            shutil.copytree(reference, run)
            path = run / name
            if change == "delete":
                path.unlink()
            elif change is None:
                torch.save({"weights": torch.zeros(3)}, path)  # another program's file
            else:
                path.write_bytes(change(path.read_bytes()))
            code, _, err = run_cli(argv(run, name))
            lines = [line for line in err.splitlines() if line.strip() and not line.startswith("attnmt ") or
                     "error:" in line]
            clear = code == 2 and str(path) in err and "Traceback" not in err and len(lines) == 1
            outcome = "traceback" if code == -1 else "clear error" if clear else f"other (status {code})"
            message = err.strip().splitlines()[-1:]
            cases.append({"case": f"{damage}, {command}", "outcome": outcome,
                          "message": [line.replace(str(folder), "$RUNS") for line in message]})
            print(f"  {damage}, {command}: {outcome}", flush=True)
    return cases


# --------------------------------------------------------------------------------------- a full disk


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _shape(data: bytes, folder: Path) -> bytes:
    """A file with its own folder's name, its numbers and its table padding masked: compare's
    summary records its path and seconds, which differ from case to case, while a file cut short
    loses its tail."""
    masked = re.sub(rb"[0-9][0-9.e+-]*", b"#", data.replace(str(folder).encode(), b"$FOLDER"))
    return re.sub(rb"[ -]+", b" ", masked)


def _one_error_line(err: str) -> bool:
    return sum("error:" in line for line in err.splitlines()) == 1 and "Traceback" not in err


def disk_commands(folder: Path, reference: Path, config: Path, compared: Path) -> dict:
    """command -> (the folder its outputs go to before the case, argv given that folder). Every
    output already has a previous version there (a file of other bytes) unless it is a training."""
    valid = [str(folder / "valid.de"), str(folder / "valid.en")]
    return {
        "train": (None, lambda out: ["train", "--config", str(config), "--out", str(out), "--no-progress"]),
        "evaluate": (reference, lambda out: ["evaluate", str(out), "--split", "valid", "-n", "0", "--no-progress"]),
        "view": (None, lambda out: ["view", str(reference), "--split", "valid", "-n", "3", "--out",
                                    str(out / "view.html"), "--overwrite", "--no-progress"]),
        "translate --plot": (None, lambda out: ["translate", str(reference), "Ein Hund.", "Eine Katze.", "--plot",
                                                str(out / "plot.png"), "--overwrite"]),
        "align": (None, lambda out: ["align", "--model", str(reference), "--src", valid[0], "--tgt", valid[1],
                                     "--out", str(out / "links.txt"), "--overwrite"]),
        "embed": (None, lambda out: ["embed", "--src", str(folder / "train.de"), "--tgt", str(folder / "train.en"),
                                     "--out", str(out), "--dim", "4", "--overwrite"]),
        "explore --plot": (None, lambda out: ["explore", "all", "--dim", "8", "--keys", "4", "--samples", "10",
                                              "--plot", str(out)]),
        "compare": (compared, lambda out: ["compare", "--config", str(config), "--attention", "dot", "--runs", "1",
                                           "--max-steps", "2", "--split", "valid", "--out", str(out),
                                           "--no-progress", "--overwrite"]),  # the case's earlier summaries
    }


def full_disk(folder: Path, reference: Path, config: Path, count: int, rng: random.Random) -> list[dict]:  # noqa: C901 (one branch per case of the category)
    """Each writing command, with its folder's file system full after a random number of bytes.

    A first pass with room enough records what the command writes (``complete``: every output's
    bytes) and how many bytes. In each case every output must afterwards hold its previous version
    or its complete new one, no temporary file may be left, and the command must end with one line
    saying the disk is full (or succeed, when the budget was enough). A training's checkpoints must
    load, and ``--resume`` with room again must end exactly as the run never stopped."""
    compared = folder / "compared"
    code, _, err = run_cli(disk_commands(folder, reference, config, compared)["compare"][1](compared))
    assert code == 0, err
    commands = disk_commands(folder, reference, config, compared)
    measured = {}
    for name, (base, argv) in commands.items():
        work = folder / f"disk-{name.split()[0]}-full"
        shutil.copytree(base, work) if base is not None else work.mkdir()
        before = _files(work)
        with FullDisk(work) as disk:
            code, _, err = run_cli(argv(work))
        assert code == 0, f"{name}: {err}"
        after = _files(work)
        outputs = {path: data for path, data in after.items() if before.get(path) != data and path != ".attnmt.lock"}
        measured[name] = (disk.written, {path: _shape(data, work) for path, data in outputs.items()})
        print(f"  {name}: writes {disk.written:,} bytes in {len(outputs)} file(s)", flush=True)

    cases = []
    for number in range(count):
        name = list(commands)[number % len(commands)]
        base, argv = commands[name]
        written, complete = measured[name]
        budget = rng.randrange(written)
        work = folder / f"disk-{number}"
        shutil.copytree(base, work) if base is not None else work.mkdir()
        if name != "train":
            for path in complete:  # an earlier version of every output
                (work / path).parent.mkdir(parents=True, exist_ok=True)
                (work / path).write_bytes(b"the previous version of " + path.encode() + b"\n")
        before = _files(work)
        with FullDisk(work, budget):
            code, _, err = run_cli(argv(work))
        after = _files(work)
        temporary = [path for path in after if path.endswith(".tmp")]
        # A training rewrites its files as it goes: there its checkpoints must load and resume.
        damaged = [] if name == "train" else [path for path, data in after.items() if path in complete
                                              and _shape(data, work) != complete[path] and data != before.get(path)]
        unreadable = []
        for path in sorted(work.rglob("*.pt")):
            try:
                load_checkpoint(path)
            except CheckpointError:
                unreadable.append(path.name)
        if code == -1:
            outcome = "traceback"
        elif code == -2:
            outcome = "hang"
        elif temporary:
            outcome = "partial file left"
        elif damaged or unreadable:
            outcome = "lost"
        elif code == 0:
            outcome = "correct"
        elif code == 2 and _one_error_line(err) and "No space left on device" in err.strip().splitlines()[-1]:
            outcome = "clear error"
        else:
            outcome = f"other (status {code})"
        if name == "train" and outcome in ("correct", "clear error"):
            resumed, _, resume_err = run_cli(["train", "--config", str(config), "--out", str(work), "--resume",
                                              "--no-progress"])
            if resumed != 0 or not same_run(work, reference):
                outcome = "lost"
                err += f" | resume: {resume_err.strip().splitlines()[-1] if resume_err.strip() else resumed}"
        message = err.strip().splitlines()[-1].replace(str(folder), "$RUNS") if err.strip() else ""
        cases.append({"case": f"{name}, disk full after {budget:,} of {written:,} bytes", "outcome": outcome,
                      "message": message[:300], "damaged": damaged, "unreadable": unreadable})
        print(f"  {name}, full after {budget:,}/{written:,} bytes: {outcome}"
              + (f" ({message[:160]}; damaged {damaged}, unreadable {unreadable})"
                 if outcome not in ("correct", "clear error") else ""), flush=True)
    return cases


# ----------------------------------------------------------------------------------------- two writers


def _wait_for_lock(folder: Path, process: subprocess.Popen, seconds: float = 60) -> bool:
    """Wait until ``process`` holds ``folder``'s writer lock (True), or has ended (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        lock = folder / ".attnmt.lock"
        if lock.exists():
            with open(lock, "a") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(handle, fcntl.LOCK_UN)
                except BlockingIOError:
                    return True
        time.sleep(0.01)
    return False


def two_writers(folder: Path, config: Path) -> list[dict]:
    """A second ``train`` (new or ``--resume``) into a run folder another process is training
    into, and a second ``compare`` into a comparison folder in use: each must be refused in one
    line, and the first writer must end as if alone (a training: exactly the reference run)."""
    settings = yaml.safe_load(config.read_text())
    settings["training"].update(max_epochs=30, max_steps=300, checkpoint_every=20)  # long enough to overlap
    slow = save_yaml(folder, settings, "two-writers.yaml")
    alone = folder / "writers-alone"
    subprocess.run(train_command(slow, alone), env=ENV, check=True, capture_output=True)
    cases = []
    second_commands = {
        "train into a run being trained": lambda run: ["train", "--config", str(slow), "--out", str(run),
                                                      "--no-progress"],
        "train --resume of a run being trained": lambda run: ["train", "--out", str(run), "--resume",
                                                             "--no-progress"],
        "compare into a comparison being made": None,
    }
    for case, second in second_commands.items():
        if second is not None:
            target = folder / f"writers-{len(cases)}"
            first = subprocess.Popen(train_command(slow, target), env=ENV, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
            argv = second(target)
        else:
            target = folder / f"writers-{len(cases)}"
            compare = ["compare", "--config", str(slow), "--attention", "dot", "--runs", "1",
                       "--split", "valid", "--out", str(target), "--no-progress"]
            first = subprocess.Popen([sys.executable, "-m", "attnmt", *compare], env=ENV, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
            argv = compare
        overlapped = _wait_for_lock(target, first)
        second_run = subprocess.run([sys.executable, "-m", "attnmt", *argv], env=ENV, capture_output=True, text=True)
        first_err = first.communicate()[1]
        refused = (second_run.returncode == 2 and _one_error_line(second_run.stderr)
                   and "is writing into this folder right now" in second_run.stderr)
        first_ok = first.returncode == 0 and (second is None or same_run(target, alone))
        if not overlapped:
            outcome = "other (the first writer ended before the second started)"
        elif "Traceback" in second_run.stderr or "Traceback" in first_err:
            outcome = "traceback"
        elif not first_ok:
            outcome = "lost"
        else:
            outcome = "clear error" if refused else f"other (status {second_run.returncode})"
        message = second_run.stderr.strip().splitlines()[-1].replace(str(folder), "$RUNS") \
            if second_run.stderr.strip() else ""
        cases.append({"case": case, "outcome": outcome, "message": message[:300]})
        print(f"  {case}: {outcome} ({message[:160]})", flush=True)
    return cases


WORDS = "ein der hund katze mann frau läuft sitzt im park ball rot blau groß klein".split()


def _line(rng: random.Random) -> bytes:
    kind = rng.choice(["words", "words", "empty", "blank", "invalid", "nul", "long", "crlf", "unicode"])
    text = " ".join(rng.choices(WORDS, k=rng.randint(1, 8))).capitalize() + "."
    return {
        "words": text.encode(), "empty": b"", "blank": b" \t ", "invalid": text.encode()[:5] + b"\xff\xfe" + b"x",
        "nul": b"ein\x00hund", "long": " ".join(rng.choices(WORDS, k=10_000)).encode(),
        "crlf": text.encode() + b"\r", "unicode": "Ein Hund 🐕 läuft — „schnell“.".encode(),
    }[kind]


def fuzz_cases(rng: random.Random, count: int, folder: Path, run: Path, config: Path, data: dict[str, Path]):  # noqa: C901 (one branch per case of the category)
    """(family, argv, stdin bytes, expected output lines or None) for ``count`` generated cases."""
    absurd_ints = ["-1", "0", "1", "3", "1000000", "99999999999", "x", ""]
    broken_files = {
        "missing": folder / "nope.de",
        "short": data["short"],  # fewer lines than its partner
        "truncated gz": data["truncated"],
        "not utf-8": data["latin1"],
        "empty": data["empty"],
        "folder": folder,
        "foreign pickle": data["pickle"],
    }
    families = ["translate args", "translate stdin", "train config", "train data", "evaluate", "view",
                "embed", "align", "align-words", "compare", "explore", "curves"]
    for number in range(count):
        family = families[number % len(families)]
        pick = rng.choice
        if family == "translate args":
            argv = ["translate", str(run), *[_line(rng).decode("utf-8", "replace") for _ in range(rng.randint(0, 3))]]
            for option, values in (("--beam", absurd_ints), ("--batch-size", absurd_ints),
                                   ("--checkpoint", ["best", "last", "nope"]), ("--precision", ["bf16", "fp16", "fp8"]),
                                   ("--device", ["cpu", "cuda", "tpu", "cuda:7"])):
                if rng.random() < 0.35:
                    argv += [option, pick(values)]
            stdin = b"\n".join(_line(rng) for _ in range(rng.randint(1, 6))) if len(argv) == 2 else None
            yield family, argv, stdin
        elif family == "translate stdin":
            lines = [_line(rng) for _ in range(rng.randint(1, 12))]
            if rng.random() < 0.3:
                lines[0] = b"\xef\xbb\xbf" + lines[0]
            ending = pick([b"\n", b"\r\n", b"\r"])
            yield family, ["translate", str(run)], ending.join(lines) + pick([b"", ending])
        elif family == "train config":
            values = {"training.lr": ["-1", "0", "x", "null", "1e9"], "training.max_steps": absurd_ints,
                      "data.vocab_size": absurd_ints, "data.max_tokens": absurd_ints,
                      "model.hidden_dim": absurd_ints, "model.attention": ["telepathy", "sdp", "3"],
                      "training.bogus": ["1"], "data.max_length": absurd_ints, "search.beam": absurd_ints,
                      "training.device": ["cpu", "cuda", "tpu"], "training.precision": ["fp16", "fp8", "bf16"]}
            key = pick(sorted(values))
            argv = ["train", "--config", str(config), "--out", str(folder / f"fuzz-run-{number}"), "--no-progress",
                    "--max-steps", "2", "--set", f"{key}={pick(values[key])}"]
            yield family, argv, None
        elif family == "train data":
            side, broken = pick(["train", "valid"]), pick(sorted(broken_files))
            index = rng.randint(0, 1)
            value = [str(data["train.de"]), str(data["train.en"])] if side == "train" else \
                [str(data["valid.de"]), str(data["valid.en"])]
            value[index] = str(broken_files[broken])
            argv = ["train", "--config", str(config), "--out", str(folder / f"fuzz-run-{number}"), "--no-progress",
                    "--max-steps", "2", "--set", f"data.{side}=[{value[0]}, {value[1]}]"]
            yield family, argv, None
        elif family == "evaluate":
            argv = ["evaluate", pick([str(run), str(folder / "nope"), str(data["pickle"])]), "--no-progress",
                    "--split", pick(["valid", "test", "nope", ""]), "-n", pick(["0", "1", "-1", "1000000"])]
            if rng.random() < 0.5:
                argv += ["--beam", *rng.sample(absurd_ints[:6], rng.randint(1, 3))]
            yield family, argv, None
        elif family == "view":
            yield family, ["view", str(run), "--split", "valid", "-n", pick(absurd_ints), "--out",
                           str(folder / f"view-{number}.html"), "--no-progress", "--beam", pick(["1", "2", "0"])], None
        elif family == "embed":
            yield family, ["embed", "--src", str(pick([data["train.de"], data["short"], data["latin1"],
                                                        data["truncated"], folder / "nope"])),
                           "--tgt", str(data["train.en"]), "--out", str(folder / f"vec-{number}"),
                           "--dim", pick(["2", "0", "-1", "100000"]), "--min-count", pick(["1", "0", "5"])], None
        elif family == "align":
            argv = ["align", "--model", pick([str(run), str(folder / "nope"), str(data["pickle"])]),
                    "--src", str(pick([data["valid.de"], data["short"], data["latin1"], data["truncated"],
                                       data["empty"], folder / "nope"])),
                    "--tgt", str(data["valid.en"]), "--out", str(folder / f"links-{number}.txt"),
                    "--method", pick(["intersect", "grow-diag-final", "itermax", "match", "nope"])]
            for option, values in (("--layer", ["1", "-1", "0", "9", "x"]), ("--head", ["1", "mean", "0", "99"]),
                                   ("--max-tokens", absurd_ints), ("--threads", ["1", "0", "-2"]),
                                   ("--gold", [str(data["short"]), str(data["latin1"]), str(folder / "nope")])):
                if rng.random() < 0.3:
                    argv += [option, pick(values)]
            yield family, argv, None
        elif family == "align-words":
            yield family, ["align-words", "--src-vectors", str(pick([data["vec"], data["latin1"], folder / "nope",
                                                                     data["pickle"]])),
                           "--tgt-vectors", str(data["vec"]), "--src", _line(rng).decode("utf-8", "replace"),
                           "--tgt", _line(rng).decode("utf-8", "replace"),
                           "--temperature", pick(["0.2", "0", "-1", "x"])], None
        elif family == "compare":
            yield family, ["compare", "--config", str(config), "--attention", *rng.sample(["dot", "sdp", "telepathy",
                                                                                           "dot"], 2),
                           "--runs", pick(["0", "-1", "1"]), "--max-steps", "1", "--split", "valid",
                           "--out", str(folder / f"compare-{number}"), "--no-progress"], None
        elif family == "curves":
            runs = rng.sample([str(run), str(run / "metrics.jsonl"), str(folder / "nope"), str(data["pickle"]),
                               str(data["latin1"]), str(data["empty"]), str(folder)], rng.randint(1, 3))
            suffix = pick(['.png', '.svg', '.gif', ''])
            yield family, ["curves", *runs, "--out", str(folder / f"curves-{number}{suffix}"),
                           *(["--overwrite"] if rng.random() < 0.5 else [])], None
        else:
            yield family, ["explore", pick(["copy", "average", "noisy", "multihead", "all", "nope"]),
                           "--dim", pick(["0", "1", "4", "-3"]), "--keys", pick(["1", "2", "4", "0"]),
                           "--samples", pick(["1", "2", "10"])], None


def _lines(data: bytes) -> int:
    """Lines in ``data`` as translate counts them: each ends at LF (a lone CR is part of its line;
    a last line without its end counts)."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def fuzz(folder: Path, run: Path, config: Path, count: int, rng: random.Random) -> list[dict]:
    data = {name: folder / f"{name}" for name in ("train.de", "train.en", "valid.de", "valid.en")}
    data["short"] = folder / "short.en"
    data["short"].write_text("ein hund.\n", encoding="utf-8")
    data["latin1"] = folder / "latin1.de"
    data["latin1"].write_bytes("ein hund läuft.\n".encode("latin-1") * 30)
    data["empty"] = folder / "empty.de"
    data["empty"].write_bytes(b"")
    data["truncated"] = folder / "truncated.de.gz"
    data["truncated"].write_bytes(gzip.compress(data["train.de"].read_bytes())[:200])
    data["pickle"] = folder / "foreign.pkl"
    data["pickle"].write_bytes(pickle.dumps({"not": "attnmt"}))
    data["vec"] = folder / "tiny.vec"
    data["vec"].write_text("3 2\nein 0.1 0.2\nhund 0.3 0.1\nläuft 0.0 1.0\n", encoding="utf-8")
    cases = []
    for family, argv, stdin in fuzz_cases(rng, count, folder, run, config, data):
        before = {p for p in folder.rglob("*.tmp")}
        code, out, err = run_cli(argv, stdin)
        partial = sorted(str(p.relative_to(folder)) for p in set(folder.rglob("*.tmp")) - before)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        if code == -1:
            outcome = "traceback"
        elif code == -2:
            outcome = "hang"
        elif partial:
            outcome = "partial file left"
        elif code == 0:
            if family.startswith("translate") and stdin is not None and len(out.split("\n")) - 1 != _lines(stdin):
                outcome = "different result"  # one output line per input line
            else:
                outcome = "correct"
        elif code == 2 and "error:" in last and "Traceback" not in err:
            outcome = "clear error"
            if family.startswith("translate") and stdin is not None and "standard input line" in err:
                outcome = "clear error" if len(out.split("\n")) - 1 == _lines(stdin) else "different result"
        else:
            outcome = f"other (status {code})"
        cases.append({"family": family, "argv": [a.replace(str(folder), "$RUNS")[:80] for a in argv[1:]],
                      "outcome": outcome, "message": last.replace(str(folder), "$RUNS")[:300]})
        if outcome not in ("correct", "clear error"):
            print(f"  {family}: {outcome}: {' '.join(argv)[:150]} -> {last[:200]}", flush=True)
    return cases


def recorded_cases(categories: dict[str, list[dict]]) -> dict:
    """Every case of the small categories; of the fuzzed input, the outcomes per command family and
    every case that did not end correctly or with a clear error (500 ordinary cases are noise)."""
    recorded = {name: cases for name, cases in categories.items() if name not in GENERATED}
    for name in GENERATED:
        generated = categories.get(name, [])
        by_family: dict[str, dict[str, int]] = {}
        for case in generated:
            counts = by_family.setdefault(case["family"], {})
            counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
        recorded[name] = {"by_family": by_family,
                          "faults": [c for c in generated if c["outcome"] not in ("correct", "clear error")]}
    return recorded


GENERATED = ("serve over HTTP", "special files", "bombs and oversized configs", "standard output on a full disk",
             "files and streams", "values and words", "serve queues and bodies",
             "fuzzed input", "hostile files", "outputs onto inputs", "odd numbers", "structured formats",
             "edited run configs", "edited checkpoints", "misbehaving mechanisms")


def untrusted_setup(folder: Path, config: Path, reference: Path) -> tuple[list[Path], Path, dict[str, Path]]:
    """What the categories of untrusted runs start from: plain runs (the reference, and a Transformer),
    a run trained here with a user mechanism, and the configs of an RNN and a Transformer."""
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))
    transformer = dict(settings, model={"type": "transformer", "d_model": 16, "num_heads": 2, "ffn_dim": 32,
                                        "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0})
    configs = {"rnn": config, "transformer": save_yaml(folder, transformer, "transformer.yaml")}
    mechanism = folder / "my_attention.py"
    shutil.copy(PROJECT / "examples" / "my_attention.py", mechanism)
    for name, path, extra in (("transformer-run", configs["transformer"], []),
                              ("user-run", config, ["--attention", f"{mechanism}:MyAttention", "--set",
                                                    "model.attention_options={attention_dim: 8}"])):
        subprocess.run([*train_command(path, folder / name), "--max-steps", "10", *extra], env=ENV, check=True,
                       capture_output=True)
    return [reference, folder / "transformer-run"], folder / "user-run", configs


def run_cases(cases, folder: Path) -> list[dict]:
    """Run generated (family, argv, stdin, inputs, marker[, expectations]) cases in this process and
    classify them. With ``expectations["case"]``, the case's own folder: temporary files are looked
    for there, a file written into the benchmark's folder or its parent counts as lost (it escaped
    the case), and the folder is removed once the case is classified (thousands of cases stay cheap)."""
    results = []
    around = [folder, folder.parent]
    for family, argv, stdin, inputs, marker, *rest in cases:
        expect = rest[0] if rest else {}
        case = expect.get("case")
        searched = case if case is not None else folder
        before = {path: path.read_bytes() if path.is_file() else None for path in inputs}
        listed = {place: set(os.listdir(place)) for place in around} if case is not None else {}
        temporary = set(searched.rglob("*.tmp"))
        code, out, err = run_cli(argv, stdin)
        partial = sorted(str(p.relative_to(folder)) for p in set(searched.rglob("*.tmp")) - temporary)
        escaped = [f"{place}/{name}" for place, names in listed.items() for name in set(os.listdir(place)) - names]
        outcome = classify(code, err, inputs, before, marker, partial, expect, out, escaped)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        results.append({"family": family, "argv": [a.replace(str(folder), "$RUNS")[:80] for a in argv],
                        "outcome": outcome, "message": last.replace(str(folder), "$RUNS")[:300],
                        **({"escaped": escaped} if escaped else {})})
        if outcome not in ("correct", "clear error"):
            print(f"  {family}: {outcome}: {' '.join(argv)[:150]} -> {last[:200]}", flush=True)
        if case is not None:
            shutil.rmtree(case, ignore_errors=True)
    return results


OUTCOMES = ["correct", "clear error", "traceback", "unreadable checkpoint", "different result", "partial file left",
            "lost", "hang", "ran code", "user file changed"]


def summary_rows(categories: dict[str, list[dict]]) -> list[dict]:
    """A row of counts per category (every outcome of OUTCOMES, and "other"), printed as a table."""
    rows = []
    for name, cases in categories.items():
        counts = [sum(case["outcome"] == outcome for case in cases) for outcome in OUTCOMES]
        rows.append([name, len(cases), *counts, len(cases) - sum(counts)])
    print()
    print(format_table(["category", "cases", *OUTCOMES, "other"], rows))
    return [dict(zip(["category", "cases", *OUTCOMES, "other"], row)) for row in rows]


def main_only(args) -> None:
    """``--only``: the probe's categories named, their rows put into the existing JSON."""
    rng = random.Random(args.seed)
    torch.set_num_threads(1)
    begun = time.monotonic()
    # the commit whose code runs: read now, not when the cases end (a commit made meanwhile is not it)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="attnmt-faults-") as temporary:
        folder = Path(temporary)
        os.environ[TRUST_FILE_VARIABLE] = ENV[TRUST_FILE_VARIABLE] = str(folder / "trusted-code.txt")
        config = save_yaml(folder, tiny_run_config(folder, train_pairs=300, max_epochs=3, max_steps=45,
                                               checkpoint_every=3, examples=0), "config.yaml")
        subprocess.run(train_command(config, folder / "reference"), env=ENV, check=True, capture_output=True)
        categories = probe(args, rng, folder, folder / "reference", config)
    rows = summary_rows(categories)
    record = json.loads(args.output.read_text(encoding="utf-8")) if args.output.is_file() else {"summary": [],
                                                                                                   "cases": {}}
    record["summary"] = [row for row in record["summary"] if row["category"] not in categories] + rows
    record["cases"].update(recorded_cases(categories))
    record.setdefault("measured_by_only", {}).update(
        {name: {"commit": commit, "seconds": round(time.monotonic() - begun), "seed": args.seed,
                "command": "python benchmarks/faults.py --only " + " ".join(f'"{n}"' for n in categories)}
         for name in categories})
    for option in ("http", "special", "bombs", "stdout", "streams", "values", "queues"):
        record[option] = getattr(args, option)
    record["cases_in_all"] = sum(row["cases"] for row in record["summary"])
    write_text_atomic(args.output, json.dumps(portable(record), indent=2, ensure_ascii=False) + "\n")
    print(f"\nwrote {args.output}")


def run_probe_cases(cases, folder: Path) -> list[dict]:
    """``run_cases`` for the probe's special files and bombs: also a special file replaced by a
    regular one (``--overwrite`` onto /dev/null) counts as a user's file changed."""
    results = []
    for family, argv, stdin, inputs, marker, expect in cases:
        code, out, err = run_cli(argv, stdin, limit=60)
        outcome = classify(code, err, inputs, {}, marker, [], expect, out)
        if "special" in expect and not special_unchanged(expect):
            outcome = "user file changed"
        last = err.strip().splitlines()[-1] if err.strip() else ""
        results.append({"family": family, "argv": [a.replace(str(folder), "$RUNS")[:80] for a in argv],
                        "outcome": outcome, "message": last.replace(str(folder), "$RUNS")[:300]})
        if outcome not in ("correct", "clear error"):
            print(f"  {family}: {outcome}: {' '.join(argv)[:150]} -> {last[:200]}", flush=True)
        shutil.rmtree(expect["case"], ignore_errors=True)
    return results


PROBE = ("serve over HTTP", "special files", "bombs and oversized configs", "standard output on a full disk",
         "files and streams", "values and words", "serve queues and bodies")


def probe(args, rng: random.Random, folder: Path, reference: Path, config: Path) -> dict[str, list[dict]]:
    """The categories of what a new user's probe found (``fault_data/probe.py``), as ``--only`` asks."""
    wanted = set(args.only or PROBE)
    data = {name: folder / name for name in ("valid.de", "valid.en")}
    categories: dict[str, list[dict]] = {}
    if "serve over HTTP" in wanted:
        print(f"serve over HTTP: {args.http} requests", flush=True)
        categories["serve over HTTP"] = list(serve_http(rng, args.http, reference, ENV))
    if "special files" in wanted:
        print(f"special files: {args.special} cases", flush=True)
        categories["special files"] = run_probe_cases(
            special_files(rng, args.special, folder, reference, config, data), folder)
    if "bombs and oversized configs" in wanted:
        print(f"bombs and oversized configs: {args.bombs} cases", flush=True)
        categories["bombs and oversized configs"] = run_probe_cases(bombs(rng, args.bombs, folder, reference, config),
                                                                    folder)
    if "standard output on a full disk" in wanted:
        print(f"standard output on a full disk: {args.stdout} cases", flush=True)
        categories["standard output on a full disk"] = list(stdout_full(rng, args.stdout, reference, ENV))
    if "files and streams" in wanted:
        print(f"files and streams: {args.streams} cases", flush=True)
        categories["files and streams"] = _printed(files_and_streams(rng, args.streams, folder, reference, ENV))
    if "values and words" in wanted:
        print(f"values and words: {args.values} cases", flush=True)
        categories["values and words"] = _printed(values_and_words(rng, args.values, folder, reference, ENV))
    if "serve queues and bodies" in wanted:
        print(f"serve queues and bodies: {args.queues} requests", flush=True)
        categories["serve queues and bodies"] = _printed(serve_queues_and_bodies(rng, args.queues, reference, ENV))
    return categories


def _printed(results) -> list[dict]:
    """The results of a generator of result dicts, each that is not correct or a clear error printed."""
    kept = []
    for result in results:
        if result["outcome"] not in ("correct", "clear error"):
            print(f"  {result['family']}: {result['outcome']}: {result['case'][:120]} -> {result.get('message', '')}",
                  flush=True)
        kept.append(result)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="random SIGKILL moments (default 20)")
    parser.add_argument("--disk", type=int, default=40, help="full-disk cases over 8 writing commands (default 40)")
    parser.add_argument("--fuzz", type=int, default=600, help="generated input cases (default 600)")
    parser.add_argument("--hostile", type=int, default=200, help="files that would run code (default 200)")
    parser.add_argument("--onto", type=int, default=220, help="outputs aimed at inputs (default 220)")
    parser.add_argument("--numbers", type=int, default=550, help="odd numbers for numeric options (default 550)")
    parser.add_argument("--formats", type=int, default=400, help="mutated files of each format (default 400)")
    parser.add_argument("--signals", type=int, default=30, help="SIGINT/SIGTERM at random moments (default 30)")
    parser.add_argument("--configs", type=int, default=500, help="run configs edited at one key (default 500)")
    parser.add_argument("--checkpoints", type=int, default=500,
                        help="checkpoints edited at one entry, code records included (default 500)")
    parser.add_argument("--mechanisms", type=int, default=240,
                        help="misbehaving user mechanisms in check, train, compare and loading (default 240)")
    parser.add_argument("--http", type=int, default=600, help="requests against a real attnmt serve (default 600)")
    parser.add_argument("--special", type=int, default=200, help="special files read or written (default 200)")
    parser.add_argument("--bombs", type=int, default=240, help="alias bombs and oversized configs (default 240)")
    parser.add_argument("--stdout", type=int, default=40, help="commands writing to /dev/full (default 40)")
    parser.add_argument("--streams", type=int, default=60,
                        help="files appearing, bad standard input, suffixes, closed stdout, special corpora "
                             "(default 60)")
    parser.add_argument("--values", type=int, default=64,
                        help="seeds, titles, huge checkpoints, words, hanging checks, run folders as outputs "
                             "(default 64)")
    parser.add_argument("--queues", type=int, default=24,
                        help="serve: translations behind saliency, odd lengths, GET bodies, gold digits (default 24)")
    parser.add_argument("--only", nargs="+", choices=PROBE, default=None, metavar="CATEGORY",
                        help=f"run only these of the probe's categories ({'; '.join(PROBE)}) and merge their rows "
                             "into the existing JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.only:
        return main_only(args)
    rng = random.Random(args.seed)
    torch.set_num_threads(1)
    begun = time.monotonic()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT, capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT,
                             capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="attnmt-faults-") as temporary:
        folder = Path(temporary)
        # The code a user trained with is listed in a file of the benchmark's own, never the user's.
        os.environ[TRUST_FILE_VARIABLE] = ENV[TRUST_FILE_VARIABLE] = str(folder / "trusted-code.txt")
        config = save_yaml(folder, tiny_run_config(folder, train_pairs=300, max_epochs=3, max_steps=45,
                                               checkpoint_every=3, examples=0), "config.yaml")
        started = time.monotonic()
        subprocess.run(train_command(config, folder / "reference"), env=ENV, check=True, capture_output=True)
        seconds = time.monotonic() - started
        print(f"reference run: {seconds:.1f} s; killing it at {args.kills} moments", flush=True)
        categories = {"killed training": kills(folder, config, folder / "reference", args.kills, seconds, rng)}
        print("damaged run folders", flush=True)
        categories["damaged run folders"] = damaged(folder, folder / "reference")
        print(f"a full disk: {args.disk} cases", flush=True)
        categories["full disk"] = full_disk(folder, folder / "reference", config, args.disk, rng)
        print("two writers", flush=True)
        categories["two writers"] = two_writers(folder, config)
        print(f"fuzzed input: {args.fuzz} cases", flush=True)
        categories["fuzzed input"] = fuzz(folder, folder / "reference", config, args.fuzz, rng)
        data = {name: folder / name for name in ("valid.de", "valid.en")}
        data["vec"] = folder / "tiny.vec"  # written by fuzz()
        marker = folder / "CODE-RAN"
        reference = folder / "reference"
        print(f"hostile files: {args.hostile} cases", flush=True)
        categories["hostile files"] = run_cases(
            hostile_files(rng, args.hostile, folder, reference, data["vec"], marker), folder)
        print(f"outputs onto inputs: {args.onto} cases", flush=True)
        categories["outputs onto inputs"] = run_cases(outputs_onto_inputs(rng, args.onto, folder, reference, data),
                                                      folder)
        print(f"odd numbers: {args.numbers} cases", flush=True)
        categories["odd numbers"] = run_cases(odd_numbers(rng, args.numbers, folder, reference), folder)
        print(f"structured formats: {args.formats} cases", flush=True)
        categories["structured formats"] = run_cases(
            structured_formats(rng, args.formats, folder, reference, data), folder)
        print(f"signals: {args.signals} cases", flush=True)
        categories["signals"] = list(signals(rng, args.signals, folder, reference, ENV))
        running = sum(not case["ended_before_the_signal"] for case in categories["signals"])
        print(f"  {running} of {args.signals} commands were still running when the signal came", flush=True)
        runs, user_run, configs = untrusted_setup(folder, config, reference)
        print(f"edited run configs: {args.configs} cases", flush=True)
        categories["edited run configs"] = run_cases(edited_configs(rng, args.configs, folder, runs, marker), folder)
        print(f"edited checkpoints: {args.checkpoints} cases", flush=True)
        categories["edited checkpoints"] = run_cases(
            edited_checkpoints(rng, args.checkpoints, folder, runs, user_run, marker), folder)
        print(f"misbehaving mechanisms: {args.mechanisms} cases", flush=True)
        categories["misbehaving mechanisms"] = run_cases(
            misbehaving_mechanisms(rng, args.mechanisms, folder, user_run, configs), folder)
        if read_only_mounts_work():
            print("read-only folders", flush=True)
            categories["read-only folders"] = list(read_only_folders(folder, reference, config, data, ENV))
        else:
            print("read-only folders: skipped (needs unshare -m and the right to mount, as root)", flush=True)
        categories.update(probe(args, rng, folder, reference, config))  # last, as --only merges them

    rows = summary_rows(categories)
    record = {"question": "does attnmt end every faulty case correctly or with a clear error?",
              "commit": commit + ("+uncommitted changes" if changed else ""),
              "command": "python benchmarks/faults.py " + " ".join(sys.argv[1:]),
              "seconds": round(time.monotonic() - begun),
              "torch": torch.__version__, "kills": args.kills, "disk": args.disk, "fuzz": args.fuzz,
              "hostile": args.hostile, "onto": args.onto, "numbers": args.numbers, "formats": args.formats,
              "signals": args.signals, "configs": args.configs, "checkpoints": args.checkpoints,
              "mechanisms": args.mechanisms, "cases_in_all": sum(len(cases) for cases in categories.values()),
              "http": args.http, "special": args.special, "bombs": args.bombs, "stdout": args.stdout,
              "streams": args.streams, "values": args.values, "queues": args.queues,
              "seed": args.seed, "summary": rows,
              "cases": recorded_cases(categories)}
    write_text_atomic(args.output, json.dumps(portable(record), indent=2, ensure_ascii=False) + "\n")
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
