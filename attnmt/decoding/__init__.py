"""Decoding: from a trained model to text, and to the attention behind it.

- ``search``: greedy and batched beam search over any model with the incremental-decoding
  contract of ``attnmt.models``; both return the attention weights of every output token.
- ``translator``: ``Translator``, a run's model, tokenizers and search settings: sentences in,
  ``Translation`` out (text, pieces, attention); the attention of every layer and head of an
  output read by force-decoding it (``attnmt.models.readout``).
- ``hf``: ``HFTranslator``, a Hugging Face translation model behind the same interface.

Public names load from their module on first use.
"""

from attnmt.runtime.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    **dict.fromkeys(["Hypothesis", "beam_search", "greedy_search", "length_penalty"], "search"),
    **dict.fromkeys(["Translation", "Translations", "Translator"], "translator"),
    **dict.fromkeys(["HFReadout", "HFTranslator"], "hf"),
})
