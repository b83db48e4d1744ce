"""Vector attention weights and the ways of turning weights [T, S] into links (i_src, j_tgt)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnmt.alignment import (
    LINK_METHODS,
    VectorAligner,
    VectorScoring,
    WordVectors,
    add_confident_links,
    align_corpus,
    extract_links,
    format_pharaoh,
    grow_diag_links,
    intersect_links,
    itermax_links,
    match_links,
    src2tgt_links,
    tgt2src_links,
    threshold_links,
    union_links,
    vector_attention,
)
from attnmt.errors import DataError


def softmax_rows(scores):
    exp = np.exp(scores - scores.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------ vector attention


def test_scaled_dot_scoring_is_softmax_of_scaled_dot_products_and_rows_sum_to_one():
    rng = np.random.default_rng(1)
    src, tgt = rng.standard_normal((5, 8)), rng.standard_normal((4, 8))
    weights, output = vector_attention(src, tgt, VectorScoring.scaled_dot())
    expected = softmax_rows(tgt @ src.T / math.sqrt(8))
    np.testing.assert_allclose(weights, expected, rtol=1e-12)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(output, expected @ src, rtol=1e-12)


def test_cosine_scoring_with_distortion_matches_the_formula():
    rng = np.random.default_rng(2)
    src, tgt = rng.standard_normal((6, 4)), rng.standard_normal((3, 4))
    src[2] = 0.0  # an unknown word keeps a zero vector, cosine 0
    tau, kappa = 0.3, 7.0
    weights, _ = vector_attention(src, tgt, VectorScoring("cosine", tau, kappa))
    unit_src = np.divide(src, np.linalg.norm(src, axis=1, keepdims=True), out=np.zeros_like(src),
                         where=np.linalg.norm(src, axis=1, keepdims=True) > 0)
    unit_tgt = tgt / np.linalg.norm(tgt, axis=1, keepdims=True)
    s = (np.arange(6) + 0.5) / 6
    t = (np.arange(3) + 0.5) / 3
    expected = softmax_rows(unit_tgt @ unit_src.T / tau - kappa * (t[:, None] - s[None, :]) ** 2)
    np.testing.assert_allclose(weights, expected, rtol=1e-10)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)


def test_unknown_words_without_prior_attend_uniformly():
    weights, _ = vector_attention(np.ones((4, 3)), np.zeros((2, 3)), VectorScoring("cosine", 0.1, 0.0))
    np.testing.assert_allclose(weights, 0.25)


def test_empty_sentence_gives_empty_weights():
    weights, output = vector_attention(np.zeros((0, 3)), np.ones((2, 3)))
    assert weights.shape == (2, 0) and output.shape == (2, 3)


def test_vector_aligner_reports_unknown_words_and_rejects_two_spaces():
    src = WordVectors(["signed", "."], np.array([[1.0, 0.0], [0.0, 1.0]]))
    tgt = WordVectors(["signé", "."], np.array([[1.0, 0.1], [0.1, 1.0]]))
    result = VectorAligner(src, tgt).attend(["signed", "today", "."], ["signé", "."])
    assert result.weights.shape == (2, 3)
    assert result.unknown_src == ["today"] and result.unknown_tgt == []
    assert intersect_links(result.weights) == {(0, 0), (2, 1)}
    with pytest.raises(DataError, match="not one space"):
        VectorAligner(src, WordVectors(["x"], np.ones((1, 3))))


# ------------------------------------------------------------------ links from hand-made matrices

# rows = 4 target words, columns = 3 source words
W = np.array([
    [0.7, 0.2, 0.1],
    [0.6, 0.3, 0.1],
    [0.1, 0.2, 0.7],
    [0.2, 0.5, 0.3],
])


def test_tgt2src_takes_each_rows_argmax():
    assert tgt2src_links(W) == {(0, 0), (0, 1), (2, 2), (1, 3)}


def test_src2tgt_takes_each_columns_argmax():
    assert src2tgt_links(W) == {(0, 0), (1, 3), (2, 2)}


def test_intersect_and_union():
    assert intersect_links(W) == {(0, 0), (1, 3), (2, 2)}
    assert union_links(W) == {(0, 0), (0, 1), (2, 2), (1, 3)}


def test_zero_rows_and_columns_propose_no_link():
    weights = np.array([[0.0, 0.0], [0.4, 0.0]])
    assert tgt2src_links(weights) == {(0, 1)}
    assert src2tgt_links(weights) == {(0, 1)}
    assert match_links(weights) == {(0, 1)}


def test_grow_diag_grows_along_neighbours_and_final_adds_the_rest():
    weights = np.array([
        [0.8, 0.1, 0.1],
        [0.5, 0.4, 0.1],
        [0.1, 0.1, 0.8],
        [0.45, 0.1, 0.1],
    ])
    assert intersect_links(weights) == {(0, 0), (2, 2)}
    assert union_links(weights) == {(0, 0), (0, 1), (1, 1), (2, 2), (0, 3)}
    # (0,1) and (1,1) neighbour (0,0) and touch an unaligned word; (0,3) neighbours no link
    assert grow_diag_links(weights) == {(0, 0), (0, 1), (1, 1), (2, 2)}
    # final: (0,3) is a tgt->src link whose target word 3 is still unaligned
    assert grow_diag_links(weights, final=True) == {(0, 0), (0, 1), (1, 1), (2, 2), (0, 3)}


def test_itermax_second_round_links_words_left_out_by_the_mutual_argmax():
    # both target words prefer source 0, so the mutual argmax keeps (0,0) only
    weights = np.array([
        [0.9, 0.1],
        [0.42, 0.4],
    ])
    assert intersect_links(weights) == {(0, 0)}
    # round two: (0,1) has one aligned word -> 0.9 * 0.42 = 0.378 < 0.4 for (1,1), both words free
    assert itermax_links(weights) == {(0, 0), (1, 1)}
    assert itermax_links(weights, max_iterations=1) == {(0, 0)}
    # without a discount the aligned source word 0 wins row 1 again and gets a second link
    assert itermax_links(weights, discount=1.0) == {(0, 0), (0, 1)}


def test_match_is_the_one_to_one_assignment_of_largest_total_weight():
    weights = np.array([
        [0.5, 0.4],
        [0.45, 0.1],
    ])
    # greedy would take (0,0)=0.5 then (1,1)=0.1 -> 0.6; the optimum is 0.4 + 0.45 = 0.85
    assert match_links(weights) == {(1, 0), (0, 1)}
    assert len(match_links(W)) == 3
    assert len({i for i, _ in match_links(W)}) == 3


def test_extract_links_dispatches_every_method_and_rejects_unknown_names():
    for method in LINK_METHODS:
        links = extract_links(W, method)
        assert all(0 <= i < 3 and 0 <= j < 4 for i, j in links)
    with pytest.raises(ValueError, match="unknown link method 'best'"):
        extract_links(W, "best")


def test_align_corpus_checks_the_weight_orientation_and_skips_empty_pairs():
    def weight_fn(src_tokens, tgt_tokens):
        return np.eye(len(tgt_tokens), len(src_tokens))

    alignments = align_corpus(weight_fn, [["a", "b"], [], ["c"]], [["x", "y", "z"], ["w"], ["v"]])
    assert alignments == [{(0, 0), (1, 1)}, set(), {(0, 0)}]

    def transposed(src_tokens, tgt_tokens):
        return np.eye(len(src_tokens), len(tgt_tokens))

    with pytest.raises(ValueError, match=r"pair 1: weight_fn returned shape \(2, 3\), expected"):
        align_corpus(transposed, [["a", "b"]], [["x", "y", "z"]])
    with pytest.raises(ValueError, match="2 source sentences but 1 target"):
        align_corpus(weight_fn, [["a"], ["b"]], [["x"]])


def test_format_pharaoh_sorts_links_and_marks_possible_ones():
    assert format_pharaoh({(2, 1), (0, 0), (1, 3)}) == "0-0 1-3 2-1"
    assert format_pharaoh({(0, 0)}, possible={(1, 1), (0, 0)}) == "0-0 1p1"
    assert format_pharaoh(set()) == ""


def test_add_confident_links_recovers_a_many_to_one_link_that_agreement_misses():
    """'not' (source 1) <- 'ne' (target 1) and 'pas' (target 3): the French->English direction puts all
    of "not"'s weight on "pas", so the agreement of (not, ne) is 0 and only one direction knows it."""
    forward = np.array([[1.0, 0.0, 0.0], [0.0, 0.95, 0.05], [0.0, 0.0, 1.0], [0.0, 0.9, 0.1]])  # p(i | j)
    backward = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])  # p(j | i)
    agreement = threshold_links(np.sqrt(forward * backward), 0.4)
    assert agreement == {(0, 0), (2, 2), (1, 3)}
    assert add_confident_links(agreement, forward, backward, 0.9) == agreement | {(1, 1)}
    assert add_confident_links(agreement, forward, backward, 0.96) == agreement  # not confident enough
    # a pair whose two words both have links already is never added
    assert add_confident_links({(0, 0), (1, 1), (2, 2), (1, 3)}, forward, backward, 0.5) == \
        {(0, 0), (1, 1), (2, 2), (1, 3)}


