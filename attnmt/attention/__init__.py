"""attnmt.attention: every attention mechanism of the seeds behind one interface.

- ``reference``: float64 NumPy reference implementations (the ground truth of the tests).
- ``functional``: the torch core, ``scaled_dot_product_attention`` and the masks.
- ``mechanisms``: single-query mechanisms for recurrent decoders and the registry of names.
- ``multihead``: ``MultiHeadAttention`` (also importable from here).

Masks are boolean with True = may attend; shapes are batch-first.
"""

from attnmt.attention.functional import (
    causal_mask,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)

__all__ = [
    "causal_mask",
    "masked_softmax",
    "padding_mask",
    "scaled_dot_product_attention",
]

from attnmt.attention.mechanisms import (  # noqa: E402
    ATTENTION_TYPES,
    Attention,
    PreparedKeys,
    build_attention,
    canonical_name,
)

__all__ += ["ATTENTION_TYPES", "Attention", "PreparedKeys", "build_attention", "canonical_name"]

from attnmt.attention.multihead import MultiHeadAttention  # noqa: E402

__all__ += ["MultiHeadAttention"]
