"""Values are checked where they enter, and the error names where a value came from: the file and
line, the option, or --set. Each case here was a traceback or a silent wrong result before."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnmt.cli import main
from attnmt.data import batching

PROJECT = Path(__file__).resolve().parents[1]
TINY = str(PROJECT / "configs" / "tiny.yaml")


@pytest.fixture
def attnmt(attnmt_cli):
    return attnmt_cli


def one_line_error(done) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_seed_out_of_range_is_refused_and_leaves_no_run_folder(attnmt, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:  # argparse's own refusal, before any config is read
        attnmt("train", "--config", TINY, "--seed", str(2**64), "--out", str(out))
    assert stopped.value.code == 2
    assert not out.exists()
    with pytest.raises(SystemExit):
        attnmt("explore", "copy", "--seed", "-1")


def test_an_option_is_blamed_not_the_config_file(attnmt, tmp_path):
    line = one_line_error(attnmt("train", "--config", TINY, "--max-steps", "0", "--out", str(tmp_path / "r")))
    assert "error: --max-steps 0: training.max_steps" in line and "tiny.yaml" not in line
    line = one_line_error(attnmt("train", "--config", TINY, "--set", "training.lr=-1", "--out", str(tmp_path / "r")))
    assert "error: --set training.lr=-1: training.lr" in line
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  lr: -1\n")
    assert f"{bad}: training.lr" in one_line_error(attnmt("train", "--config", str(bad), "--out", str(tmp_path / "r")))


@pytest.mark.parametrize("text, line_number, key", [
    ("training:\n  lr: 3.0e-3\n  lr: 1.0\n", 3, "lr"),
    ("data:\n  dataset: multi30k\nmodel:\n  type: rnn\ndata:\n  vocab_size: 10\n", 5, "data"),
])
def test_a_key_given_twice_is_an_error_naming_both_lines(attnmt, tmp_path, text, line_number, key):
    config = tmp_path / "twice.yaml"
    config.write_text(text)
    line = one_line_error(attnmt("train", "--config", str(config), "--out", str(tmp_path / "r")))
    assert f"{config}:{line_number}: {key!r} appears twice" in line


def test_a_yaml_syntax_error_is_one_line_with_its_place(attnmt, tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("training:\n  lr: [1, 2\n")
    line = one_line_error(attnmt("train", "--config", str(config), "--out", str(tmp_path / "r")))
    assert f"{config}: not valid YAML: line 3, column 1" in line


def test_explore_sizes_are_checked_against_memory(attnmt):
    assert "GiB" in one_line_error(attnmt("explore", "copy", "--dim", str(10**11)))


def test_embed_refuses_names_with_folders_and_powers_out_of_range(attnmt, tmp_path):
    base = ["embed", "--src", "a", "--tgt", "b", "--out", str(tmp_path / "vectors")]
    assert "--src-lang '../x'" in one_line_error(attnmt(*base, "--src-lang", "../x"))
    for power in ("nan", "inf", "1e6"):
        assert "--singular-power" in one_line_error(attnmt(*base, "--singular-power", power))


def test_vectors_that_are_not_finite_are_refused_naming_the_word(attnmt, tmp_path):
    good, bad = tmp_path / "en.vec", tmp_path / "fr.vec"
    good.write_text("2 2\nthe 1 0\nhouse 0 1\n")
    bad.write_text("2 2\nla 1 0\nmaison nan 1\n")
    line = one_line_error(attnmt("align-words", "--src-vectors", str(good), "--tgt-vectors", str(bad),
                                 "--src", "the house", "--tgt", "la maison"))
    assert f"{bad}:3: the vector of 'maison' holds nan" in line


def test_argparse_errors_print_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["translate", "RUN", "--beam", "nan"])
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "attnmt translate: error: argument --beam: invalid int value: 'nan' (see attnmt translate --help)"]


def test_a_repeated_warning_is_printed_once_with_a_count(caplog):
    batching._OVERSIZED_WARNINGS.pop(1, None)
    with caplog.at_level("WARNING"):
        for _ in range(50):
            batching.make_batches([[1, 2, 3]] * 4, [[1, 2]] * 4, max_tokens=1, shuffle=False)
    assert [record.getMessage() for record in caplog.records] == [
        "4 sentence pairs are longer than max_tokens=1; each gets a batch of its own"]
    assert batching._OVERSIZED_WARNINGS.pop(1) == 50


def test_compare_refuses_a_number_of_runs_no_study_would_use(attnmt, tmp_path):
    """--runs 18446744073709551616 trained one-step runs until it was stopped."""
    line = one_line_error(attnmt("compare", "--config", TINY, "--attention", "mean", "--runs", str(2**64),
                                 "--out", str(tmp_path / "c")))
    assert "--runs" in line and "from 1 to 1000" in line
    assert not (tmp_path / "c").exists()


def test_a_thread_count_torch_cannot_hold_is_refused(attnmt, tmp_path):
    """align --threads 2**64 was a traceback (torch's "Overflow when unpacking long long")."""
    legacy_run = PROJECT / "tests" / "data" / "runs-0.1.0" / "rnn"
    (tmp_path / "s.de").write_text("Ein Hund.\n")
    (tmp_path / "t.en").write_text("A dog.\n")
    line = one_line_error(attnmt("align", "--model", str(legacy_run), "--src", str(tmp_path / "s.de"),
                                 "--tgt", str(tmp_path / "t.en"), "--out", str(tmp_path / "a.txt"),
                                 "--threads", str(2**64)))
    assert "--threads 18446744073709551616: must be an integer from 1 to 1024" in line
    line = one_line_error(attnmt("train", "--config", TINY, "--set", "training.num_threads=100000",
                                 "--out", str(tmp_path / "r")))
    assert "training.num_threads=100000" in line and "from 1 to 1024" in line


@pytest.mark.parametrize("setting, named", [
    ("model.type=[1]", "model.type"),  # was a TypeError while looking for old option names
    ("data.character_coverage=0.5", "from 0.98 to 1"),  # was sentencepiece's own check, after reading the data
])
def test_config_values_that_reached_a_library_are_refused_where_they_enter(attnmt, tmp_path, setting, named):
    line = one_line_error(attnmt("train", "--config", TINY, "--set", setting, "--out", str(tmp_path / "r")))
    assert named in line
    assert not (tmp_path / "r").exists()


def test_words_name_where_a_value_came_from(attnmt, tiny_run, tmp_path):
    """Issue 63, item 10: an unknown key given with --set is blamed on --set, not on the recipe; a
    checkpoint's own beam is not called --beam, an option the user never gave."""
    import torch

    line = one_line_error(attnmt("train", "--config", "tiny", "--set", "training.frob=1", "--out", str(tmp_path / "r")))
    assert line.startswith("attnmt train: error: --set training.frob=1: training: unknown key(s) 'frob'")
    _, run = tiny_run
    state = torch.load(run / "best.pt", weights_only=True)
    state["config"]["search"]["beam"] = 1_000_000
    torch.save(state, tmp_path / "wide.pt")
    done = attnmt("translate", str(tmp_path / "wide.pt"), "ein hund")
    line = done.stderr.strip().splitlines()[-1]  # after the line that says where the model runs
    assert done.returncode == 2 and "--beam" not in line
    assert "the run's search.beam 1000000: at most the target vocabulary size" in line


def test_a_loop_of_links_and_a_file_where_a_folder_should_be_are_one_line(attnmt, tmp_path):
    """Issue 63, item 8: ``curves`` on a loop of symbolic links and ``demo --out FILE/d`` ended in
    tracebacks (pathlib's RuntimeError, NotADirectoryError)."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    line = one_line_error(attnmt("curves", str(loop), "--out", str(tmp_path / "c.png")))
    assert line.startswith("attnmt curves: error:") and str(loop) in line
    (tmp_path / "FILE").write_text("x")
    line = one_line_error(attnmt("demo", "--out", str(tmp_path / "FILE" / "d")))
    assert line == f"attnmt demo: error: --out {tmp_path / 'FILE' / 'd'}: cannot make the folder (Not a directory)"
