"""A user's attention mechanism, found by name and imported: how users name their own mechanism,
and how attnmt imports its code.

Names. ``path/to/file.py:Class`` and ``package.module:Class`` (a spec), a name given with
``register_attention("name")``, or a name from the entry-point group ``attnmt.attention`` of an
installed package. A user name never shadows a built-in one: registering it is an error, and an
entry point that tries is skipped with a warning.

Naming a spec imports it: the user asked for it. A file is imported once per process and text
(``import_file``); an edited file afresh. While a run's model is built (``bound_classes(...,
only=True)``) no other user name can be imported: the names a run's record resolved
(``attnmt.attention.provenance``) are the only ones.

The contract such a class follows, and how attnmt calls it, is ``attnmt.attention.user_adapter``'s.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from torch import nn

from attnmt.attention.mechanisms import BUILTIN_NAMES
from attnmt.errors import ConfigError

__all__ = [
    "ENTRY_POINT_GROUP", "UntrustedCodeError", "UserCodeError", "bound_classes", "check_is_module_class",
    "import_file", "is_user_name", "load_user_class", "raised", "register_attention", "registered_class",
    "registered_names",
]

#: The entry-point group through which an installed package adds mechanism names.
ENTRY_POINT_GROUP = "attnmt.attention"

_REGISTERED: dict[str, type] = {}  # register_attention and entry points: name -> class
_BOUND: list[tuple[dict[str, type], bool]] = []  # bound_classes: (name -> class a run's record gave, only)
_ENTRY_POINTS_READ = False


class UserCodeError(ConfigError):
    """A user mechanism cannot be found, imported or built."""


class UntrustedCodeError(UserCodeError):
    """A run names code that is not on this machine as it was trained; only ``trust_run_code`` runs its copy."""


# -- names ---------------------------------------------------------------------------------------


def register_attention(name: str) -> Callable[[type], type]:
    """Class decorator: ``@register_attention("my-dot")`` makes ``model.attention: my-dot`` build it.

    A built-in name, or a name another class holds, is a ValueError."""
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise ValueError(f"register_attention: a name is a non-empty string without ':', got {name!r}")
    key = name.strip()

    def register(cls: type) -> type:
        if key.lower() in BUILTIN_NAMES:
            raise ValueError(f"register_attention: {key!r} is a built-in mechanism; choose another name")
        held = _REGISTERED.get(key)
        if held is not None and held is not cls and _qualified(held) != _qualified(cls):
            raise ValueError(f"register_attention: {key!r} already names {_qualified(held)}")
        check_is_module_class(cls, key)
        _REGISTERED[key] = cls
        return cls

    return register


def registered_names() -> tuple[str, ...]:
    """The names user mechanisms are registered under (``register_attention`` and entry points)."""
    _read_entry_points()
    return tuple(sorted(_REGISTERED))


def is_user_name(name: str) -> bool:
    """Whether ``name`` names a user mechanism: a spec (``file.py:Class``, ``module:Class``) or a
    registered name. Reads the entry points' names, never imports their code."""
    if not isinstance(name, str):
        return False
    if ":" in name:
        return True
    _read_entry_points()
    return name.strip() in _REGISTERED or name.strip() in _ENTRY_POINT_NAMES


_ENTRY_POINT_NAMES: dict[str, Any] = {}


def _read_entry_points() -> None:
    """Note the names of the ``attnmt.attention`` entry points (their code loads on first use)."""
    global _ENTRY_POINTS_READ
    if _ENTRY_POINTS_READ:
        return
    _ENTRY_POINTS_READ = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name.lower() in BUILTIN_NAMES:
            warnings.warn(
                f"entry point {point.name!r} of group {ENTRY_POINT_GROUP} ({point.value}) is a built-in "
                "mechanism's name; it is skipped", stacklevel=2,
            )
            continue
        _ENTRY_POINT_NAMES.setdefault(point.name, point)


def load_user_class(name: str) -> type:
    """The class ``name`` names (a spec or a registered name), importing its code if need be.

    Raises UserCodeError with one line: a missing file, module or class, or an exception at import."""
    name = name.strip()
    for bound, _ in reversed(_BOUND):
        if name in bound:
            return bound[name]
    if any(only for _, only in _BOUND):
        raise UntrustedCodeError(
            f"attention {name!r}: a run names it, but its code is not the code the run keeps and trusts; "
            "it is not imported"
        )
    if name in _REGISTERED:
        return _REGISTERED[name]
    _read_entry_points()
    if name in _ENTRY_POINT_NAMES:
        point = _ENTRY_POINT_NAMES[name]
        try:
            cls = point.load()
        except (Exception, SystemExit) as error:  # the package's own code failed: report it in one line
            raise UserCodeError(f"attention {name!r} (entry point {point.value}): its import "
                                f"{raised(error)}") from None
        check_is_module_class(cls, name)
        _REGISTERED[name] = cls
        return cls
    if ":" not in name:
        raise UserCodeError(f"unknown attention mechanism {name!r}; known names: {', '.join(_known_names())}")
    return _import_spec(name)


