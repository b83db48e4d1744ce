"""What a new user's hostile input still broke (issue 77), each case as it was found: a file that
appeared while a command worked was replaced, bytes that are not UTF-8 on standard input, an
upper-case suffix, a closed standard output, /dev/zero as a corpus, seeds out of range, a title
matplotlib took for TeX, a checkpoint whose config asks for a huge model, words that named the
wrong thing, a check that never ended, and outputs written into a run folder."""

from __future__ import annotations

import errno
import io
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnmt.runtime.atomic_files as atomic_files
from attnmt.errors import OutputError
from attnmt.runs.checkpoint import load_checkpoint
from attnmt.runtime import memory
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.outputs import check_output
from attnmt.visual.export import load_attention

PROJECT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(PROJECT)}
SDP = pytest.mark.parametrize("tiny_run", ["sdp"], indirect=True)


def attnmt_process(*arguments: str, stdin: bytes | None = None, **options) -> subprocess.CompletedProcess:
    """attnmt as its own process (what standard streams and limits it starts with matter here)."""
    return subprocess.run([sys.executable, "-m", "attnmt", *arguments], input=stdin, capture_output=True,
                          env={**ENV, **options.pop("env", {})}, timeout=120, **options)


# -- 1. a file that appears while a command works is not replaced ------------------------------------


def release_claims() -> None:
    atomic_files.release_claims()  # what the command line does when a command ends


@pytest.fixture
def claims():
    yield
    release_claims()


def test_a_file_that_appeared_after_the_check_is_left_as_it_is(tmp_path, claims):
    target = check_output(tmp_path / "r.jsonl", "--out", overwrite=False, suffixes=[".jsonl"])
    target.write_text("someone else's\n")
    with pytest.raises(OutputError, match="appeared there while attnmt worked.*--overwrite"):
        write_text_atomic(target, "ours\n")
    assert target.read_text() == "someone else's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]  # no temporary file left


def test_a_command_replaces_its_own_output_and_overwrite_replaces_any(tmp_path, claims):
    target = check_output(tmp_path / "r.jsonl", "--out", overwrite=False)
    write_text_atomic(target, "first\n")
    write_text_atomic(target, "second\n")  # the command's own earlier version
    assert target.read_text() == "second\n"
    release_claims()
    other = tmp_path / "o.jsonl"
    check_output(other, "--out", overwrite=True)
    other.write_text("appeared\n")
    write_text_atomic(other, "ours\n")  # --overwrite: replaced, as asked
    assert other.read_text() == "ours\n"


def test_without_hard_links_the_final_step_still_refuses_a_file_that_appeared(tmp_path, claims, monkeypatch):
    def no_links(source, target):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(atomic_files.os, "link", no_links)
    target = check_output(tmp_path / "a.txt", "--out", overwrite=False)
    write_text_atomic(target, "written\n")
    assert target.read_text() == "written\n"
    release_claims()
    second = check_output(tmp_path / "b.txt", "--out", overwrite=False)
    second.write_text("mine\n")
    with pytest.raises(OutputError, match="appeared"):
        write_text_atomic(second, "ours\n")
    assert second.read_text() == "mine\n"


@SDP
@pytest.mark.parametrize(("module", "function", "arguments", "name"), [
    ("attnmt.evaluation.explain", "explain", ["explain", "ein hund", "--methods", "attention", "--out"], "r.npz"),
    ("attnmt.visual.export", "attention_records", ["translate", "ein hund", "--attention-out"], "a.jsonl"),
])
def test_a_writer_does_not_replace_a_file_that_appeared_while_it_worked(tiny_run, tmp_path, attnmt_cli, monkeypatch,
                                                                        module, function, arguments, name):
    """While the command works (inside ``function``), someone creates its output file."""
    import importlib

    _, run = tiny_run
    out = tmp_path / name
    patched = importlib.import_module(module)
    real = getattr(patched, function)

    def then_a_file_appears(*positional, **options):
        out.write_text("mine")
        return real(*positional, **options)

    monkeypatch.setattr(patched, function, then_a_file_appears)
    command = [arguments[0], run, *arguments[1:], out]
    done = attnmt_cli(*command)
    assert done.returncode == 2 and "appeared there while attnmt worked" in done.stderr
    assert out.read_text() == "mine"
    monkeypatch.setattr(patched, function, real)
    out.unlink()
    assert attnmt_cli(*command).returncode == 0
    assert len(load_attention(out)) == 1  # the claim of the first command did not outlive it


# -- 2. standard input that is not UTF-8 ---------------------------------------------------------------


