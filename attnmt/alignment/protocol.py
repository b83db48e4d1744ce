"""The protocol of attnmt's alignment results: choose on trial, score on test, compare paired.

An aligner has settings to choose (a link method, a threshold, a layer and head, a temperature,
...). Choosing them on the pairs that score them would flatter the figure, so the gold pairs are
split: the small *trial* set chooses, the *test* set scores the choice. The HLT-NAACL 2003
English–French gold has 37 trial and 447 test pairs::

    trial, test = read_gold_split(gold_folder, "trial"), read_gold_split(gold_folder, "test")
    rows = {name: scored_row(trial_links[name], test_links[name], trial, test, **settings[name])
            for name in configurations}
    best = chosen_on_trial(rows)                      # the lowest trial AER; ties: the first row
    difference = paired(test_links[best], test_links[other], test)
    errors = error_analysis(test_links[best], test, frequent_words(src_text), frequent_words(tgt_text))

A row holds its settings, its trial AER, and the test AER, precision, recall and F1 with the 95%
interval of the test AER (the test sentences redrawn 2,000 times: ``aer_interval``). Two aligners
compare on the same redraws (``paired``): the difference of their test AERs, its 95% interval, and
how often the first is the better one. Every figure is rounded to 4 decimals, as the results
files keep them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from attnmt.alignment.aer import aer_interval, alignment_error_rate, paired_bootstrap
from attnmt.alignment.links import extract_links
from attnmt.alignment.vectors import tokenize
from attnmt.data.corpus import read_lines
from attnmt.data.link_files import GoldAlignment, read_naacl_alignments
from attnmt.runtime.choices import LINK_METHODS

__all__ = ["GoldSplit", "choose_on_trial", "chosen_on_trial", "error_analysis", "frequent_words", "paired",
           "read_gold_split", "rounded", "score_links", "score_matrices", "scored_row"]

Links = set[tuple[int, int]]
T = TypeVar("T")


@dataclass
class GoldSplit:
    """The sentences of one gold split (lists of words) and its sure and possible links."""

    name: str
    src: list[list[str]]
    tgt: list[list[str]]
    gold: GoldAlignment

    def __len__(self) -> int:
        return len(self.src)

    def __iter__(self):  # (src, tgt, gold), as a tuple of three
        return iter((self.src, self.tgt, self.gold))


def read_gold_split(folder: str | Path, split: str, languages: tuple[str, str] = ("en", "fr"),
                    lowercase: bool = True) -> GoldSplit:
    """``folder/<split>.<src>-<tgt>.<src|tgt|naacl>``: the words lower-cased by attnmt's tokenization
    (for word vectors) or, with ``lowercase`` False, split on spaces as they are (for a translator,
    whose tokenizer learned the training text's case)."""
    src_lang, tgt_lang = languages
    base = Path(folder) / f"{split}.{src_lang}-{tgt_lang}"
    words = tokenize if lowercase else str.split
    src = [words(line) for line in read_lines(f"{base}.{src_lang}")]
    tgt = [words(line) for line in read_lines(f"{base}.{tgt_lang}")]
    gold = read_naacl_alignments(f"{base}.naacl", [len(s) for s in src], [len(t) for t in tgt])
    return GoldSplit(split, src, tgt, gold)


def rounded(values: dict[str, float], digits: int = 4) -> dict[str, float]:
    """Every value of ``values`` rounded to ``digits`` places (what the results files keep)."""
    return {key: round(value, digits) for key, value in values.items()}


def score_links(links: Sequence[Links], split: GoldSplit) -> dict[str, float]:
    """AER, precision, recall and F1 of ``links`` (one set per pair) against the split's gold."""
    return alignment_error_rate(list(links), split.gold.sure, split.gold.possible)


def score_matrices(split: GoldSplit, matrices: Sequence[np.ndarray],
                   methods: Sequence[str] = LINK_METHODS) -> dict[str, dict[str, float]]:
    """``score_links`` of every link method for given word weights (one matrix per pair)."""
    return {method: score_links([extract_links(matrix, method) for matrix in matrices], split) for method in methods}


def choose_on_trial(candidates: Iterable[T], trial_aer: Callable[[T], float]) -> T:
    """The candidate with the lowest trial AER; of equal ones (within 1e-12), the first."""
    best: T | None = None
    best_aer = float("inf")
    for candidate in candidates:
        aer = trial_aer(candidate)
        if best is None or aer < best_aer - 1e-12:
            best, best_aer = candidate, aer
    if best is None:
        raise ValueError("choose_on_trial: no candidates")
    return best


def chosen_on_trial(rows: dict[str, dict[str, Any]]) -> str:
    """The name of the row with the lowest ``trial_aer`` (ties: the first)."""
    return min(rows, key=lambda name: rows[name]["trial_aer"])


def scored_row(trial_links: Sequence[Links], test_links: Sequence[Links], trial: GoldSplit, test: GoldSplit,
               **settings: Any) -> dict[str, Any]:
    """One configuration's row: its ``settings``, its trial AER, and its test AER, precision, recall
    and F1 with the test AER's 95% bootstrap interval (2,000 redraws of the test sentences, seed 0)."""
    interval = aer_interval(list(test_links), test.gold.sure, test.gold.possible)
    return {**settings, "trial_aer": round(score_links(trial_links, trial)["aer"], 4),
            **rounded(score_links(test_links, test)), "aer_95_interval": [round(bound, 4) for bound in interval]}


def paired(links_a: Sequence[Links], links_b: Sequence[Links], split: GoldSplit) -> dict[str, float]:
    """Two aligners on the same redraws of ``split``'s sentences (``paired_bootstrap``): the AER
    difference a − b, its 95% interval (``low``, ``high``), and the share of redraws where a is
    better (``a_better``), rounded to 4 places."""
    return rounded(paired_bootstrap(list(links_a), list(links_b), split.gold.sure, split.gold.possible))


def error_analysis(links: Sequence[Links], split: GoldSplit, frequent_src: set[str],
                   frequent_tgt: set[str]) -> dict[str, int]:
    """Where a configuration's errors lie, counted over ``split``.

    Wrong links (predicted, not even possible in the gold) split by whether a word of the link has
    no gold link at all (it should have stayed unaligned) or has gold links elsewhere (a wrong
    partner); missed sure links split by whether a word of the link has several sure links in the
    gold (many-to-one, a phrase) or one (one-to-one). Each also counts the links that touch a
    frequent word (``frequent_words`` of each side's training text: mostly function words).
    """
    counts = {"wrong_links": 0, "wrong_word_unaligned_in_gold": 0, "wrong_partner": 0, "wrong_frequent_word": 0,
              "missed_sure_links": 0, "missed_many_to_one": 0, "missed_one_to_one": 0, "missed_frequent_word": 0,
              "predicted_links": 0, "sure_links": 0}
    for predicted, sure, possible, src, tgt in zip(links, split.gold.sure, split.gold.possible, split.src,
                                                   split.tgt, strict=True):
        linked_src = {i for i, _ in possible}
        linked_tgt = {j for _, j in possible}
        sure_per_src = Counter(i for i, _ in sure)
        sure_per_tgt = Counter(j for _, j in sure)
        counts["predicted_links"] += len(predicted)
        counts["sure_links"] += len(sure)
        for i, j in predicted - possible:
            counts["wrong_links"] += 1
            unaligned = i not in linked_src or j not in linked_tgt
            counts["wrong_word_unaligned_in_gold" if unaligned else "wrong_partner"] += 1
            counts["wrong_frequent_word"] += src[i].lower() in frequent_src or tgt[j].lower() in frequent_tgt
        for i, j in sure - predicted:
            counts["missed_sure_links"] += 1
            many = sure_per_src[i] > 1 or sure_per_tgt[j] > 1
            counts["missed_many_to_one" if many else "missed_one_to_one"] += 1
            counts["missed_frequent_word"] += src[i].lower() in frequent_src or tgt[j].lower() in frequent_tgt
    return counts


def frequent_words(lines: Iterable[str], count: int = 100) -> set[str]:
    """The ``count`` most frequent lower-cased words of some text (split on spaces)."""
    return {word for word, _ in Counter(word.lower() for line in lines for word in line.split()).most_common(count)}
