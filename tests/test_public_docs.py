"""Every class and function of the public API has a docstring: the names in ``attnmt.__all__`` and
in each subpackage's and module's ``__all__``. (Ruff's docstring rules cannot be limited to
``__all__``; this test is that rule.) A dataclass's generated signature does not count."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import attnmt

#: modules without a public API of their own: the commands (their help is their documentation),
#: ``python -m attnmt``, the Keras layers, which need the optional extra (tests/test_keras.py reads
#: them), and a deprecated path that only hands on the names of its new modules (and warns)
SKIPPED = ("attnmt.commands", "attnmt.__main__", "attnmt.keras", "attnmt.attention.user")


def public_objects():
    """(module, name, object) of every class and function named in an ``__all__`` of the package."""
    names = ["attnmt", *(info.name for info in pkgutil.walk_packages(attnmt.__path__, "attnmt."))]
    seen = set()
    for module_name in names:
        if module_name in SKIPPED or module_name.startswith(SKIPPED[:3]):
            continue
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if not (inspect.isclass(value) or inspect.isfunction(value)):
                continue
            key = (value.__module__, value.__qualname__)
            if key not in seen:
                seen.add(key)
                yield module_name, name, value


def has_docstring(value) -> bool:
    doc = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
    generated = inspect.isclass(value) and bool(doc) and doc.startswith(f"{value.__name__}(")
    return bool(doc and doc.strip()) and not generated


def test_every_public_class_and_function_has_a_docstring():
    objects = list(public_objects())
    assert len(objects) > 300  # the walk found the package's API, not an empty list
    missing = [f"{module}.{name}" for module, name, value in objects if not has_docstring(value)]
    assert missing == [], missing


def test_the_rule_sees_a_missing_docstring():
    def undocumented():
        pass

    class Plain:
        pass

    assert not has_docstring(undocumented) and not has_docstring(Plain) and has_docstring(public_objects)
