"""A run folder is data from an unknown sender (issue: a run folder is untrusted input). Loading or
resuming a run never imports a path or module it names: an audit hook proves it. A user's
mechanism that misbehaves ends in one line naming it, and values that cannot be right (NaN weights,
a step limit below the step reached, a sentence that is not text) are refused where they enter."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

import attnmt
from attnmt.attention.trusted_code import TRUST_FILE_VARIABLE
from attnmt.attention.user_code import UserCodeError
from attnmt.cli import main as cli_main
from attnmt.decoding.translator import Translator
from attnmt.errors import CheckpointError

from helpers import run_trainer, tiny_run_config

PROJECT = Path(__file__).resolve().parents[1]
MECHANISM = (PROJECT / "examples" / "my_attention.py").read_text(encoding="utf-8")

# -- the audit hook: what the interpreter opens, imports and executes while a run is loaded --------

_EVENTS: list[tuple[str, str]] | None = None  # recording when a list


def _audit(event: str, args: tuple) -> None:
    if _EVENTS is None or event not in ("open", "import", "exec", "compile"):
        return
    if event == "open":
        name = str(args[0])
    elif event == "import":
        name = f"{args[0]} {args[1]}"
    elif event == "exec":
        name = getattr(args[0], "co_filename", str(args[0]))
    else:
        name = str(args[1])
    _EVENTS.append((event, name))


sys.addaudithook(_audit)  # cannot be removed: it records only while _EVENTS is a list


def recorded(action) -> list[tuple[str, str]]:
    """The audit events of ``action()`` (its exception, if any, is the caller's to expect)."""
    global _EVENTS
    _EVENTS = []
    try:
        action()
    except Exception:  # noqa: BLE001 - the refusal is what is expected; the events are what is checked
        pass
    finally:
        events, _EVENTS = _EVENTS, None
    return events


def interpreters_own(path: str) -> bool:
    """A file of the interpreter, its installed packages, or attnmt itself."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(PROJECT / "attnmt")}
    return any(str(Path(path).resolve()).startswith(str(Path(root).resolve())) for root in roots)


# -- runs -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def user_run(tmp_path_factory) -> Path:
    """A run trained here with a user mechanism: this machine trusts its code."""
    folder = tmp_path_factory.mktemp("user-run")
    (folder / "mine.py").write_text(MECHANISM, encoding="utf-8")
    config = tiny_run_config(folder, train_pairs=40, valid_pairs=4, max_steps=2, examples=0, bleu_max_sentences=0)
    config["model"]["attention"] = f"{folder / 'mine.py'}:MyAttention"
    config["model"]["attention_options"] = {"attention_dim": 8}
    run_trainer(folder, config)
    return folder / "run"


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plain-run")
    run_trainer(folder, tiny_run_config(folder, train_pairs=40, valid_pairs=4, max_steps=4, checkpoint_every=2,
                                        examples=0, bleu_max_sentences=0))
    return folder / "run"


@pytest.fixture
def another_machine(tmp_path, monkeypatch):
    """A machine that never trained with any code: an empty list of trusted code."""
    monkeypatch.setenv(TRUST_FILE_VARIABLE, str(tmp_path / "trusted-nothing.txt"))


@pytest.fixture
def hostile_code(tmp_path) -> tuple[Path, Path]:
    """(a Python file that leaves a marker when it runs, the marker)."""
    marker = tmp_path / "CODE-RAN"
    code = tmp_path / "hostile.py"
    code.write_text(f"open({str(marker)!r}, 'w').close()\nimport torch\nclass MyAttention(torch.nn.Module):\n"
                    "    pass\n", encoding="utf-8")
    return code, marker


def pointed_at(run: Path, folder: Path, code: Path, sha256: str | None = None) -> Path:
    """A copy of ``run`` whose checkpoints' record of its code names ``code`` (with its real SHA-256)."""
    copy = Path(shutil.copytree(run, folder / "pointed"))
    for name in ("best.pt", "last.pt"):
        state = torch.load(copy / name, weights_only=True)
        state["attention_code"]["path"] = str(code)
        state["attention_code"]["sha256"] = sha256 or hashlib.sha256(code.read_bytes()).hexdigest()
        torch.save(state, copy / name)
    return copy


def assert_nothing_ran(events: list[tuple[str, str]], marker: Path, code: Path) -> None:
    assert not marker.exists(), "the run's code ran"
    foreign = [(event, name) for event, name in events
               if (event == "open" and name.endswith(".py") and not interpreters_own(name))
               or (event == "import" and "attnmt_user_" in name)
               or (event in ("exec", "compile") and (str(code) in name or "(kept in" in name))]
    assert not foreign, foreign


# -- trust ------------------------------------------------------------------------------------------


def test_the_audit_hook_sees_a_mechanism_being_imported(tmp_path, hostile_code):
    """The check below can fail: naming a file imports it, and the hook records just that."""
    code, marker = hostile_code
    events = recorded(lambda: attnmt.build_attention(f"{code}:MyAttention", 4, 4))
    with pytest.raises(AssertionError):
        assert_nothing_ran(events, marker, code)
    assert ("open", str(code)) in events and ("exec", str(code)) in events


def test_loading_a_run_whose_record_names_any_file_imports_nothing(user_run, tmp_path, hostile_code, another_machine):
    code, marker = hostile_code
    hostile = pointed_at(user_run, tmp_path, code)
    events = recorded(lambda: Translator.load(hostile))
    assert_nothing_ran(events, marker, code)
    with pytest.raises(UserCodeError, match="record of the attention's code is damaged"):
        Translator.load(hostile, trust_run_code=True)  # its SHA-256 is no longer that of the text it keeps
    assert not marker.exists()


def test_loading_an_untrusted_run_imports_and_opens_no_code(user_run, hostile_code, another_machine, capsys):
    code, marker = hostile_code
    for argv in (["translate", str(user_run), "Ein Hund."],
                 ["evaluate", str(user_run), "--split", "valid", "-n", "0", "--no-progress"],
                 ["view", str(user_run), "--split", "valid", "-n", "1", "--out", str(user_run.parent / "v.html")],
                 ["train", "--out", str(user_run), "--resume", "--max-steps", "3", "--no-progress"]):
        events = recorded(lambda argv=argv: cli_main(argv))
        assert_nothing_ran(events, marker, code)
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and "--trust-run-code" in error[0], (argv, error)


def test_a_run_trained_here_loads_without_asking(user_run):
    assert Translator.load(user_run).translate(["Ein hund."])[0].output is not None


def test_a_config_yaml_edited_to_name_code_is_never_imported_on_resume(plain_run, user_run, tmp_path,
                                                                       hostile_code, capsys):
    code, marker = hostile_code
    for run in (plain_run, user_run):
        copy = Path(shutil.copytree(run, tmp_path / f"edited-{run.parent.name}"))
        config = copy / "config.yaml"
        text = config.read_text(encoding="utf-8")
        attention = next(line for line in text.splitlines() if line.strip().startswith("attention:"))
        config.write_text(text.replace(attention, f"  attention: {code}:MyAttention"), encoding="utf-8")
        events = recorded(lambda copy=copy: cli_main(["train", "--out", str(copy), "--resume", "--max-steps", "8",
                                                      "--no-progress"]))
        assert_nothing_ran(events, marker, code)
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and "describes another run than" in error[0] and str(config) in error[0], error


@pytest.mark.parametrize("spec", ["this:Zen", "user_attention.py:MyAttention", "{code}:MyAttention"])
def test_a_folder_without_checkpoints_never_imports_the_code_its_config_names(
        plain_run, tmp_path, hostile_code, another_machine, capsys, spec):
    """A received folder with only config.yaml (no best.pt, no last.pt) naming code: resume imports
    nothing and trusts nothing, and says how to consent (issue 63, item 1)."""
    code, marker = hostile_code
    folder = tmp_path / "received"
    folder.mkdir()
    shutil.copy(code, folder / "user_attention.py")
    spec = spec.format(code=code)
    text = (plain_run / "config.yaml").read_text(encoding="utf-8")
    attention = next(line for line in text.splitlines() if line.strip().startswith("attention:"))
    (folder / "config.yaml").write_text(text.replace(attention, f"  attention: {spec}"), encoding="utf-8")
    trusted = Path(os.environ[TRUST_FILE_VARIABLE])
    events = recorded(lambda: cli_main(["train", "--out", str(folder), "--resume", "--max-steps", "2",
                                        "--no-progress"]))
    assert_nothing_ran(events, marker, code)
    assert not [name for event, name in events if event == "import" and name.split()[0] == "this"]
    assert not trusted.exists() or spec not in trusted.read_text(encoding="utf-8")
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "does not import code a run names" in error[0] and f"--attention {spec}" in error[0]


def test_a_config_yaml_edited_to_train_otherwise_is_refused_on_resume(plain_run, tmp_path, capsys):
    run = Path(shutil.copytree(plain_run, tmp_path / "run"))
    config = run / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("lr: 0.01", "lr: 0.5"), encoding="utf-8")
    assert cli_main(["train", "--out", str(run), "--resume", "--max-steps", "8", "--no-progress"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "training.lr (0.01 in last.pt, 0.5 in the config)" in error[0], error


@pytest.mark.parametrize("damage", [{"step": "4"}, {"epoch": -7}, {"plateau": [1]}, {"window": {"loss": "x"}},
                                    {"stop_reason": 3}])
def test_a_damaged_training_state_is_one_line_on_resume(plain_run, tmp_path, capsys, damage):
    run = Path(shutil.copytree(plain_run, tmp_path / "run"))
    state = torch.load(run / "last.pt", weights_only=True)
    state["progress"].update(damage)
    torch.save(state, run / "last.pt")
    assert cli_main(["train", "--out", str(run), "--resume", "--max-steps", "8", "--no-progress"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "last.pt: its progress" in error[0] and "damaged" in error[0], error


def test_a_spec_named_now_must_hold_the_code_the_run_keeps(user_run, tmp_path, another_machine):
    spec = attnmt.load_config(user_run / "config.yaml").model.attention
    assert Translator.load(user_run, attention=spec).translate(["Ein hund."])
    with pytest.raises(attnmt.ConfigError, match="was trained with attention .*, not 'other.py:MyAttention'"):
        Translator.load(user_run, attention="other.py:MyAttention")


# -- values where they enter ------------------------------------------------------------------------


def test_resume_refuses_a_step_limit_below_the_step_reached(plain_run, tmp_path, capsys):
    run = Path(shutil.copytree(plain_run, tmp_path / "run"))
    for argv, said in ((["--max-steps", "2"], "--max-steps 2: the run in"),
                       (["--set", "training.max_steps=3"], "--set training.max_steps=3: the run in")):
        assert cli_main(["train", "--out", str(run), "--resume", "--no-progress", *argv]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and said in error[0] and "already at step 4" in error[0], error
    assert cli_main(["train", "--out", str(run), "--resume", "--no-progress", "--max-steps", "4"]) == 0


def test_a_checkpoint_with_nan_weights_is_refused(plain_run, tmp_path, capsys):
    run = Path(shutil.copytree(plain_run, tmp_path / "run"))
    state = torch.load(run / "best.pt", weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = torch.full_like(state["model"][name], float("nan"))
    torch.save(state, run / "best.pt")
    with pytest.raises(CheckpointError, match=f"weight '{name}' holds values that are not finite"):
        Translator.load(run)
    assert cli_main(["translate", str(run), "Ein Hund."]) == 2
    assert "not finite" in capsys.readouterr().err


def test_translate_refuses_a_sentence_that_is_not_text(plain_run):
    translator = Translator.load(plain_run)
    with pytest.raises(TypeError, match="sentence 2 is None, not a string"):
        translator.translate(["Ein Hund.", None])


# -- a user's mechanism that misbehaves -------------------------------------------------------------

FORWARD = """
import sys, torch
from torch import nn
{top}
class Bad(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim):
        super().__init__()
        {init}
        self.project = nn.Linear(query_dim, key_dim)

    def forward(self, query, keys, values, mask):
        scores = torch.einsum("bd,bsd->bs", self.project(query), keys).masked_fill(~mask, -1e9)
        weights = torch.softmax(scores, dim=-1) * mask
        context = torch.einsum("bs,bsv->bv", weights, values)
        {answer}
"""

MISBEHAVIOUR = {
    "raises": ({"answer": "raise ValueError('boom')"}, "forward raised ValueError: boom"),
    "returns None": ({"answer": "return None"}, "forward returned None, not (context, weights)"),
    "three values": ({"answer": "return context, weights, weights"}, "forward returned 3 values"),
    "numpy": ({"answer": "return context.detach().numpy(), weights"}, "numpy.ndarray as its context"),
    "wrong shape": ({"answer": "return context[:, :1], weights"}, "forward returned context of shape"),
    "sys.exit at import": ({"top": "sys.exit(3)"}, "importing"),
    "sys.exit in __init__": ({"init": "sys.exit(3)"}, "Bad(...) called sys.exit(3)"),
    "sys.exit in forward": ({"answer": "sys.exit(0)"}, "forward called sys.exit(0)"),
}


@pytest.mark.parametrize("case", sorted(MISBEHAVIOUR))
def test_a_misbehaving_mechanism_ends_training_in_one_line(case, tmp_path, capsys):
    parts, said = MISBEHAVIOUR[case]
    code = tmp_path / "bad.py"
    code.write_text(FORWARD.format(**{"top": "", "init": "", "answer": "return context, weights", **parts}),
                    encoding="utf-8")
    config = tiny_run_config(tmp_path, train_pairs=20, valid_pairs=2, max_steps=2, examples=0, bleu_max_sentences=0)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    status = cli_main(["train", "--config", str(config_path), "--attention", f"{code}:Bad", "--out",
                       str(tmp_path / "run"), "--no-progress"])
    error = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert status == 2 and len(error) == 1, error
    assert said in error[0] and "bad.py:Bad" in error[0] and "attnmt check" in error[0], error
    if "sys.exit" not in case or "forward" in case:
        assert cli_main(["check", f"{code}:Bad", "--no-speed"]) == 1  # check reports it as a property
        assert said.split(":")[0] in capsys.readouterr().out


def test_a_mechanism_giving_nan_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    code = tmp_path / "late_nan.py"
    code.write_text(FORWARD.format(top="", init="self.calls = 0", answer=(
        "self.calls += 1\n        return (context * float('nan') if self.calls > 150 else context), weights")),
        encoding="utf-8")
    config = tiny_run_config(tmp_path, train_pairs=20, valid_pairs=2, max_steps=60, checkpoint_every=2, log_every=2,
                             examples=0, bleu_max_sentences=0)
    config["model"]["attention"] = f"{code}:Bad"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    status = cli_main(["train", "--config", str(config_path), "--out", str(tmp_path / "run"), "--no-progress"])
    error = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert status == 2 and len(error) == 1 and "not finite" in error[0] and "last.pt keeps step" in error[0], error
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert all(torch.isfinite(tensor).all() for tensor in last["model"].values())


def test_compare_reuses_a_run_only_while_its_mechanism_holds_the_same_code(tmp_path, capsys):
    code = tmp_path / "mine.py"
    code.write_text(MECHANISM, encoding="utf-8")
    config = tiny_run_config(tmp_path, train_pairs=20, valid_pairs=2, examples=0, bleu_max_sentences=0)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = ["compare", "--config", str(config_path), "--attention", f"{code}:MyAttention", "--runs", "1",
            "--max-steps", "1", "--split", "valid", "--out", str(tmp_path / "compared"), "--no-progress"]
    assert cli_main(argv) == 0
    code.write_text(MECHANISM + "\n# edited\n", encoding="utf-8")
    assert cli_main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "was trained with other code than" in error and "put the file back" in error, error
    code.write_text(MECHANISM, encoding="utf-8")
    assert cli_main(argv) == 0
    assert "reused" in capsys.readouterr().out
