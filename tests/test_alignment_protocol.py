"""The trial/test protocol of the alignment results (attnmt.alignment.protocol): gold splits read
from files, rows scored as the alignment metrics score them, choices on trial with ties to the first,
paired comparisons, and the error analysis against counts made by hand."""

from __future__ import annotations

import numpy as np
import pytest

from attnmt.alignment import aer_interval, alignment_error_rate, extract_links, paired_bootstrap
from attnmt.alignment.protocol import (
    GoldSplit,
    choose_on_trial,
    chosen_on_trial,
    error_analysis,
    frequent_words,
    paired,
    read_gold_split,
    score_matrices,
    scored_row,
)
from attnmt.data.link_files import GoldAlignment
from attnmt.runtime.choices import LINK_METHODS


@pytest.fixture
def gold_folder(tmp_path):
    """Two pairs in the HLT-NAACL file layout: ``trial.en-fr.{en,fr,naacl}``."""
    (tmp_path / "trial.en-fr.en").write_text("The House rose .\nMr. Speaker\n", encoding="utf-8")
    (tmp_path / "trial.en-fr.fr").write_text("La Chambre se lève .\nMonsieur le Orateur\n", encoding="utf-8")
    (tmp_path / "trial.en-fr.naacl").write_text(
        "1 1 1 S\n1 2 2 S\n1 3 3 P\n1 3 4 S\n1 4 5 S\n2 1 1 S\n2 2 2 P\n2 2 3 S\n", encoding="utf-8")
    return tmp_path


def test_a_gold_split_is_read_lower_cased_for_vectors_or_as_given_for_a_translator(gold_folder):
    split = read_gold_split(gold_folder, "trial")
    assert split.name == "trial" and len(split) == 2
    assert split.src[0] == ["the", "house", "rose", "."] and split.tgt[1] == ["monsieur", "le", "orateur"]
    assert split.gold.sure[0] == {(0, 0), (1, 1), (2, 3), (3, 4)}
    assert split.gold.possible[0] == split.gold.sure[0] | {(2, 2)}
    assert split.gold.sure[1] == {(0, 0), (1, 2)} and split.gold.possible[1] == {(0, 0), (1, 1), (1, 2)}
    as_given = read_gold_split(gold_folder, "trial", lowercase=False)
    assert as_given.src[1] == ["Mr.", "Speaker"] and as_given.gold.sure == split.gold.sure
    src, tgt, gold = split  # unpacks as (src, tgt, gold)
    assert src is split.src and gold is split.gold


def _random_split(seed: int, sentences: int = 30) -> tuple[GoldSplit, list[set], list[set]]:
    rng = np.random.default_rng(seed)
    src, tgt, sure, possible, a, b = [], [], [], [], [], []
    for _ in range(sentences):
        size = int(rng.integers(1, 6))
        cells = [(i, j) for i in range(size) for j in range(size)]
        s = {cell for cell in cells if rng.random() < 0.3}
        sure.append(s)
        possible.append(s | {cell for cell in cells if rng.random() < 0.2})
        a.append({cell for cell in cells if rng.random() < 0.3})
        b.append({cell for cell in cells if rng.random() < 0.3})
        src.append([f"s{i}" for i in range(size)])
        tgt.append([f"t{j}" for j in range(size)])
    return GoldSplit("random", src, tgt, GoldAlignment(sure, possible)), a, b


def test_a_row_holds_the_settings_the_trial_aer_and_the_test_scores_with_their_interval():
    trial, trial_links, _ = _random_split(0)
    test, test_links, _ = _random_split(1)
    row = scored_row(trial_links, test_links, trial, test, method="intersect", threshold=0.4)
    expected_trial = alignment_error_rate(trial_links, trial.gold.sure, trial.gold.possible)["aer"]
    expected_test = alignment_error_rate(test_links, test.gold.sure, test.gold.possible)
    low, high = aer_interval(test_links, test.gold.sure, test.gold.possible)
    assert list(row) == ["method", "threshold", "trial_aer", "aer", "precision", "recall", "f1", "aer_95_interval"]
    assert row["method"] == "intersect" and row["threshold"] == 0.4
    assert row["trial_aer"] == round(expected_trial, 4)
    assert {key: row[key] for key in expected_test} == {key: round(value, 4) for key, value in expected_test.items()}
    assert row["aer_95_interval"] == [round(low, 4), round(high, 4)]


def test_the_choice_on_trial_is_the_lowest_and_the_first_of_equals():
    rows = {"a": {"trial_aer": 0.2}, "b": {"trial_aer": 0.1}, "c": {"trial_aer": 0.1}}
    assert chosen_on_trial(rows) == "b"
    assert choose_on_trial([3, 1, 2, 1], lambda k: float(k)) == 1
    aers = {"x": 0.3, "y": 0.3 - 1e-13, "z": 0.25}  # within 1e-12 of the first: equal, the first stays
    assert choose_on_trial(["x", "y"], aers.__getitem__) == "x"
    assert choose_on_trial(["x", "y", "z"], aers.__getitem__) == "z"
    with pytest.raises(ValueError, match="no candidates"):
        choose_on_trial([], float)


def test_paired_is_the_paired_bootstrap_rounded_and_zero_against_itself():
    test, a, b = _random_split(2)
    result = paired(a, b, test)
    expected = paired_bootstrap(a, b, test.gold.sure, test.gold.possible)
    assert result == {key: round(value, 4) for key, value in expected.items()}
    itself = paired(a, a, test)
    assert itself["difference"] == 0.0 and itself["low"] == 0.0 and itself["high"] == 0.0


def test_score_matrices_extract_links_with_every_method():
    test, _, _ = _random_split(3)
    rng = np.random.default_rng(3)
    matrices = [rng.dirichlet(np.ones(len(s)), size=len(t)) for s, t in zip(test.src, test.tgt)]
    scores = score_matrices(test, matrices)
    assert list(scores) == list(LINK_METHODS)
    for method in ("intersect", "grow-diag"):
        links = [extract_links(matrix, method) for matrix in matrices]
        assert scores[method] == alignment_error_rate(links, test.gold.sure, test.gold.possible)


def test_error_analysis_counts_each_kind_of_error():
    # source "the cat sat" / target "le chat assis X": X unaligned in the gold; "sat" aligns to two words
    sure = [{(0, 0), (1, 1), (2, 2), (2, 3)}]
    possible = [{(0, 0), (1, 1), (2, 2), (2, 3)}]
    split = GoldSplit("hand", [["the", "cat", "sat", "down"]], [["le", "chat", "assis", "bas", "x"]],
                      GoldAlignment(sure, possible))
    predicted = [{(0, 0), (0, 1), (3, 4), (2, 2)}]  # misses (1, 1) and (2, 3); (0, 1), (3, 4) wrong
    counts = error_analysis(predicted, split, frequent_src={"the"}, frequent_tgt={"le"})
    assert counts == {
        "wrong_links": 2,
        "wrong_word_unaligned_in_gold": 1,  # (3, 4): "down" and "x" have no gold link
        "wrong_partner": 1,  # (0, 1): "the" and "chat" have links elsewhere
        "wrong_frequent_word": 1,  # (0, 1) touches "the"
        "missed_sure_links": 2,
        "missed_many_to_one": 1,  # (2, 3): "sat" has two sure links
        "missed_one_to_one": 1,  # (1, 1)
        "missed_frequent_word": 0,
        "predicted_links": 4,
        "sure_links": 4,
    }


def test_frequent_words_are_the_most_common_lower_cased():
    assert frequent_words(["The cat and the dog", "THE end and"], count=2) == {"the", "and"}
