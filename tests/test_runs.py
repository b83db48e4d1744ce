"""Run folders: checkpoints of format 1 (written before training became a package) still load,
translate, evaluate and resume, exactly as the same run in format 2; newer formats are refused."""

from __future__ import annotations

import shutil

import pytest
import torch

from attnmt.cli import main as cli_main
from attnmt.decoding.translator import Translator
from attnmt.errors import CheckpointError
from attnmt.runs.checkpoint import FORMAT_VERSION, load_checkpoint

from helpers import comparable, make_pairs, run_trainer, tiny_run_config

pytestmark = pytest.mark.slow  # trains and resumes runs


def as_format_1(checkpoint: dict) -> dict:
    """The layout attnmt wrote before format 2: one flat ``progress`` dict and a scheduler that
    kept its own plateau count."""
    old = dict(checkpoint, format_version=1)
    progress = checkpoint["progress"]
    plateau, window, epoch = progress["plateau"], progress["window"], progress["epoch_sums"]
    old["progress"] = {
        **{key: progress[key] for key in ("step", "epoch", "batch_in_epoch", "elapsed_seconds", "last_eval_step",
                                          "stop_reason", "world_size")},
        "best_val_loss": plateau["best_loss"], "best_step": plateau["best_step"],
        "best_epoch": plateau["best_epoch"], "best_val_bleu": plateau["best_bleu"],
        "plateau_best": plateau["best_loss"], "evals_without_improvement": plateau["stale"],
        **{f"window_{key}": window[key] for key in ("loss", "nll", "tokens", "steps", "seconds", "grad_norm", "guide")},
        **{f"epoch_{key}": epoch[key] for key in ("loss", "nll", "tokens", "seconds")},
    }
    if "scheduler" in checkpoint:
        old["scheduler"] = {**checkpoint["scheduler"], "best": plateau["best_loss"], "bad_evaluations": 0}
    return old


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same run stopped mid-epoch at step 7, once as written (format 2), once rewritten in format 1."""
    folder = tmp_path_factory.mktemp("runs")
    config = tiny_run_config(folder, max_epochs=3, max_steps=7)
    run_trainer(folder, config, out="new")
    shutil.copytree(folder / "new", folder / "old")
    for name in ("last.pt", "best.pt"):
        torch.save(as_format_1(torch.load(folder / "new" / name, weights_only=True)), folder / "old" / name)
    return folder, config


def test_format_1_checkpoints_translate_and_evaluate_as_before(two_runs, capsys):
    folder, _ = two_runs
    assert FORMAT_VERSION == 2 and torch.load(folder / "old" / "best.pt", weights_only=True)["format_version"] == 1
    upgraded = load_checkpoint(folder / "old" / "last.pt")["progress"]
    written = load_checkpoint(folder / "new" / "last.pt")["progress"]
    epoch_keys = ("loss", "nll", "tokens", "seconds")  # the epoch sums format 1 kept (and records use)
    assert {k: upgraded["epoch_sums"][k] for k in epoch_keys} == {k: written["epoch_sums"][k] for k in epoch_keys}
    # Format 1 did not count target tokens or the time to the best checkpoint: those start unknown.
    newer = {"epoch_sums", "target_tokens"}
    assert {k: v for k, v in upgraded.items() if k not in newer | {"plateau"}} == \
        {k: v for k, v in written.items() if k not in newer | {"plateau"}}
    newer_plateau = ("best_seconds", "best_tokens")
    assert upgraded["plateau"] == {k: v for k, v in written["plateau"].items() if k not in newer_plateau}
    assert "target_tokens" not in upgraded
    sources, _ = make_pairs(6, seed=9)
    old, new = Translator.load(folder / "old"), Translator.load(folder / "new")
    assert old.step == new.step == 7
    for beam in (1, 3):
        outputs = [t.output for t in new.translate(sources, beam=beam)]
        assert [t.output for t in old.translate(sources, beam=beam)] == outputs
    for run in ("old", "new"):
        assert cli_main(["evaluate", str(folder / run), "--split", "valid", "-n", "0", "--no-progress"]) == 0
    assert (folder / "old" / "eval-valid.json").read_text().replace("/old", "/new") == \
        (folder / "new" / "eval-valid.json").read_text()


def test_format_1_last_checkpoint_resumes_exactly_like_format_2(two_runs):
    folder, config = two_runs
    config = {**config, "training": {**config["training"], "max_steps": None}}
    old = run_trainer(folder, config, out="old", resume=True)
    new = run_trainer(folder, config, out="new", resume=True)
    assert old.step == new.step > 7 and old.stop_reason == "max_epochs=3 reached"
    assert comparable(old.history) == comparable(new.history)


def test_a_newer_checkpoint_format_is_refused_with_its_version(two_runs, tmp_path):
    folder, _ = two_runs
    checkpoint = torch.load(folder / "new" / "best.pt", weights_only=True)
    path = tmp_path / "future.pt"
    torch.save(dict(checkpoint, format_version=FORMAT_VERSION + 1), path)
    with pytest.raises(CheckpointError, match=f"format version {FORMAT_VERSION + 1} is not supported"):
        Translator.load(path)
