"""Attention that users write: how they name it, how attnmt loads it, and the adapter that puts it
behind the built-ins' interface (``prepare`` / ``attend``).

The contract. A user mechanism is a ``torch.nn.Module`` whose constructor takes the keywords
``query_dim``, ``key_dim`` and ``value_dim`` (plus options of its own, from
``model.attention_options``), in one of three forms:

``forward``
    ``forward(query [B, Dq], keys [B, S, Dk], values [B, S, Dv], mask [B, S]) -> (context [B, Dv], weights [B, S])``,
    mask bool with True = may attend. The whole mechanism, as a course writes it.
``score``
    ``score(query [B, Dq], keys [B, S, Dk]) -> e [B, S]`` and no ``forward``: attnmt does the rest,
    ``α = softmax(e)`` over the allowed positions (0 elsewhere, all 0 on a row with none) and
    ``context = Σ_s α_s v_s``.
``prepared``
    a subclass of ``attnmt.attention.Attention`` (``prepare_keys`` / ``score(query [B, T, Dq], prepared)``,
    or ``prepare`` / ``attend`` themselves): the built-ins' speed path, which projects the keys once
    per sentence and answers all decoding steps of the ``parallel`` flow in one product.

The first two forms are asked one decoding step at a time: in the ``parallel`` flow the adapter
loops over the T steps (``benchmarks/experiments/user_attention.py`` measures what that costs).

For the Transformer a user class gives ``score(q [B, h, T, d], k [B, h, S, d]) -> [B, h, T, S]``
(built with query_dim = key_dim = value_dim = d, the size of a head); it replaces ``q·kᵀ/√d`` in
every attention layer, and attnmt applies the padding and causal masks and the softmax.

Names. ``path/to/file.py:Class`` and ``package.module:Class`` (a spec), a name given with
``register_attention("name")``, or a name from the entry-point group ``attnmt.attention`` of an
installed package. A user name never shadows a built-in one: registering it is an error, and an
entry point that tries is skipped with a warning.

Trust. Naming a spec imports it: the user asked for it. A run trained with one keeps a
``CodeRecord`` (the spec, the file, its SHA-256 and its text) in its checkpoints. A run folder is
data from an unknown sender, so loading one never imports a path or module the run names: it runs
the text the run keeps, and only with the user's consent on this command line
(``resolve_recorded``): ``trust_run_code``, or the spec named again now (its file must hold the same
text), or the text's SHA-256 listed in ``attnmt.attention.trusted_code`` (code this user trained
with on this machine). While a run's model is built (``bound_classes(..., only=True)``) no other user
name can be imported.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib.metadata import entry_points
from pathlib import Path, PurePath
from typing import Any, cast

import torch
from torch import nn

from attnmt.attention.functional import masked_softmax
from attnmt.attention.mechanisms import BUILTIN_NAMES, Attention, PreparedKeys
from attnmt.attention.trusted_code import is_trusted
from attnmt.errors import ConfigError

__all__ = [
    "ENTRY_POINT_GROUP", "CodeRecord", "UntrustedCodeError", "UserAttention", "UserCodeError", "UserCodeFault",
    "build_user_attention",
    "build_user_score", "bound_classes",
    "code_record", "contract_form", "is_user_name", "load_user_class", "register_attention", "registered_names",
    "resolve_recorded",
]

#: The entry-point group through which an installed package adds mechanism names.
ENTRY_POINT_GROUP = "attnmt.attention"
#: The keywords every user mechanism's constructor takes.
CONTRACT_KEYWORDS = ("query_dim", "key_dim", "value_dim")

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
        _check_is_module_class(cls, key)
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
        _check_is_module_class(cls, name)
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
        module = _import_file(path.resolve(), spec)
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
    _check_is_module_class(cls, spec)
    return cls


def _import_file(path: Path, label: str, source: str | None = None, kept_in: str | None = None) -> types.ModuleType:
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


class UserCodeFault(UserCodeError):
    """A user mechanism's code raised, called ``sys.exit`` or broke the contract while it ran
    (``what`` says which, for ``attnmt check``'s table); the message names the mechanism and points
    to ``attnmt check``."""

    def __init__(self, label: str, what: str):
        super().__init__(f"attention {label!r}: {what}; run attnmt check {label} to see which property it breaks")
        self.what = what


@contextmanager
def running_user_code(label: str, method: str) -> Iterator[None]:
    """Around a call of a user's ``method``: anything it raises, ``SystemExit`` included, becomes a
    UserCodeFault naming ``label`` (a Ctrl-C still stops attnmt)."""
    try:
        yield
    except UserCodeFault:
        raise
    except (Exception, SystemExit) as error:
        raise UserCodeFault(label, f"{method} {raised(error)}") from None


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return "None" if value is None else f"a {type(value).__module__}.{type(value).__qualname__}"


def checked_answer(answer: Any, label: str, method: str, context_shape: tuple[int, ...],
                   weights_shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """``answer`` when it is ``(context, weights)``: two tensors of these shapes; else UserCodeFault."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        what = f"{len(answer)} values" if isinstance(answer, (tuple, list)) else _describe(answer)
        raise UserCodeFault(label, f"{method} returned {what}, not (context, weights)")
    for name, value, shape in (("context", answer[0], context_shape), ("weights", answer[1], weights_shape)):
        if not isinstance(value, torch.Tensor):
            raise UserCodeFault(label, f"{method} returned {_describe(value)} as its {name}, not a torch.Tensor")
        if tuple(value.shape) != shape:
            raise UserCodeFault(label, f"{method} returned {name} of shape {list(value.shape)}, expected {list(shape)}")
    return answer[0], answer[1]


def _check_is_module_class(cls: Any, label: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise UserCodeError(f"attention {label!r}: {cls!r} is not a torch.nn.Module class")


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# -- the adapter ---------------------------------------------------------------------------------


def contract_form(module: nn.Module) -> str:
    """Which form of the contract ``module`` follows: ``prepared``, ``forward`` or ``score``."""
    if isinstance(module, Attention):
        return "prepared"
    if type(module).forward is not nn.Module.forward:
        return "forward"
    if callable(getattr(module, "score", None)):
        return "score"
    raise UserCodeError(
        f"{type(module).__name__} defines neither forward(query, keys, values, mask) nor score(query, keys)"
    )


class UserAttention(Attention):
    """A user's ``forward``- or ``score``-form mechanism behind the ``prepare`` / ``attend`` interface.

    ``prepare`` keeps the keys and values as they are; ``attend`` asks the user's module one step
    at a time (T calls for ``query [B, T, Dq]``) and stacks the answers into [B, T, Dv], [B, T, S].
    The user's module is ``self.module``, so its parameters are ``attention.module.*``. What the
    module raises, or an answer of another form or shape, is a UserCodeFault naming ``label``.
    """

    def __init__(self, module: nn.Module, query_dim: int, key_dim: int, value_dim: int | None = None,
                 label: str | None = None):
        super().__init__(query_dim, key_dim, value_dim)
        self.module = module
        self.label = label or type(module).__name__
        self.form = contract_form(module)
        if self.form == "prepared":
            raise ValueError("UserAttention wraps forward- and score-form mechanisms; use an Attention directly")
        self.output_dim = int(getattr(module, "output_dim", self.value_dim))

    def attend(self, query: torch.Tensor, prepared: PreparedKeys, step: int | torch.Tensor | None = None) -> Any:
        if query.dim() == 2:
            return self._one_step(query, prepared)
        contexts, weights = zip(*(self._one_step(query[:, t], prepared) for t in range(query.shape[1])))
        return torch.stack(contexts, dim=1), torch.stack(weights, dim=1)

    def _one_step(self, query: torch.Tensor, prepared: PreparedKeys) -> tuple[torch.Tensor, torch.Tensor]:
        batch, source = prepared.mask.shape
        if self.form == "forward":
            with running_user_code(self.label, "forward"):
                answer = self.module(query, prepared.keys, prepared.values, prepared.mask)
            return checked_answer(answer, self.label, "forward", (batch, self.output_dim), (batch, source))
        score = cast(Callable[..., torch.Tensor], self.module.score)  # not a tensor, as nn.Module types it
        with running_user_code(self.label, "score"):
            scores = score(query, prepared.keys)  # [B, S]
        if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != (batch, source):
            raise UserCodeFault(self.label, f"score returned {_describe(scores)}, expected a tensor of shape "
                                            f"{[batch, source]}")
        weights = masked_softmax(scores, prepared.mask, dim=-1)
        return torch.bmm(weights.unsqueeze(1), prepared.values).squeeze(1), weights

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, form={self.form}"


def instantiate(cls: type, label: str, query_dim: int, key_dim: int, value_dim: int, **options: Any) -> nn.Module:
    """``cls(query_dim=…, key_dim=…, value_dim=…, **options)``; UserCodeError in one line when the
    constructor does not take these keywords or fails."""
    try:
        signature = inspect.signature(cls)
        signature.bind(query_dim=query_dim, key_dim=key_dim, value_dim=value_dim, **options)
    except TypeError as error:
        raise UserCodeError(
            f"attention {label!r}: {cls.__name__}(query_dim=..., key_dim=..., value_dim=...{_options_text(options)}) "
            f"does not fit its constructor: {error}; attnmt takes either form: (query_dim, key_dim, value_dim) with "
            "forward(query, keys, values, mask), or the handout's (enc_hid_dim, dec_hid_dim) with "
            "forward(hidden, encoder_outputs)"
        ) from None
    except ValueError:  # no signature to read (a C type): let the call say
        pass
    try:
        return cls(query_dim=query_dim, key_dim=key_dim, value_dim=value_dim, **options)
    except (Exception, SystemExit) as error:
        raise UserCodeError(
            f"attention {label!r}: {cls.__name__}(...) {raised(error)}; run attnmt check {label}"
        ) from None


def _options_text(options: dict) -> str:
    return "".join(f", {key}={value!r}" for key, value in options.items())


def build_user_attention(name: str, query_dim: int, key_dim: int, value_dim: int | None = None,
                         **options: Any) -> Attention:
    """The mechanism ``name`` names, built for these sizes and behind the built-ins' interface."""
    value_dim = key_dim if value_dim is None else value_dim
    cls = load_user_class(name)
    if isinstance(cls, type) and issubclass(cls, Attention):  # already the interface: contained in place
        return cast(Attention, instantiate(_contained_attention(cls, name), name, query_dim, key_dim, value_dim,
                                           **options))
    module = instantiate(cls, name, query_dim, key_dim, value_dim, **options)
    return UserAttention(module, query_dim, key_dim, value_dim, label=name)


def build_user_score(name: str, head_dim: int, **options: Any) -> nn.Module:
    """The Transformer form: the class ``name`` names, built with query_dim = key_dim = value_dim =
    ``head_dim``; its ``score(q [B, h, T, d], k [B, h, S, d]) -> [B, h, T, S]`` replaces q·kᵀ/√d."""
    cls = load_user_class(name)
    module = instantiate(_contained_score(cls, name) if callable(getattr(cls, "score", None)) else cls, name,
                         head_dim, head_dim, head_dim, **options)
    if not callable(getattr(module, "score", None)):
        raise UserCodeError(
            f"attention {name!r}: a Transformer takes a class with score(q [B, h, T, d], k [B, h, S, d]); "
            f"{type(module).__name__} has no score method"
        )
    return module


_CONTAINED: dict[tuple[type, str], type] = {}


def _contained_attention(cls: type, label: str) -> type:
    """A subclass of the user's ``Attention`` subclass whose ``prepare`` and ``attend`` turn what the
    user's code raises, and an answer of another shape, into a UserCodeFault. Being a subclass, it
    holds the same parameters under the same names as ``cls``, so checkpoints are unchanged."""
    if (cls, label) not in _CONTAINED:
        user: Any = cls

        def prepare(self: Any, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor | None = None) -> PreparedKeys:
            with running_user_code(label, "prepare"):
                return user.prepare(self, keys, values, mask)

        def attend(self: Any, query: torch.Tensor, prepared: PreparedKeys, step: Any = None) -> Any:
            with running_user_code(label, "attend"):
                answer = user.attend(self, query, prepared, step)
            batch, source = prepared.mask.shape
            steps = tuple(query.shape[1:2]) if query.dim() == 3 else ()
            return checked_answer(answer, label, "attend", (batch, *steps, self.output_dim), (batch, *steps, source))

        _CONTAINED[cls, label] = _subclass(cls, prepare=prepare, attend=attend)
    return _CONTAINED[cls, label]


def _contained_score(cls: type, label: str) -> type:
    """The Transformer form's class with its ``score`` contained, as ``_contained_attention`` does:
    scores must be a tensor of shape [B, h, T, S] for q [B, h, T, d] and k [B, h, S, d]."""
    if (cls, label) not in _CONTAINED:
        user: Any = cls

        def score(self: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            with running_user_code(label, "score"):
                scores = user.score(self, q, k)
            expected = (*q.shape[:-1], k.shape[-2])
            if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != expected:
                raise UserCodeFault(label, f"score returned {_describe(scores)}, expected [B, h, T, S] = "
                                           f"{list(expected)}")
            return scores

        _CONTAINED[cls, label] = _subclass(cls, score=score)
    return _CONTAINED[cls, label]


def _subclass(cls: type, **methods: Callable) -> type:
    """A subclass of ``cls`` with ``methods`` in place, named and placed as ``cls`` is."""
    namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__, **methods}
    return type(cls.__name__, (cls,), namespace)


# -- what a run keeps, and the gate when it is loaded -------------------------------------------------


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
    registered = _REGISTERED.get(record.spec)  # registered in this process: the user's own code
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
    module = _import_file(Path(name), record.spec, source=record.source, kept_in=where)
    kept = getattr(module, class_name, None) if ":" in record.spec else _single_module_class(module)
    if kept is None:
        raise UserCodeError(f"{where}: the code it keeps has no class for attention {record.spec!r}")
    _check_is_module_class(kept, record.spec)
    return kept


def _single_module_class(module: types.ModuleType) -> type | None:
    """The one nn.Module class a registered name's file defines (its kept copy has no spec)."""
    found = [value for value in vars(module).values() if isinstance(value, type) and issubclass(value, nn.Module)
             and value.__module__ == module.__name__]
    return found[0] if len(found) == 1 else None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
