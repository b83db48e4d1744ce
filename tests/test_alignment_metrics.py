"""Alignment error rate on hand-computed cases, its bootstrap interval, and the NAACL / Pharaoh gold readers."""

from __future__ import annotations

import numpy as np
import pytest

from attnmt.alignment import (
    aer_interval,
    alignment_error_rate,
    bootstrap_aers,
    paired_bootstrap,
    read_gold,
    read_naacl_alignments,
    read_pharaoh_alignments,
    write_pharaoh,
)
from attnmt.errors import DataError

from conftest import shared_data_path


def test_aer_precision_recall_f1_by_hand():
    predicted = [{(0, 0), (1, 1), (2, 2)}]
    sure = [{(0, 0), (1, 2)}]
    possible = [{(0, 0), (1, 2), (1, 1)}]
    # |A|=3, |S|=2, |A∩S|=1, |A∩P|=2
    scores = alignment_error_rate(predicted, sure, possible)
    assert scores["aer"] == pytest.approx(1 - (1 + 2) / (3 + 2))
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(1 / 2)
    assert scores["f1"] == pytest.approx(2 * (2 / 3) * (1 / 2) / (2 / 3 + 1 / 2))


def test_aer_sums_counts_over_sentences():
    predicted = [{(0, 0)}, {(0, 0), (1, 1), (2, 2)}]
    sure = [{(0, 0)}, {(5, 5)}]
    # |A|=4, |S|=2, |A∩S|=1, |A∩P|=1 (possible = sure)
    scores = alignment_error_rate(predicted, sure, sure)
    assert scores["aer"] == pytest.approx(1 - 2 / 6)
    assert scores["precision"] == pytest.approx(1 / 4)
    assert scores["recall"] == pytest.approx(1 / 2)


def test_perfect_prediction_has_zero_aer():
    sure = [{(0, 0), (1, 2)}, {(3, 1)}]
    possible = [{(0, 0), (1, 2), (2, 2)}, {(3, 1)}]
    assert alignment_error_rate(sure, sure, possible) == {"aer": 0.0, "precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_empty_prediction_has_precision_one_recall_zero_aer_one():
    scores = alignment_error_rate([set(), set()], [{(0, 0)}, set()], [{(0, 0), (1, 1)}, set()])
    assert scores == {"aer": 1.0, "precision": 1.0, "recall": 0.0, "f1": 0.0}


def test_nothing_predicted_and_nothing_to_find_is_not_an_error():
    assert alignment_error_rate([set()], [set()], [set()]) == {"aer": 0.0, "precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_possible_only_hits_count_for_precision_not_recall():
    predicted = [{(1, 1), (2, 2)}]
    sure = [{(0, 0)}]
    possible = [{(0, 0), (1, 1), (2, 2)}]
    scores = alignment_error_rate(predicted, sure, possible)
    assert scores["precision"] == 1.0
    assert scores["recall"] == 0.0
    assert scores["aer"] == pytest.approx(1 - 2 / 3)  # (0 + 2) / (2 + 1)


def test_sure_links_missing_from_possible_are_added_to_it():
    predicted = [{(0, 0)}]
    assert (alignment_error_rate(predicted, [{(0, 0)}], [set()])
            == alignment_error_rate(predicted, [{(0, 0)}], [{(0, 0)}]))
    assert alignment_error_rate(predicted, [{(0, 0)}])["aer"] == 0.0  # possible defaults to sure


def test_aer_rejects_lists_of_different_lengths():
    with pytest.raises(ValueError, match="2 predicted, 1 sure and 1 possible"):
        alignment_error_rate([set(), set()], [set()], [set()])


# ------------------------------------------------------------------ NAACL


def test_naacl_reader_is_one_based_and_separates_sure_from_possible(tmp_path):
    path = tmp_path / "gold.naacl"
    path.write_text("1 1 1 S\n1 2 3 P\n1 3 2\n2 2 1 S 0.9\n2 0 2 S\n\n", encoding="utf-8")
    gold = read_naacl_alignments(path, src_lengths=[3, 2, 4], tgt_lengths=[3, 2, 1])
    assert len(gold) == 3  # sentence 3 has no line, so no link
    assert gold.sure == [{(0, 0), (2, 1)}, {(1, 0)}, set()]  # no label means S; position 0 (NULL) is skipped
    assert gold.possible == [{(0, 0), (1, 2), (2, 1)}, {(1, 0)}, set()]  # possible includes sure


def test_naacl_reader_without_lengths_counts_sentences_by_largest_id(tmp_path):
    path = tmp_path / "gold.naacl"
    path.write_text("2 1 1 S\n", encoding="utf-8")
    assert read_naacl_alignments(path).sure == [set(), {(0, 0)}]


def test_naacl_link_outside_the_sentence_names_sentence_and_link(tmp_path):
    path = tmp_path / "gold.naacl"
    path.write_text("1 1 1 S\n2 4 1 S\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"gold\.naacl: sentence 2: link 4-1 is outside the sentence lengths "
                                        r"\(source 3 words"):
        read_naacl_alignments(path, src_lengths=[3, 3], tgt_lengths=[3, 3])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 1\n", r"gold\.naacl:1: expected 'sentence source target"),
        ("1 1 x S\n", r"gold\.naacl:1: sentence and positions must be integers"),
        ("1 1 1 S\n1 1 2 Q\n", r"gold\.naacl:2: the label must be S \(sure\) or P \(possible\), got 'Q'"),
        ("3 1 1 S\n", r"gold\.naacl:1: sentence 3 does not exist: there are 2 sentences"),
        ("0 1 1 S\n", r"gold\.naacl:1: sentence ids count from 1"),
    ],
)
def test_naacl_reader_names_file_and_line_of_malformed_input(tmp_path, text, message):
    path = tmp_path / "gold.naacl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_naacl_alignments(path, src_lengths=[5, 5], tgt_lengths=[5, 5])