@SDP
@pytest.mark.parametrize(("raw", "words"), [
    (b"Ein Hund \xff.\n", "standard input line 1: not valid UTF-8 (byte 0xff at byte 10)"),
    (b"Ein Hund.\n\n\xfe\n", "standard input line 3: not valid UTF-8 (byte 0xfe at byte 1)"),
    ("Ein Hund.\n".encode("utf-16"), "standard input is UTF-16"),
    ("Ein Hund.\n".encode("utf-32"), "standard input is UTF-32"),
])
def test_explain_names_the_line_of_standard_input_that_is_not_utf8(tiny_run, attnmt_cli, monkeypatch, raw, words):
    _, run = tiny_run
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    done = attnmt_cli("explain", run)
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr


@SDP
def test_explain_and_translate_read_bad_bytes_in_one_line_in_their_own_process(tiny_run):
    _, run = tiny_run
    for command in ("explain", "translate"):
        done = attnmt_process(command, str(run), stdin=b"Ein Hund \xff.\n", env={"LC_ALL": "C"}, text=False)
        done = subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())
        assert "standard input line 1: not valid UTF-8" in done.stderr and "Traceback" not in done.stderr
        assert done.returncode == 2


# -- 3. the suffix rule: case-insensitive, checked before any work ----------------------------------


@SDP
def test_an_upper_case_suffix_writes_that_format(tiny_run, tmp_path, attnmt_cli):
    _, run = tiny_run
    assert attnmt_cli("explain", run, "ein hund", "--methods", "attention", "--out", tmp_path / "X.NPZ").returncode == 0
    assert len(load_attention(tmp_path / "X.NPZ")) == 1
    assert attnmt_cli("translate", run, "ein hund", "--attention-out", tmp_path / "UP.JSONL").returncode == 0
    assert (tmp_path / "UP.JSONL").read_text().startswith("{")
    assert len(load_attention(tmp_path / "UP.JSONL")) == 1


# -- 4. a closed standard output ------------------------------------------------------------------------


@pytest.mark.parametrize("arguments", [("recipes",), ("translate", "no-such-run", "Ein Hund.")])
def test_a_closed_standard_output_is_one_line_not_a_traceback(arguments):
    done = subprocess.run([sys.executable, "-m", "attnmt", *arguments], capture_output=False, stderr=subprocess.PIPE,
                          text=True, env=ENV, timeout=60, preexec_fn=lambda: os.close(1))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"attnmt {arguments[0]}: error: standard output is closed; send it to a file or " \
                                  "to /dev/null (> /dev/null) instead"


# -- 5. every file attnmt reads: a regular file, within a bound ----------------------------------------


def test_a_corpus_that_is_a_device_or_a_fifo_is_refused_at_once(tmp_path, attnmt_cli):
    (tmp_path / "b.fr").write_text("un chien\n")
    done = attnmt_cli("embed", "--src", "/dev/zero", "--tgt", tmp_path / "b.fr", "--out", tmp_path / "v")
    assert done.returncode == 2 and "/dev/zero: is a device, not a regular file" in done.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = attnmt_cli("embed", "--src", fifo, "--tgt", tmp_path / "b.fr", "--out", tmp_path / "v")
    assert done.returncode == 2 and "is a FIFO, not a regular file" in done.stderr  # and did not wait for a writer
    assert not (tmp_path / "v").exists()


def test_a_gzip_corpus_that_unpacks_past_the_bound_is_refused(tmp_path, monkeypatch):
    import gzip

    from attnmt.data import corpus
    from attnmt.errors import DataError

    monkeypatch.setattr(corpus, "MAX_CORPUS_BYTES", 10_000)
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(gzip.compress(b"ein hund\n" * 100_000))
    assert bomb.stat().st_size < 10_000
    with pytest.raises(DataError, match="larger than 10,000 bytes"):
        corpus.read_lines(bomb)


# -- 6. every seed option is range-checked --------------------------------------------------------------


@pytest.mark.parametrize("arguments", [
    ("explain", "run", "--seed", "-1", "Ein Hund."),
    ("embed", "--src", "a", "--tgt", "b", "--out", "v", "--seed", "-1"),
    ("explore", "copy", "--seed", str(2**63)),
    ("train", "--config", "tiny", "--seed", "-1"),
    ("explain", "run", "--seed", "9" * 5000, "Ein Hund."),
])
def test_every_seed_option_is_range_checked_in_one_line(arguments, attnmt_cli):
    with pytest.raises(SystemExit) as stopped:
        attnmt_cli(*arguments)
    assert stopped.value.code == 2


