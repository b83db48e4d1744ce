"""Files and values from an unknown sender are bounded before anything reads or renders them
(attnmt.runtime.reading): special files, alias bombs, deep nesting, numbers of thousands of
digits, and shared references in a checkpoint's pickle. Each of these hung, filled the memory or
ended in a traceback before (issue 63, item 4)."""

from __future__ import annotations

import os
import stat

import pytest
import torch

from attnmt.errors import CheckpointError, ConfigError
from attnmt.runs.checkpoint import FORMAT, load_checkpoint
from attnmt.runs.folder import read_saved_config
from attnmt.runs.run_config import load_config
from attnmt.runtime.reading import DataTooLarge, check_plain_data, read_text_bounded

ALIAS_BOMB = "\n".join(['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'] +
                       [f"{chr(98 + k)}: &{chr(98 + k)} [{', '.join(['*' + chr(97 + k)] * 9)}]" for k in range(8)])


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(DataTooLarge, match="is a FIFO"):
        read_text_bounded(fifo)
    with pytest.raises(ConfigError, match="is a FIFO, not a regular file"):
        read_saved_config(tmp_path)
    with pytest.raises(ConfigError, match="is a FIFO"):
        load_config(fifo)


def test_a_link_to_a_device_and_a_file_too_large_are_refused(tmp_path):
    (tmp_path / "config.yaml").symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="is a device, not a regular file"):
        read_saved_config(tmp_path)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(ConfigError, match="is larger than 1,048,576 bytes"):
        load_config(big)


def test_an_alias_bomb_is_refused_in_one_line_before_anything_renders_it(tmp_path):
    assert len(ALIAS_BOMB) < 1000  # 9^9 strings once expanded
    (tmp_path / "config.yaml").write_text(ALIAS_BOMB)
    with pytest.raises(ConfigError) as error:
        read_saved_config(tmp_path)
    assert "more than 100,000 values" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="more than 100,000 values"):
        load_config(tmp_path / "config.yaml")


@pytest.mark.parametrize(("text", "words"), [
    ("model:\n  embed_dim: " + "9" * 5000 + "\n", "a number of 5,000 digits"),
    ("model:\n  embed_dim: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than"),
])
def test_huge_numbers_and_deep_nesting_are_one_line(tmp_path, text, words):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=words):
        load_config(path)
    with pytest.raises(ConfigError, match=words):
        load_config("tiny", set_options=[f"model.embed_dim={text.split(': ', 1)[1].strip()}"])


def test_shared_references_in_a_checkpoint_are_refused(tmp_path):
    bomb: list = ["x"] * 10
    for _ in range(7):
        bomb = [bomb] * 10
    path = tmp_path / "best.pt"
    torch.save({"format": FORMAT, "format_version": 2, "config": {"model": {"type": "rnn", "extra": bomb}}}, path)
    with pytest.raises(CheckpointError, match="more than 100,000 values"):
        load_checkpoint(path)


def test_plain_data_within_the_bounds_passes_and_a_loop_does_not():
    shared = list(range(50))
    check_plain_data({"a": shared, "b": shared, "c": {"d": [1.5, None, True, "text"]}}, "ok")
    loop: list = []
    loop.append(loop)
    with pytest.raises(DataTooLarge):
        check_plain_data(loop, "a list that holds itself")


@pytest.mark.parametrize("arguments", [
    ["check", "dot", "--json", "{target}", "--overwrite"],
    ["translate", "{run}", "Ein Hund.", "--attention-out", "{target}", "--overwrite"],
    ["view", "{run}", "-n", "1", "--out", "{target}", "--overwrite"],
])
def test_overwrite_never_replaces_a_device_or_a_fifo(tiny_run, attnmt_cli, tmp_path, arguments):
    """A FIFO named like the output (and, as /dev/null would be, a device) is an input to keep:
    one line, exit 2, and the FIFO is still a FIFO."""
    _, run = tiny_run
    suffix = {"check": ".json", "translate": ".jsonl", "view": ".html"}[arguments[0]]
    target = tmp_path / f"out{suffix}"
    os.mkfifo(target)
    result = attnmt_cli(*[a.format(target=target, run=run) for a in arguments])
    assert result.returncode == 2, result.stderr
    assert "not a regular file" in result.stderr.strip().splitlines()[-1]
    assert stat.S_ISFIFO(target.stat().st_mode)


def test_an_atomic_write_refuses_a_device():
    from attnmt.errors import OutputError
    from attnmt.runtime.atomic_files import write_text_atomic

    with pytest.raises(OutputError, match="not a regular file"):
        write_text_atomic("/dev/null", "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_checkpoint_asking_for_a_huge_model_is_refused_before_allocating(tiny_run, tmp_path):
    """Its config asks for a width of a million: loading builds the model on the meta device, finds
    that the weights do not fit it, and refuses in one line, instead of allocating terabytes
    (item 5; issue 77, item 8: the shapes are compared before the memory is counted)."""
    from attnmt.decoding.translator import Translator

    name, run = tiny_run
    state = torch.load(run / "best.pt", weights_only=True)
    key = "d_model" if name == "transformer" else "hidden_dim"
    state["config"]["model"][key] = 1_000_000
    path = tmp_path / "huge.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="the weights do not fit the model its config describes"):
        Translator.load(path)


@pytest.mark.parametrize("progress", [12345, "step 4", [1, 2], {"step": 4, "plateau": 7}])
def test_a_damaged_progress_in_a_checkpoint_is_one_line(tiny_run, tmp_path, attnmt_cli, progress):
    """``progress: 12345`` in a checkpoint ended in a traceback in translate (item 8)."""
    _, run = tiny_run
    state = torch.load(run / "best.pt", weights_only=True)
    state["progress"] = progress
    path = tmp_path / "damaged.pt"
    torch.save(state, path)
    result = attnmt_cli("translate", path, "ein hund")
    assert result.returncode == 2 and "its progress is damaged" in result.stderr.strip().splitlines()[-1]
