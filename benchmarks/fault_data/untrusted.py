"""The fault categories of run folders as untrusted input, for benchmarks/faults.py:

- edited run configs: a run's ``config.yaml`` with one key (every key of every section) replaced by a
  value of another type or a path form (``../../escape``, an absolute path, ``x/y``, a file or module
  spec naming hostile code), deleted, or the file emptied or cut; read by ``evaluate`` and
  ``train --resume``.
- edited checkpoints: one entry of ``best.pt`` / ``last.pt`` replaced the same way: a key of the
  config it keeps, a field of its record of a user mechanism's code (the path pointed at hostile
  code with that code's real SHA-256, a consistent record of hostile code, a damaged one), its
  progress, format, model type, tokenizers or weights (NaN); read by ``translate``, ``evaluate``,
  ``view``, ``align --model`` and ``train --resume``.
- misbehaving mechanisms: a user mechanism in each form (forward, score, an Attention subclass, a
  Transformer score) that raises, returns None, three values, NumPy, a wrong shape or NaN, or calls
  ``sys.exit``, at import, in its constructor or when called; run by ``check``, ``train``,
  ``compare``, and by ``translate`` / ``evaluate --trust-run-code`` of a run whose kept code is it.

Hostile code creates a marker file; the marker must never appear without ``--trust-run-code``. A
case ends correctly with a result, or with one line and exit status 2 (``check`` reports a failing
property with exit status 1); a misbehaving mechanism must never end with status 0, a damaged
checkpoint must never translate into nothing but unknown pieces, and nothing may be written
outside the case's folder.
"""

from __future__ import annotations

import copy
import hashlib
import random
import shutil
from pathlib import Path
from typing import Any

import torch
import yaml

HOSTILE = "import os\nopen({marker!r}, 'w').close()\nimport torch\n\nclass MyAttention(torch.nn.Module):\n    pass\n"

#: values a key is replaced by: other types, absurd numbers, and the path forms a name must not take
VALUES: list[Any] = [None, "x", "", -1, 0, 1e308, float("nan"), [], {}, True, [1, 2, 3], {"a": 1},
                     "../../escape", "/etc/passwd", "x/y", "~/x", "os:system", "HOSTILE_SPEC"]