def test_a_negative_seed_says_its_range(capsys):
    from attnmt.cli import main

    with pytest.raises(SystemExit):
        main(["explain", "run", "--seed", "-1", "Ein Hund."])
    err = capsys.readouterr().err
    assert "argument --seed: must be an integer from 0 to 2**63 - 1, got -1" in err and "Traceback" not in err


# -- 7. titles and labels are plain text ---------------------------------------------------------------


@SDP
def test_a_title_and_a_run_name_with_dollars_are_drawn_as_written(tiny_run, tmp_path, attnmt_cli):
    _, run = tiny_run
    named = tmp_path / "$x^$"
    shutil.copytree(run, named)
    for title in ("$$$", "$\\frac{$", "cost in $ and $"):
        out = tmp_path / f"c{len(title)}.png"
        done = attnmt_cli("curves", named, "--out", out, "--title", title)
        assert done.returncode == 0, done.stderr
        assert out.read_bytes().startswith(b"\x89PNG")


# -- 8. a checkpoint whose config asks for a huge model ----------------------------------------------


@SDP
def test_a_huge_dimension_in_a_checkpoints_config_is_refused_before_anything_is_allocated(tiny_run, tmp_path):
    """Under an address-space limit 600 MiB above what the process has, a config asking for
    embed_dim 1,000,000 (over a gigabyte of weights here) ends in the one-line mismatch, found on the
    meta device; before, the allocation failed with a traceback."""
    _, run = tiny_run
    huge = tmp_path / "huge"
    shutil.copytree(run, huge)
    for name in ("best.pt", "last.pt"):
        state = load_checkpoint(huge / name)
        state["config"]["model"]["embed_dim"] = 1_000_000
        torch.save(state, huge / name)
    limit = "import resource, sys, runpy, torch, attnmt.cli; " \
            "v = int(open('/proc/self/statm').read().split()[0]) * 4096; " \
            "resource.setrlimit(resource.RLIMIT_AS, (v + 600 * 2**20, v + 600 * 2**20)); " \
            "sys.argv = ['attnmt', 'translate', sys.argv[1], 'ein hund']; " \
            "runpy.run_module('attnmt', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", limit, str(huge)], capture_output=True, text=True, env=ENV,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "the weights do not fit the model its config describes: shape mismatch" in done.stderr


