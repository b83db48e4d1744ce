"""Files of word links, and the guided-alignment targets made from them.

Links are ``(i, j)`` pairs, 0-based, source word first. Two file formats:

* Pharaoh: one line per sentence pair, ``i-j`` for a sure link and ``ipj`` for a possible one,
  0-based (or 1-based by option); what ``attnmt align`` writes and ``data.train_links`` reads.
* NAACL (HLT-NAACL 2003 shared task): one link a line, ``sentence_id source_pos target_pos
  [S|P] [confidence]``, 1-based; sentence ids number the sentences from 1; a missing label means
  S; position 0 stands for NULL (the word is unaligned) and such lines add no link.

Readers return a :class:`GoldAlignment` (one set of sure and one of possible links per sentence).
Links outside the sentence lengths raise DataError naming the file, the sentence and the link.

**Guided alignment targets.** Given links for the training pairs, training can pull one
cross-attention map towards them (``attnmt.models.losses.guided_alignment_loss``, Chen et al.
2016; Garg et al. 2019). ``AlignmentGuide`` turns the links into each batch's target A:

A: [B, T, S] over subword pieces: for a target piece of target word j that has sure links,
    the uniform distribution over every piece of every source word linked to j; rows of pieces
    whose word has no sure link (and padding) are 0 and cost nothing. With ``unaligned="eos"``
    a target word with no link at all, neither sure nor possible, is guided to the source EOS
    (column m of a source of m pieces; the batch appends EOS there), so the attention learns a
    place that means "unaligned". Possible links (``ipj``) thus mark a word as aligned without
    guiding it: ``attnmt align --eflomal --method intersect --possible union`` writes the links
    both directions agree on as sure and the rest of their union as possible, and then only words
    that neither direction aligns go to EOS.

Which row a target piece guides. Without ``shift`` piece t guides row t, the step that
*predicts* it (the usual reading, ``attnmt align`` without ``--shift``). With ``shift`` it guides
row t + 1, the step whose *input* it is: the query has then read the word it must align, which
makes alignment a lookup instead of a prediction, and ``attnmt align --shift`` reads that row.

Words are the space-separated tokens of a line; a pair gets a guide only when encoding its words
one by one gives exactly the pieces of encoding the sentence (sentencepiece splits on whitespace
first, so this holds but for odd characters); pairs where it does not, or that have no link, are
trained without the guide and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attnmt.data.corpus import read_lines
from attnmt.errors import DataError
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.choices import GUIDE_UNALIGNED

__all__ = [
    "AlignmentGuide", "GoldAlignment", "GuideReport", "check_link_range", "check_links_file", "format_pharaoh",
    "piece_targets", "read_naacl_alignments", "read_pharaoh_alignments", "write_pharaoh",
]

Links = set[tuple[int, int]]


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
            raise DataError(f"{path}:{line_number}: sentence and positions must be integers, "
                            f"got {line.strip()!r}") from None
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
    if src_lengths is not None and tgt_lengths is not None:
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
    if src_lengths is not None and tgt_lengths is not None:
        check_link_range(gold.possible, src_lengths, tgt_lengths, where=str(path), one_based=one_based)
    return gold


def format_pharaoh(links: Iterable[tuple[int, int]], possible: Iterable[tuple[int, int]] = ()) -> str:
    """One Pharaoh line: ``i-j`` per link (0-based, source first), sorted; ``ipj`` for possible-only links."""
    sure = set(links)
    items = [(i, j, "-") for i, j in sure] + [(i, j, "p") for i, j in set(possible) - sure]
    return " ".join(f"{i}{mark}{j}" for i, j, mark in sorted(items))


def write_pharaoh(
    path: str | Path, alignments: Sequence[Links], *, overwrite: bool = False, possible: Sequence[Links] | None = None
) -> Path:
    """Write one Pharaoh line per sentence (``i-j``, 0-based, sorted), atomically; ``possible[n]``
    adds sentence n's possible-only links as ``ipj``.

    Raises DataError when ``path`` exists and ``overwrite`` is False.
    """
    if possible is not None and len(possible) != len(alignments):
        raise ValueError(f"write_pharaoh: {len(possible)} sentences of possible links for {len(alignments)}")
    path = Path(path)
    if path.exists() and not overwrite:
        raise DataError(f"{path} exists; refusing to overwrite it (pass overwrite=True)")
    if path.is_dir():
        raise DataError(f"{path} is a folder; give a file name for the links")
    extra = possible if possible is not None else [()] * len(alignments)
    text = "".join(format_pharaoh(links, maybe) + "\n" for links, maybe in zip(alignments, extra))
    return write_text_atomic(path, text)


# --------------------------------------------------------------------------- guided alignment

Span = tuple[int, int]


def piece_targets(
    links: set[tuple[int, int]] | Sequence[tuple[int, int]],
    src_spans: Sequence[Span],
    tgt_spans: Sequence[Span],
    unaligned_words: Sequence[int] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-zero entries ``(rows, cols, values)`` of one pair's target A over pieces.

    ``links`` are word links ``(i, j)``, source first; ``src_spans[i]`` / ``tgt_spans[j]`` the
    ``[start, stop)`` pieces of each word. Every piece of target word j gets the value
    1 / (number of pieces of the source words linked to j) on each of those pieces, so its row sums to 1.
    Every piece of a target word in ``unaligned_words`` (which must have no link) gets 1 on column m,
    the source EOS after the m source pieces.
    """
    sources_of: dict[int, list[int]] = {}
    for i, j in links:
        if not (0 <= i < len(src_spans) and 0 <= j < len(tgt_spans)):
            raise ValueError(f"link {i}-{j} is outside a pair of {len(src_spans)} x {len(tgt_spans)} words")
        sources_of.setdefault(j, []).append(i)
    eos = src_spans[-1][1] if src_spans else 0
    for j in unaligned_words:
        if j in sources_of or not 0 <= j < len(tgt_spans):
            raise ValueError(f"target word {j} cannot go to EOS: it has links or lies outside {len(tgt_spans)} words")
        sources_of[j] = []
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for j, sources in sorted(sources_of.items()):
        pieces = [c for i in sorted(set(sources)) for c in range(*src_spans[i])] or [eos]
        for row in range(*tgt_spans[j]):
            rows.extend([row] * len(pieces))
            cols.extend(pieces)
            values.extend([1.0 / len(pieces)] * len(pieces))
    return np.asarray(rows, np.int32), np.asarray(cols, np.int32), np.asarray(values, np.float32)


