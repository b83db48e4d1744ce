"""The geometric mean of alignment weight sources (attnmt.alignment.combine), by hand and against
a float64 reference on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from attnmt.alignment import CombinedAligner, align_corpus, combine_weights, extract_links


def test_hand_computed_geometric_mean():
    first = np.array([[0.8, 0.2], [0.5, 0.5]])
    second = np.array([[0.2, 0.8], [0.9, 0.1]])
    combined = combine_weights([first, second], [0.5, 0.5])
    np.testing.assert_allclose(combined, [[0.4, 0.4], [np.sqrt(0.45), np.sqrt(0.05)]], rtol=1e-12)
    # a share of 0 leaves the other source alone; a share of 1 returns it
    np.testing.assert_allclose(combine_weights([first, second], [1.0, 0.0]), first, rtol=1e-12)


def test_agreement_beats_one_confident_source():
    """Source A is sure of column 0, B mildly prefers column 1 and rules column 0 out: the geometric
    mean follows the agreement (column 1), where the arithmetic mean would follow A."""
    confident = np.array([[0.90, 0.09, 0.01]])
    vetoing = np.array([[0.001, 0.60, 0.399]])
    assert (0.5 * confident + 0.5 * vetoing).argmax() == 0
    assert combine_weights([confident, vetoing], [0.5, 0.5]).argmax() == 1


def test_matches_a_float64_reference_on_random_inputs_with_zeros():
    rng = np.random.default_rng(7)
    for _ in range(20):
        rows, columns, parts = rng.integers(1, 6), rng.integers(1, 6), rng.integers(1, 4)
        matrices = [rng.dirichlet(np.ones(columns), size=rows) for _ in range(parts)]
        matrices[0][rng.random((rows, columns)) < 0.2] = 0.0  # exact zeros: floored, not -inf
        shares = rng.dirichlet(np.ones(parts))
        expected = np.ones((rows, columns))
        for share, matrix in zip(shares, matrices):
            expected *= np.maximum(matrix, 1e-9) ** share
        np.testing.assert_allclose(combine_weights(matrices, shares), expected, rtol=1e-10)
        assert np.all(np.isfinite(combine_weights(matrices, shares)))


@pytest.mark.parametrize("shares, message", [
    ([0.5, 0.6], "must sum to 1"),
    ([1.5, -0.5], "finite and >= 0"),
    ([1.0], "2 weight matrices but 1 shares"),
])
def test_bad_shares_are_refused(shares, message):
    with pytest.raises(ValueError, match=message):
        combine_weights([np.ones((2, 2)), np.ones((2, 2))], shares)


def test_shape_mismatch_and_nan_name_the_matrix():
    with pytest.raises(ValueError, match=r"matrix 2 has shape \(3, 2\), matrix 1 has \(2, 2\)"):
        combine_weights([np.ones((2, 2)), np.ones((3, 2))], [0.5, 0.5])
    with pytest.raises(ValueError, match="matrix 1 contains NaN"):
        combine_weights([np.full((1, 1), np.nan), np.ones((1, 1))], [0.5, 0.5])


class Recording:
    """A weight function that batches: records its precompute call and returns fixed weights."""

    def __init__(self, weights):
        self.weights = weights
        self.precomputed = None

    def precompute(self, src, tgt, progress=False):
        self.precomputed = (len(src), len(tgt))

    def __call__(self, src_tokens, tgt_tokens):
        return self.weights(len(tgt_tokens), len(src_tokens))


def test_combined_aligner_forwards_precompute_and_aligns_like_the_combined_matrix():
    diagonal = Recording(lambda t, s: np.eye(t, s) * 0.9 + 0.1 / s)

    def uniform(src, tgt):  # a weight function without precompute
        return np.full((len(tgt), len(src)), 1.0 / len(src))

    aligner = CombinedAligner([diagonal, uniform], [0.7, 0.3], names=["diagonal", "uniform"])
    src, tgt = [["a", "b", "c"], ["d"]], [["x", "y", "z"], ["w", "v"]]
    aligner.precompute(src, tgt)
    assert diagonal.precomputed == (2, 2)
    links = align_corpus(aligner, src, tgt, "intersect")
    assert links[0] == {(0, 0), (1, 1), (2, 2)}
    expected = combine_weights([diagonal(src[1], tgt[1]), uniform(src[1], tgt[1])], [0.7, 0.3])
    assert links[1] == extract_links(expected, "intersect")
    assert aligner.describe() == "geometric mean of diagonal (0.7), uniform (0.3)"


def test_combined_aligner_names_the_part_with_a_wrong_shape():
    def wrong(src, tgt):  # transposed by mistake
        return np.ones((len(src), len(tgt)))

    def right(src, tgt):
        return np.ones((len(tgt), len(src)))

    aligner = CombinedAligner([right, wrong], [0.5, 0.5], names=["good", "backwards"])
    with pytest.raises(ValueError, match=r"backwards returned shape \(2, 3\), expected \[3, 2\]"):
        aligner(["a", "b"], ["x", "y", "z"])
    with pytest.raises(ValueError, match="2 parts but 1 names"):
        CombinedAligner([right, wrong], [0.5, 0.5], names=["one"])


def test_translator_vector_shares():
    from attnmt.alignment import translator_vector_shares

    np.testing.assert_allclose(translator_vector_shares(2, 0.7), [0.15, 0.15, 0.7])
    assert translator_vector_shares(1, 0.4) == pytest.approx([0.6, 0.4])
    assert translator_vector_shares(2, None) == [0.5, 0.5]
    assert translator_vector_shares(0, 0.7) == [1.0]  # vectors alone take everything
