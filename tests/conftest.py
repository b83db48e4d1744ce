"""Shared test fixtures: the location of ../shared/data, seeded randomness, tiny trained runs and a
headless browser (both once per session, built from ``helpers.py``), and what a missing
requirement does: a user's `make test` skips the test with the reason; under CI (CI=true) the
test fails instead, so CI never passes by silently running less."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

# One fixed thread count for the whole suite, set before torch is imported and inherited by every
# subprocess a test starts: attnmt's default count follows the machine's load (attnmt.runtime.threads),
# and a different count changes the order of floating-point sums, so a test that compares two
# trainings for equality failed when a neighbour process came and went between them.
# tests/test_threads.py checks that it is set; a test of the adaptive count unsets it itself.
# A count given from outside (benchmarks/suite_on_every_cpu.py runs the suite at 1 and at 2) is kept.
SUITE_THREADS = os.environ.get("OMP_NUM_THREADS", "1")
if not SUITE_THREADS.isascii() or not SUITE_THREADS.isdigit() or int(SUITE_THREADS) < 1:
    SUITE_THREADS = "1"
os.environ["OMP_NUM_THREADS"] = SUITE_THREADS

import pytest  # noqa: E402 (after the thread count, which torch reads when it is imported)

from attnmt.cli import main as cli_main  # noqa: E402

from helpers import (  # noqa: E402
    TINY_MODELS,
    Browser,
    find_browser,
    run_trainer,
    tiny_run_config,
    write_corpus,
)

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# The list of code this user trained with (attnmt.attention.trusted_code) lives in a folder of the
# session's own, set before any test module copies os.environ for its subprocesses: the tests never
# read or extend the list in the user's home.
TRUST_FOLDER = Path(tempfile.mkdtemp(prefix="attnmt-tests-trust-"))
os.environ["ATTNMT_TRUSTED_CODE"] = str(TRUST_FOLDER / "trusted-code.txt")
# bf16 runs as asked on every CPU, emulated where the CPU has none: the tests check its numbers
# everywhere (attnmt.runtime.precision; tests/test_device.py checks the fall-back to fp32). A value
# given from outside is kept (the suite must pass with it on and off); a test that needs bf16
# arithmetic sets it itself.
os.environ.setdefault("ATTNMT_CPU_BF16", "on")


def pytest_addoption(parser):
    parser.addoption("--training-seed", type=int, default=1, metavar="N",
                     help="the seed of the tests marked `outcome` (trainings that assert what they learnt); "
                          "benchmarks/suite_on_every_cpu.py runs them under several")


@pytest.fixture(scope="session")
def training_seed(request) -> int:
    """The training seed of an `outcome` test: 1 unless ``--training-seed N`` says otherwise. Such a
    test must pass under every seed, on every CPU, with margin, not on one lucky trajectory."""
    return request.config.getoption("--training-seed")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TRUST_FOLDER, ignore_errors=True)

SHARED_DATA = Path(os.environ.get("ATTNMT_SHARED_DATA", PROJECT_ROOT.parent / "shared" / "data"))


def skip_or_fail_in_ci(reason: str) -> None:
    """Skip the calling test with ``reason``; fail it instead when CI=true."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: CI must run every test, so this is a failure, not a skip)")
    pytest.skip(reason)


def shared_data_path(*parts: str) -> Path:
    """Path below ../shared/data; skips the calling test with a reason when it is absent (fails in CI)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        skip_or_fail_in_ci(f"needs {path} (the shared data folder beside the project); it is absent here")
    return path


@pytest.fixture
def shared_data():
    """The shared data folder (``../shared/data``); the test is skipped when it is absent."""
    return shared_data_path()


@pytest.fixture(autouse=True)
def _seed_torch_one_thread():
    """Every test starts from the same torch seed, so a failure reproduces, and runs on the suite's
    thread count, one unless OMP_NUM_THREADS said otherwise: the tensors of the tests are tiny,
    and on a 2-core machine more threads only fight each other (10-50x slower under load)."""
    import torch

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(int(SUITE_THREADS))
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session", params=list(TINY_MODELS))
def tiny_run(request, tmp_path_factory) -> tuple[str, Path]:
    """(name, run folder) of a run of a few steps for each of ``TINY_MODELS``, with a test split
    ``made_up`` (the outputs are poor, which is fine: only shapes and numbers matter)."""
    folder = tmp_path_factory.mktemp(f"tiny-{request.param}")
    config = tiny_run_config(folder, train_pairs=60, valid_pairs=5, max_steps=4, bleu_max_sentences=0, examples=0)
    config["model"] = TINY_MODELS[request.param]
    config["data"]["test"] = {"made_up": write_corpus(folder, "test", 8, seed=3)}
    config["search"] = {"max_len_a": 1.0, "max_len_b": 3}
    run_trainer(folder, config)
    return request.param, folder / "run"


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium (``helpers.Browser``); skipped with a reason where none is installed."""
    executable = find_browser()
    if executable is None:
        skip_or_fail_in_ci("needs Chromium for the browser test (Debian: apt-get install chromium); "
                           "it is not installed")
    instance = Browser(executable)
    try:
        yield instance
    finally:
        instance.close()


@dataclass
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def attnmt_cli(capsys):
    """``attnmt_cli("translate", RUN, ...)``: the command run in this process (no interpreter to
    start), with its exit status and what it printed."""
    def run(*arguments: str) -> CommandResult:
        status = cli_main([str(argument) for argument in arguments])
        captured = capsys.readouterr()
        return CommandResult(status, captured.out, captured.err)

    return run

