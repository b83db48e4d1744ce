"""attnmt.attention: every attention mechanism behind one interface.

- ``reference``: float64 NumPy reference implementations (the ground truth of the tests).
- ``functional``: the torch core, ``scaled_dot_product_attention`` and the masks.
- ``mechanisms``: single-query mechanisms for recurrent decoders.
- ``registry``: the one registry of names (``build_attention``), built-in and the user's own.
- ``user_code``, ``user_adapter``, ``provenance``: mechanisms users write: naming and importing
  them (``register_attention``), the contract and its adapter, what a run keeps and the trust check.
- ``multihead``: ``MultiHeadAttention`` (also importable from here).

Masks are boolean with True = may attend; shapes are batch-first. What one head can compute is
demonstrated beside this package, in ``attnmt.explore``.
"""

from attnmt.attention.functional import (
    causal_mask,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)
from attnmt.attention.mechanisms import Attention, PreparedKeys
from attnmt.attention.multihead import MultiHeadAttention
from attnmt.attention.registry import ATTENTION_TYPES, build_attention, canonical_name, register_attention

__all__ = [
    "ATTENTION_TYPES", "Attention", "MultiHeadAttention", "PreparedKeys", "build_attention", "canonical_name",
    "causal_mask", "masked_softmax", "padding_mask", "register_attention", "scaled_dot_product_attention",
]
