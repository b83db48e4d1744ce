"""attnmt: attention in sequence-to-sequence models.

Every classic attention mechanism behind one interface, encoder–decoder translators that use them,
training, decoding, evaluation and alignment, with pictures of what the attention does. The names
below are the stable public API; each is imported from its module when first used, so that
``import attnmt`` (and the command line) stays fast::

    import attnmt
    translator = attnmt.Translator.load("runs/rnn-sdp")
    attnmt.show(translator, ["Ein Mann fährt Fahrrad."], beam=5)

The layers of the package, lowest first (a module imports only from its own layer or below):
``runtime`` → ``attention`` → ``data`` → ``models`` → ``runs`` → ``decoding`` → ``evaluation`` →
``training`` → ``alignment`` → ``visual`` → ``serve`` → the command line (``cli``, ``commands``), and
``workflows``, which wires the pictures into training.
"""

import importlib
import sys
import warnings

from attnmt._version import __version__
from attnmt.errors import AttnmtError, CheckpointError, ConfigError, DataError, OutputError
from attnmt.runtime.lazy import lazy_exports

#: public name -> the module that defines it
_HOMES = {
    # attention
    "ATTENTION_TYPES": "attnmt.attention.registry",
    "build_attention": "attnmt.attention.registry",
    "register_attention": "attnmt.attention.registry",
    "Attention": "attnmt.attention.mechanisms",
    "PreparedKeys": "attnmt.attention.mechanisms",
    "MultiHeadAttention": "attnmt.attention.multihead",
    "scaled_dot_product_attention": "attnmt.attention.functional",
    # configs and runs
    "RunConfig": "attnmt.runs.run_config",
    "SearchConfig": "attnmt.runs.run_config",
    "load_config": "attnmt.runs.run_config",
    # translating, evaluating, training
    "Translator": "attnmt.decoding.translator",
    "Translation": "attnmt.decoding.base",
    "HFTranslator": "attnmt.decoding.hf",
    "evaluate_run": "attnmt.evaluation.evaluate",
    "train": "attnmt.workflows",
    "TrainResult": "attnmt.training.trainer",
    "compare_mechanisms": "attnmt.workflows",
    # looking at attention
    "show": "attnmt.visual.notebook",
    "AttentionView": "attnmt.visual.notebook",
    "view_examples": "attnmt.visual.examples",
    "plot_attention": "attnmt.visual.heatmap",
    "write_attention_viewer": "attnmt.visual.viewer",
    "plot_curves": "attnmt.visual.curves",
    "AttentionRecord": "attnmt.visual.export",
    "attention_records": "attnmt.visual.export",
    "load_attention": "attnmt.visual.export",
    "save_attention": "attnmt.visual.export",
    # explaining a translation
    "AttributionOptions": "attnmt.attribution.methods",
    "attribute": "attnmt.attribution.reader",
    "explain": "attnmt.evaluation.explain",
    "ExplainSettings": "attnmt.evaluation.explain",
    "Foil": "attnmt.evaluation.explain",
    # word alignment
    "TranslatorAligner": "attnmt.alignment.translator_attention",
    "align_corpus": "attnmt.alignment.links",
    "alignment_error_rate": "attnmt.alignment.aer",
}
_ERRORS = {"AttnmtError": AttnmtError, "CheckpointError": CheckpointError, "ConfigError": ConfigError,
           "DataError": DataError, "OutputError": OutputError}

#: names of 0.2 -> (their home, their name now); they still work and warn, and go in 0.4
_RENAMED = {"SaliencyOptions": ("attnmt.attribution.methods", "AttributionOptions"),
            "saliency": ("attnmt.attribution.reader", "attribute")}

_lazy_getattr, __dir__, _names = lazy_exports(__name__, _HOMES, {"__version__": __version__, **_ERRORS})
__all__ = list(_names)


def __getattr__(name: str):
    """A public name, imported when first used; an old name warns and gives the new one."""
    if name in _RENAMED:
        home, new = _RENAMED[name]
        warnings.warn(f"attnmt.{name} is deprecated; use attnmt.{new} (the old name goes in 0.4)",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), new)
    return _lazy_getattr(name)


def _translations_html(translations) -> str:
    """What IPython shows for a ``Translation`` or ``Translations`` (``attnmt.visual.notebook``)."""
    from attnmt.visual.notebook import translations_html  # the package sits above every layer

    return translations_html(translations)


def _show_translations_in_ipython() -> None:
    """In a running IPython kernel (Jupyter, VS Code, Colab), translations render as the attention
    viewer. Registered by type name, so nothing is imported until one is shown."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if not formatters or "text/html" not in formatters:
        return
    for name in ("Translation", "Translations"):
        formatters["text/html"].for_type_by_name("attnmt.decoding.base", name, _translations_html)


_show_translations_in_ipython()
