"""The fault categories benchmarks/faults.py added in 0.2 (issue: untrusted files, lost files):

- hostile files: files that would run code if read naively (a pickle that calls os.system, an .npz
  of pickled objects, YAML with a python tag, a checkpoint holding a pickled object, a run whose
  attention file has changed). The code would create a marker file; the marker must never appear.
- outputs onto inputs: every command that writes, with --overwrite, aimed at one of its own inputs
  or at a file a run needs; no input may change.
- odd numbers: every numeric option of every command with NaN, ±inf, negative, zero, huge, tiny.
- structured formats: valid .vec files, Pharaoh and NAACL links, metrics.jsonl and config YAML,
  each mutated where its structure is (a field dropped, doubled or of another type, an index out
  of range, a number absurd) and read by the command that reads it.
- signals: a command in its own process stopped by SIGINT or SIGTERM at a random moment; it must
  end with status 0 or 130 and leave no temporary file or folder.
- read-only folders: every command that writes, aimed at a folder mounted read-only in a mount
  namespace of its own (``unshare -m``; root ignores a ``chmod``, not a read-only mount). It must
  end with a one-line error and leave the folder as it was.

Each generator yields (family, argv, stdin, inputs that must not change, marker that must not
appear); ``classify`` gives the outcome.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import yaml

ODD_NUMBERS = ["nan", "inf", "-inf", "-1", "0", "1e30", "1e-30", "18446744073709551616", "-0"]


class RunsCode:
    """Pickles as a call of os.system that creates ``marker``: what a hostile file holds."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def hostile_files(rng: random.Random, count: int, folder: Path, run: Path, vec: Path, marker: Path):
    """Files that would run code if attnmt read them naively, each where attnmt reads such a file."""
    good_pkl, good_npz = folder / "good.pkl", folder / "good.npz"
    with open(good_pkl, "wb") as handle:
        pickle.dump({"ein": 0, "hund": 1}, handle)
    np.savez(good_npz, embeddings=np.eye(2))
    kinds = ["pickle", "pickle inside", "npz objects", "yaml tag", "checkpoint object", "changed attention",
             "missing attention", "attention record damaged"]
    for number in range(count):
        kind = kinds[number % len(kinds)]
        case = folder / f"hostile-{number}"
        case.mkdir()
        if kind in ("pickle", "pickle inside"):
            path = case / "word2int.pkl"
            with open(path, "wb") as handle:
                pickle.dump(RunsCode(marker) if kind == "pickle" else {"ein": RunsCode(marker)}, handle)
            yield kind, ["align-words", "--src-vectors", str(path), str(good_npz), "--tgt-vectors", str(vec),
                         "--src", "ein hund", "--tgt", "a dog"], None, [path], marker
        elif kind == "npz objects":
            path = case / "embeddings.npz"
            np.savez(path, embeddings=np.array([[RunsCode(marker)]], dtype=object))
            yield kind, ["align-words", "--src-vectors", str(good_pkl), str(path), "--tgt-vectors", str(vec),
                         "--src", "ein hund", "--tgt", "a dog"], None, [path], marker
        elif kind == "yaml tag":
            path = case / "config.yaml"
            path.write_text(f"training:\n  lr: !!python/object/apply:os.system ['touch {marker}']\n")
            yield kind, ["train", "--config", str(path), "--out", str(case / "run"), "--no-progress"], None, \
                [path], marker
        elif kind == "checkpoint object":
            copy = Path(shutil.copytree(run, case / "run"))
            state = torch.load(copy / "best.pt", weights_only=True)
            state["progress"] = RunsCode(marker)
            torch.save(state, copy / "best.pt")
            yield kind, ["translate", str(copy), "Ein Hund."], None, [copy / "best.pt"], marker
        else:
            yield (kind, *_run_with_attention_code(kind, case, run, marker, rng))


