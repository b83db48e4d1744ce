"""The kinds of fault the second probe of a new user found (issue 77), made in bulk for
``benchmarks/faults.py``. Each case runs attnmt in its own process: what matters is how its
standard streams, its limits and the files around it start.

- ``files_and_streams``: a file that appears at an output's name while the command works (it must
  be left as it is: one line, status 2), standard input that is not UTF-8 (bytes of every kind,
  ``LC_ALL=C``, UTF-16 and UTF-32) for ``explain`` and ``translate``, output names with an
  upper-case suffix (they must be written, in that format), a closed standard output, and corpora
  that are devices or FIFOs.
- ``values_and_words``: seeds out of range in every command that takes one, titles and run names
  with ``$``, a checkpoint whose config asks for a huge dimension (under an address-space limit),
  a forgotten run folder, blank input lines before a bad one, malformed ``--set``, a check of a
  forward that never returns, and a run folder given as the output folder of ``embed`` and
  ``compare``.
- ``serve_queues_and_bodies``: a translation sent while heavy saliency fills a model's queue (it
  must be answered 200), Content-Length in other digits, GET and HEAD carrying a second request as
  their body, and gold links of thousands of digits.

Each function yields result dicts ``{"family", "case", "outcome", "message"}``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from attnmt.runs.checkpoint import load_checkpoint
from attnmt.visual.export import load_attention

from fault_data.probe import MAX_SECONDS, _answers, _exchange, _post, _start_serve

ATTNMT = [sys.executable, "-m", "attnmt"]


def _run(argv: list[str], env: dict, stdin: bytes | None = None, **options) -> tuple[int, str, str]:
    """``attnmt ARGV`` in its own process: (status, stdout, stderr); status -2 past MAX_SECONDS."""
    try:
        done = subprocess.run([*ATTNMT, *argv], input=stdin, capture_output="stdout" not in options, env=env,
                              timeout=MAX_SECONDS, **options)
    except subprocess.TimeoutExpired:
        return -2, "", "hang"
    return done.returncode, _text(done.stdout), _text(done.stderr)


def _text(data: bytes | str | None) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data or ""


def _error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _outcome(status: int, err: str, wanted_status: int, words: str = "") -> str:
    """"correct" when the command ended with ``wanted_status`` and, for an error, one line holding
    ``words``; else what went wrong."""
    if "Traceback" in err or "Exception ignored" in err:
        return "traceback"
    if status == -2:
        return "hang"
    errors = [line for line in err.splitlines() if "error:" in line]
    if status != wanted_status:
        return f"other (status {status})"
    if wanted_status == 2 and (len(errors) != 1 or words not in errors[0]):
        return f"other (words: {_error_line(err)[:120]})"
    return "correct" if wanted_status != 2 else "clear error"


def _result(family: str, case: str, outcome: str, err: str) -> dict:
    return {"family": family, "case": case[:160], "outcome": outcome, "message": _error_line(err)[:300]}


# ------------------------------------------------------------------------------- files and streams


def _appearing(run: Path, folder: Path, number: int, env: dict, rng: random.Random) -> dict:
    """A command works; a file appears at its output's name; it must be left as it is."""
    sentences = "".join(f"Ein Hund läuft im Park {k}.\n" for k in range(rng.choice([40, 80, 120]))).encode()
    kind = rng.choice(["explain --out", "translate --attention-out"])
    out = folder / f"appeared-{number}{rng.choice(['.npz', '.jsonl'])}"
    argv = (["explain", str(run), "--methods", "attention,gradient", "--random-orders", "1", "--out", str(out)]
            if kind == "explain --out" else ["translate", str(run), "--attention-out", str(out)])
    process = subprocess.Popen([*ATTNMT, *argv], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=env)
    assert process.stdin is not None and process.stderr is not None
    process.stdin.write(sentences)
    process.stdin.close()
    first = process.stderr.readline().decode("utf-8", "replace")  # the device line: the model is loaded
    out.write_bytes(b"someone else's file")
    try:
        err = first + process.stderr.read().decode("utf-8", "replace")
        status = process.wait(timeout=MAX_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        return _result(f"a file appears: {kind}", " ".join(argv), "hang", "")
    kept = out.read_bytes() == b"someone else's file"
    if not kept:
        outcome = "user file changed"
    elif status == 0:  # it finished before the file appeared: nothing was measured
        outcome = "other (finished before the file appeared)"
    else:
        outcome = _outcome(status, err, 2, "appeared there while attnmt worked")
    out.unlink(missing_ok=True)
    return _result(f"a file appears: {kind}", " ".join(argv), outcome, err)


def _bad_stdin(rng: random.Random) -> tuple[bytes, str, dict]:
    kind = rng.choice(["invalid byte", "invalid byte after blank lines", "UTF-16", "UTF-32", "Latin-1", "LC_ALL=C"])
    env: dict = {}
    if kind == "UTF-16":
        return "Ein Hund läuft.\n".encode("utf-16"), "standard input is UTF-16", env
    if kind == "UTF-32":
        return "Ein Hund läuft.\n".encode("utf-32"), "standard input is UTF-32", env
    if kind == "Latin-1":
        return "Ein Hund läuft über die Straße.\n".encode("latin-1"), "standard input line 1: not valid UTF-8", env
    if kind == "LC_ALL=C":
        env = {"LC_ALL": "C", "LANG": "C"}
    blank = b"\n" * (rng.randint(1, 4) if kind == "invalid byte after blank lines" else 0)
    byte = bytes([rng.choice([0x80, 0xC0, 0xFE, 0xFF, 0xED])])
    line = 1 + blank.count(b"\n")
    return blank + b"Ein Hund " + byte + b".\n", f"standard input line {line}: not valid UTF-8", env


def files_and_streams(rng: random.Random, count: int, folder: Path, run: Path, env: dict) -> Iterator[dict]:
    """``count`` cases of the kinds of the module docstring, in turn."""
    (folder / "b.fr").write_text("un chien\n", encoding="utf-8")
    fifo = folder / "corpus.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    kinds = ["appears", "stdin", "suffix", "closed stdout", "special corpus"]
    for number in range(count):
        kind = kinds[number % len(kinds)]
        if kind == "appears":
            yield _appearing(run, folder, number, env, rng)
        elif kind == "stdin":
            data, words, extra = _bad_stdin(rng)
            command = rng.choice(["explain", "translate"])
            status, _, err = _run([command, str(run)], {**env, **extra}, stdin=data)
            yield _result(f"stdin not UTF-8: {command}", repr(data[:40]), _outcome(status, err, 2, words), err)
        elif kind == "suffix":
            suffix = rng.choice([".NPZ", ".JSONL", ".Npz", ".JsonL"])
            out = folder / f"upper-{number}{suffix}"
            argv = rng.choice([["explain", str(run), "Ein Hund.", "--methods", "attention", "--random-orders", "1",
                                "--out", str(out)], ["translate", str(run), "Ein Hund.", "--attention-out", str(out)]])
            status, _, err = _run(argv, env)
            outcome = _outcome(status, err, 0)
            if outcome == "correct":
                try:
                    outcome = "correct" if len(load_attention(out)) == 1 else "different result"
                except Exception as error:  # noqa: BLE001 - what is measured
                    outcome, err = "different result", f"{type(error).__name__}: {error}"
            out.unlink(missing_ok=True)
            yield _result(f"upper-case suffix: {argv[0]}", " ".join(argv), outcome, err)
        elif kind == "closed stdout":
            argv = rng.choice([["recipes"], ["translate", str(run), "Ein Hund."],
                               ["explain", str(run), "Ein Hund.", "--methods", "attention"], ["--version"]])
            status, _, err = _run(argv, env, stdout=None, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
            yield _result(f"closed stdout: {argv[0]}", " ".join(argv),
                          _outcome(status, err, 2, "standard output is closed"), err)
        else:
            source = rng.choice(["/dev/zero", "/dev/urandom", str(fifo), "/dev/null"])
            argv = rng.choice([["embed", "--src", source, "--tgt", str(folder / "b.fr"), "--out", str(folder / "v")],
                               ["align", "--model", str(run), "--src", source, "--tgt", str(folder / "b.fr"),
                                "--out", str(folder / f"links-{number}.txt")]])
            status, _, err = _run(argv, env)
            words = "not a regular file" if source != "/dev/null" else ""
            yield _result(f"special corpus: {argv[0]}", " ".join(argv), _outcome(status, err, 2, words), err)


# ------------------------------------------------------------------------------------ values and words


HANG = ("from torch import nn\n\n\nclass Hang(nn.Module):\n    def __init__(self, query_dim, key_dim, value_dim):\n"
        "        super().__init__()\n\n    def forward(self, query, keys, values, mask=None):\n"
        "        while True:\n            try:\n                pass\n            except Exception:\n"
        "                pass\n")


def _huge_run(run: Path, folder: Path, key: str) -> Path:
    huge = folder / f"huge-{key}"
    if not huge.exists():
        shutil.copytree(run, huge, ignore=shutil.ignore_patterns("examples", "*.tmp"))
        for name in ("best.pt", "last.pt"):
            state = load_checkpoint(huge / name)
            state["config"]["model"][key] = 1_000_000
            torch.save(state, huge / name)
    return huge


LIMITED = ("import resource, sys, runpy, torch, attnmt.cli; "
           "v = int(open('/proc/self/statm').read().split()[0]) * 4096; "
           "resource.setrlimit(resource.RLIMIT_AS, (v + 600 * 2**20, v + 600 * 2**20)); "
           "sys.argv = ['attnmt', *sys.argv[1:]]; runpy.run_module('attnmt', run_name='__main__')")


def values_and_words(rng: random.Random, count: int, folder: Path, run: Path, env: dict) -> Iterator[dict]:  # noqa: C901 (one branch per kind)
    """``count`` cases of the kinds of the module docstring, in turn."""
    (folder / "hang.py").write_text(HANG, encoding="utf-8")
    (folder / "a.txt").write_text("ein hund\n", encoding="utf-8")
    kinds = ["seed", "title", "huge checkpoint", "forgotten run", "blank lines", "set", "hanging check", "out RUN"]
    for number in range(count):
        kind = kinds[number % len(kinds)]
        if kind == "seed":
            seed = rng.choice(["-1", str(2**63), "9" * rng.choice([30, 5000]), "\u00b2", "1e3", ""])
            argv = rng.choice([["explain", str(run), "Ein Hund.", "--seed", seed],
                               ["embed", "--src", str(folder / "a.txt"), "--tgt", str(folder / "a.txt"), "--out",
                                str(folder / "v"), "--seed", seed],
                               ["explore", "copy", "--seed", seed], ["train", "--config", "tiny", "--seed", seed,
                                                                     "--out", str(folder / "never")]])
            status, _, err = _run(argv, env)
            yield _result(f"seed out of range: {argv[0]}", " ".join(argv)[:160],
                          _outcome(status, err, 2, "--seed"), err)
        elif kind == "title":
            title = rng.choice(["$$$", "$", "$\\frac{$", "a $ b $ c", "\\$x$", "$^$"])
            named = folder / f"run-{number}-{rng.choice(['$x$', '$$', 'plain'])}"
            shutil.copytree(run, named, ignore=shutil.ignore_patterns("examples", "*.tmp"))
            out = folder / f"curves-{number}.{rng.choice(['png', 'svg', 'pdf'])}"
            status, _, err = _run(["curves", str(named), "--out", str(out), "--title", title], env)
            outcome = _outcome(status, err, 0)
            if outcome == "correct" and not out.is_file():
                outcome = "different result"
            shutil.rmtree(named, ignore_errors=True)
            out.unlink(missing_ok=True)
            yield _result("a title or run name with $: curves", title, outcome, err)
        elif kind == "huge checkpoint":
            huge = _huge_run(run, folder, rng.choice(["embed_dim", "hidden_dim"]))
            command = rng.choice([["translate", str(huge), "Ein Hund."],
                                  ["evaluate", str(huge), "--split", "valid", "-n", "1", "--no-progress"],
                                  ["explain", str(huge), "Ein Hund.", "--methods", "attention"]])
            try:
                done = subprocess.run([sys.executable, "-c", LIMITED, *command], capture_output=True, text=True,
                                      env=env, timeout=MAX_SECONDS)
                status, err = done.returncode, done.stderr
            except subprocess.TimeoutExpired:
                status, err = -2, "hang"
            yield _result(f"huge checkpoint dimension under ulimit -v: {command[0]}", " ".join(command),
                          _outcome(status, err, 2, "do not fit"), err)
        elif kind == "forgotten run":
            status, _, err = _run(["explain", rng.choice(["Ein Hund läuft.", "Zwei Katzen", "x"])], env)
            yield _result("explain without its run", "", _outcome(status, err, 2, "no such run folder"), err)
        elif kind == "blank lines":
            blank = rng.randint(1, 5)
            data = b"\n" * blank + b"Ein Hund.\n\n" + b"x " * 20000 + b"\n"
            status, _, err = _run(["explain", str(run), "--methods", "attention"], env, stdin=data)
            yield _result("explain names the input line", f"{blank} blank lines first",
                          _outcome(status, err, 2, f"standard input line {blank + 3}"), err)
        elif kind == "set":
            setting = rng.choice(["", "training", "=3", ".lr=1", "training.", "nosuch.key=1"])
            status, _, err = _run(["train", "--config", "tiny", "--set", setting, "--out", str(folder / "never")], env)
            outcome = _outcome(status, err, 2, "--set")
            if outcome == "clear error" and "tiny.yaml" in err:
                outcome = "other (blamed on the config file)"
            yield _result("a malformed --set", repr(setting), outcome, err)
        elif kind == "hanging check":
            started = time.monotonic()
            status, _, err = _run(["check", f"{folder / 'hang.py'}:Hang", "--time-limit", "2", "--no-speed"], env)
            outcome = "correct" if status == 1 and time.monotonic() - started < MAX_SECONDS else \
                _outcome(status, err, 1)
            yield _result("check of a forward that never returns", "--time-limit 2", outcome, err)
        else:
            before = sorted(path.name for path in run.iterdir())
            argv = rng.choice([["embed", "--src", str(folder / "a.txt"), "--tgt", str(folder / "a.txt"), "--out",
                                str(run)], ["compare", "--config", "tiny", "--attention", "dot", "--out", str(run)]])
            status, _, err = _run(argv, env)
            outcome = _outcome(status, err, 2, "is the folder of a training run")
            if sorted(path.name for path in run.iterdir()) != before:
                outcome = "user file changed"
            yield _result(f"a run folder as the output folder: {argv[0]}", " ".join(argv), outcome, err)


# ---------------------------------------------------------------------------- serve: queues, bodies


def _saliency_flood(host: str, port: int, heavy: int) -> list[threading.Thread]:
    body = json.dumps({"sentence": "Ein Hund läuft im Park. " * 4, "model": "run", "method": "integrated",
                       "steps": 64}).encode()
    threads = [threading.Thread(target=_exchange, args=(host, port, _post(port, "/api/saliency", body,
                                {"Content-Type": "application/json"}), 120.0), daemon=True) for _ in range(heavy)]
    for thread in threads:
        thread.start()
    return threads


def serve_queues_and_bodies(rng: random.Random, count: int, run: Path, env: dict) -> Iterator[dict]:
    """``count`` requests of the kinds of the module docstring against one ``attnmt serve``."""
    process, host, port = _start_serve(run, env)
    good = json.dumps({"sentence": "Ein Hund läuft."}).encode()
    try:
        for number in range(count):
            kind = ["translation behind saliency", "length digits", "body of GET", "gold digits"][number % 4]
            if kind == "translation behind saliency":
                flood = _saliency_flood(host, port, rng.choice([10, 20, 30]))
                time.sleep(1.0)
                answers = _answers(_exchange(host, port, _post(port, "/api/translate", good,
                                                               {"Content-Type": "application/json"}), 60.0))
                ok = len(answers) == 1 and answers[0][0] == 200
                yield {"family": "serve: a translation behind saliency", "case": f"{len(flood)} integrated-64 first",
                       "outcome": "correct" if ok else f"other ({[status for status, _ in answers]})"}
                for thread in flood:
                    thread.join(120)
            elif kind == "length digits":
                length = rng.choice(["\u00b2", "\u0663", "\uff11", "1 2", "+5", "-1", "0x10", "9" * 40])
                data = (f"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"
                        f"\r\nContent-Length: {length}\r\n\r\n").encode() + good
                answers = _answers(_exchange(host, port, data))
                ok = len(answers) == 1 and answers[0][0] in (400, 411, 413)
                yield {"family": "serve: Content-Length in other digits", "case": repr(length),
                       "outcome": "correct" if ok else f"other ({[status for status, _ in answers]})"}
            elif kind == "body of GET":
                method = rng.choice(["GET", "HEAD"])
                inner = _post(port, "/api/translate", good, {"Content-Type": "application/json"})
                data = (f"{method} {rng.choice(['/api/models', '/'])} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Content-Length: {len(inner)}\r\n\r\n").encode() + inner
                answers = _answers(_exchange(host, port, data))
                ok = len(answers) == 1 and answers[0][0] == 400
                yield {"family": f"serve: a {method} carrying a request", "case": data[:80].decode("latin-1"),
                       "outcome": "correct" if ok else f"other ({[status for status, _ in answers]})"}
            else:
                links = rng.choice(["9" * 5000 + "-0", "0-" + "9" * 5000, "9" * 4301 + "-" + "9" * 4301, "0-0 " * 10])
                body = json.dumps({"sentence": "Ein Hund", "reference": "A dog", "links": links}).encode()
                answers = _answers(_exchange(host, port, _post(port, "/api/gold", body,
                                                               {"Content-Type": "application/json"})))
                wanted = (200,) if links.startswith("0-0 ") else (400,)
                ok = len(answers) == 1 and answers[0][0] in wanted
                yield {"family": "serve: gold links of thousands of digits", "case": links[:40],
                       "outcome": "correct" if ok else f"other ({[status for status, _ in answers]})"}
    finally:
        process.kill()
        process.wait()