# ------------------------------------------------------------------ Pharaoh


def test_pharaoh_reader_zero_based_with_possible_links(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_text("0-0 1p2 2-1\n\n0p0\n", encoding="utf-8")
    gold = read_pharaoh_alignments(path)
    assert gold.sure == [{(0, 0), (2, 1)}, set(), set()]
    assert gold.possible == [{(0, 0), (1, 2), (2, 1)}, set(), {(0, 0)}]


def test_pharaoh_reader_one_based_shifts_positions(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_text("1-1 2p3\n", encoding="utf-8")
    gold = read_gold(path, "pharaoh", src_lengths=[2], tgt_lengths=[3], one_based=True)
    assert gold.sure == [{(0, 0)}] and gold.possible == [{(0, 0), (1, 2)}]
    path.write_text("0-1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"gold\.txt:1: '0-1' is not a link .* counting from 1"):
        read_pharaoh_alignments(path, one_based=True)


def test_pharaoh_link_outside_the_sentence_names_sentence_and_link(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_text("0-0\n0-0 1-5\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"sentence 2: link 1-5 is outside the sentence lengths \(source 2 words, "
                                        r"target 3 words, positions count from 0\)"):
        read_pharaoh_alignments(path, src_lengths=[2, 2], tgt_lengths=[3, 3])
    one_based = tmp_path / "gold1.txt"
    one_based.write_text("1-1\n1-1 2-6\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"sentence 2: link 2-6 is outside .* count from 1\)"):
        read_gold(one_based, "pharaoh", src_lengths=[2, 2], tgt_lengths=[3, 3], one_based=True)


def test_pharaoh_reader_rejects_malformed_links_and_line_count_mismatch(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_text("0-0 1x1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"gold\.txt:1: '1x1' is not a link"):
        read_pharaoh_alignments(path)
    path.write_text("0-0\n", encoding="utf-8")
    with pytest.raises(DataError, match="1 sentences of links for 2 source"):
        read_pharaoh_alignments(path, src_lengths=[1, 1], tgt_lengths=[1, 1])


def test_write_pharaoh_round_trips_and_refuses_to_overwrite(tmp_path):
    path = tmp_path / "links.txt"
    alignments = [{(1, 0), (0, 0)}, set(), {(2, 3)}]
    write_pharaoh(path, alignments)
    assert path.read_text(encoding="utf-8") == "0-0 1-0\n\n2-3\n"
    assert read_pharaoh_alignments(path).sure == alignments
    with pytest.raises(DataError, match="exists"):
        write_pharaoh(path, alignments)
    write_pharaoh(path, alignments, overwrite=True, possible=[{(0, 1)}, {(1, 1)}, {(2, 3)}])
    assert path.read_text(encoding="utf-8") == "0-0 0p1 1-0\n1p1\n2-3\n"  # a sure link stays sure
    read = read_pharaoh_alignments(path)
    assert read.sure == alignments and read.possible == [{(1, 0), (0, 0), (0, 1)}, {(1, 1)}, {(2, 3)}]
    with pytest.raises(ValueError, match="2 sentences of possible links for 3"):
        write_pharaoh(path, alignments, overwrite=True, possible=[set(), set()])


def test_reads_the_shared_hansards_gold():
    folder = shared_data_path("alignment-gold", "hansards-en-fr")
    src = (folder / "test.en-fr.en").read_text(encoding="utf-8").splitlines()
    tgt = (folder / "test.en-fr.fr").read_text(encoding="utf-8").splitlines()
    gold = read_naacl_alignments(folder / "test.en-fr.naacl", [len(s.split()) for s in src],
                                 [len(t.split()) for t in tgt])
    assert len(gold) == 447
    assert sum(map(len, gold.sure)) == 4038
    assert sum(map(len, gold.possible)) == 4038 + 13400


def _random_corpus(seed: int, sentences: int):
    """Random predicted, sure and possible links (possible ⊇ sure here, as in gold files) per sentence."""
    rng = np.random.default_rng(seed)
    predicted, sure, possible = [], [], []
    for _ in range(sentences):
        size = int(rng.integers(1, 6))  # length 1 included
        cells = [(i, j) for i in range(size) for j in range(size)]

        def pick(share: float, cells=cells) -> set:
            return {cell for cell in cells if rng.random() < share}

        s = pick(0.2)
        predicted.append(pick(0.3))
        sure.append(s)
        possible.append(s | pick(0.2))
    return predicted, sure, possible


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bootstrap_aers_equal_the_corpus_aer_of_each_redraw(seed):
    predicted, sure, possible = _random_corpus(seed, 25)
    values = bootstrap_aers(predicted, sure, possible, samples=40, seed=seed)
    indices = np.random.default_rng(seed).integers(0, 25, size=(40, 25))
    for value, draw in zip(values, indices):
        expected = alignment_error_rate([predicted[k] for k in draw], [sure[k] for k in draw],
                                        [possible[k] for k in draw])["aer"]
        assert value == pytest.approx(expected, abs=1e-12)


def test_aer_interval_holds_the_corpus_aer_and_narrows_with_more_sentences():
    small = _random_corpus(3, 30)
    large = tuple(a * 20 for a in _random_corpus(3, 30))  # the same sentences, twenty times over
    point = alignment_error_rate(*small)["aer"]
    low, high = aer_interval(*small)
    assert low <= point <= high and low < high
    large_low, large_high = aer_interval(*large)
    assert large_low <= point <= large_high
    assert large_high - large_low < (high - low) / 2


def test_aer_interval_of_a_perfect_or_empty_case_is_a_point():
    gold = [{(0, 0), (1, 1)}, {(0, 0)}]
    assert aer_interval(gold, gold, gold) == (0.0, 0.0)
    assert aer_interval([set(), set()], [set(), set()]) == (0.0, 0.0)  # nothing to find, nothing found
    assert aer_interval([set(), set()], gold) == (1.0, 1.0)


@pytest.mark.parametrize("kwargs, message", [
    ({"level": 1.0}, "level"), ({"level": 0}, "level"), ({"samples": 0}, "samples"), ({"samples": 2.5}, "samples"),
])
def test_aer_interval_rejects_bad_settings(kwargs, message):
    gold = [{(0, 0)}]
    with pytest.raises(ValueError, match=message):
        aer_interval(gold, gold, **kwargs)


def test_bootstrap_rejects_empty_or_mismatched_corpora():
    with pytest.raises(ValueError, match="no sentences"):
        bootstrap_aers([], [])
    with pytest.raises(ValueError, match="same number"):
        bootstrap_aers([set()], [set(), set()])


@pytest.mark.parametrize("seed", [0, 1])
def test_paired_bootstrap_scores_both_aligners_on_the_same_redraws(seed):
    predicted_a, sure, possible = _random_corpus(seed, 25)
    predicted_b = _random_corpus(seed + 10, 25)[0]
    result = paired_bootstrap(predicted_a, predicted_b, sure, possible, samples=40, seed=seed)
    assert result["difference"] == pytest.approx(alignment_error_rate(predicted_a, sure, possible)["aer"]
                                                 - alignment_error_rate(predicted_b, sure, possible)["aer"], abs=1e-12)
    differences = []
    for draw in np.random.default_rng(seed).integers(0, 25, size=(40, 25)):

        def pick(links: list, draw=draw) -> list:
            return [links[k] for k in draw]

        differences.append(alignment_error_rate(pick(predicted_a), pick(sure), pick(possible))["aer"]
                           - alignment_error_rate(pick(predicted_b), pick(sure), pick(possible))["aer"])
    assert result["a_better"] == pytest.approx(np.mean(np.asarray(differences) < 0))
    assert (result["low"], result["high"]) == pytest.approx(tuple(np.quantile(differences, [0.025, 0.975])))


def test_paired_bootstrap_of_an_aligner_with_itself_and_with_the_gold():
    predicted, sure, possible = _random_corpus(4, 30)
    same = paired_bootstrap(predicted, predicted, sure, possible)
    assert (same["difference"], same["low"], same["high"], same["a_better"]) == (0.0, 0.0, 0.0, 0.0)
    gold = paired_bootstrap(sure, predicted, sure, possible)
    assert gold["a_better"] == 1.0 and gold["high"] < 0
    with pytest.raises(ValueError, match="paired_bootstrap: 2 predicted, 1 sure"):
        paired_bootstrap([set(), set()], [set(), set()], [set()])


def test_bootstrap_in_blocks_draws_what_one_block_would(monkeypatch):
    from attnmt.alignment import aer as metrics

    predicted, sure, possible = _random_corpus(5, 40)
    whole = bootstrap_aers(predicted, sure, possible, samples=50, seed=5)
    monkeypatch.setattr(metrics, "REDRAW_BLOCK", 40 * 7)  # blocks of 7 redraws, the last of 1
    assert np.array_equal(bootstrap_aers(predicted, sure, possible, samples=50, seed=5), whole)