def _run_with_attention_code(kind: str, case: Path, run: Path, marker: Path, rng: random.Random):
    """A copy of ``run`` whose checkpoint names a user attention whose file now runs code."""
    copy = Path(shutil.copytree(run, case / "run"))
    code = case / "attention.py"
    code.write_text(f"import os\nos.system('touch {marker}')\n")
    state = torch.load(copy / "best.pt", weights_only=True)
    state["config"]["model"]["attention"] = f"{code}:Mine"
    record = {"spec": f"{code}:Mine", "path": str(code), "sha256": "0" * 64, "source": "class Mine: pass\n"}
    if kind == "missing attention":
        record["path"] = str(case / "gone.py")
    if kind == "attention record damaged":
        record = {"spec": 3}
    state["attention_code"] = record
    torch.save(state, copy / "best.pt")
    argv = rng.choice([["translate", str(copy), "Ein Hund."],
                       ["evaluate", str(copy), "--split", "valid", "-n", "0", "--no-progress"],
                       ["view", str(copy), "--split", "valid", "-n", "1", "--out", str(case / "v.html")]])
    return argv, None, [copy / "best.pt", code], marker


def outputs_onto_inputs(rng: random.Random, count: int, folder: Path, run: Path, data: dict[str, Path]):
    """Each writing command with --overwrite, its output aimed at an input, at a file the run needs,
    at the run's own evaluation files and heatmaps, at the mechanism checked or at the vectors read."""
    for number in range(count):
        case = folder / f"onto-{number}"
        copy = Path(shutil.copytree(run, case / "run"))
        src, tgt = case / "src.de", case / "tgt.en"
        shutil.copy(data["valid.de"], src)
        shutil.copy(data["valid.en"], tgt)
        shutil.copy(data["valid.de"], case / "en.vec")  # a corpus whose name is embed's output
        (copy / "examples").mkdir(exist_ok=True)
        heatmap = copy / "examples" / "epoch01-1.png"
        heatmap.write_bytes(b"the run's own heatmap")
        (copy / "hyps-valid.txt").write_text("the run's own translations\n", encoding="utf-8")
        mechanism = case / "mine.py"
        mechanism.write_text("import torch\n\nclass Mine(torch.nn.Module):\n    pass\n", encoding="utf-8")
        vectors = case / "vectors"
        vectors.mkdir()
        for name in ("en.vec", "fr.vec"):
            (vectors / name).write_text("2 2\nein 0.5 0.5\nhund 0.1 0.9\n", encoding="utf-8")
        run_file = copy / rng.choice(["best.pt", "last.pt", "config.yaml", "metrics.jsonl", "tokenizers.json",
                                      "hyps-valid.txt", "examples/epoch01-1.png"])
        choices = [
            ("view", ["view", str(copy), "--split", "valid", "-n", "1", "--out", str(run_file)], [run_file]),
            ("translate --attention-out", ["translate", str(copy), "Ein Hund.", "--attention-out", str(run_file)],
             [run_file]),
            ("translate --plot", ["translate", str(copy), "Ein Hund.", "--plot", str(run_file)], [run_file]),
            ("translate --plot onto a heatmap", ["translate", str(copy), "Ein Hund.", "--plot", str(heatmap)],
             [heatmap]),
            ("align --out", ["align", "--model", str(copy), "--src", str(src), "--tgt", str(tgt), "--out",
                             str(rng.choice([src, tgt, copy / "hyps-valid.txt"]))],
             [src, tgt, copy / "hyps-valid.txt"]),
            ("align --vectors --out", ["align", "--vectors", str(vectors), "--src", str(src), "--tgt", str(tgt),
                                       "--out", str(vectors / rng.choice(["en.vec", "fr.vec"]))],
             [vectors / "en.vec", vectors / "fr.vec"]),
            ("curves --out", ["curves", str(copy), "--out", str(rng.choice([copy / "metrics.jsonl", heatmap]))],
             [copy / "metrics.jsonl", heatmap]),
            ("check --json", ["check", "mean", "--no-speed", "--json", str(run_file)], [run_file]),
            ("check --json onto the mechanism", ["check", f"{mechanism}:Mine", "--no-speed", "--json", str(mechanism)],
             [mechanism]),
            ("align-words --plot", ["align-words", "--src-vectors", str(data["vec"]), "--tgt-vectors",
                                    str(data["vec"]), "--src", "ein hund", "--tgt", "ein hund", "--plot",
                                    str(data["vec"])], [data["vec"]]),
            ("embed --out", ["embed", "--src", str(case / "en.vec"), "--tgt", str(tgt), "--out", str(case),
                             "--dim", "2", "--min-count", "1"], [case / "en.vec"]),
        ]
        family, argv, inputs = choices[number % len(choices)]
        yield family, [*argv, "--overwrite"], None, inputs, None, {"case": case}


