"""``attnmt.data.pieces``: attention over pieces merged into words, against the formula computed
one cell at a time in float64 on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from attnmt.data.pieces import group_pieces, merge_spans, merge_subwords, spans_of


def _random_spans(rng, words: int) -> list[tuple[int, int]]:
    """``words`` spans tiling 0 … n, each of 1 to 3 pieces."""
    spans, start = [], 0
    for length in rng.integers(1, 4, size=words):
        spans.append((start, start + int(length)))
        start += int(length)
    return spans


def _by_the_formula(weights, src_spans, out_spans) -> np.ndarray:
    """W[i, j] = mean over the output pieces of word i of the sum over the source pieces of word j."""
    merged = np.zeros((len(out_spans), len(src_spans)))
    for i, (out_start, out_stop) in enumerate(out_spans):
        for j, (src_start, src_stop) in enumerate(src_spans):
            cells = [float(weights[t, s]) for t in range(out_start, out_stop) for s in range(src_start, src_stop)]
            merged[i, j] = sum(cells) / (out_stop - out_start)
    return merged


@pytest.mark.parametrize("seed", range(6))
def test_merge_spans_is_the_formula_and_keeps_rows_distributions(seed):
    rng = np.random.default_rng(seed)
    src_spans, out_spans = _random_spans(rng, int(rng.integers(1, 6))), _random_spans(rng, int(rng.integers(1, 6)))
    weights = rng.dirichlet(np.ones(src_spans[-1][1]), size=out_spans[-1][1]).astype(np.float32)
    merged = merge_spans(weights, src_spans, out_spans)
    assert merged.dtype == np.float64 and merged.shape == (len(out_spans), len(src_spans))
    np.testing.assert_allclose(merged, _by_the_formula(weights, src_spans, out_spans), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(merged.sum(axis=1), 1.0, atol=1e-6)
    summed = merge_spans(weights, src_spans, out_spans, output_words="sum")  # saliency: a word's rows add up
    sizes = np.array([stop - start for start, stop in out_spans], dtype=np.float64)
    np.testing.assert_allclose(summed, merged * sizes[:, None], rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="output_words must be 'mean' or 'sum'"):
        merge_spans(weights, src_spans, out_spans, output_words="max")


def test_merge_subwords_takes_the_words_from_the_markers():
    rng = np.random.default_rng(7)
    src, out = ["▁Ein", "▁Hund", "e", "</s>"], ["▁Do", "g", "s", "▁run", "</s>"]
    weights = rng.dirichlet(np.ones(len(src)), size=len(out))
    merged, src_words, out_words = merge_subwords(weights, src, out)
    assert (src_words, out_words) == (["Ein", "Hunde", "</s>"], ["Dogs", "run", "</s>"])
    src_spans = [(start, stop) for _, start, stop in group_pieces(src)]
    out_spans = [(start, stop) for _, start, stop in group_pieces(out)]
    np.testing.assert_allclose(merged, _by_the_formula(weights, src_spans, out_spans), atol=1e-15)


def test_a_word_the_tokenizer_encodes_as_nothing_keeps_one_unknown_piece():
    ids, spans = spans_of([[5, 6], [], [7]], unk_id=1)
    assert ids == [5, 6, 1, 7]
    assert spans == [(0, 2), (2, 3), (3, 4)]