@contextmanager
def bound_classes(classes: dict[str, type], only: bool = False) -> Iterator[None]:
    """Within the block, the names of ``classes`` build those classes (what a run's record resolved);
    with ``only``, any other user name is refused (UntrustedCodeError) instead of imported: the
    model of a loaded run is built from what its record resolved, never from a name in its config."""
    _BOUND.append((dict(classes), only))
    try:
        yield
    finally:
        _BOUND.pop()


def _known_names() -> list[str]:
    return [*BUILTIN_NAMES, *registered_names(), "path/to/file.py:Class", "package.module:Class"]


def _split_spec(spec: str) -> tuple[str, str]:
    target, _, class_name = spec.rpartition(":")
    if not target or not class_name.isidentifier():
        raise UserCodeError(f"attention {spec!r}: write path/to/file.py:ClassName or package.module:ClassName")
    return target, class_name


def _is_file_target(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _import_spec(spec: str) -> type:
    target, class_name = _split_spec(spec)
    if _is_file_target(target):
        path = Path(target).expanduser()
        if not path.is_file():
            raise UserCodeError(f"attention {spec!r}: no such file {path}")
        module = import_file(path.resolve(), spec)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as error:
            raise UserCodeError(f"attention {spec!r}: no module {error.name!r} (is it on PYTHONPATH?)") from None
        except (Exception, SystemExit) as error:
            raise UserCodeError(f"attention {spec!r}: importing {target} {raised(error)}; "
                                f"run attnmt check {spec} to see what is wrong") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise UserCodeError(f"attention {spec!r}: {target} has no class {class_name!r}")
    check_is_module_class(cls, spec)
    return cls


def import_file(path: Path, label: str, source: str | None = None, kept_in: str | None = None) -> types.ModuleType:
    """Import the Python file ``path`` as a module named after it and its content: the same file
    with the same text is imported once per process, an edited file afresh. With ``kept_in`` (a
    run), ``source`` is the text that run keeps: it runs as ``path.name (kept in RUN)``, and no file
    is read."""
    try:
        code = source if kept_in is not None and source is not None else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserCodeError(f"attention {label!r}: cannot read {path}: {error}") from None
    filename = str(path) if kept_in is None else f"{path.name} (kept in {kept_in})"
    identity = hashlib.sha256(f"{filename}\0{code}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    module_name = f"attnmt_user_{path.stem}_{identity}"  # one module per file and text
    if module_name in sys.modules:
        return sys.modules[module_name]
    hint = f"; run attnmt check {label} to see what is wrong" if kept_in is None else ""
    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module  # dataclasses and pickling look the module up there
    try:
        exec(compile(code, filename, "exec"), module.__dict__)  # the user named this file, or trusted the run
    except SyntaxError as error:
        del sys.modules[module_name]
        raise UserCodeError(f"attention {label!r}: {filename}:{error.lineno}: syntax error: {error.msg}") from None
    except (Exception, SystemExit) as error:  # SystemExit: a sys.exit() at import must not end attnmt
        del sys.modules[module_name]
        raise UserCodeError(f"attention {label!r}: importing {filename} {raised(error)}{hint}") from None
    return module


def raised(error: BaseException) -> str:
    """What a user's code did, in a few words on one line: ``raised ValueError: ...`` or
    ``called sys.exit(0)``."""
    if isinstance(error, SystemExit):
        return f"called sys.exit({error.code!r})"
    text = " ".join(str(error).split())
    return f"raised {type(error).__name__}: {text[:200]}" if text else f"raised {type(error).__name__}"



def check_is_module_class(cls: Any, label: str) -> None:
    """UserCodeError naming ``label`` unless ``cls`` is a ``torch.nn.Module`` class."""
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise UserCodeError(f"attention {label!r}: {cls!r} is not a torch.nn.Module class")


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def registered_class(name: str) -> type | None:
    """The class registered in this process under ``name`` (``register_attention`` or a loaded
    entry point), None when there is none; imports nothing."""
    return _REGISTERED.get(name)
