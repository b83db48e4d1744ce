"""``attnmt compare`` (mechanisms × seeds: train, evaluate, summarise, continue after an
interruption) and ``attnmt evaluate --beam 1 2 3`` (the beam-size table), on tiny runs of a few
steps over made-up data (test_training's helpers)."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest

import attnmt.evaluation.agreement
import attnmt.training.trainer
from attnmt.cli import main as cli_main
from attnmt.errors import ConfigError
from attnmt.evaluation.summary import Statistics
from attnmt.runs.checkpoint import load_checkpoint
from attnmt.runs.folder import eval_json_path
from attnmt.training.comparison import run_folder
from attnmt.workflows import compare_mechanisms

from helpers import save_yaml, tiny_run_config, write_corpus

pytestmark = pytest.mark.slow  # trains a comparison of runs

MECHANISMS = ["dot", "mean"]
STEPS = 4


@pytest.fixture(scope="module")
def config_path(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("compare-data")
    config = tiny_run_config(folder, train_pairs=60, valid_pairs=5, checkpoint_every=2, log_every=2,
                         bleu_max_sentences=0, examples=0)
    config["data"]["test"] = {"made_up": write_corpus(folder, "test", 8, seed=3)}
    config["search"] = {"max_len_a": 1.0, "max_len_b": 3}
    return save_yaml(folder, config, "tiny.yaml")


def compare(config_path: Path, out: Path, log: list[str] | None = None, **options):
    return compare_mechanisms(config_path, MECHANISMS, 2, out, limits={"max_steps": STEPS}, show_progress=False,
                              log=(log.append if log is not None else lambda line: None), **options)


@pytest.fixture(scope="module")
def finished(config_path, tmp_path_factory):
    """A complete comparison, never interrupted, and the lines it logged."""
    out = tmp_path_factory.mktemp("compare") / "results"
    log: list[str] = []
    comparison = compare(config_path, out, log)
    return out, comparison, log


def per_run_values(out: Path, mechanism: str, metric: str) -> list[float]:
    return [json.loads(eval_json_path(run_folder(out, mechanism, seed), "made_up", 1).read_text())[metric]
            for seed in (1, 2)]


def test_every_mechanism_and_seed_is_trained_evaluated_and_logged(finished):
    out, comparison, log = finished
    order = [(o.mechanism, o.seed) for o in comparison.outcomes]
    assert order == [("dot", 1), ("mean", 1), ("dot", 2), ("mean", 2)]  # seed by seed
    assert [o.status for o in comparison.outcomes] == ["trained"] * 4
    assert re.match(r"device (cpu|cuda:\d+) \(.*\), precision fp32($|, TF32 on$)", log[0])  # where they train
    assert log[1] == f"[1/4] dot seed 1: training {out / 'runs' / 'dot-seed1'}"
    assert log[2].startswith("[1/4] dot seed 1: trained in ") and "made_up perplexity " in log[2]
    assert len(log) == 9
    for outcome in comparison.outcomes:
        report = json.loads(eval_json_path(outcome.run_dir, "made_up", 1).read_text())
        assert report["step"] == STEPS and report["num_sentences"] == 8 and report["beam"] == 1
        scores = (outcome.perplexity, outcome.bleu, outcome.chrf)
        assert scores == (report["perplexity"], report["bleu"], report["chrf"])
        assert (outcome.run_dir / "hyps-made_up.txt").is_file()
    config = (run_folder(out, "mean", 2) / "config.yaml").read_text()
    assert "attention: mean" in config and "seed: 2" in config and f"max_steps: {STEPS}" in config


def test_summary_statistics_match_numpy_and_statistics(finished):
    out, comparison, _ = finished
    summary = json.loads((out / "summary.json").read_text())
    rows = {row["attention"]: row for row in csv.DictReader((out / "summary.csv").open())}
    for mechanism in MECHANISMS:
        for metric in ("perplexity", "bleu", "chrf"):
            values = per_run_values(out, mechanism, metric)
            stats = summary["statistics"][mechanism][metric]
            assert stats["n"] == 2
            assert stats["mean"] == pytest.approx(np.mean(values), rel=1e-12, abs=1e-12)
            assert stats["std"] == pytest.approx(np.std(values, ddof=1), rel=1e-12, abs=1e-12)
            assert stats["var"] == pytest.approx(statistics.variance(values), rel=1e-12, abs=1e-12)
            assert float(rows[mechanism][f"{metric}_mean"]) == pytest.approx(stats["mean"], rel=1e-12)
            assert float(rows[mechanism][f"{metric}_var"]) == pytest.approx(stats["var"], rel=1e-12, abs=1e-12)
    assert len({o.perplexity for o in comparison.outcomes}) == 4  # different seeds, different runs
    markdown = (out / "summary.md").read_text()
    mean_ppl = np.mean(per_run_values(out, "dot", "perplexity"))
    std_ppl = np.std(per_run_values(out, "dot", "perplexity"), ddof=1)
    assert f"| dot       |    2 | {mean_ppl:.2f} ± {std_ppl:.2f}" in markdown
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_statistics_of_values():
    values = [31.2, 29.8, 33.05, 30.0]
    stats = Statistics.of(values)
    assert (stats.n, stats.mean) == (4, pytest.approx(np.mean(values)))
    assert stats.std == pytest.approx(statistics.stdev(values)) and stats.var == pytest.approx(np.var(values, ddof=1))
    one = Statistics.of([5.0])
    assert one.mean == 5.0 and math.isnan(one.std) and math.isnan(one.var)


def test_running_again_reuses_every_finished_run(finished, config_path, capsys, monkeypatch):
    out, comparison, _ = finished
    trained = []
    monkeypatch.setattr(attnmt.training.Trainer, "run", lambda self: trained.append(self.run_dir))
    code = cli_main(["compare", "--config", str(config_path), "--attention", *MECHANISMS, "--runs", "2",
                     "--out", str(out), "--max-steps", str(STEPS), "--no-progress"])
    assert code == 0 and trained == []
    captured = capsys.readouterr()
    printed = captured.out
    assert "device " in captured.err and "device " not in printed  # status on stderr, results on stdout
    assert printed.count(": reused: made_up perplexity") == 4
    assert "| attention | runs | perplexity (mean ± std) | perplexity var |" in printed
    assert f"{comparison.outcomes[0].bleu:.2f}" in printed


def test_an_interrupted_comparison_continues_where_it_stopped(finished, config_path, tmp_path, monkeypatch):
    """Interrupted during the third run (dot, seed 2; last checkpoint at step 2) and with the scores
    of a finished run lost: the second call reuses run 1, only evaluates run 2, resumes run 3 and
    trains run 4 — and every number equals the uninterrupted comparison's."""
    out = tmp_path / "results"
    calls = {"steps": 0}
    original_backward = attnmt.training.backward_on_batch

    def interrupting_backward(*args, **kwargs):
        calls["steps"] += 1
        if calls["steps"] == 2 * STEPS + 4:  # the 4th step of the third run
            raise KeyboardInterrupt
        return original_backward(*args, **kwargs)

    monkeypatch.setattr(attnmt.training.trainer, "backward_on_batch", interrupting_backward)
    with pytest.raises(KeyboardInterrupt):
        compare(config_path, out)
    monkeypatch.setattr(attnmt.training, "backward_on_batch", original_backward)
    interrupted = run_folder(out, "dot", 2)
    assert not eval_json_path(interrupted, "made_up", 1).exists()
    assert load_checkpoint(interrupted / "last.pt")["progress"]["step"] == 2  # where it will resume
    assert json.loads((out / "summary.json").read_text())["statistics"]["dot"]["perplexity"]["n"] == 1
    eval_json_path(run_folder(out, "mean", 1), "made_up", 1).unlink()

    trainings = []
    original_run = attnmt.training.Trainer.run

    def recording_run(self):
        trainings.append((self.run_dir.name, self.resume))
        return original_run(self)

    monkeypatch.setattr(attnmt.training.Trainer, "run", recording_run)
    log: list[str] = []
    again = compare(config_path, out, log)
    assert [o.status for o in again.outcomes] == ["reused", "evaluated", "resumed", "trained"]
    assert trainings == [("dot-seed2", True), ("mean-seed2", False)]
    assert f"[3/4] dot seed 2: resuming {interrupted}" in log
    metrics = [json.loads(line) for line in (interrupted / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics if r["type"] == "train"] == [2, 4]  # one record per 2 steps, none twice
    reference = {(o.mechanism, o.seed): o for o in finished[1].outcomes}
    for outcome in again.outcomes:
        expected = reference[(outcome.mechanism, outcome.seed)]
        assert (outcome.perplexity, outcome.bleu, outcome.chrf) == pytest.approx(
            (expected.perplexity, expected.bleu, expected.chrf), rel=1e-9
        )
    assert (out / "summary.md").read_text().split("## Runs")[0] == \
        (finished[0] / "summary.md").read_text().split("## Runs")[0]


def test_a_changed_config_or_bad_names_are_refused_before_training(finished, config_path, tmp_path, capsys,
                                                                   monkeypatch):
    out = finished[0]
    trained = []
    monkeypatch.setattr(attnmt.training.Trainer, "run", lambda self: trained.append(self.run_dir))
    base = ["compare", "--config", str(config_path), "--runs", "2", "--max-steps", str(STEPS), "--no-progress"]
    assert cli_main(base + ["--attention", *MECHANISMS, "--out", str(out), "--set", "training.lr=0.5"]) == 2
    error = capsys.readouterr().err
    assert "dot-seed1: this run was made with another config" in error and "training.lr (" in error
    assert "resume" not in error.lower()  # the comparison's advice, not train's (#38: it nested train's)
    assert cli_main(base + ["--attention", "dot", "nonsense", "--out", str(tmp_path / "new")]) == 2
    assert "nonsense" in capsys.readouterr().err
    assert cli_main(base + ["--attention", "dot", "dot", "--out", str(tmp_path / "new")]) == 2
    assert "more than once" in capsys.readouterr().err
    assert cli_main(base + ["--attention", "dot", "--split", "nope", "--out", str(tmp_path / "new")]) == 2
    assert "no split 'nope'" in capsys.readouterr().err
    assert trained == [] and not (tmp_path / "new").exists()


def test_evaluate_with_several_beam_sizes_writes_a_table(finished, capsys):
    out, comparison, _ = finished
    run = run_folder(out, "dot", 1)
    assert cli_main(["evaluate", str(run), "--beam", "1", "2", "3", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "| beam |" in printed and "sentences/s" in printed
    report = json.loads((run / "beam-made_up.json").read_text())
    assert [r["beam"] for r in report["results"]] == [1, 2, 3]
    assert report["num_sentences"] == 8 and report["perplexity"] == pytest.approx(comparison.outcomes[0].perplexity)
    greedy = json.loads(eval_json_path(run, "made_up", 1).read_text())
    assert report["results"][0]["bleu"] == pytest.approx(greedy["bleu"])  # beam 1 = the greedy evaluation
    for row in report["results"]:
        assert {"bleu", "chrf", "average_length", "length_ratio", "seconds"} <= set(row)
        assert row["seconds"] > 0 and row["average_length"] > 0
        suffix = "" if row["beam"] == 1 else f"-beam{row['beam']}"
        hyps = (run / f"hyps-made_up{suffix}.txt").read_text()
        assert len(hyps.splitlines()) == 8
        assert np.mean([len(line.split()) for line in hyps.splitlines()]) == pytest.approx(row["average_length"])
    table = (run / "beam-made_up.md").read_text()
    assert table.count("\n|") == 2 + 3  # header, rule, three beam sizes


def test_a_finished_run_is_not_reused_under_another_limit(finished, config_path):
    out, comparison, _ = finished
    assert comparison.outcomes[0].stop_reason == f"max_steps={STEPS} reached"  # the limit each run kept
    with pytest.raises(ConfigError, match=f"stopped at max_steps={STEPS}, but the comparison asks for "
                                          f"max_steps={STEPS + 3}"):
        compare_mechanisms(config_path, MECHANISMS, 2, out, limits={"max_steps": STEPS + 3}, show_progress=False,
                           log=lambda line: None)


def test_compare_adds_the_agreement_of_each_run_and_reuses_it(finished, config_path, tmp_path, capsys, monkeypatch):
    out = tmp_path / "results"
    shutil.copytree(finished[0], out)
    arguments = ["compare", "--config", str(config_path), "--attention", *MECHANISMS, "--runs", "2", "--out",
                 str(out), "--max-steps", str(STEPS), "--no-progress", "--attribution", "gradient"]
    assert cli_main(arguments) == 0
    printed = capsys.readouterr().out
    assert "attention-saliency rank correlation (mean ± std)" in printed and "top-1 agreement (mean ± std)" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["saliency"]["method"] == "gradient"
    for run in summary["runs"]:
        report = json.loads((out / "runs" / f"{run['mechanism']}-seed{run['seed']}" /
                             "agreement-made_up-gradient.json").read_text())
        assert report["step"] == run["step"] and report["words"] > 0
        # (mean attention is uniform over pieces, so over words it ranks them by their number of pieces)
        assert 0 < report["counted"] <= report["words"]
        assert -1 <= run["rank_correlation"] <= 1 and 0 <= run["top1"] <= 1
        assert (run["rank_correlation"], run["top1"]) == (report["rank_correlation"], report["top1"])
    statistics = summary["statistics"]["dot"]["rank_correlation"]
    values = [run["rank_correlation"] for run in summary["runs"] if run["mechanism"] == "dot"]
    assert statistics["mean"] == pytest.approx(float(np.mean(values)))
    assert "rank_correlation_mean" in (out / "summary.csv").read_text().splitlines()[0]

    def not_again(*args, **kwargs):
        raise AssertionError("the agreement was computed again")

    monkeypatch.setattr(attnmt.evaluation.agreement, "corpus_agreement", not_again)
    assert cli_main(arguments) == 0  # every run's agreement is read back from its folder
    assert json.loads((out / "summary.json").read_text())["runs"] == summary["runs"]


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", '{"perplexity": "x", "bleu": 1, "chrf": 2}'])
def test_a_damaged_score_file_is_evaluated_again_not_a_traceback(finished, config_path, tmp_path, damage):
    """Issue 63, item 8: compare reused eval-*.json as it found it and ended in a traceback when it
    was damaged; the run is evaluated again and the comparison gives the same numbers."""
    out = tmp_path / "results"
    shutil.copytree(finished[0], out)
    damaged = eval_json_path(run_folder(out, "dot", 1), "made_up", 1)
    damaged.write_text(damage, encoding="utf-8")
    log: list[str] = []
    again = {(o.mechanism, o.seed): o for o in compare(config_path, out, log).outcomes}
    assert again[("dot", 1)].status == "evaluated" and any("is damaged; evaluating" in line for line in log)
    reference = {(o.mechanism, o.seed): o for o in finished[1].outcomes}
    assert again[("dot", 1)].bleu == reference[("dot", 1)].bleu