NUMERIC_OPTIONS = {
    "translate": (lambda run, case: ["translate", str(run), "Ein Hund."], ["--beam", "--batch-size"]),
    "evaluate": (lambda run, case: ["evaluate", str(run), "--split", "valid", "--no-progress"],
                 ["--beam", "-n", "--batch-size"]),
    "view": (lambda run, case: ["view", str(run), "--split", "valid", "--out", str(case / "v.html"), "--no-progress"],
             ["-n", "--beam", "--batch-size"]),
    "train": (lambda run, case: ["train", "--config", str(run / "config.yaml"), "--out", str(case / "r"),
                                 "--no-progress", "--max-steps", "1"],
              ["--seed", "--max-epochs", "--max-steps", "--max-minutes"]),
    "explore": (lambda run, case: ["explore", "copy"], ["--dim", "--keys", "--samples", "--seed"]),
    "align-words": (lambda run, case: ["align-words", "--src-vectors", str(case.parent / "tiny.vec"),
                                       "--tgt-vectors", str(case.parent / "tiny.vec"), "--src", "ein hund",
                                       "--tgt", "hund ein"], ["--temperature", "--distortion"]),
    "embed": (lambda run, case: ["embed", "--src", str(case.parent / "valid.de"), "--tgt",
                                 str(case.parent / "valid.en"), "--out", str(case / "vec")],
              ["--dim", "--min-count", "--max-lines", "--seed", "--singular-power"]),
    "align": (lambda run, case: ["align", "--model", str(run), "--src", str(case.parent / "valid.de"), "--tgt",
                                 str(case.parent / "valid.en"), "--out", str(case / "links.txt")],
              ["--layer", "--max-tokens", "--threads", "--threshold"]),
    "check": (lambda run, case: ["check", "mean", "--no-speed"], ["--heads"]),
    "compare": (lambda run, case: ["compare", "--config", str(run / "config.yaml"), "--attention", "mean",
                                   "--out", str(case / "c"), "--no-progress", "--split", "valid"],
                ["--runs", "--max-steps", "--max-minutes", "--beam"]),
}


def odd_numbers(rng: random.Random, count: int, folder: Path, run: Path):
    """Every numeric option of every command with a value from ODD_NUMBERS (one odd value a case)."""
    commands = sorted(NUMERIC_OPTIONS)
    for number in range(count):
        command = commands[number % len(commands)]
        make, options = NUMERIC_OPTIONS[command]
        case = folder / f"number-{number}"
        case.mkdir()
        option = rng.choice(options)
        value = rng.choice(ODD_NUMBERS)
        argv = make(run, case)
        if command == "compare" and option != "--max-steps":
            argv += ["--max-steps", "1"]
        yield f"{command} {option}", [*argv, option, value], None, [], None


def _mutate_lines(lines: list[str], rng: random.Random, tokens: list[str]) -> list[str]:
    """One structure-aware change: a line dropped, doubled, cut, emptied, a field replaced by a token."""
    lines = list(lines)
    k = rng.randrange(len(lines)) if lines else 0
    change = rng.choice(["drop", "double", "cut", "empty", "field", "field", "append", "bytes"])
    if not lines or change == "append":
        lines.append(rng.choice(tokens))
    elif change == "drop":
        del lines[k]
    elif change == "double":
        lines.insert(k, lines[k])
    elif change == "cut":
        lines[k] = lines[k][: rng.randrange(len(lines[k]) + 1)]
    elif change == "empty":
        lines[k] = ""
    elif change == "bytes":
        lines[k] = lines[k] + "\udcff"
    else:
        fields = lines[k].split(" ") or [""]
        fields[rng.randrange(len(fields))] = rng.choice(tokens)
        lines[k] = " ".join(fields)
    return lines


