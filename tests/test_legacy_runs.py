"""A run folder written by attnmt 0.1.0 (``tests/data/runs-0.1.0``, made by its ``make_runs.py``
before the layout of 0.2.0) translates with greedy and beam search, evaluates and resumes exactly
as 0.1.0 did: the same outputs, scores, attention and metric records. 0.1.0 made them on a CPU, so
each command here runs on the CPU too, on a machine with a GPU as well."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import attnmt
from attnmt.cli import main as cli_main
from attnmt.decoding.translator import Translator
from attnmt.runs.checkpoint import save_checkpoint

from helpers import comparable, run_trainer, tiny_rnn_config, tiny_run_config

pytestmark = pytest.mark.slow  # translates, evaluates and resumes a run

LEGACY = Path(__file__).resolve().parent / "data" / "runs-0.1.0"
EXPECTED = json.loads((LEGACY / "expected.json").read_text(encoding="utf-8"))
#: floats from the same computation on another processor: its vector units round otherwise (on the
#: host of a GPU machine a resumed loss differed by 9e-8; on an AVX2-only CPU a perplexity by 4e-8)
FLOAT_RTOL = 1e-6


@pytest.fixture
def legacy_run(tmp_path) -> Path:
    """A copy of the 0.1.0 RNN run whose config names the copied data: a run moved with its data."""
    run = tmp_path / "rnn"
    shutil.copytree(LEGACY / "rnn", run)
    for name in ("train.de", "train.en", "valid.de", "valid.en"):
        shutil.copy(LEGACY / name, tmp_path / name)
    config = run / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace(f"{EXPECTED['work_folder']}/data", str(tmp_path)),
                      encoding="utf-8")
    return run


def assert_records_match(records: list[dict], expected: list[dict]) -> None:
    """The same records, their floats to 1e-6 relative: another processor's vector units round
    otherwise (on the host of a GPU machine a resumed loss differed from this one's by 9e-8)."""
    assert len(records) == len(expected)
    for record, wanted in zip(records, expected):
        assert record.keys() == wanted.keys()
        for key, value in wanted.items():
            if isinstance(value, float):
                assert record[key] == pytest.approx(value, rel=FLOAT_RTOL), (record.get("step"), key)
            else:
                assert record[key] == value, (record.get("step"), key)


@pytest.mark.parametrize("beam", [1, 5])
def test_a_run_of_0_1_0_translates_as_it_did(legacy_run, beam):
    translator = attnmt.Translator.load(legacy_run, device="cpu")
    translations = translator.translate(EXPECTED["sentences"], beam=beam, return_attention=True)
    for translation, expected in zip(translations, EXPECTED["rnn"]["translations"][f"beam{beam}"], strict=True):
        assert translation.output == expected["output"]
        assert translation.out_pieces == expected["out_pieces"]
        assert translation.score == pytest.approx(expected["score"], abs=1e-6)
        np.testing.assert_allclose(translation.attention, expected["attention"], atol=2e-6)
        [heads] = translator.read_attention([translation])
        np.testing.assert_allclose(heads, expected["heads"], atol=2e-6)


def test_a_run_of_0_1_0_evaluates_as_it_did(legacy_run, capsys):
    for beam, expected in EXPECTED["rnn"]["evaluation"].items():
        assert cli_main(["evaluate", str(legacy_run), "--split", "valid", "--beam", beam, "--no-progress",
                         "-n", "0", "--device", "cpu"]) == 0
        name = "eval-valid.json" if beam == "1" else f"eval-valid-beam{beam}.json"
        report = json.loads((legacy_run / name).read_text(encoding="utf-8"))
        assert {key: report[key] for key in expected} == pytest.approx(expected, rel=FLOAT_RTOL, abs=1e-9)


def test_a_run_of_0_1_0_resumes_as_it_did(legacy_run, capsys):
    assert cli_main(["train", "--out", str(legacy_run), "--resume", "--max-steps", "20", "--no-progress",
                     "--device", "cpu"]) == 0
    records = [json.loads(line) for line in (legacy_run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert_records_match(comparable([r for r in records if r["type"] != "summary"]), EXPECTED["rnn"]["resumed_records"])


def test_evaluate_names_the_run_config_whose_data_section_is_wrong(legacy_run, capsys):
    """The split's files come from RUN/config.yaml; a wrong value there is one line naming that file."""
    config = legacy_run / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("max_tokens: 160", "max_tokens: -5"),
                      encoding="utf-8")
    assert cli_main(["evaluate", str(legacy_run), "--split", "valid", "--no-progress", "-n", "0"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(config) in error and "max_tokens" in error and "Traceback" not in error
    assert not (legacy_run / "eval-valid.json").exists()


def test_relative_data_paths_in_the_run_config_start_at_the_run_folder(legacy_run, tmp_path, monkeypatch, capsys):
    """evaluate and train --resume read RUN/config.yaml's relative paths from the run folder, wherever
    the command runs from: the same numbers as with absolute paths."""
    config = legacy_run / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace(str(legacy_run.parent), ".."), encoding="utf-8")
    assert str(legacy_run.parent) not in config.read_text(encoding="utf-8")
    elsewhere = tmp_path / "somewhere" / "else"  # where ".." is not the data's folder
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    assert cli_main(["evaluate", str(legacy_run), "--split", "valid", "--beam", "1", "--no-progress", "-n", "0",
                     "--device", "cpu"]) == 0
    report = json.loads((legacy_run / "eval-valid.json").read_text(encoding="utf-8"))
    expected = EXPECTED["rnn"]["evaluation"]["1"]
    assert {key: report[key] for key in expected} == pytest.approx(expected, rel=FLOAT_RTOL, abs=1e-9)
    assert cli_main(["train", "--out", str(legacy_run), "--resume", "--max-steps", "20", "--no-progress",
                     "--device", "cpu"]) == 0
    records = [json.loads(line) for line in (legacy_run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert_records_match(comparable([r for r in records if r["type"] != "summary"]), EXPECTED["rnn"]["resumed_records"])


def _forget_gaussian(run: Path) -> None:
    """Make ``run`` look saved before local-m followed the paper: no ``gaussian`` in its config.yaml
    nor in its checkpoints (what attnmt wrote then)."""
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    del config["model"]["attention_options"]["gaussian"]
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    for name in ("best.pt", "last.pt"):
        state = torch.load(run / name, weights_only=True)
        del state["config"]["model"]["attention_options"]["gaussian"]
        save_checkpoint(state, run / name)


def test_a_local_m_run_saved_before_the_paper_form_translates_exactly_as_before(tmp_path):
    config = tiny_run_config(tmp_path, max_steps=12)
    config["model"] = tiny_rnn_config(attention="local-m", attention_options={"window": 2, "gaussian": True})
    run_trainer(tmp_path, config)
    run = tmp_path / "run"
    sentences = ["Der Hund sieht die Katze.", "Ein Mann läuft."]
    before = Translator.load(run).translate(sentences, beam=3, return_attention=True)
    _forget_gaussian(run)
    old = Translator.load(run)
    assert old.model.attention.gaussian and old.run_config.model.attention_options["gaussian"] is True
    after = old.translate(sentences, beam=3, return_attention=True)
    for a, b in zip(before, after):
        assert a.output == b.output and a.score == b.score and np.array_equal(a.attention, b.attention)
    assert cli_main(["train", "--out", str(run), "--resume", "--max-steps", "14", "--no-progress"]) == 0

    config["model"]["attention_options"] = {"window": 2}  # a new local-m run: the paper's form, recorded
    run_trainer(tmp_path, config, out="new")
    assert "gaussian: false" in (tmp_path / "new" / "config.yaml").read_text(encoding="utf-8")
    assert not Translator.load(tmp_path / "new").model.attention.gaussian
