"""Word alignment from attention: word vectors in, attention matrices, links, AER out.

- ``vectors``: :class:`WordVectors`, fastText ``.vec`` and pickle + npz loading, tokenization.
- ``embed``: English and French vectors in one space from a parallel corpus (co-occurrence + SVD).
- ``weights``: vector attention, ``softmax(Q Kᵀ · scale)`` of target over source words .
- ``links``: argmax in both directions, intersect/union, grow-diag(-final), itermax, one-to-one
  matching; :func:`align_corpus` for any weight function (vectors or translators).
- ``translator``: :class:`TranslatorAligner`, a trained translator's attention while it
  force-decodes the given target, pieces merged to words (any model; a Transformer layer/head).
- ``combine``: :class:`CombinedAligner`, several weight sources made to agree (weighted
  geometric mean): both translation directions, or a translator and vector attention.
- ``aer``: alignment error rate, precision, recall, F1, bootstrap intervals; gold files in either format.
- ``eflomal``: eflomal's links (a statistical peer and teacher), several runs and their vote.

The link files themselves (Pharaoh, NAACL; reading, writing, range checks) are data:
``attnmt.data.link_files``, re-exported here.

Every public name is importable from ``attnmt.alignment``; submodules load on first use, so the
command line can read the choice lists in ``attnmt.runtime.choices`` without loading NumPy.

Conventions: attention weights are ``[len(tgt), len(src)]`` (rows = target words, as a decoder
attends); links are ``(i_src, j_tgt)``, 0-based, source first (Pharaoh ``i-j``).
"""

from __future__ import annotations

import importlib
from typing import Any

from attnmt.runtime.choices import GOLD_FORMATS, LINK_METHODS, SCORINGS, SYMMETRIZATIONS  # noqa: F401 (re-exported: public names of attnmt.alignment)

_SUBMODULE_OF = {
    "EMBED_METHOD": "embed",
    "train_cross_lingual_vectors": "embed",
    "CombinedAligner": "combine",
    "combine_weights": "combine",
    "translator_vector_shares": "combine",
    "check_same_languages": "combine",
    "read_word_pairs": "links",
    "unknown_words": "vectors",
    "file_language": "translator_attention",
    "align_corpus": "links",
    "extract_links": "links",
    "format_pharaoh": "attnmt.data.link_files",
    "grow_diag_links": "links",
    "intersect_links": "links",
    "itermax_links": "links",
    "match_links": "links",
    "src2tgt_links": "links",
    "symmetrize": "links",
    "tgt2src_links": "links",
    "union_links": "links",
    "threshold_links": "links",
    "add_confident_links": "links",
    "GoldAlignment": "attnmt.data.link_files",
    "aer_interval": "aer",
    "alignment_error_rate": "aer",
    "bootstrap_aers": "aer",
    "paired_bootstrap": "aer",
    "check_link_range": "attnmt.data.link_files",
    "read_gold": "aer",
    "read_naacl_alignments": "attnmt.data.link_files",
    "read_pharaoh_alignments": "attnmt.data.link_files",
    "write_pharaoh": "attnmt.data.link_files",
    "WordVectors": "vectors",
    "load_pickle_npz_vectors": "vectors",
    "load_vec": "vectors",
    "load_vector_dir": "vectors",
    "load_word_vectors": "vectors",
    "save_vec": "vectors",
    "save_vector_dir": "vectors",
    "tokenize": "vectors",
    "ForcedAttention": "translator_attention",
    "TranslatorAligner": "translator_attention",
    "DEFAULT_DISTORTION": "vector_weights",
    "DEFAULT_TEMPERATURE": "vector_weights",
    "VectorAligner": "vector_weights",
    "VectorAttention": "vector_weights",
    "VectorScoring": "vector_weights",
    "vector_attention": "vector_weights",
}

__all__ = sorted(["GOLD_FORMATS", "LINK_METHODS", "SCORINGS", "SYMMETRIZATIONS", *_SUBMODULE_OF])


def __getattr__(name: str) -> Any:
    """Load the submodule that defines ``name`` on first access (PEP 562)."""
    submodule = _SUBMODULE_OF.get(name)
    if submodule is None:
        raise AttributeError(f"module 'attnmt.alignment' has no attribute {name!r}")
    module = submodule if "." in submodule else f"attnmt.alignment.{submodule}"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