def structured_formats(rng: random.Random, count: int, folder: Path, run: Path, data: dict[str, Path]):
    """Valid files of each format attnmt reads, mutated where their structure is."""
    tokens = ["nan", "inf", "-1", "0", "99999", "x", "1-1", "0p0", "2-", "-", "1.5", "", "{", "null", "ein",
              "1e400", "3 3", "\t"]
    formats = ["vec", "pharaoh gold", "naacl gold", "metrics", "config"]
    valid_lines = sum(1 for _ in open(data["valid.de"], encoding="utf-8"))
    for number in range(count):
        kind = formats[number % len(formats)]
        case = folder / f"format-{number}"
        case.mkdir()
        if kind == "vec":
            lines = _mutate_lines(data["vec"].read_text(encoding="utf-8").splitlines(), rng, tokens)
            path = case / "mutated.vec"
            path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
            argv = ["align-words", "--src-vectors", str(path), "--tgt-vectors", str(data["vec"]), "--src",
                    "ein hund", "--tgt", "hund ein"]
        elif kind in ("pharaoh gold", "naacl gold"):
            if kind == "pharaoh gold":
                lines = [" ".join(f"{i}-{i}" for i in range(2)) for _ in range(valid_lines)]
            else:
                lines = [f"{n + 1} {i + 1} {i + 1} S" for n in range(valid_lines) for i in range(2)]
            path = case / ("gold.txt" if kind == "pharaoh gold" else "gold.naacl")
            path.write_bytes("\n".join(_mutate_lines(lines, rng, tokens)).encode("utf-8", "surrogateescape") + b"\n")
            argv = ["align", "--model", str(run), "--src", str(data["valid.de"]), "--tgt", str(data["valid.en"]),
                    "--out", str(case / "links.txt"), "--gold", str(path)]
        elif kind == "metrics":
            fake = Path(shutil.copytree(run, case / "run", ignore=shutil.ignore_patterns("*.pt", "spm*")))
            lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
            records = [json.loads(line) for line in lines]
            record = rng.choice(records)
            key = rng.choice(sorted(record))
            record[key] = rng.choice([None, "x", -1, 1e308, [], {}, float("nan")])
            mutated = [json.dumps(r, allow_nan=True) for r in records]
            (fake / "metrics.jsonl").write_bytes("\n".join(_mutate_lines(mutated, rng, tokens))
                                                 .encode("utf-8", "surrogateescape") + b"\n")
            argv = ["curves", str(fake), "--out", str(case / "curves.png")]
        else:
            config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
            section = rng.choice(sorted(config))
            key = rng.choice(sorted(config[section]) or ["x"])
            config[section][key] = rng.choice([None, "x", -1, 1e308, [], {"a": 1}, True, "1e-3", 2**70])
            text = yaml.safe_dump(config, allow_unicode=True).splitlines()
            if rng.random() < 0.5:
                text = _mutate_lines(text, rng, ["  lr: 1", "training:", "- 3", "data: x", ": :", "  ? a"])
            path = case / "config.yaml"
            path.write_bytes("\n".join(text).encode("utf-8", "surrogateescape") + b"\n")
            argv = ["train", "--config", str(path), "--out", str(case / "r"), "--no-progress", "--max-steps", "1"]
        yield kind, argv, None, [], None


SIGNAL_COMMANDS = {
    "evaluate": lambda run, case: ["evaluate", str(run), "--split", "valid", "--beam", "3", "-n", "5",
                                   "--no-progress"],
    "translate": lambda run, case: ["translate", str(run)],
    "view": lambda run, case: ["view", str(run), "--split", "valid", "-n", "20", "--out", str(case / "v.html"),
                               "--no-progress"],
    "train --resume": lambda run, case: ["train", "--out", str(run), "--resume", "--no-progress",
                                         "--max-steps", "1000"],
    "embed": lambda run, case: ["embed", "--src", str(case.parent / "valid.de"), "--tgt",
                                str(case.parent / "valid.en"), "--out", str(case / "vec"), "--dim", "2",
                                "--min-count", "1"],
}