def _word_spans(word_ids: list[list[int]]) -> tuple[list[int], list[Span]]:
    ids: list[int] = []
    spans: list[Span] = []
    for piece_ids in word_ids:
        spans.append((len(ids), len(ids) + len(piece_ids)))
        ids.extend(piece_ids)
    return ids, spans


@dataclass
class GuideReport:
    """What became of the links: pairs guided, links used, pairs trained without a guide."""

    guided_pairs: int
    links: int
    without_links: int
    piece_mismatch: int
    unaligned_words: int = 0

    def summary(self) -> str:
        to_eos = f" and {self.unaligned_words} unaligned target words to the source EOS" if self.unaligned_words else ""
        return (
            f"alignment guide: {self.guided_pairs} training pairs guided by {self.links} links{to_eos}; "
            f"{self.without_links} pairs without links and {self.piece_mismatch} whose word-by-word pieces "
            f"differ from the sentence's are trained without it"
        )


class AlignmentGuide:
    """The guide targets of the training pairs, built once; ``target`` makes a batch's A.

    ``entries[k]`` holds ``(rows, cols, values)`` for encoded training pair k (None: no guide).
    """

    def __init__(self, entries: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None], shift: bool = False):
        self.entries = entries
        self.shift = bool(shift)

    @classmethod
    def from_links(
        cls,
        links_path: str | Path,
        corpus,
        encoded,
        tokenizers,
        shift: bool = False,
        unaligned: str = "ignore",
    ) -> tuple[AlignmentGuide, GuideReport]:
        """Read ``links_path`` (one line per line of the training files) for the pairs of
        ``encoded`` (an EncodedCorpus of ``corpus``, a ParallelCorpus that knows each pair's line).
        ``unaligned``: "ignore" or "eos", what becomes of a target word without any link (module doc).

        DataError names the file (and line) when it has too few lines or a link outside its pair.
        """
        if unaligned not in GUIDE_UNALIGNED:
            raise ValueError(f"AlignmentGuide.from_links: unaligned must be one of {GUIDE_UNALIGNED}, "
                             f"got {unaligned!r}")
        links_path = check_links_file(links_path)
        lines = [corpus.line_numbers[k] for k in encoded.indices]
        gold = read_pharaoh_alignments(links_path)
        if lines and max(lines) > len(gold.sure):
            raise DataError(
                f"{links_path} has {len(gold.sure)} lines but the training files have a pair on line "
                f"{max(lines)}: give one line of links per line of the training files"
            )
        src_words = [corpus.src[k].split() for k in encoded.indices]
        tgt_words = [corpus.tgt[k].split() for k in encoded.indices]
        src_word_ids = _encode_words(tokenizers.src, src_words)
        tgt_word_ids = _encode_words(tokenizers.tgt, tgt_words)
        entries: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = []
        used = without = mismatch = to_eos = 0
        for k, line in enumerate(lines):
            links = gold.possible[line - 1]  # sure and possible: every link must fit the pair
            for i, j in links:
                if i >= len(src_words[k]) or j >= len(tgt_words[k]):
                    raise DataError(
                        f"{links_path}:{line}: link {i}-{j} is outside the pair of {len(src_words[k])} source and "
                        f"{len(tgt_words[k])} target words on that line of the training files"
                    )
            src_ids, src_spans = _word_spans(src_word_ids[k])
            tgt_ids, tgt_spans = _word_spans(tgt_word_ids[k])
            if not links:
                without += 1
                entries.append(None)
            elif src_ids != list(encoded.src_ids[k]) or tgt_ids != list(encoded.tgt_ids[k]):
                mismatch += 1
                entries.append(None)
            else:
                sure = gold.sure[line - 1]
                aligned = {j for _, j in links}
                unaligned_words = ([j for j in range(len(tgt_words[k])) if j not in aligned]
                                   if unaligned == "eos" else [])
                used += len(sure)
                to_eos += len(unaligned_words)
                entries.append(piece_targets(sure, src_spans, tgt_spans, unaligned_words))
        report = GuideReport(len(entries) - without - mismatch, used, without, mismatch, to_eos)
        return cls(entries, shift), report

    def target(self, indices: Sequence[int], tgt_width: int, src_width: int):
        """A: [B, tgt_width, src_width] float32 for the training pairs ``indices`` (a batch's rows)."""
        target = torch.zeros(len(indices), tgt_width, src_width)
        batch_rows, rows, cols, values = [], [], [], []
        for b, k in enumerate(indices):
            entry = self.entries[k]
            if entry is None:
                continue
            batch_rows.append(np.full(len(entry[0]), b, np.int64))
            rows.append(entry[0].astype(np.int64) + (1 if self.shift else 0))
            cols.append(entry[1].astype(np.int64))
            values.append(entry[2])
        if batch_rows:
            index = tuple(torch.from_numpy(np.concatenate(part)) for part in (batch_rows, rows, cols))
            target[index] = torch.from_numpy(np.concatenate(values))
        return target


def check_links_file(path: str | Path) -> Path:
    """``path`` as a Path; DataError saying how to make the file when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"data.train_links: {path} is not a file; write the links of the training pairs first, e.g. "
            f"`attnmt align --eflomal --src TRAIN_SRC --tgt TRAIN_TGT --out {path}` (or --vectors DIR)"
        )
    return path


def _encode_words(tokenizer, sentences: list[list[str]]) -> list[list[list[int]]]:
    """Every word of every sentence encoded alone (one call into sentencepiece)."""
    flat = tokenizer.encode_many([word for words in sentences for word in words])
    result, position = [], 0
    for words in sentences:
        result.append(flat[position:position + len(words)])
        position += len(words)
    return result
