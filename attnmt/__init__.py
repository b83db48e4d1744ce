"""attnmt: attention in sequence-to-sequence models.

Every classic attention mechanism behind one interface (``attnmt.attention``), encoder–decoder
translators that use them, training, decoding, evaluation and alignment, with pictures of what the
attention does.
"""

import importlib

__version__ = "0.1.0"

# The common entry points, imported when first used (``import attnmt`` stays light for the CLI).
_LAZY = {
    "Translator": "attnmt.translator",
    "load_attention": "attnmt.export",
    "show": "attnmt.notebook",
    "save_attention": "attnmt.export",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnmt' has no attribute {name!r}")