def _start_signal_command(command: str, case: Path, run: Path, env: dict) -> tuple[subprocess.Popen, list[str], Path]:
    """``attnmt COMMAND`` on a copy of ``run`` in its own process, with its own temporary folder."""
    case.mkdir()
    copy = Path(shutil.copytree(run, case / "run"))
    temporary = Path(tempfile.mkdtemp(prefix="tmp-", dir=case))
    argv = SIGNAL_COMMANDS[command](copy, case)
    stdin = case / "stdin.txt"  # a file, so that no write blocks on a full pipe
    stdin.write_text("Ein Hund läuft.\n" * 4000 if command == "translate" else "", encoding="utf-8")
    with open(stdin, "rb") as handle:
        process = subprocess.Popen([sys.executable, "-m", "attnmt", *argv], stdin=handle,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   env={**env, "TMPDIR": str(temporary), "PYTHONFAULTHANDLER": "1"})
    return process, argv, temporary


def signals(rng: random.Random, count: int, folder: Path, run: Path, env: dict) -> Iterator[dict]:
    """A command in its own process, stopped by SIGINT or SIGTERM at a random moment of its run: each
    command is first timed once unstopped, and the signal comes after 10% to 100% of that time."""
    commands = sorted(SIGNAL_COMMANDS)
    durations = {}
    for command in commands:
        started = time.monotonic()
        process, _, _ = _start_signal_command(command, folder / f"signal-timing-{command.split()[0]}", run, env)
        process.communicate(timeout=600)
        durations[command] = time.monotonic() - started
    for number in range(count):
        command = commands[number % len(commands)]
        case = folder / f"signal-{number}"
        sent = rng.choice([signal.SIGINT, signal.SIGTERM])
        delay = rng.uniform(0.1, 1.0) * durations[command]
        process, argv, temporary = _start_signal_command(command, case, run, env)
        time.sleep(delay)
        ended_first = process.poll() is not None
        process.send_signal(sent)
        hung = False
        try:
            _, err = process.communicate(timeout=120)
            code = process.returncode  # negative: killed by that signal (-2: an uncaught KeyboardInterrupt)
        except subprocess.TimeoutExpired:
            hung = True
            process.send_signal(signal.SIGABRT)  # faulthandler (PYTHONFAULTHANDLER) prints every thread's stack
            try:
                _, err = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                _, err = process.communicate()
            code = process.returncode
        left = sorted(str(p.relative_to(case)) for p in case.rglob("*") if ".tmp" in p.name or
                      (p.parent == temporary and p.name.startswith("attnmt")))
        text = err.decode("utf-8", "replace")
        if hung:
            outcome = "hang"
        elif "Traceback" in text:
            outcome = "traceback"
        elif left:
            outcome = "partial file left"
        elif code in (0, 130):
            outcome = "correct"
        else:
            outcome = f"other (status {code})"
        yield {"family": f"{command} {signal.Signals(sent).name}", "argv": [a.replace(str(folder), "$RUNS")
                                                                         for a in argv],
               "after_seconds": round(delay, 1), "ended_before_the_signal": ended_first, "outcome": outcome,
               "left": left,
               "message": (text.strip().splitlines() or [""])[-1].replace(str(folder), "$RUNS")[:300],
               **({"stderr": text[-4000:].replace(str(folder), "$RUNS")} if outcome != "correct" else {})}


def classify(code: int, err: str, inputs: list[Path], before: dict[Path, bytes | None], marker: Path | None,  # noqa: PLR0913 (every observation of one case)
             partial: list[str], expect: dict | None = None, out: str = "", escaped: list[str] | None = None) -> str:
    """The outcome of one case; a file that ran code, or a user's file changed, before anything else.

    ``expect``: ``must_fail`` (status 0 is a silent wrong result: the case is broken), ``result_status``
    (a status other than 0 that is a result, as ``check``'s 1 for a failing property), ``no_garbage``
    (a translation of nothing but unknown pieces is a silent wrong result). ``escaped``: files a case
    wrote outside its folder."""
    expect = expect or {}
    if marker is not None and marker.exists():
        marker.unlink()
        return "ran code"
    for path in inputs:
        now = path.read_bytes() if path.is_file() else None
        if now != before.get(path):
            return "user file changed"
    if escaped:
        return "lost"  # written outside the folder it belongs to
    if code == -1:
        return "traceback"
    if code == -2:
        return "hang"
    if partial:
        return "partial file left"
    result_status = expect.get("result_status", 0)
    if code in (0, result_status):
        if code == 0 and expect.get("must_fail"):
            return "different result"
        if expect.get("no_garbage") and out.strip() and not out.replace("⁇", "").strip():
            return "different result"
        return "correct"
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if code == 2 and "error:" in last and "Traceback" not in err and _one_error(err):
        return "clear error"
    return f"other (status {code})"