def _flatten(values: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested mapping (the mappings themselves included)."""
    paths = []
    if isinstance(values, dict):
        for key, value in values.items():
            paths.append((*prefix, key))
            paths += _flatten(value, (*prefix, key))
    return paths


def _replaced(values: dict, path: tuple, value: Any) -> dict:
    """A deep copy of ``values`` with ``path`` set to ``value`` (deleted for ``DELETE``)."""
    edited = copy.deepcopy(values)
    target = edited
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return edited


DELETE = object()


def hostile_file(case: Path, marker: Path) -> Path:
    code = case / "hostile.py"
    code.write_text(HOSTILE.format(marker=str(marker)), encoding="utf-8")
    return code


def _value(rng: random.Random, spec: str) -> Any:
    value = rng.choice([*VALUES, DELETE])
    return spec if value == "HOSTILE_SPEC" else value


def edited_configs(rng: random.Random, count: int, folder: Path, runs: list[Path], marker: Path):
    """A run's config.yaml edited at one key (or emptied, cut, renamed test set), read by evaluate
    and train --resume. Yields (family, argv, stdin, inputs, marker, expectations)."""
    for number in range(count):
        run = runs[number % len(runs)]
        case = folder / f"config-{number}"
        case.mkdir()
        copy_ = Path(shutil.copytree(run, case / "run"))
        code = hostile_file(case, marker)
        spec = f"{code}:MyAttention"
        path = copy_ / "config.yaml"
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
        kind = rng.choice(["key", "key", "key", "key", "attention", "test name", "empty", "cut"])
        if kind == "key":
            key = rng.choice(_flatten(saved))
            text = yaml.safe_dump(_replaced(saved, key, _value(rng, spec)), allow_unicode=True)
            family = f"config.yaml {'.'.join(map(str, key))}"
        elif kind == "attention":
            text = yaml.safe_dump(_replaced(saved, ("model", "attention"), spec))
            family = "config.yaml model.attention: hostile spec"
        elif kind == "test name":
            name = rng.choice(["../../escape", "x/y", "/tmp/escape", "..", "a b"])
            data = dict(saved["data"], test={name: [str(case / "nope.de"), str(case / "nope.en")]})
            text = yaml.safe_dump(dict(saved, data=data))
            family = "config.yaml data.test name"
        elif kind == "empty":
            text, family = "", "config.yaml empty"
        else:
            full = path.read_text(encoding="utf-8")
            text, family = full[: rng.randrange(len(full))], "config.yaml cut"
        path.write_text(text, encoding="utf-8")
        command = rng.choice(["evaluate", "train --resume"])
        if command == "evaluate":
            argv = ["evaluate", str(copy_), "--split", rng.choice(["valid", "test", "../../escape", "x/y"]), "-n",
                    "1", "--no-progress"]
        else:
            argv = ["train", "--out", str(copy_), "--resume", "--no-progress", "--max-steps", "60"]
        inputs = [code] if command == "train --resume" else [code, copy_ / "best.pt", copy_ / "last.pt"]
        yield f"{family}, {command}", argv, None, inputs, marker, {"case": case}


def edited_checkpoints(rng: random.Random, count: int, folder: Path, runs: list[Path], user_run: Path,
                       marker: Path):
    """One entry of a run's checkpoints edited, read by translate, evaluate, view, align --model and
    train --resume."""
    for number in range(count):
        user = number % 3 == 0
        run = user_run if user else runs[number % len(runs)]
        case = folder / f"checkpoint-{number}"
        case.mkdir()
        copy_ = Path(shutil.copytree(run, case / "run"))
        code = hostile_file(case, marker)
        spec = f"{code}:MyAttention"
        state = torch.load(copy_ / "last.pt", weights_only=True)
        kinds = ["config", "config", "progress", "format", "tokenizers", "weights"]
        if user:
            kinds += ["record path", "record path", "record consistent", "record field", "record spec"]
        kind = rng.choice(kinds)
        if kind == "config":
            key = rng.choice(_flatten(state["config"]))
            state["config"] = _replaced(state["config"], key, _value(rng, spec))
            family = f"checkpoint config {'.'.join(map(str, key))}"
        elif kind == "progress":
            key = rng.choice(_flatten(state["progress"]))
            state["progress"] = _replaced(state["progress"], key, _value(rng, spec))
            family = f"checkpoint progress {'.'.join(map(str, key))}"
        elif kind == "format":
            key = rng.choice(["format", "format_version", "model_type", "attnmt_version"])
            state[key] = _value(rng, spec)
            family = f"checkpoint {key}"
        elif kind == "tokenizers":
            state["tokenizers"] = rng.choice([{}, {"spm.joint.model": b"not a model"}, None, "x"])
            family = "checkpoint tokenizers"
        elif kind == "weights":
            name = rng.choice(sorted(state["model"]))
            state["model"][name] = rng.choice([torch.full_like(state["model"][name], float("nan")),
                                               torch.zeros(3), "x", state["model"][name].double()])
            family = "checkpoint weights"
        elif kind == "record path":  # the record points at hostile code, with that code's real SHA-256
            state["attention_code"]["path"] = str(rng.choice([code, code.relative_to(case)]))
            state["attention_code"]["sha256"] = hashlib.sha256(code.read_bytes()).hexdigest()
            family = "checkpoint record path -> hostile file"
        elif kind == "record consistent":  # a whole record of hostile code: untrusted, so it must not run
            source = code.read_text(encoding="utf-8")
            state["attention_code"] = {"spec": state["attention_code"]["spec"], "path": str(code),
                                       "sha256": hashlib.sha256(source.encode()).hexdigest(), "source": source}
            family = "checkpoint record of hostile code"
        elif kind == "record spec":
            state["attention_code"]["spec"] = rng.choice([spec, "os:system", "antigravity:X", "../x.py:Y"])
            family = "checkpoint record spec"
        else:
            field = rng.choice(["spec", "path", "sha256", "source"])
            state["attention_code"][field] = _value(rng, spec)
            family = f"checkpoint record {field}"
        torch.save(state, copy_ / "last.pt")
        torch.save({key: value for key, value in state.items()
                    if key not in ("optimizer", "scheduler", "rng", "progress", "history")}, copy_ / "best.pt")
        data = run.parent
        command = rng.choice(["translate", "evaluate", "view", "align", "train --resume"])
        argv = {
            "translate": ["translate", str(copy_), "Ein Hund läuft."],
            "evaluate": ["evaluate", str(copy_), "--split", "valid", "-n", "1", "--no-progress"],
            "view": ["view", str(copy_), "--split", "valid", "-n", "1", "--out", str(case / "v.html"), "--no-progress"],
            "align": ["align", "--model", str(copy_), "--src", str(data / "valid.de"), "--tgt", str(data / "valid.en"),
                      "--out", str(case / "links.txt")],
            "train --resume": ["train", "--out", str(copy_), "--resume", "--no-progress", "--max-steps", "60"],
        }[command]
        inputs = [code] + ([] if command == "train --resume" else [copy_ / "last.pt", copy_ / "best.pt"])
        yield f"{family}, {command}", argv, None, inputs, marker, {"case": case, "no_garbage": True}


#: misbehaviour -> (what a forward-form method does instead of answering, what a score method does)
MISBEHAVIOURS = {
    "raises": ("raise ValueError('boom')",) * 2,
    "returns None": ("return None",) * 2,
    "three values": ("return ANSWER + (ANSWER[-1],)", "return ANSWER * 3"),
    "numpy": ("return tuple(part.detach().numpy() for part in ANSWER)", "return ANSWER[0].detach().numpy()"),
    "wrong shape": ("return tuple(part[..., :1] for part in ANSWER)", "return ANSWER[0][..., :1]"),
    "nan": ("return tuple(part * float('nan') for part in ANSWER)", "return ANSWER[0] * float('nan')"),
    "sys.exit(0)": ("import sys; sys.exit(0)",) * 2,
    "SystemExit(2)": ("raise SystemExit(2)",) * 2,
}

#: a mechanism of each form: INIT_TOP runs at import, INIT in the constructor, CALL answers (ANSWER
#: is the right answer as a tuple). The forward form has the parameters of examples/my_attention.py.
FORMS = {
    "forward": '''
import torch
from torch import nn
INIT_TOP

class MyAttention(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim, attention_dim=8):
        super().__init__()
        self.query_projection = nn.Linear(query_dim, attention_dim)
        self.key_projection = nn.Linear(key_dim, attention_dim)
        self.scale = 1.0
        INIT

    def forward(self, query, keys, values, mask):
        scores = torch.einsum("ba,bsa->bs", self.query_projection(query), self.key_projection(keys))
        has_any = mask.any(dim=-1, keepdim=True)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")).masked_fill(~has_any, 0.0), -1) * mask
        ANSWER = (torch.einsum("bs,bsv->bv", weights, values), weights)
        CALL
''',
    "score": '''
import torch
from torch import nn
INIT_TOP

class MyAttention(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim):
        super().__init__()
        self.project = nn.Linear(query_dim, key_dim)
        INIT

    def score(self, query, keys):
        ANSWER = (torch.einsum("bd,bsd->bs", self.project(query), keys),)
        CALL
''',
    "prepared": '''
import torch
from torch import nn
from attnmt.attention import Attention
INIT_TOP

class MyAttention(Attention):
    def __init__(self, query_dim, key_dim, value_dim):
        super().__init__(query_dim, key_dim, value_dim)
        self.project = nn.Linear(query_dim, key_dim)
        INIT

    def score(self, query, prepared):
        ANSWER = (torch.einsum("btd,bsd->bts", self.project(query), prepared.keys),)
        CALL
''',
    "transformer score": '''
import torch
from torch import nn
INIT_TOP

class MyAttention(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))
        INIT

    def score(self, q, k):
        ANSWER = (torch.matmul(q, k.transpose(-1, -2)) * self.scale,)
        CALL
''',
}


def mechanism_source(form: str, misbehaviour: str, stage: str) -> str:
    """The code of a mechanism of ``form`` that misbehaves as ``misbehaviour`` says at ``stage``
    (import, init or call)."""
    forward_action, score_action = MISBEHAVIOURS[misbehaviour]
    action = forward_action if form == "forward" else score_action
    good = "return ANSWER" if form == "forward" else "return ANSWER[0]"
    raising = action if not action.startswith("return") else "raise ValueError('boom')"
    return (FORMS[form].replace("INIT_TOP", raising.replace("; ", "\n") if stage == "import" else "")
            .replace("INIT", raising if stage == "init" else "pass")
            .replace("CALL", action if stage == "call" else good))


def misbehaving_mechanisms(rng: random.Random, count: int, folder: Path, user_run: Path, configs: dict[str, Path]):
    """A misbehaving user mechanism run by check, train, compare, and by translate / evaluate of a run
    that keeps it (with --trust-run-code: the user consents to its code). ``configs``: the run config
    of an RNN ("rnn") and of a Transformer ("transformer")."""
    for number in range(count):
        form = sorted(FORMS)[number % len(FORMS)]
        misbehaviour = rng.choice(sorted(MISBEHAVIOURS))
        stage = rng.choice(["import", "init", "call", "call"])
        commands = ["check", "train", "compare"] + (["translate", "evaluate"] if form == "forward" else [])
        command = rng.choice(commands)
        case = folder / f"mechanism-{number}"
        case.mkdir()
        source = mechanism_source(form, misbehaviour, stage)
        code = case / "mine.py"
        code.write_text(source, encoding="utf-8")
        spec = f"{code}:MyAttention"
        transformer = form == "transformer score"
        config = configs["transformer" if transformer else "rnn"]
        if command == "check":
            argv = ["check", spec, "--no-speed", *(["--model", "transformer", "--dims", "4", "4", "4", "--heads", "2"]
                                                   if transformer else [])]
        elif command == "train":
            argv = ["train", "--config", str(config), "--attention", spec, "--out", str(case / "run"), "--no-progress",
                    "--max-steps", "3"]
        elif command == "compare":
            argv = ["compare", "--config", str(config), "--attention", spec, "--runs", "1", "--max-steps", "2",
                    "--split", "valid", "--out", str(case / "compared"), "--no-progress"]
        else:
            copy_ = Path(shutil.copytree(user_run, case / "run"))
            _keep_code(copy_, source)
            argv = (["translate", str(copy_), "Ein Hund läuft."] if command == "translate" else
                    ["evaluate", str(copy_), "--split", "valid", "-n", "1", "--no-progress"]) + ["--trust-run-code"]
        yield (f"{form} {misbehaviour} at {stage}, {command}", argv, None, [code], None,
               {"case": case, "must_fail": True, "result_status": 1 if command == "check" else 0})


def _keep_code(run: Path, source: str) -> None:
    """Make ``run``'s checkpoints keep ``source`` as their mechanism's code (a consistent record)."""
    for name in ("best.pt", "last.pt"):
        state = torch.load(run / name, weights_only=True)
        state["attention_code"]["source"] = source
        state["attention_code"]["sha256"] = hashlib.sha256(source.encode()).hexdigest()
        torch.save(state, run / name)
