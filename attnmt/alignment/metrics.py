"""Alignment error rate and the gold-standard alignment files it is measured against.

With predicted links A, sure links S and possible links P (Och & Ney, 2003), summed over the
whole corpus (micro-average: every link counts once, long sentences weigh more):

    precision = |A ∩ P| / |A|        recall = |A ∩ S| / |S|
    AER       = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)
    F1        = 2 · precision · recall / (precision + recall)

P must contain S (a sure link is also possible); when a caller's P lacks some sure links they are
added to it (P := P ∪ S), which is what every published AER assumes. Empty cases never divide by
zero: with no prediction (|A| = 0) precision is 1 (no wrong link was made); with no sure gold link
(|S| = 0) recall is 1 (nothing was missed); AER is 0 when |A| + |S| = 0; F1 is 0 when precision
and recall are both 0.

Gold readers return a :class:`GoldAlignment` — one set of sure and one set of possible links per
sentence, 0-based, source first:

* NAACL (HLT-NAACL 2003 shared task): one link a line, ``sentence_id source_pos target_pos
  [S|P] [confidence]``, 1-based; sentence ids number the sentences from 1; a missing label means
  S; position 0 stands for NULL (the word is unaligned) and such lines add no link.
* Pharaoh: one line per sentence, ``i-j`` for a sure link and ``ipj`` for a possible one,
  0-based (or 1-based by option).

Links outside the sentence lengths raise DataError naming the file, the sentence and the link.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from attnmt.alignment.names import GOLD_FORMATS
from attnmt.files import write_text_atomic
from attnmt.data.corpus import read_lines
from attnmt.errors import DataError

__all__ = [
    "GOLD_FORMATS",
    "GoldAlignment",
    "alignment_error_rate",
    "check_link_range",
    "read_gold",
    "read_naacl_alignments",
    "read_pharaoh_alignments",
    "write_pharaoh",
]

Links = set[tuple[int, int]]


def alignment_error_rate(
    predicted: Sequence[Links],
    sure: Sequence[Links],
    possible: Sequence[Links] | None = None,
) -> dict[str, float]:
    """Corpus AER, precision, recall and F1 (see module doc); one set of ``(i, j)`` per sentence.

    ``possible`` defaults to ``sure``; sure links missing from it are added. Returns
    ``{"aer", "precision", "recall", "f1"}``. Raises ValueError when the lists differ in length.
    """
    if possible is None:
        possible = sure
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(
            f"alignment_error_rate: {len(predicted)} predicted, {len(sure)} sure and {len(possible)} "
            "possible sentences; they must be the same number"
        )
    n_predicted = n_sure = hits_sure = hits_possible = 0
    for links, sure_links, possible_links in zip(predicted, sure, possible):
        links, sure_links = set(links), set(sure_links)
        possible_links = set(possible_links) | sure_links
        n_predicted += len(links)
        n_sure += len(sure_links)
        hits_sure += len(links & sure_links)
        hits_possible += len(links & possible_links)
    precision = hits_possible / n_predicted if n_predicted else 1.0
    recall = hits_sure / n_sure if n_sure else 1.0
    total = n_predicted + n_sure
    aer = 1.0 - (hits_sure + hits_possible) / total if total else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"aer": aer, "precision": precision, "recall": recall, "f1": f1}


@dataclass
class GoldAlignment:
    """Gold links per sentence: ``sure[n] ⊆ possible[n]``, 0-based ``(source, target)`` pairs."""

    sure: list[Links]
    possible: list[Links]

    def __post_init__(self) -> None:
        if len(self.sure) != len(self.possible):
            raise ValueError(f"GoldAlignment: {len(self.sure)} sure but {len(self.possible)} possible sentences")
        self.possible = [set(possible) | set(sure) for sure, possible in zip(self.sure, self.possible)]

    def __len__(self) -> int:
        return len(self.sure)


def check_link_range(
    alignments: Sequence[Links],
    src_lengths: Sequence[int],
    tgt_lengths: Sequence[int],
    where: str = "alignments",
    one_based: bool = False,
) -> None:
    """Raise DataError when a link of sentence n lies outside its source or target length.

    The message names ``where`` (e.g. the file), the 1-based sentence number and the link as it
    is written in the file (shifted back by one when ``one_based``).
    """
    if not len(alignments) == len(src_lengths) == len(tgt_lengths):
        raise DataError(
            f"{where}: {len(alignments)} sentences of links for {len(src_lengths)} source and "
            f"{len(tgt_lengths)} target sentences"
        )
    shift = 1 if one_based else 0
    for number, (links, src_length, tgt_length) in enumerate(zip(alignments, src_lengths, tgt_lengths), start=1):
        for i, j in sorted(links):
            if not (0 <= i < src_length and 0 <= j < tgt_length):
                raise DataError(
                    f"{where}: sentence {number}: link {i + shift}-{j + shift} is outside the sentence "
                    f"lengths (source {src_length} words, target {tgt_length} words"
                    f"{', positions count from 1' if one_based else ', positions count from 0'})"
                )


def _check_lengths_given(src_lengths, tgt_lengths) -> None:
    if (src_lengths is None) != (tgt_lengths is None):
        raise ValueError("give both src_lengths and tgt_lengths, or neither")


def read_naacl_alignments(
    path: str | Path,
    src_lengths: Sequence[int] | None = None,
    tgt_lengths: Sequence[int] | None = None,
) -> GoldAlignment:
    """Read an HLT-NAACL 2003 alignment file (``sent src tgt [S|P] [conf]``, 1-based; see module doc).

    With the sentence lengths given, the number of sentences is ``len(src_lengths)`` (sentences
    without any line have no link) and every link is checked against the lengths; otherwise it
    is the largest sentence id. Raises DataError naming the file and line for a malformed line.
    """
    path = Path(path)
    _check_lengths_given(src_lengths, tgt_lengths)
    entries: list[tuple[int, int, int, bool, int]] = []
    for line_number, line in enumerate(read_lines(path), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 3 or len(fields) > 5:
            raise DataError(
                f"{path}:{line_number}: expected 'sentence source target [S|P] [confidence]', got {line.strip()!r}"
            )
        try:
            sentence, i, j = (int(value) for value in fields[:3])
        except ValueError:
            raise DataError(f"{path}:{line_number}: sentence and positions must be integers, got {line.strip()!r}") from None
        label = fields[3].upper() if len(fields) > 3 else "S"
        if label not in ("S", "P"):
            raise DataError(f"{path}:{line_number}: the label must be S (sure) or P (possible), got {fields[3]!r}")
        if sentence < 1 or i < 0 or j < 0:
            raise DataError(f"{path}:{line_number}: sentence ids count from 1 and positions from 1 (0 = NULL), "
                            f"got {line.strip()!r}")
        entries.append((sentence, i, j, label == "S", line_number))
    count = len(src_lengths) if src_lengths is not None else max((entry[0] for entry in entries), default=0)
    sure: list[Links] = [set() for _ in range(count)]
    possible: list[Links] = [set() for _ in range(count)]
    for sentence, i, j, is_sure, line_number in entries:
        if sentence > count:
            raise DataError(f"{path}:{line_number}: sentence {sentence} does not exist: there are {count} sentences")
        if i == 0 or j == 0:
            continue  # a link to NULL: the word is unaligned, which AER does not score
        (sure if is_sure else possible)[sentence - 1].add((i - 1, j - 1))
    gold = GoldAlignment(sure, possible)
    if src_lengths is not None:
        check_link_range(gold.possible, src_lengths, tgt_lengths, where=str(path), one_based=True)
    return gold


def read_pharaoh_alignments(
    path: str | Path,
    one_based: bool = False,
    src_lengths: Sequence[int] | None = None,
    tgt_lengths: Sequence[int] | None = None,
) -> GoldAlignment:
    """Read Pharaoh links, one line per sentence: ``i-j`` sure, ``ipj`` possible (see module doc).

    Raises DataError naming the file and line for a malformed link, and (with lengths given) for
    a different number of lines or a link outside the sentence.
    """
    path = Path(path)
    _check_lengths_given(src_lengths, tgt_lengths)
    shift = 1 if one_based else 0
    sure: list[Links] = []
    possible: list[Links] = []
    for line_number, line in enumerate(read_lines(path), start=1):
        sure_links: Links = set()
        possible_links: Links = set()
        for item in line.split():
            separator = "-" if "-" in item else "p"
            parts = item.split(separator)
            try:
                if len(parts) != 2:
                    raise ValueError
                i, j = int(parts[0]) - shift, int(parts[1]) - shift
                if i < 0 or j < 0:
                    raise ValueError
            except ValueError:
                raise DataError(
                    f"{path}:{line_number}: {item!r} is not a link 'i-j' (sure) or 'ipj' (possible) with "
                    f"positions counting from {shift}"
                ) from None
            (sure_links if separator == "-" else possible_links).add((i, j))
        sure.append(sure_links)
        possible.append(possible_links)
    gold = GoldAlignment(sure, possible)
    if src_lengths is not None:
        check_link_range(gold.possible, src_lengths, tgt_lengths, where=str(path), one_based=one_based)
    return gold


def read_gold(
    path: str | Path,
    format: str,
    src_lengths: Sequence[int] | None = None,
    tgt_lengths: Sequence[int] | None = None,
    one_based: bool = False,
) -> GoldAlignment:
    """Read a gold alignment file in ``"naacl"`` (always 1-based) or ``"pharaoh"`` format."""
    if format == "naacl":
        return read_naacl_alignments(path, src_lengths, tgt_lengths)
    if format == "pharaoh":
        return read_pharaoh_alignments(path, one_based, src_lengths, tgt_lengths)
    raise ValueError(f"unknown gold format {format!r}; choose one of {', '.join(GOLD_FORMATS)}")


def write_pharaoh(path: str | Path, alignments: Sequence[Links], *, overwrite: bool = False) -> Path:
    """Write one Pharaoh line per sentence (``i-j``, 0-based, sorted), atomically.

    Raises DataError when ``path`` exists and ``overwrite`` is False.
    """
    from attnmt.alignment.links import format_pharaoh

    path = Path(path)
    if path.exists() and not overwrite:
        raise DataError(f"{path} exists; refusing to overwrite it (use --overwrite)")
    if path.is_dir():
        raise DataError(f"{path} is a folder; give a file name for the links")
    text = "".join(format_pharaoh(links) + "\n" for links in alignments)
    return write_text_atomic(path, text)
