"""Agreement of attention and saliency (attnmt.evaluation.agreement): the row measures against
scipy's Spearman and the rows that cannot count (``compare --saliency``: tests/test_compare.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from attnmt.evaluation.agreement import row_agreement


def test_rank_correlation_is_spearmans_and_top1_compares_the_largest():
    rng = np.random.default_rng(0)
    attention, saliency = rng.random((6, 5)), rng.normal(size=(6, 5))
    saliency[0] = attention[0] * 3 - 1  # the same order
    saliency[1] = -attention[1]  # the reverse order
    saliency[2, :2] = saliency[2, 2]  # ties: average ranks
    correlations, same_top, rows = row_agreement(attention, saliency)
    assert rows == 6 and len(correlations) == 6
    np.testing.assert_allclose(correlations, [spearmanr(a, g).statistic for a, g in zip(attention, saliency)])
    assert correlations[0] == pytest.approx(1.0) and correlations[1] == pytest.approx(-1.0)
    assert same_top == [bool(np.argmax(a) == np.argmax(g)) for a, g in zip(attention, saliency)]


def test_rows_without_a_ranking_do_not_count():
    uniform = np.full((3, 4), 0.25)  # a mean mechanism's attention
    assert row_agreement(uniform, np.arange(12.0).reshape(3, 4)) == ([], [], 3)
    assert row_agreement(np.ones((2, 1)), np.ones((2, 1))) == ([], [], 2)  # one source word: nothing to rank
    attention = np.array([[0.1, 0.9], [0.5, 0.5]])
    correlations, same_top, rows = row_agreement(attention, np.array([[1.0, 2.0], [3.0, 1.0]]))
    assert correlations == [pytest.approx(1.0)] and same_top == [True] and rows == 2
    with pytest.raises(ValueError, match="must be the same"):
        row_agreement(np.ones((2, 3)), np.ones((3, 2)))


def test_a_mechanism_without_any_ranking_shows_a_dash_not_nan(tmp_path):
    """A run whose attention ranks nothing (none) has no agreement: a dash in the table, null in JSON."""
    from pathlib import Path

    from attnmt.attribution.methods import AttributionOptions
    from attnmt.evaluation.summary import Comparison, RunOutcome

    comparison = Comparison(out=tmp_path, config="c.yaml", mechanisms=["none"], runs=2, split="test", beam=1,
                            limits={}, set_options=[], saliency=AttributionOptions("gradient"))
    comparison.outcomes = [RunOutcome("none", seed, Path("r"), "reused", 40.0, 2.0, 15.0, 400, 0.0)
                           for seed in (1, 2)]
    table = comparison.summary_table()
    assert "nan" not in table and table.splitlines()[-1].count("–") >= 4
    assert comparison.to_dict()["runs"][0]["rank_correlation"] is None
    assert comparison.to_dict()["statistics"]["none"]["top1"]["mean"] is None
