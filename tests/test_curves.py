"""Training curves: ``attnmt curves RUN [RUN ...] --out FILE`` and ``training.tensorboard``."""

from __future__ import annotations

import json

import pytest

from attnmt.cli import main as cli_main
from attnmt.errors import DataError
from attnmt.visual.curves import read_curves

from helpers import run_trainer, save_yaml, tiny_run_config

pytestmark = pytest.mark.slow  # trains runs to draw


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("curves")
    for seed in (1, 2):
        config = tiny_run_config(folder, max_epochs=2, max_steps=12, log_every=2, seed=seed, examples=0)
        run_trainer(folder, config, out=f"seed{seed}")
    return folder


def test_read_curves_takes_every_training_and_validation_record(two_runs):
    curves = read_curves(two_runs / "seed1")
    records = [json.loads(line) for line in (two_runs / "seed1" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["type"] == "train"]
    valid = [r for r in records if r["type"] in ("valid", "epoch")]
    assert curves.name == "seed1" and len(curves.train_loss) == len(train) == 6 and len(curves.valid_ppl) == len(valid)
    assert [(step, value) for step, _, value in curves.train_loss] == [(r["step"], r["loss"]) for r in train]
    assert [(step, value) for step, _, value in curves.valid_ppl] == [(r["step"], r["val_ppl"]) for r in valid]
    assert all(minutes == pytest.approx(r["elapsed"] / 60) for (_, minutes, _), r in zip(curves.valid_bleu, valid))


def test_curves_draws_several_runs_in_one_figure(two_runs, tmp_path, capsys):
    out = tmp_path / "curves.png"
    # Runs after an option join the others, as with translate's sentences.
    assert cli_main(["curves", str(two_runs / "seed1"), "--out", str(out), str(two_runs / "seed2")]) == 0
    assert f"wrote {out}: curves of 2 runs" in capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli_main(["curves", str(two_runs / "seed1"), "--out", str(out)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    svg = tmp_path / "curves.svg"
    assert cli_main(["curves", str(two_runs / "seed1"), "--out", str(svg), "--title", "one seed"]) == 0
    text = svg.read_text(encoding="utf-8")
    assert "validation perplexity" in text and "minutes of training" in text and "seed1" in text


def test_curves_names_what_it_cannot_read(two_runs, tmp_path, capsys):
    assert cli_main(["curves", str(tmp_path), "--out", str(tmp_path / "c.png")]) == 2
    assert f"{tmp_path / 'metrics.jsonl'}: no such file" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text('{"type": "train", "step": 1, "elapsed": 0.1, "loss": 2.0}\n{"type": \n',
                                            encoding="utf-8")
    with pytest.raises(DataError, match=r"metrics.jsonl, line 2: not JSON"):
        read_curves(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"type": "train", "step": 1}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"metrics.jsonl, line 1: not a metrics record of attnmt \(KeyError"):
        read_curves(tmp_path)
    assert cli_main(["curves", str(two_runs / "seed1"), "--out", str(tmp_path / "c.gif")]) == 2
    assert "cannot draw curves as 'gif'" in capsys.readouterr().err
    assert not (tmp_path / "c.gif").exists() and not (tmp_path / "c.png").exists()


def test_training_tensorboard_writes_the_metrics_as_event_files(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                            reason="tensorboard is an optional extra (attnmt[tensorboard])")
    config = tiny_run_config(tmp_path, max_epochs=2, max_steps=8, log_every=2, examples=0, tensorboard=True)
    run_trainer(tmp_path, config)
    events = event_accumulator.EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["type"] == "train"]
    valid = [r for r in records if r["type"] in ("valid", "epoch")]
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == \
        [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in train]
    assert [(e.step, e.value) for e in events.Scalars("valid/ppl")] == \
        [(r["step"], pytest.approx(r["val_ppl"], rel=1e-6)) for r in valid]
    assert len(events.Scalars("valid/bleu")) == len(valid)


def test_training_tensorboard_without_the_package_is_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("attnmt.training.tensorboard.importlib.util.find_spec", lambda name: None)
    config = save_yaml(tmp_path, tiny_run_config(tmp_path, max_steps=2))
    assert cli_main(["train", "--config", str(config), "--out", str(tmp_path / "run"), "--no-progress",
                     "--set", "training.tensorboard=true"]) == 2
    assert "training.tensorboard: true needs the tensorboard package; pip install 'attnmt[tensorboard]'" in \
        capsys.readouterr().err
    assert not (tmp_path / "run" / "config.yaml").exists()
