"""How attnmt holds up when things go wrong, measured in bulk (categories of issue 19 built so far).

1. Killed training. One small training (a made-up task, one thread, a checkpoint every 3 steps) is
   SIGKILLed at ``--kills`` random moments; every fourth kill waits for a checkpoint being written
   (its temporary file in the folder) and kills then. After each kill every checkpoint left must
   load, and ``--resume`` must end with exactly the weights and metrics of the run never stopped.
2. Damaged run folders. A truncated, corrupt, empty or foreign ``last.pt`` / ``best.pt``, or a
   missing ``last.pt``: ``translate``, ``evaluate`` and ``train --resume`` must each end with one
   line naming the file, exit status 2.

Outcomes per case: "correct" (a right result), "clear error" (one line, status 2), "traceback",
"unreadable checkpoint", "different result", "partial file left" (a temporary file a killed write
left that the resumed run did not remove). The table and ``benchmarks/results/faults.json``
count them.

    python benchmarks/faults.py                 # 20 kills, writes benchmarks/results/faults.json
    python benchmarks/faults.py --kills 5       # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from attnmt.checkpoint import load_checkpoint
from attnmt.cli import main as cli_main
from attnmt.errors import CheckpointError
from attnmt.files import write_text_atomic
from attnmt.tables import format_table
from portable import portable

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
from tests.test_training import comparable, save_yaml, tiny_config  # noqa: E402  (the tests' made-up task)

RESULTS = PROJECT / "benchmarks" / "results" / "faults.json"
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


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``attnmt ARGV`` in this process: (exit status, stderr); an exception escaping is a traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli_main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except Exception as error:  # noqa: BLE001 - that is what is measured
            return -1, f"Traceback: {type(error).__name__}: {error}"
    return code, err.getvalue()


def damaged(folder: Path, reference: Path) -> list[dict]:
    damages = {
        "truncated last.pt": ("last.pt", lambda data: data[: len(data) // 2]),
        "corrupt best.pt": ("best.pt", lambda data: data[:100] + bytes(random.Random(1).randrange(256) for _ in range(500))),
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
            code, err = run_cli(argv(run, name))
            lines = [line for line in err.splitlines() if line.strip() and not line.startswith("attnmt ") or
                     "error:" in line]
            clear = code == 2 and str(path) in err and "Traceback" not in err and len(lines) == 1
            outcome = "traceback" if code == -1 else "clear error" if clear else f"other (status {code})"
            message = err.strip().splitlines()[-1:]
            cases.append({"case": f"{damage}, {command}", "outcome": outcome,
                          "message": [line.replace(str(folder), "$RUNS") for line in message]})
            print(f"  {damage}, {command}: {outcome}", flush=True)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="random SIGKILL moments (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="attnmt-faults-") as temporary:
        folder = Path(temporary)
        config = save_yaml(folder, tiny_config(folder, train_pairs=300, max_epochs=3, max_steps=45,
                                               checkpoint_every=3, examples=0))
        started = time.monotonic()
        subprocess.run(train_command(config, folder / "reference"), env=ENV, check=True, capture_output=True)
        seconds = time.monotonic() - started
        print(f"reference run: {seconds:.1f} s; killing it at {args.kills} moments", flush=True)
        categories = {"killed training": kills(folder, config, folder / "reference", args.kills, seconds, rng)}
        print("damaged run folders", flush=True)
        categories["damaged run folders"] = damaged(folder, folder / "reference")

    outcomes = ["correct", "clear error", "traceback", "unreadable checkpoint", "different result",
                "partial file left"]
    rows = []
    for name, cases in categories.items():
        counts = [sum(case["outcome"] == outcome for case in cases) for outcome in outcomes]
        other = len(cases) - sum(counts)
        rows.append([name, len(cases), *counts, other])
    table = format_table(["category", "cases", *outcomes, "other"], rows)
    print()
    print(table)
    record = {"question": "does attnmt end every faulty case correctly or with a clear error?",
              "torch": torch.__version__, "kills": args.kills, "seed": args.seed,
              "summary": [dict(zip(["category", "cases", *outcomes, "other"], row)) for row in rows],
              "cases": categories}
    write_text_atomic(args.output, json.dumps(portable(record), indent=2, ensure_ascii=False) + "\n")
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
