"""What a run keeps of a user's attention code, and the gate when the run is loaded.

A run trained with a user's mechanism keeps a ``CodeRecord`` (the spec, the file, its SHA-256 and
its text) in its checkpoints. A run folder is data from an unknown sender, so loading one never
imports a path or module the run names: it runs the text the run keeps, and only with the user's
consent on this command line (``resolve_recorded``): ``trust_run_code``, or the spec named again now
(its file must hold the same text), or the text's SHA-256 listed in
``attnmt.attention.trusted_code`` (code this user trained with on this machine).
"""

from __future__ import annotations

import hashlib
import sys
import types
from dataclasses import asdict, dataclass
from pathlib import Path, PurePath
from typing import Any

from torch import nn

from attnmt.attention.trusted_code import is_trusted
from attnmt.attention.user_code import (
    UntrustedCodeError,
    UserCodeError,
    check_is_module_class,
    import_file,
    is_user_name,
    load_user_class,
    registered_class,
)

__all__ = ["CodeRecord", "code_record", "resolve_recorded"]



@dataclass(frozen=True)
class CodeRecord:
    """The code of a run's user mechanism: the spec as the config names it, the file its class came
    from (absolute), that file's SHA-256, and its text (the copy ``trust_run_code`` runs)."""

    spec: str
    path: str
    sha256: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Any, where: str) -> CodeRecord:
        if not isinstance(values, dict) or not all(isinstance(values.get(key), str) for key in
                                                   ("spec", "path", "sha256", "source")):
            raise UserCodeError(f"{where}: its record of the attention's code is damaged")
        return cls(values["spec"], values["path"], values["sha256"], values["source"])


def code_record(name: str) -> CodeRecord | None:
    """The record of the user mechanism ``name`` (None for a built-in), read from its class's file."""
    if not is_user_name(name):
        return None
    cls = load_user_class(name)
    path = _class_file(cls, name)
    data = path.read_bytes()
    return CodeRecord(spec=name.strip(), path=str(path), sha256=hashlib.sha256(data).hexdigest(),
                      source=data.decode("utf-8"))


def _class_file(cls: type, name: str) -> Path:
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if not file or not Path(file).is_file():
        raise UserCodeError(
            f"attention {name!r}: the file of {cls.__qualname__} cannot be found, so a run cannot keep it; "
            "define the class in a .py file"
        )
    return Path(file).resolve()


def resolve_recorded(record: CodeRecord, trust_run_code: bool, where: str, named: str | None = None) -> type:
    """The class a run's ``record`` names, for loading the run (``where`` names it, for messages);
    build with it inside ``bound_classes({record.spec: cls}, only=True)``.

    A run is data from an unknown sender: no path or module it names is imported. Its kept text runs
    when the user consents now: ``trust_run_code``, or its SHA-256 is in the local list of code this
    user trained with (``attnmt.attention.trusted_code``). ``named``, the spec the user names now,
    imports that file instead, which must hold the same text. Else UntrustedCodeError (one line)."""
    digest = hashlib.sha256(record.source.encode("utf-8", "surrogatepass")).hexdigest()
    class_name = record.spec.rpartition(":")[2]
    if digest != record.sha256 or (":" in record.spec and not class_name.isidentifier()):
        raise UserCodeError(f"{where}: its record of the attention's code is damaged (the kept text does not "
                            "match its SHA-256, or the spec names no class)")
    if named is not None and named.strip() != record.spec:
        raise UserCodeError(f"{where}: the run was trained with attention {record.spec!r}, not {named.strip()!r}")
    registered = registered_class(record.spec)  # registered in this process: the user's own code
    if registered is not None and _sha256(_class_file(registered, record.spec)) == digest:
        return registered
    if named is not None:
        named_class = load_user_class(named)
        file = _class_file(named_class, named)
        if _sha256(file) == digest:
            return named_class
        if not trust_run_code:
            raise UntrustedCodeError(
                f"{where}: its attention {record.spec!r}: {file} has changed since the run was trained; "
                "trust_run_code=True runs the copy kept in the run instead"
            )
    elif not (trust_run_code or is_trusted(digest)):
        raise UntrustedCodeError(
            f"{where}: it was trained with your own attention {record.spec!r}, and this machine has not "
            "trained with that code, so it is not run; read the copy the run keeps (user_attention.py) and "
            "pass trust_run_code=True to run it"
        )
    name = PurePath(record.path).name if record.path.endswith(".py") else "user_attention.py"
    module = import_file(Path(name), record.spec, source=record.source, kept_in=where)
    kept = getattr(module, class_name, None) if ":" in record.spec else _single_module_class(module)
    if kept is None:
        raise UserCodeError(f"{where}: the code it keeps has no class for attention {record.spec!r}")
    check_is_module_class(kept, record.spec)
    return kept


def _single_module_class(module: types.ModuleType) -> type | None:
    """The one nn.Module class a registered name's file defines (its kept copy has no spec)."""
    found = [value for value in vars(module).values() if isinstance(value, type) and issubclass(value, nn.Module)
             and value.__module__ == module.__name__]
    return found[0] if len(found) == 1 else None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
