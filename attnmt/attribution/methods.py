"""The one registry of attribution methods, read by the library, the pages and the command line.

Each record names a method and says where it lives; the module it names holds, with the method's
paper and equation in its docstring::

    applies(model, name) -> None, or one line saying why the method cannot read the model
    compute(name, model, batch, request) -> scores [B, T, S] float64 on the CPU, zero at padding

(``batch`` an ``attnmt.models.readout.ForcedBatch``, ``request`` an
``attnmt.attribution.reader.Request``: the pairs' ids, the options and the foils). A method that
depends on the output explains the score of each output token, log p(y_t | y_<t, x), or, given a
foil y′_t, the contrast log p(y_t | y_<t, x) − log p(y′_t | y_<t, x) (Yin & Neubig, 2022,
"Interpreting Language Models with Contrastive Explanations"). A method that does not (value norms,
ALTI+, rollout) gives the same matrix for any foil, and says so.

To add a method: write its module (``applies``, ``compute``, the paper and the equation), add one
``AttributionMethod`` line to ``METHODS`` below, and put its float64 paper test beside the others
(tests/test_attribution_papers.py). docs/mechanisms.md walks through it.

This module imports neither torch nor NumPy: ``attnmt --help`` reads the names from here.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass
from typing import Any

from attnmt.errors import ConfigError
from attnmt.runtime.checks import is_int

__all__ = ["ATTENTION", "AttributionMethod", "AttributionOptions", "DEFAULT_EXPLAINED", "METHODS", "NAMES",
           "applicable", "check_applies", "check_options", "method", "why_not"]


@dataclass(frozen=True)
class AttributionMethod:
    """One attribution method: ``name`` (what options and files say), ``label`` (what a page shows:
    a format string over AttributionOptions' fields), ``module`` (where ``applies`` and ``compute``
    live), ``depends_on_output`` (whether it explains a score of the output, and so takes a foil),
    ``settings`` (the options it reads), ``source_share`` (whether a row of its scores sums to the
    share of that output piece that comes from the source, as ALTI+'s and rollout's do)."""

    name: str
    label: str
    module: str
    depends_on_output: bool
    settings: tuple[str, ...] = ()
    source_share: bool = False

    def _home(self) -> Any:
        return importlib.import_module(self.module)

    def applies(self, model: Any) -> str | None:
        """None when the method can read ``model``, else one line saying why not."""
        reason: str | None = self._home().applies(model, self.name)
        return reason

    def compute(self, model: Any, batch: Any, request: Any) -> Any:
        """The scores [B, T, S] of a batch (module docstring)."""
        return self._home().compute(self.name, model, batch, request)

    def describe(self, options: AttributionOptions | None = None) -> str:
        """The label with the settings it uses, e.g. "integrated gradients (50 steps)"."""
        return self.label.format(**asdict(options or AttributionOptions(self.name)))


#: every method, in the order lists show them
METHODS: dict[str, AttributionMethod] = {record.name: record for record in (
    AttributionMethod("gradient", "gradient × input", "attnmt.attribution.gradient", True),
    AttributionMethod("smoothgrad", "SmoothGrad ({samples} samples, noise {noise:g})", "attnmt.attribution.gradient",
                      True, ("samples", "noise", "seed")),
    AttributionMethod("integrated", "integrated gradients ({steps} steps)", "attnmt.attribution.gradient", True,
                      ("steps",)),
    AttributionMethod("value_norm", "value norms ‖α f(v)‖", "attnmt.attribution.value_norm", False),
    AttributionMethod("erasure", "erasure (leave one out)", "attnmt.attribution.erasure", True),
    AttributionMethod("alti", "ALTI+ contributions", "attnmt.attribution.composition", False, source_share=True),
    AttributionMethod("rollout", "attention rollout", "attnmt.attribution.composition", False, source_share=True),
)}
NAMES: tuple[str, ...] = tuple(METHODS)
#: the search's own attention, which ``attnmt explain`` and the pages set beside the attributions
ATTENTION = "attention"
#: what ``attnmt explain`` explains when no method is named (those that apply)
DEFAULT_EXPLAINED = ("attention", "gradient", "integrated", "value_norm", "erasure", "alti", "rollout")

SAMPLES, NOISE, STEPS = 10, 0.15, 50  # SmoothGrad's noisy copies and σ (a share of the range), IG's points


def method(name: str) -> AttributionMethod:
    """The record of ``name``; ConfigError naming the methods when there is none."""
    if not isinstance(name, str) or name not in METHODS:
        raise ConfigError(f"attribution {name!r:.40}: must be one of {', '.join(NAMES)}")
    return METHODS[name]


def why_not(model: Any, name: str) -> str | None:
    """Why method ``name`` cannot read ``model`` (one line), or None when it can."""
    return method(name).applies(model)


def applicable(model: Any) -> list[str]:
    """The methods of the registry that can read ``model``, in the registry's order."""
    return [name for name, record in METHODS.items() if record.applies(model) is None]


def check_applies(model: Any, name: str) -> None:
    """ConfigError, one line naming the methods that do apply, when ``name`` cannot read ``model``
    (rollout on an RNN, value_norm on a mechanism that hides its values)."""
    reason = why_not(model, name)
    if reason is not None:
        raise ConfigError(f"{reason}. For this model use one of: {', '.join(applicable(model)) or 'none'}")


def check_options(name: str, samples: int, noise: float, steps: int) -> None:
    """ConfigError naming the first option out of range."""
    if name not in METHODS:
        raise ConfigError(f"attribution={name!r:.40}: must be one of {', '.join(NAMES)}")
    for option, value in (("samples", samples), ("steps", steps)):
        if not is_int(value) or not 1 <= value <= 10_000:
            raise ConfigError(f"attribution_{option}={value!r}: must be an integer from 1 to 10000")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 10:
        raise ConfigError(f"attribution_noise={noise!r}: must be a number from 0 to 10")


@dataclass(frozen=True)
class AttributionOptions:
    """Which attribution, with its settings: ``method`` a name of ``METHODS``, ``samples`` and
    ``noise`` for SmoothGrad, ``steps`` for integrated gradients, ``seed`` for SmoothGrad's noise.
    Checked when made."""

    method: str = "gradient"
    samples: int = SAMPLES
    noise: float = NOISE
    steps: int = STEPS
    seed: int = 0

    def __post_init__(self) -> None:
        check_options(self.method, self.samples, self.noise, self.steps)

    @classmethod
    def of(cls, value: AttributionOptions | str) -> AttributionOptions:
        """``value`` itself, or the default settings of the method it names."""
        return value if isinstance(value, AttributionOptions) else cls(value)

    @property
    def record(self) -> AttributionMethod:
        return METHODS[self.method]

    def describe(self) -> str:
        """The method and the settings it uses, e.g. "integrated gradients (50 steps)"."""
        return self.record.describe(self)

    def as_keywords(self) -> dict[str, Any]:
        """The keywords of ``attnmt.attribution.reader.attribute``."""
        return asdict(self)
