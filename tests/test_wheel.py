"""attnmt works from its wheel alone, without a clone: the wheel is built, installed into a fresh
virtual environment, and runs a recipe by name from a folder that holds nothing of the project.

The fresh environment gets attnmt from the wheel only (pip, no index, no dependencies); its
dependencies (torch, ...) are borrowed from the environment running the tests through a ``.pth``
line written after the install, which adds that folder to the path without reading its ``.pth``
files, so this clone's editable install stays out of sight.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow]


def run(*command, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel of this working tree installed; returns its bin folder."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # built from a copy: the build leaves build/ and *.egg-info behind
    needed = ("attnmt", "pyproject.toml", "README.md")
    shutil.copytree(PROJECT, source, symlinks=True, ignore=lambda folder, names: [
        name for name in names if name == "__pycache__" or (Path(folder) == PROJECT and name not in needed)])
    # setuptools of this environment when it has one (offline), else pip fetches it from the index
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    run(sys.executable, "-m", "pip", "wheel", ".", "--no-deps", *isolation, "--quiet", "-w", root / "dist", cwd=source)
    wheels = list((root / "dist").glob("attnmt-*.whl"))
    assert len(wheels) == 1, wheels
    venv = root / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=root)
    bin_dir = venv / "bin"
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheels[0], cwd=root)
    site = Path(run(bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=root).stdout.strip())
    (site / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return bin_dir


def test_the_wheel_holds_the_recipes_and_runs_without_the_clone(installed, tmp_path):
    where = run(installed / "python", "-c", "import attnmt; print(attnmt.__file__)", cwd=tmp_path).stdout
    assert Path(where.strip()).is_relative_to(installed.parent), where
    listing = run(installed / "attnmt", "recipes", cwd=tmp_path).stdout
    assert "multi30k_rnn_fast" in listing and "tiny" in listing
    assert "demo" in run(installed / "attnmt", "--help", cwd=tmp_path).stdout


@pytest.mark.shared_data
def test_the_wheel_trains_a_recipe_by_name(installed, tmp_path, shared_data):
    env = {**os.environ, "ATTNMT_DATA_DIR": str(shared_data)}
    done = run(installed / "attnmt", "train", "--config", "multi30k_rnn_fast", "--max-steps", "20",
               "--out", "run", "--no-progress", cwd=tmp_path, env=env)
    assert "stopped: max_steps=20 reached" in done.stdout + done.stderr
    assert (tmp_path / "run" / "best.pt").is_file() and (tmp_path / "run" / "config.yaml").is_file()
