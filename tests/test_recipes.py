"""The recipes ship inside the package: --config takes a recipe's name, `attnmt recipes` lists and
prints them, their data paths start at $ATTNMT_DATA_DIR or the current folder, and `attnmt demo`
writes only into a folder of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnmt.commands.demo import MARKER
from attnmt.errors import ConfigError
from attnmt.runs.recipes import RECIPES_DIR, config_path, is_recipe, recipe_names, recipe_summary
from attnmt.runs.run_config import load_config

PROJECT = Path(__file__).resolve().parents[1]


def test_the_recipes_are_in_the_package_and_the_clone_shows_them_as_configs():
    assert RECIPES_DIR.parent == PROJECT / "attnmt"
    assert "multi30k_rnn_fast" in recipe_names() and "tiny" in recipe_names()
    assert sorted(path.stem for path in (PROJECT / "configs").glob("*.yaml")) == recipe_names()


@pytest.mark.parametrize("given", ["multi30k_rnn_fast", "multi30k_rnn_fast.yaml", "configs/multi30k_rnn_fast.yaml"])
def test_config_takes_a_recipes_name(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ folder here: the name alone finds the recipe
    assert config_path(given) == RECIPES_DIR / "multi30k_rnn_fast.yaml"
    assert is_recipe(config_path(given))


def test_a_file_of_the_same_name_wins_over_the_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tiny").write_text("model: {type: rnn}\n", encoding="utf-8")
    assert config_path("tiny") == Path("tiny")
    assert not is_recipe("tiny")


def test_an_unknown_name_lists_the_recipes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"multi30k_rnn_fas: no such config file, and no recipe .*multi30k_rnn_fast"):
        config_path("multi30k_rnn_fas")
    with pytest.raises(ConfigError, match="no such config file"):
        config_path("elsewhere/tiny.yaml")  # a folder other than configs/ is a path, not a recipe


def test_recipe_paths_start_at_the_data_folder_and_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMT_DATA_DIR", str(tmp_path / "data"))
    data = load_config(config_path("hansards_align_en_fr")).data
    assert data.resolve(data.train[0]) == tmp_path / "data" / "hansards-en-fr" / "train.en.gz"
    assert data.resolve(data.train_links) == tmp_path / "teacher" / "train.en-fr.links"
    monkeypatch.delenv("ATTNMT_DATA_DIR")
    with pytest.raises(ConfigError, match=r"\$ATTNMT_DATA_DIR is not set"):
        data.resolve(data.train[0])


def test_a_file_of_ones_own_resolves_against_its_folder(tmp_path, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "run.yaml").write_text("data: {dataset: null, train: [a.de, a.en]}\n", encoding="utf-8")
    monkeypatch.chdir(PROJECT)
    data = load_config(tmp_path / "mine" / "run.yaml").data
    assert data.resolve(data.train[0]) == (tmp_path / "mine" / "a.de").resolve()


def test_every_recipe_has_a_one_line_summary():
    for name in recipe_names():
        summary = recipe_summary(name)
        assert 20 < len(summary) <= 152 and "\n" not in summary, (name, summary)


def test_recipes_command_lists_and_prints(attnmt_cli):
    listing = attnmt_cli("recipes")
    assert listing.returncode == 0
    assert all(name in listing.stdout for name in recipe_names())
    printed = attnmt_cli("recipes", "tiny")
    assert printed.stdout == (RECIPES_DIR / "tiny.yaml").read_text(encoding="utf-8")
    missing = attnmt_cli("recipes", "tinyy")
    assert missing.returncode == 2 and "tinyy: no recipe of that name" in missing.stderr


def test_train_names_the_recipe_it_could_not_find(attnmt_cli, tmp_path):
    done = attnmt_cli("train", "--config", "multi30k_rnn_fats", "--out", tmp_path / "run")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "multi30k_rnn_fats: no such config file, and no recipe of that name" in done.stderr
    assert not (tmp_path / "run").exists()


def test_demo_writes_only_into_a_folder_of_its_own(attnmt_cli, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine\n", encoding="utf-8")
    done = attnmt_cli("demo", "--out", theirs, "--minutes", "1")
    assert done.returncode == 2 and "holds files the demo did not write" in done.stderr
    assert sorted(path.name for path in theirs.iterdir()) == ["notes.txt"]
    assert attnmt_cli("demo", "--out", tmp_path / "d", "--minutes", "0").returncode == 2
    assert not (tmp_path / "d" / MARKER).exists()
