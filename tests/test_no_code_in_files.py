"""No file attnmt reads may run code. Read off the source: every reader call that could run code
is made in its safe form, and code is executed in one place only, for a user's own attention."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from attnmt.errors import DataError
from attnmt.visual.export import load_attention

PACKAGE = Path(__file__).resolve().parents[1] / "attnmt"
EXECUTES_USER_CODE = {"attention/user_code.py"}  # imports the file a user names (or a run's kept copy, when trusted)


def calls(name: str):
    """(module path, call node) of every call of a function or method called ``name`` in the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                function = node.func
                called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
                if called == name:
                    yield path.relative_to(PACKAGE).as_posix(), node


def keyword(node: ast.Call, name: str):
    value = next((k.value for k in node.keywords if k.arg == name), None)
    return value.value if isinstance(value, ast.Constant) else value


def test_every_reader_is_called_in_its_safe_form():
    numpy_loads = [(path, node) for path, node in calls("load") if isinstance(node.func, ast.Attribute)
                   and getattr(node.func.value, "id", None) == "np"]
    assert numpy_loads and all(keyword(node, "allow_pickle") is False for _, node in numpy_loads), numpy_loads
    torch_loads = [(path, node) for path, node in calls("load") if isinstance(node.func, ast.Attribute)
                   and getattr(node.func.value, "id", None) == "torch"]
    assert torch_loads and all(keyword(node, "weights_only") is True for _, node in torch_loads)
    pretrained = list(calls("from_pretrained"))
    assert pretrained and all(keyword(node, "trust_remote_code") is False for _, node in pretrained)
    assert not [path for path, node in calls("load") if isinstance(node.func, ast.Attribute)
                and getattr(node.func.value, "id", None) == "pickle"]
    assert not [path for path, node in calls("load") if isinstance(node.func, ast.Attribute)
                and getattr(node.func.value, "id", None) == "yaml"
                and keyword(node, "Loader") is None]


def test_code_is_executed_only_for_a_users_own_attention():
    for name in ("exec", "eval", "compile", "__import__"):  # the built-ins, not model.eval()
        users = {path for path, node in calls(name) if isinstance(node.func, ast.Name)}
        assert users <= EXECUTES_USER_CODE, (name, users)


def test_exported_attention_with_pickled_objects_is_refused(tmp_path):
    path = tmp_path / "attention.npz"
    np.savez(path, records=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataError):
        load_attention(path)
