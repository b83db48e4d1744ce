"""Cross-lingual vectors from a parallel corpus: co-occurrence, association, SVD, translations."""

from __future__ import annotations

import numpy as np
import pytest

from attnmt.alignment import train_cross_lingual_vectors
from attnmt.alignment.embed import association_matrix, build_vocabulary, cooccurrence_counts
from attnmt.errors import ConfigError, DataError

LEXICON = {
    "cat": "chat", "dog": "chien", "house": "maison", "red": "rouge", "big": "grand",
    "sees": "voit", "eats": "mange", "the": "le", "small": "petit", "tree": "arbre",
    "river": "rivière", "sleeps": "dort",
}


def synthetic_corpus(pairs: int = 400, seed: int = 0):
    """Random English sentences and word-by-word French translations in shuffled order."""
    rng = np.random.default_rng(seed)
    english = list(LEXICON)
    src, tgt = [], []
    for _ in range(pairs):
        words = list(rng.choice(english, size=rng.integers(3, 7), replace=False))
        translation = [LEXICON[word] for word in words]
        rng.shuffle(translation)
        src.append(words)
        tgt.append(translation)
    return src, tgt


def test_vocabulary_keeps_frequent_words_most_frequent_first():
    assert build_vocabulary([["b", "a", "b"], ["c", "b", "a"]], min_count=2) == ["b", "a"]
    with pytest.raises(ConfigError, match="min_count must be >= 1"):
        build_vocabulary([["a"]], min_count=0)


def test_cooccurrence_counts_pairs_once_per_sentence_and_association_is_ochiai():
    src = [["a", "a", "b"], ["a"], ["b"]]
    tgt = [["x"], ["x", "y"], ["y", "y"]]
    counts, n_src, n_tgt = cooccurrence_counts(src, tgt, ["a", "b"], ["x", "y"])
    np.testing.assert_array_equal(counts.toarray(), [[2, 1], [1, 1]])
    np.testing.assert_array_equal(n_src, [2, 2])
    np.testing.assert_array_equal(n_tgt, [2, 2])
    association = association_matrix(counts, n_src, n_tgt).toarray()
    np.testing.assert_allclose(association, np.array([[2, 1], [1, 1]]) / 2.0, rtol=1e-6)


def test_translations_are_nearest_neighbours_across_languages():
    src, tgt = synthetic_corpus()
    src_vectors, tgt_vectors, info = train_cross_lingual_vectors(src, tgt, dim=8, min_count=1, seed=0)
    assert info["src_vocabulary"] == info["tgt_vocabulary"] == len(LEXICON)
    for english, french in LEXICON.items():
        nearest, _ = tgt_vectors.nearest(src_vectors.vector(english), count=1)[0]
        assert nearest == french, f"{english}: nearest French word {nearest}, expected {french}"


def test_vectors_with_half_power_reconstruct_the_float64_truncated_svd():
    src, tgt = synthetic_corpus(pairs=300, seed=3)
    src_words, tgt_words = build_vocabulary(src, 1), build_vocabulary(tgt, 1)
    counts, n_src, n_tgt = cooccurrence_counts(src, tgt, src_words, tgt_words)
    dense = counts.toarray().astype(np.float64) / np.sqrt(np.outer(n_src, n_tgt))
    u, s, vt = np.linalg.svd(dense)
    k = 5
    reference = (u[:, :k] * s[:k]) @ vt[:k]
    src_vectors, tgt_vectors, info = train_cross_lingual_vectors(src, tgt, dim=k, min_count=1, singular_power=0.5)
    assert src_vectors.words == src_words and tgt_vectors.words == tgt_words
    np.testing.assert_allclose(src_vectors.matrix @ tgt_vectors.matrix.T, reference, atol=1e-4)
    np.testing.assert_allclose(info["singular_values"], s[:k], rtol=1e-4)


def test_same_seed_gives_identical_vectors():
    src, tgt = synthetic_corpus(pairs=120, seed=5)
    first = train_cross_lingual_vectors(src, tgt, dim=4, min_count=1, seed=7)
    second = train_cross_lingual_vectors(src, tgt, dim=4, min_count=1, seed=7)
    np.testing.assert_array_equal(first[0].matrix, second[0].matrix)
    np.testing.assert_array_equal(first[1].matrix, second[1].matrix)


def test_bad_requests_raise_clear_errors():
    src, tgt = synthetic_corpus(pairs=50)
    with pytest.raises(ConfigError, match="dim=12 is too large: .* at most 11"):
        train_cross_lingual_vectors(src, tgt, dim=12, min_count=1)
    with pytest.raises(DataError, match="50 source and 49 target sentences"):
        train_cross_lingual_vectors(src, tgt[:-1], dim=2)