def _one_error(err: str) -> bool:
    """One line of error, whatever status lines came before it."""
    return sum("error:" in line for line in err.splitlines()) == 1


READ_ONLY_COMMANDS = {
    "train --out": lambda ro, run, config, data: ["train", "--config", str(config), "--out", str(ro / "new-run"),
                                                  "--no-progress", "--max-steps", "2"],
    "train --resume": lambda ro, run, config, data: ["train", "--out", str(ro / "run"), "--resume", "--no-progress",
                                                     "--max-steps", "1000"],
    "evaluate": lambda ro, run, config, data: ["evaluate", str(ro / "run"), "--split", "valid", "-n", "3",
                                               "--no-progress"],
    "view": lambda ro, run, config, data: ["view", str(ro / "run"), "--split", "valid", "-n", "3", "--no-progress"],
    "translate --attention-out": lambda ro, run, config, data: ["translate", str(run), "Ein Hund.",
                                                                "--attention-out", str(ro / "a.npz")],
    "translate --plot": lambda ro, run, config, data: ["translate", str(run), "Ein Hund.", "--plot",
                                                       str(ro / "p.png")],
    "compare --out": lambda ro, run, config, data: ["compare", "--config", str(config), "--attention", "dot",
                                                    "--runs", "1", "--max-steps", "2", "--split", "valid",
                                                    "--out", str(ro / "cmp"), "--no-progress"],
    "embed --out": lambda ro, run, config, data: ["embed", "--src", str(data["valid.de"]), "--tgt",
                                                  str(data["valid.en"]), "--out", str(ro / "vec"), "--dim", "2",
                                                  "--min-count", "1"],
    "align --out": lambda ro, run, config, data: ["align", "--model", str(run), "--src", str(data["valid.de"]),
                                                  "--tgt", str(data["valid.en"]), "--out", str(ro / "links.txt")],
    "curves --out": lambda ro, run, config, data: ["curves", str(run), "--out", str(ro / "c.png")],
}


def read_only_mounts_work() -> bool:
    """Whether ``unshare -m`` can mount a folder read-only here (root with the namespace rights)."""
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {folder} {folder} && "
                               f"! touch {folder}/x 2>/dev/null"], capture_output=True)
        return done.returncode == 0


def read_only_folders(folder: Path, run: Path, config: Path, data: dict[str, Path], env: dict) -> Iterator[dict]:
    """Each writing command aimed into a read-only folder that holds a copy of ``run``."""
    for number, (command, argv_of) in enumerate(READ_ONLY_COMMANDS.items()):
        read_only = folder / f"read-only-{number}"
        read_only.mkdir()
        shutil.copytree(run, read_only / "run")
        before = {str(p.relative_to(read_only)): p.read_bytes() for p in read_only.rglob("*") if p.is_file()}
        argv = argv_of(read_only, run, config, data)
        shell = (f"mount --bind -o ro {read_only} {read_only} && exec {sys.executable} -m attnmt "
                 + " ".join(f"'{a}'" for a in argv))
        done = subprocess.run(["unshare", "-m", "sh", "-c", shell], capture_output=True, env=env, timeout=600,
                              stdin=subprocess.DEVNULL)
        err = done.stderr.decode("utf-8", "replace")
        after = {str(p.relative_to(read_only)): p.read_bytes() for p in read_only.rglob("*") if p.is_file()}
        last = err.strip().splitlines()[-1] if err.strip() else ""
        if "Traceback" in err:
            outcome = "traceback"
        elif after != before:
            outcome = "user file changed"
        elif done.returncode == 2 and "error:" in last:
            outcome = "clear error"
        else:
            outcome = f"other (status {done.returncode})"
        yield {"family": command, "argv": [a.replace(str(folder), "$RUNS") for a in argv], "outcome": outcome,
               "message": last.replace(str(folder), "$RUNS")[:300],
               **({"stderr": err[-4000:].replace(str(folder), "$RUNS")} if outcome != "clear error" else {})}