def test_the_free_memory_respects_the_address_space_limit():
    script = ("import resource; from attnmt.runtime.memory import available_ram, address_space_room; "
              "v = int(open('/proc/self/statm').read().split()[0]) * 4096; "
              "resource.setrlimit(resource.RLIMIT_AS, (v + 2**30, resource.RLIM_INFINITY)); "
              "print(address_space_room(), available_ram())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV, timeout=60,
                          check=True)
    room, available = map(int, done.stdout.split())
    assert 0.8 * 2**30 < room <= 2**30 and available <= room
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != 2**30  # this process is unchanged


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_free_memory_respects_the_cgroup_limit(tmp_path, monkeypatch, version):
    root = tmp_path / "cgroup"
    if version == "v2":
        folder, lines = root / "user.slice" / "job", "0::/user.slice/job\n"
        folder.mkdir(parents=True)
        (folder / "memory.max").write_text(f"{3 * 2**30}\n")
        (folder / "memory.current").write_text(f"{2 * 2**30}\n")
        (folder / "memory.stat").write_text(f"anon 1\ninactive_file {2**28}\n")
        (root / "user.slice" / "memory.max").write_text("max\n")
        (root / "user.slice" / "memory.current").write_text(f"{2 * 2**30}\n")
    else:
        folder, lines = root / "memory" / "docker" / "abc", "4:memory:/docker/abc\n1:cpu:/\n"
        folder.mkdir(parents=True)
        (folder / "memory.limit_in_bytes").write_text(f"{3 * 2**30}\n")
        (folder / "memory.usage_in_bytes").write_text(f"{2 * 2**30}\n")
        (folder / "memory.stat").write_text(f"cache 5\ntotal_inactive_file {2**28}\n")
        (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
        (root / "memory" / "memory.usage_in_bytes").write_text("1\n")
    cgroup_file = tmp_path / "self-cgroup"
    cgroup_file.write_text(lines)
    monkeypatch.setattr(memory, "_CGROUP", root)
    monkeypatch.setattr(memory, "_PROC_CGROUP", cgroup_file)
    assert memory.cgroup_room() == 2**30 + 2**28  # the limit less the usage, the inactive page cache free
    assert memory.available_ram() <= 2**30 + 2**28


# -- 9. words that name the right thing ----------------------------------------------------------------


@SDP
def test_explain_names_the_input_line_when_blank_lines_are_skipped(tiny_run, attnmt_cli, monkeypatch):
    _, run = tiny_run
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n\nein hund\n\n" + b"x " * 20000 + b"\n")))
    done = attnmt_cli("explain", run, "--methods", "attention")
    assert done.returncode == 2 and "standard input line 5:" in done.stderr
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n\nein hund\n")))
    done = attnmt_cli("explain", run, "--methods", "attention")
    assert done.returncode == 0 and done.stdout.startswith("standard input line 3: ein hund")


def test_explain_without_its_run_says_the_run_is_missing(attnmt_cli):
    done = attnmt_cli("explain", "Ein Hund läuft.")
    assert done.returncode == 2
    assert "RUN 'Ein Hund läuft.': no such run folder or checkpoint; give the run first" in done.stderr


@pytest.mark.parametrize("setting", ["", "training", "=3", ".lr=1"])
def test_a_malformed_set_is_not_blamed_on_the_config_file(setting, attnmt_cli, tmp_path):
    done = attnmt_cli("train", "--config", "tiny", "--set", setting, "--out", tmp_path / "run")
    assert done.returncode == 2
    assert f"error: --set {setting!r}: expected SECTION.KEY=VALUE" in done.stderr and "tiny.yaml" not in done.stderr
    assert not (tmp_path / "run").exists()


# -- the unsure ones, decided ------------------------------------------------------------------------


def test_check_stops_a_forward_that_never_returns(tmp_path, attnmt_cli):
    (tmp_path / "hang.py").write_text(
        "from torch import nn\n\n\nclass Hang(nn.Module):\n"
        "    def __init__(self, query_dim, key_dim, value_dim):\n        super().__init__()\n\n"
        "    def forward(self, query, keys, values, mask=None):\n"
        "        while True:\n            try:\n                pass\n"
        "            except Exception:\n                pass\n")
    done = attnmt_cli("check", f"{tmp_path / 'hang.py'}:Hang", "--time-limit", "0.5", "--no-speed")
    assert done.returncode == 1
    assert "| shapes       | fail   | did not return within 0.5 s" in done.stdout
    assert "not run: shapes ran past the time limit" in done.stdout
    assert attnmt_cli("check", "dot", "--time-limit", "0").returncode == 2


@SDP
def test_compare_and_embed_refuse_a_run_folder_as_their_out(tiny_run, tmp_path, attnmt_cli):
    _, run = tiny_run
    before = sorted(path.name for path in run.iterdir())
    (tmp_path / "a").write_text("ein hund\n")
    done = attnmt_cli("embed", "--src", tmp_path / "a", "--tgt", tmp_path / "a", "--out", run)
    assert done.returncode == 2 and "is the folder of a training run" in done.stderr
    done = attnmt_cli("compare", "--config", "tiny", "--attention", "dot", "--out", run)
    assert done.returncode == 2 and "is the folder of a training run" in done.stderr
    assert sorted(path.name for path in run.iterdir()) == before


@SDP
@pytest.mark.parametrize("command", ["recipes", "explain"])
def test_a_reader_that_leaves_ends_the_command_with_141_silently(tiny_run, command):
    """Decided: as Unix tools do (``attnmt explain ... | head -c 5``), status 141 and nothing said."""
    _, run = tiny_run
    arguments = ["recipes"] if command == "recipes" else ["explain", str(run), "ein hund", "--methods", "attention"]
    process = subprocess.Popen([sys.executable, "-m", "attnmt", *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=ENV)
    process.stdout.close()  # the reader leaves before the first line
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "Traceback" not in err and "error" not in err


def test_a_check_keeps_the_time_limit_of_its_caller():
    """``check``'s time limit (a SIGALRM timer) inside a caller's own alarm, as benchmarks/faults.py
    runs it: the caller's alarm still comes at its moment, and not again after."""
    import signal
    import time

    from attnmt.attention.conformance import TimeLimitReached, time_limit

    class CallersAlarm(Exception):
        pass

    def callers(signum, frame):
        raise CallersAlarm

    previous = signal.signal(signal.SIGALRM, callers)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(TimeLimitReached), time_limit(0.2):
            while True:
                pass
        assert 0.5 < signal.getitimer(signal.ITIMER_REAL)[0] < 0.85
        started = time.monotonic()
        with pytest.raises(CallersAlarm), time_limit(30):
            while True:
                pass
        assert time.monotonic() - started < 2 and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
