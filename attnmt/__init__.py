"""attnmt: attention in sequence-to-sequence models.

Every classic attention mechanism behind one interface (``attnmt.attention``), encoder–decoder
translators that use them, training, decoding, evaluation and alignment, with pictures of what the
attention does.
"""

__version__ = "0.1.0"