@pytest.mark.parametrize("seed", range(5))
def test_add_confident_links_matches_a_loop_over_every_pair(seed):
    rng = np.random.default_rng(seed)
    rows, columns = rng.integers(1, 9, size=2)
    forward = rng.dirichlet(np.ones(columns) * 0.3, size=rows)
    backward = rng.dirichlet(np.ones(rows) * 0.3, size=columns).T
    links = {(int(i), int(j)) for j in range(rows) for i in range(columns) if rng.random() < 0.15}
    confident = float(rng.uniform(0.3, 0.9))
    expected = set(links)
    for j in range(rows):
        for i in range(columns):
            unlinked = all(link[0] != i for link in links) or all(link[1] != j for link in links)
            if unlinked and max(forward[j, i], backward[j, i]) >= confident:
                expected.add((i, j))
    assert add_confident_links(links, forward, backward, confident) == expected


def test_add_confident_links_rejects_a_bad_threshold_or_shapes():
    weights = np.eye(2)
    with pytest.raises(ValueError, match="confident must be in"):
        add_confident_links(set(), weights, weights, 0)
    with pytest.raises(ValueError, match="differ"):
        add_confident_links(set(), weights, np.eye(3), 0.5)


def test_threshold_links_keep_every_pair_at_or_above_it():
    weights = np.array([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    assert threshold_links(weights, 0.3) == {(0, 0), (1, 0), (2, 1)}
    assert threshold_links(weights, 1.0) == set()
    with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\], got 0"):
        threshold_links(weights, 0)
