"""Guided alignment: train a translator's attention towards given word links.

Given links for the training pairs (Pharaoh format, ``i-j`` = source word i with target word j,
0-based, one line per line of the training files — e.g. written by ``attnmt align --vectors``),
the training loss gets a second term (Chen et al. 2016; Garg et al. 2019; Marian's
``--guided-alignment``)::

    loss = CE(translation) + λ · Σ_b Σ_t Σ_s −A[b, t, s] · log a[b, t, s]     (divided by the target tokens)

a: [B, T, S] the guided attention (one decoder layer; one head or the mean of the heads), over
    subword pieces; row t is the decoder step whose input is tgt_in[t] (BOS, then piece t − 1)
A: [B, T, S] the target distribution: for a target piece of target word j that has links, the
    uniform distribution over every piece of every source word linked to j; rows of pieces
    whose word has no link (and padding) are 0 and cost nothing

Which row a target piece guides. Without ``shift`` piece t guides row t, the step that
*predicts* it (the usual reading, ``attnmt align`` without ``--shift``). With ``shift`` it guides
row t + 1, the step whose *input* it is: the query has then read the word it must align, which
makes alignment a lookup instead of a prediction, and ``attnmt align --shift`` reads that row.
Guiding one head of a ``multihead`` attention on the shifted rows leaves the other heads free to
look where the next word needs them.

Pieces. Words are the space-separated tokens of a line; a pair gets a guide only when encoding
its words one by one gives exactly the pieces of encoding the sentence (sentencepiece splits on
whitespace first, so this holds but for odd characters); pairs where it does not, or that have no
link, are trained without the second term and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["AlignmentGuide", "GuideReport", "check_links_file", "guide_attention", "guided_alignment_loss", "piece_targets"]

Span = tuple[int, int]


def piece_targets(
    links: set[tuple[int, int]] | Sequence[tuple[int, int]], src_spans: Sequence[Span], tgt_spans: Sequence[Span]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-zero entries ``(rows, cols, values)`` of one pair's target A over pieces.

    ``links`` are word links ``(i, j)``, source first; ``src_spans[i]`` / ``tgt_spans[j]`` the
    ``[start, stop)`` pieces of each word. Every piece of target word j gets the value
    1 / (number of pieces of the source words linked to j) on each of those pieces, so its row sums to 1.
    """
    sources_of: dict[int, list[int]] = {}
    for i, j in links:
        if not (0 <= i < len(src_spans) and 0 <= j < len(tgt_spans)):
            raise ValueError(f"link {i}-{j} is outside a pair of {len(src_spans)} x {len(tgt_spans)} words")
        sources_of.setdefault(j, []).append(i)
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for j, sources in sorted(sources_of.items()):
        pieces = [c for i in sorted(set(sources)) for c in range(*src_spans[i])]
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

    def summary(self) -> str:
        return (
            f"alignment guide: {self.guided_pairs} training pairs guided by {self.links} links; "
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
    ) -> tuple["AlignmentGuide", GuideReport]:
        """Read ``links_path`` (one line per line of the training files) for the pairs of
        ``encoded`` (an EncodedCorpus of ``corpus``, a ParallelCorpus that knows each pair's line).

        DataError names the file (and line) when it has too few lines or a link outside its pair.
        """
        from attnmt.alignment.metrics import read_pharaoh_alignments
        from attnmt.errors import DataError

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
        used = without = mismatch = 0
        for k, line in enumerate(lines):
            links = gold.possible[line - 1]
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
                used += len(links)
                entries.append(piece_targets(links, src_spans, tgt_spans))
        report = GuideReport(len(entries) - without - mismatch, used, without, mismatch)
        return cls(entries, shift), report

    def target(self, indices: Sequence[int], tgt_width: int, src_width: int):
        """A: [B, tgt_width, src_width] float32 for the training pairs ``indices`` (a batch's rows)."""
        import torch

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
    from attnmt.errors import DataError

    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"data.train_links: {path} is not a file; write the links of the training pairs first, e.g. "
            f"`attnmt align --vectors DIR --src TRAIN_SRC --tgt TRAIN_TGT --out {path}`"
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


def guide_attention(weights, layer: int, head: int | None):
    """The guided map [B, T, S] from a model's per-head attention.

    weights: [B, h, T, S] (RNN, ``return_attention="heads"``) or [B, L, h, T, S] (Transformer);
    ``layer`` and ``head`` are 0-based indices, ``head`` None = the mean over the heads.
    """
    from attnmt.alignment.translator import layers_and_heads

    per_head = layers_and_heads(weights)[:, layer]
    return per_head.mean(dim=1) if head is None else per_head[:, head]


def guided_alignment_loss(attention, target):
    """Σ −A · log a over every entry (a float32 sum); entries where A is 0 cost nothing.

    attention, target: [B, T, S]; ``a`` is clamped at 1e-9 so a zero weight under a link costs
    20.7 nats instead of infinity.
    """
    return -(target * attention.float().clamp_min(1e-9).log()).sum()
