"""The kinds of fault a new user's probe found (issue 63), made in bulk for ``benchmarks/faults.py``:

- ``serve_http``: requests against a real ``attnmt serve`` process on the loopback address:
  refused requests whose body is a whole second request (smuggling), pipelined requests, odd JSON
  (deep, huge numbers, lone surrogates, not JSON, not UTF-8), unknown methods and odd paths, clients
  that hang up, and SIGINT while a model works. Each must get one JSON answer of the right status
  (a refused request's connection closed after it), and the server must stay up and quiet; a
  stopped server must exit with status 0.
- ``special_files``: FIFOs, device nodes and links to ``/dev/zero`` where a command reads a config
  or writes an output, ``--overwrite`` or not: one line, status 2, nothing hangs, and the special
  file is left as it was.
- ``bombs``: YAML alias bombs of every breadth and depth, nesting thousands deep, numbers of
  thousands of digits and files of megabytes, as a run's ``config.yaml``, as ``--config`` and as
  ``--set``: one line, status 2, in bounded time.
- ``stdout_full``: commands writing their output to ``/dev/full``: one line, status 2, no traceback.

Each function yields result dicts ``{"family", "case", "outcome"[, "message"]}``, with the outcomes
of ``fault_data.cases.classify``.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

MAX_SECONDS = 60  # a case past this is a hang


# ------------------------------------------------------------------------------ serve over HTTP


def _start_serve(run: Path, env: dict) -> tuple[subprocess.Popen, str, int]:
    process = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", str(run), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    url = process.stdout.readline().split()[2]
    host, port = url.split("//")[1].rstrip("/").split(":")
    return process, host, int(port)


def _exchange(host: str, port: int, data: bytes, wait: float = 5.0) -> bytes:
    with socket.create_connection((host, port), timeout=wait) as connection:
        connection.sendall(data)
        received = b""
        try:
            while chunk := connection.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return received


def _post(port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}Content-Length: {len(body)}\r\n\r\n").encode() \
        + body


def _answers(data: bytes) -> list[tuple[int, bytes]]:
    """(status, body) of each HTTP answer in ``data``, in order."""
    answers = []
    while data.startswith(b"HTTP/1.1 "):
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        answers.append((status, rest[:length]))
        data = rest[length:]
    return answers


def _one_json_error(answer: tuple[int, bytes], statuses: tuple[int, ...]) -> bool:
    status, body = answer
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return status in statuses and isinstance(parsed, dict) and isinstance(parsed.get("error"), str) \
        and "\n" not in parsed["error"]


def serve_http(rng: random.Random, count: int, run: Path, env: dict) -> Iterator[dict]:  # noqa: C901 (one branch per kind of request)
    """``count`` requests (module docstring), then a SIGINT while a model works, on one server."""
    process, host, port = _start_serve(run, env)
    good = json.dumps({"sentence": "Ein Hund läuft."}).encode()
    kinds: list[tuple[str, Callable[[], tuple[bytes, Callable[[list[tuple[int, bytes]]], bool]]]]] = []

    def smuggle() -> tuple[bytes, Callable]:
        inner_path = rng.choice(["/api/translate", "/api/saliency", "/api/gold", "/api/export"])
        inner = _post(port, inner_path, good, {"Content-Type": "application/json"})
        outer_type = rng.choice(["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                 "application/json"])
        headers = {"Content-Type": outer_type}
        if outer_type == "application/json" or rng.random() < 0.5:
            headers["Origin"] = rng.choice(["http://evil.example", "null", "http://127.0.0.1:1"])
        return _post(port, rng.choice(["/api/translate", "/api/saliency", "/nothing"]), inner, headers), \
            lambda answers: len(answers) == 1 and _one_json_error(answers[0], (403, 404, 415))

    def pipelined() -> tuple[bytes, Callable]:
        requests = rng.randint(2, 4)
        data = b"".join(_post(port, "/api/translate", good, {"Content-Type": "application/json"})
                        for _ in range(requests))
        return data, lambda answers: len(answers) == requests and all(status == 200 for status, _ in answers)

    def odd_json() -> tuple[bytes, Callable]:
        depth = rng.choice([100, 1000, 10_000, 30_000])
        body = rng.choice([
            b"[" * depth + b"]" * depth,
            b'{"sentence": ' + b"[" * depth + b"]" * depth + b"}",
            b'{"sentence": ' + b"9" * rng.choice([4301, 5000, 20_000]) + b"}",
            json.dumps({rng.choice(["sentence", "prefix", "reference"]): "a \ud800 b",
                        "model": "run"}).encode(),
            b'{"sentence": "ein hund"' + bytes([rng.randrange(0x80, 0x100)]) + b"}",
            b"not json at all", b"[1, 2, 3]", b'"a string"', b"{}", b'{"sentence": null}',
            json.dumps({"sentence": "x" * 2000}).encode(),
        ])
        if len(body) > 64 * 1024:
            body = body[: 64 * 1024]
        path = rng.choice(["/api/translate", "/api/saliency", "/api/prefix", "/api/gold", "/api/counterfactual"])
        return _post(port, path, body, {"Content-Type": "application/json"}), \
            lambda answers: len(answers) == 1 and _one_json_error(answers[0], (400, 413))

    def gold_link() -> tuple[bytes, Callable]:
        link = rng.choice(["\u00b2-1", "1-\u00b9", "\u0661-0", "0-0-0", "-1-0", "a-b", "0:0", "99999-0"])
        body = json.dumps({"sentence": "Ein Hund", "reference": "A dog", "links": link}).encode()
        return _post(port, "/api/gold", body, {"Content-Type": "application/json"}), \
            lambda answers: len(answers) == 1 and _one_json_error(answers[0], (400,))

    def odd_method_or_path() -> tuple[bytes, Callable]:
        if rng.random() < 0.5:
            method = rng.choice(["FROB", "TRACE", "CONNECT", "PROPFIND", "BREW", "GETS", "get"])
            return (f"{method} / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").encode(), \
                lambda answers: len(answers) == 1 and _one_json_error(answers[0], (400, 405, 501))
        path = rng.choice(["//api/models", "///", "/../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/static/../app.js",
                           "/api/models/..", "//static/app.js", "/static/app.js/"])
        return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").encode(), \
            lambda answers: len(answers) == 1 and _one_json_error(answers[0], (400, 404))

    kinds = [("smuggled", smuggle), ("pipelined", pipelined), ("odd JSON", odd_json), ("gold link", gold_link),
             ("odd method or path", odd_method_or_path)]
    try:
        for number in range(count):
            name, make = kinds[number % len(kinds)] if number < 5 * len(kinds) else rng.choice(kinds)
            data, judge = make()
            started = time.monotonic()
            try:
                answers = _answers(_exchange(host, port, data))
                outcome = "correct" if judge(answers) else f"other ({[status for status, _ in answers]})"
            except OSError as error:
                outcome = f"other ({type(error).__name__})"
            if time.monotonic() - started > MAX_SECONDS:
                outcome = "hang"
            yield {"family": f"serve: {name}", "case": data[:120].decode("latin-1"), "outcome": outcome}
        for _ in range(max(1, count // 100)):  # clients that hang up before their answer
            with socket.create_connection((host, port), timeout=5) as connection:
                connection.sendall(f"GET /api/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            alive = _answers(_exchange(host, port, f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                                                   "Connection: close\r\n\r\n".encode()))
            yield {"family": "serve: hang-up", "case": "GET then close",
                   "outcome": "correct" if alive and alive[0][0] == 200 else "other"}
        # SIGINT while a model computes saliency: the server waits for it and exits 0
        connection = http.client.HTTPConnection(host, port, timeout=60)
        body = json.dumps({"sentence": "Ein Hund läuft im Park. " * 6, "model": "run", "method": "integrated",
                           "steps": 64})
        connection.request("POST", "/api/saliency", body=body,
                           headers={"Content-Type": "application/json", "Host": f"127.0.0.1:{port}"})
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=MAX_SECONDS)
        quiet = "Traceback" not in err and "terminate called" not in err
        yield {"family": "serve: SIGINT during work", "case": "integrated gradients, 64 steps",
               "outcome": "correct" if process.returncode == 0 and quiet else f"other (status {process.returncode})",
               "message": err.strip().splitlines()[-1:] if err.strip() else []}
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# ------------------------------------------------------------------------------------ special files


def _special(kind: str, path: Path) -> None:
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "link to /dev/null":
        path.symlink_to("/dev/null")
    else:
        path.symlink_to("/dev/urandom")


SPECIAL_KINDS = ("FIFO", "link to /dev/zero", "link to /dev/null", "link to /dev/urandom")


def special_files(rng: random.Random, count: int, folder: Path, run: Path, config: Path,
                  data: dict[str, Path]) -> Iterator[tuple]:
    """``run_cases`` cases: a special file where a command reads its config or writes an output."""
    import shutil

    readers = {
        "translate (config.yaml)": lambda case, special: ["translate", str(case), "Ein Hund."],
        "evaluate (config.yaml)": lambda case, special: ["evaluate", str(case), "--split", "valid", "-n", "1",
                                                         "--no-progress"],
        "train --resume (config.yaml)": lambda case, special: ["train", "--out", str(case), "--resume",
                                                               "--no-progress", "--max-steps", "1"],
        "train --config": lambda case, special: ["train", "--config", str(special), "--out", str(case / "new"),
                                                 "--no-progress", "--max-steps", "1"],
        "curves (metrics.jsonl)": lambda case, special: ["curves", str(case), "--out", str(case / "c.png")],
    }
    writers = {
        "translate --attention-out": lambda case, target: ["translate", str(case), "Ein Hund.", "--attention-out",
                                                           str(target)],
        "translate --plot": lambda case, target: ["translate", str(case), "Ein Hund.", "--plot", str(target)],
        "view --out": lambda case, target: ["view", str(case), "-n", "1", "--no-progress", "--out", str(target)],
        "check --json": lambda case, target: ["check", "dot", "--json", str(target)],
        "curves --out": lambda case, target: ["curves", str(case), "--out", str(target)],
        "explain --out": lambda case, target: ["explain", str(case), "Ein Hund.", "--methods", "attention",
                                               "--random-orders", "1", "--out", str(target)],
        "align --out": lambda case, target: ["align", "--model", str(case), "--src", str(data["valid.de"]),
                                             "--tgt", str(data["valid.en"]), "--out", str(target)],
    }
    suffixes = {"translate --attention-out": ".jsonl", "translate --plot": ".png", "view --out": ".html",
                "check --json": ".json", "curves --out": ".png", "explain --out": ".jsonl", "align --out": ".txt"}
    for number in range(count):
        case = folder / f"special-{number}"
        shutil.copytree(run, case, ignore=shutil.ignore_patterns("examples", "*.tmp"))
        kind = rng.choice(SPECIAL_KINDS)
        if number % 2 == 0:
            name = rng.choice(sorted(readers))
            if name == "train --config":
                special = folder / f"special-config-{number}.yaml"
            elif name == "curves (metrics.jsonl)":
                special = case / "metrics.jsonl"
                special.unlink()
            else:
                special = case / "config.yaml"
                special.unlink()
            _special(kind, special)
            argv = readers[name](case, special)
            family = f"special file read: {name}"
        else:
            name = rng.choice(sorted(writers))
            special = folder / f"special-out-{number}{suffixes[name]}"
            _special(kind, special)
            argv = writers[name](case, special)
            if rng.random() < 0.5:
                argv.append("--overwrite")
            family = f"special file written: {name}"
        # a reader may not need the file (translate reads the config its checkpoint keeps): status 0 is
        # a result there; a writer must refuse to write onto the special file
        yield family + f" ({kind})", argv, None, [], None, {"case": case, "special": special, "kind": kind,
                                                             "must_fail": family.startswith("special file written")}


def special_unchanged(expect: dict) -> bool:
    """The special file of a case is still what it was (not replaced by a regular file)."""
    special: Path = expect["special"]
    if expect["kind"] == "FIFO":
        return special.is_fifo()
    return special.is_symlink()


# --------------------------------------------------------------------- alias bombs, oversized configs


def _alias_bomb(breadth: int, depth: int) -> str:
    names = [f"l{k}" for k in range(depth + 1)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['lol'] * breadth)}]"]
    for k in range(1, depth + 1):
        lines.append(f"{names[k]}: &{names[k]} [{', '.join(['*' + names[k - 1]] * breadth)}]")
    return "\n".join(lines) + "\n"


def bombs(rng: random.Random, count: int, folder: Path, run: Path, config: Path) -> Iterator[tuple]:
    """``run_cases`` cases: YAML that expands, nests or grows past any setting, in three places."""
    import shutil

    base = yaml.safe_load(config.read_text(encoding="utf-8"))
    for number in range(count):
        kind = rng.choice(["alias bomb", "alias bomb", "deep nesting", "long number", "large file"])
        if kind == "alias bomb":
            breadth, depth = rng.randint(4, 12), rng.randint(6, 12)
            value = f"{{{_alias_bomb(breadth, depth).replace(chr(10), ', ').rstrip(', ')}}}"
            text = yaml.safe_dump(base) + _alias_bomb(breadth, depth).replace("l0:", "model_extra_l0:", 1)
        elif kind == "deep nesting":
            depth = rng.choice([100, 1000, 3000, 10_000])
            value = "[" * depth + "]" * depth
            text = yaml.safe_dump(base).replace("embed_dim: 16", f"embed_dim: {value}", 1)
        elif kind == "long number":
            value = "9" * rng.choice([101, 1000, 4301, 5000, 50_000])
            text = yaml.safe_dump(base).replace("embed_dim: 16", f"embed_dim: {value}", 1)
        else:
            value = "1"
            text = yaml.safe_dump(base) + "# " + "x" * rng.choice([1_100_000, 3_000_000]) + "\n"
        place = rng.choice(["run config.yaml", "--config", "--set"])
        case = folder / f"bomb-{number}"
        case.mkdir()
        if place == "run config.yaml":
            shutil.copytree(run, case / "run", ignore=shutil.ignore_patterns("examples", "*.tmp"))
            (case / "run" / "config.yaml").write_text(text, encoding="utf-8")
            argv = rng.choice([["translate", str(case / "run"), "Ein Hund."],
                               ["evaluate", str(case / "run"), "--split", "valid", "-n", "1", "--no-progress"],
                               ["train", "--out", str(case / "run"), "--resume", "--no-progress", "--max-steps", "1"]])
        elif place == "--config":
            path = case / "config.yaml"
            path.write_text(text, encoding="utf-8")
            argv = ["train", "--config", str(path), "--out", str(case / "new"), "--no-progress", "--max-steps", "1"]
        else:
            if kind in ("large file", "alias bomb"):
                value = value if kind == "alias bomb" else "x" * 1_100_000
            argv = ["train", "--config", str(config), "--set", f"model.embed_dim={value}", "--out",
                    str(case / "new"), "--no-progress", "--max-steps", "1"]
        yield f"{kind} in {place}", argv, None, [], None, {"case": case, "must_fail": place != "run config.yaml"}


# ----------------------------------------------------------------------- standard output, disk full


def stdout_full(rng: random.Random, count: int, run: Path, env: dict) -> Iterator[dict]:
    """Commands whose standard output is ``/dev/full``, each in its own process."""
    commands = [["recipes"], ["recipes", "tiny"], ["explore", "copy", "--samples", "2", "--dim", "4", "--keys", "3"],
                ["explore", "average", "--samples", "2", "--dim", "4", "--keys", "3"],
                ["translate", str(run), "Ein Hund."], ["translate", str(run), "Ein Hund.", "Eine Katze."],
                ["explain", str(run), "Ein Hund.", "--methods", "attention", "--random-orders", "1"],
                ["check", "dot"], ["--version"], ["translate", "--help"]]
    for number in range(count):
        argv = commands[number % len(commands)] if number < len(commands) else rng.choice(commands)
        with open("/dev/full", "wb") as full:
            done = subprocess.run([sys.executable, "-m", "attnmt", *argv], stdout=full, stderr=subprocess.PIPE,
                                  env=env, timeout=MAX_SECONDS)
        err = done.stderr.decode(errors="replace")
        last = err.strip().splitlines()[-1] if err.strip() else ""
        if "Traceback" in err or "Exception ignored" in err:
            outcome = "traceback"
        elif done.returncode in (1, 2) and ("cannot write the output" in last or "error:" in last):
            outcome = "clear error"
        else:
            outcome = f"other (status {done.returncode})"
        yield {"family": f"stdout on a full disk: {argv[0]}", "case": " ".join(argv)[:80], "outcome": outcome,
               "message": last[:200]}
