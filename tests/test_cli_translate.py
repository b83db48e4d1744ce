"""The command line end to end: ``attnmt train`` → ``attnmt evaluate`` → ``attnmt translate``
(sentences as arguments and on standard input), on a small made-up German→English corpus: the
commands need no real data to be tested, so these tests run everywhere."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from attnmt.cli import main as cli_main
from attnmt.decoding.translator import Translator
from attnmt.errors import ConfigError

from helpers import make_pairs

pytestmark = pytest.mark.slow  # trains a run for the commands


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """train (500 pairs), valid and a test set "flickr" (50 pairs each) of the made-up task."""
    folder = tmp_path_factory.mktemp("corpus")
    for name, count, seed in (("train", 500, 1), ("valid", 50, 2), ("flickr", 50, 3)):
        src, tgt = make_pairs(count, seed)
        (folder / f"{name}.de").write_text("\n".join(src) + "\n", encoding="utf-8")
        (folder / f"{name}.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    config = {
        "data": {
            "train": ["train.de", "train.en"],
            "valid": ["valid.de", "valid.en"],
            "test": {"flickr": ["flickr.de", "flickr.en"]},
            "vocab_size": 60,
            "max_tokens": 800,
        },
        "model": {"type": "rnn", "embed_dim": 32, "hidden_dim": 64, "dropout": 0.1, "attention": "sdp"},
        "training": {"lr": 0.005, "max_epochs": 1, "log_every": 4, "checkpoint_every": 4,
                     "num_threads": 1, "bleu_max_sentences": 10, "examples": 2},
        "search": {"max_len_a": 1.0, "max_len_b": 5},
    }
    (folder / "slice.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def trained(corpus) -> Path:
    out = corpus / "run"
    code = cli_main(["train", "--config", str(corpus / "slice.yaml"), "--out", str(out),
                     "--max-steps", "8", "--attention", "additive", "--seed", "3", "--no-progress"])
    assert code == 0
    return out


def test_train_writes_a_complete_run(trained, capsys):
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records] == ["train", "train", "valid", "summary"]
    assert records[-1]["stop_reason"] == "max_steps=8 reached"
    config = yaml.safe_load((trained / "config.yaml").read_text())
    assert config["model"]["attention"] == "additive" and config["training"]["seed"] == 3
    assert Path(config["data"]["train"][0]).is_absolute()
    assert sorted(p.name for p in (trained / "examples").iterdir()) == ["epoch01-1.png", "epoch01-2.png"]


def test_evaluate_prints_scores_and_writes_files(trained, capsys):
    assert cli_main(["evaluate", str(trained), "--split", "flickr", "-n", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for label in ("perplexity:", "BLEU:", "chrF:", "BLEU (lc):", "nrefs:1|case:mixed", "source:", "reference:",
                  "output:"):
        assert label in out
    report = json.loads((trained / "eval-flickr.json").read_text())
    assert report["num_sentences"] == 50 and report["beam"] == 1 and report["checkpoint"] == "best.pt"
    assert report["perplexity"] > 1 and 0 <= report["bleu"] <= 100
    hyps = (trained / "hyps-flickr.txt").read_text().splitlines()
    assert len(hyps) == 50
    assert (trained / "examples" / "flickr-001.png").is_file() and (trained / "examples" / "flickr-002.png").is_file()

    assert cli_main(["evaluate", str(trained), "--beam", "2", "--checkpoint", "last", "-n", "0", "--no-progress"]) == 0
    assert "beam 2" in capsys.readouterr().out
    assert (trained / "hyps-flickr-beam2.txt").is_file()  # "test" = the config's first test set


def test_evaluate_unknown_split(trained, capsys):
    assert cli_main(["evaluate", str(trained), "--split", "nope", "--no-progress"]) == 2
    assert "no split 'nope'" in capsys.readouterr().err


def test_translate_arguments_stdin_and_plot(trained, capsys, monkeypatch, tmp_path):
    assert cli_main(["translate", str(trained), "Ein Mann fährt Fahrrad.", "Zwei Hunde spielen.",
                     "--plot", str(tmp_path / "a.png")]) == 0
    captured = capsys.readouterr()
    outputs = captured.out.splitlines()
    assert len(outputs) == 2
    assert (tmp_path / "a-1.png").is_file() and (tmp_path / "a-2.png").is_file()
    # Refuses to overwrite the plots unless asked.
    assert cli_main(["translate", str(trained), "Ein Mann fährt Fahrrad.", "Zwei Hunde spielen.",
                     "--plot", str(tmp_path / "a.png")]) == 2
    assert "--overwrite" in capsys.readouterr().err

    monkeypatch.setattr(sys, "stdin", io.StringIO("Ein Mann fährt Fahrrad.\n\nZwei Hunde spielen.\n"))
    assert cli_main(["translate", str(trained)]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines == [outputs[0], "", outputs[1], ""]  # one line out per line in, empty stays empty


def test_bfloat16_search_writes_its_own_files(trained, capsys):
    """--precision bf16: the search's products in bfloat16; its hyps and eval files sit beside
    the float32 ones instead of replacing them."""
    assert cli_main(["evaluate", str(trained), "--split", "flickr", "--beam", "2", "-n", "0", "--precision", "bf16",
                     "--no-progress"]) == 0
    assert "beam 2 (bf16 products)" in capsys.readouterr().out
    report = json.loads((trained / "eval-flickr-beam2-bf16.json").read_text())
    assert report["precision"] == "bf16" and report["beam"] == 2 and 0 <= report["bleu"] <= 100
    assert len((trained / "hyps-flickr-beam2-bf16.txt").read_text().splitlines()) == 50
    capsys.readouterr()
    assert cli_main(["translate", str(trained), "Ein Mann fährt Fahrrad.", "--precision", "bf16", "--beam", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert cli_main(["translate", str(trained), "Ein Mann.", "--precision", "fp16", "--device", "cpu"]) == 2
    assert "no float16 LSTM on the CPU; use bf16" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["translate", str(trained), "Ein Mann.", "--precision", "fp8"])


def test_missing_run_and_checkpoint(tmp_path, capsys):
    assert cli_main(["translate", str(tmp_path / "nothing"), "Hallo"]) == 2
    assert "no such run folder" in capsys.readouterr().err
    empty = tmp_path / "empty-run"
    empty.mkdir()
    assert cli_main(["evaluate", str(empty)]) == 2
    assert "best.pt: checkpoint not found" in capsys.readouterr().err


def test_options_may_come_before_between_and_after_the_sentences(trained, capsys):
    assert cli_main(["translate", str(trained), "Ein Hund.", "--beam", "2", "Zwei Katzen."]) == 0
    between = capsys.readouterr().out.splitlines()
    assert cli_main(["translate", str(trained), "--beam", "2", "Ein Hund.", "Zwei Katzen."]) == 0
    assert capsys.readouterr().out.splitlines() == between and len(between) == 2
    with pytest.raises(SystemExit):
        cli_main(["translate", str(trained), "Ein Hund.", "--no-such-option"])


def test_a_bad_stdin_line_costs_only_its_own_translation(trained, capsys, monkeypatch):
    """Invalid UTF-8 on line 2, a byte-order mark, CRLF, a bare CR and no final line end: every
    good line is translated, the bad one is named by its number, and lines stay one for one."""
    assert cli_main(["translate", str(trained), "Ein Hund.", "Ein Mann.", "Eine Frau."]) == 0
    expected = capsys.readouterr().out.splitlines()
    raw = b"\xef\xbb\xbfEin Hund.\r\nZwei \xff Katzen.\nEin\rMann.\n\nEine Frau."
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    assert cli_main(["translate", str(trained)]) == 2
    captured = capsys.readouterr()
    out = captured.out.split("\n")
    assert len(out) == 6 and out[5] == ""  # five input lines (a bare CR ends none), five output lines
    assert [out[0], out[1], out[3], out[4]] == [expected[0], "", "", expected[2]]
    assert "standard input line 2: not valid UTF-8 (byte 0xff at byte 6)" in captured.err


def test_a_search_too_big_for_the_machine_is_refused_before_it_starts(trained, capsys, monkeypatch):
    assert cli_main(["translate", str(trained), "Ein Hund.", "--beam", "1000000"]) == 2
    assert "beam 1000000: at most the target vocabulary size, 60" in capsys.readouterr().err
    # a machine with 1 GiB free
    monkeypatch.setattr("attnmt.decoding.translator.available_memory", lambda device: 2**30)
    # "Ein Hund." is 11 pieces with EOS, so outputs of up to 1.0 * 11 + 5 = 16 tokens; a row holds
    # 60 tokens x 16 bytes + 17 ids x 8 bytes = 1,096 bytes: 64 sentences x beam 60 (4.0 MiB) fit,
    # 10,000 (0.61 GiB, more than half of 1 GiB) do not, and 2**29 // (60 * 1096) = 8,164 would.
    assert cli_main(["translate", str(trained), "Ein Hund.", "--beam", "60", "--batch-size", "64"]) == 0
    capsys.readouterr()
    sentences = ["Ein Hund."] * 10_000
    assert cli_main(["translate", str(trained), *sentences, "--beam", "60", "--batch-size", "10000"]) == 2
    err = capsys.readouterr().err
    assert ("beam 60 with 10000 sentences at once and outputs of up to 16 tokens needs about 627 MiB" in err
            and "use --batch-size 8164 or less" in err)


def test_the_longest_output_counts_in_what_a_search_needs(trained, monkeypatch):
    """With search.max_len_b = 1000 each of 64 x 10 rows may keep 1,012 token ids (8 bytes) and their
    attention over the 11 pieces of "Ein Hund." (44 bytes): 34 MB, more than half of 16 MiB free."""
    translator = Translator.load(trained)
    monkeypatch.setattr("attnmt.decoding.translator.available_memory", lambda device: 16 * 2**20)
    assert translator.translate(["Ein Hund."] * 64, beam=10, batch_size=64, return_attention=True)  # 17 ids: fits
    translator.search_config = replace(translator.search_config, max_len_b=1000)
    assert translator.search_bytes(10, 64, 11, True) == 64 * 10 * (60 * 16 + 1012 * (8 + 11 * 4))
    with pytest.raises(ConfigError, match=r"outputs of up to 1011 tokens needs about 33 MiB, more than half of "
                                          rf"the 16 MiB free on {translator.device}; use batch_size=15 or less"):
        translator.translate(["Ein Hund."] * 64, beam=10, batch_size=64, return_attention=True)


def test_a_source_far_longer_than_training_is_refused_not_decoded_for_minutes(trained, capsys, monkeypatch):
    """A 10,000-word line would take tens of thousands of decoding steps: refused in one line as an
    argument; on standard input only that line is left empty."""
    long_line = " ".join(["hund"] * 10_000)
    assert cli_main(["translate", str(trained), long_line]) == 2
    assert "sentence 1: 50000 subword pieces, more than 1000 (ten times the longest" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f"Ein Hund.\n{long_line}\nEin Mann.\n".encode())))
    assert cli_main(["translate", str(trained)]) == 2
    captured = capsys.readouterr()
    assert len(captured.out.split("\n")) == 4 and captured.out.split("\n")[1] == ""
    assert "standard input line 2: 50000 subword pieces" in captured.err
