"""Subword pieces and the words they form, and attention matrices merged from pieces into words.

A tokenizer splits words into pieces; an attention matrix ``weights [T, S]`` is then over output
pieces (rows) and source pieces (columns). Seen as words, with P(j) the pieces of source word j
and Q(i) those of output word i::

    W[i, j] = mean_{t ∈ Q(i)} sum_{s ∈ P(j)} weights[t, s]

Summing over a source word's pieces keeps the attention mass the word received; averaging over
an output word's pieces keeps each row a distribution (a row that sums to 1 over pieces sums to
1 over words). One rule for the heatmaps, the viewer, exported attention and the aligner.

Which pieces form a word comes from one of two places:

- the pieces' text (``group_pieces``): sentencepiece marks the first piece of a word with "▁";
  special tokens such as ``</s>`` are words of their own. For translations (``merge_subwords``).
- exact spans (``word_pieces``): every word encoded alone, so word k owns the pieces
  ``[start_k, stop_k)``. For gold sentences, whose words must stay the words the gold counts.

Matrices are anything ``np.asarray`` takes, torch tensors (CPU or GPU) included.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from attnmt.data.special_tokens import UNK_ID

__all__ = [
    "SPIECE_MARKER",
    "Span",
    "as_matrix",
    "as_tokens",
    "check_matrix_shape",
    "group_pieces",
    "is_special_token",
    "merge_spans",
    "merge_subwords",
    "spans_of",
    "word_pieces",
]

#: sentencepiece's word-boundary marker (U+2581): a piece that starts with it starts a word.
SPIECE_MARKER = "\u2581"

#: a word's pieces, ``ids[start:stop]``
Span = tuple[int, int]

# "<s>", "</s>", "<eos>", "<unk>", "<pad>", "<2en>", ...: never glued to a neighbouring piece.
_SPECIAL_TOKEN = re.compile(r"^<[^<>\s]+>$")


# --------------------------------------------------------------------------- inputs


def as_matrix(weights: Any, name: str = "weights") -> np.ndarray:
    """``weights`` as a float64 ``[T, S]`` array; torch tensors are detached and moved to the CPU."""
    if hasattr(weights, "detach") and hasattr(weights, "cpu"):  # a torch tensor, without importing torch
        weights = weights.detach().cpu().float().numpy()
    try:
        matrix = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a 2-D array of numbers, got {type(weights).__name__}: {error}") from None
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be 2-D [T, S] (output tokens × source tokens), got shape {matrix.shape}")
    return matrix


def as_tokens(tokens: Any, name: str) -> list[str]:
    """``tokens`` as a list of strings; TypeError for one string (a sentence not split yet)."""
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be a list of tokens, not one string {tokens[:40]!r} (split it first)")
    try:
        return [str(token) for token in tokens]
    except TypeError:
        raise TypeError(f"{name} must be a list of tokens, got {type(tokens).__name__}") from None


def check_matrix_shape(matrix: np.ndarray, src_tokens: list[str], out_tokens: list[str],
                       name: str = "weights") -> None:
    """ValueError unless ``matrix`` is [len(out_tokens), len(src_tokens)]."""
    expected = (len(out_tokens), len(src_tokens))
    if matrix.shape != expected:
        raise ValueError(
            f"{name} has shape {matrix.shape} but there are {len(out_tokens)} output tokens and "
            f"{len(src_tokens)} source tokens, so it must have shape {expected} [T, S]"
        )


# --------------------------------------------------------------------------- words from the pieces' text


def is_special_token(token: str) -> bool:
    """True for tokens such as ``</s>``, ``<eos>``, ``<unk>``: they always stand as their own word."""
    return bool(_SPECIAL_TOKEN.match(token))


def group_pieces(pieces: Sequence[str], marker: str = SPIECE_MARKER) -> list[tuple[str, int, int]]:
    """Group sentencepiece pieces into words: ``[(word, start, stop), ...]`` with ``pieces[start:stop]``.

    A piece starting with ``marker`` starts a new word; any other piece continues the word
    before it. Special tokens (``<...>``) are words of their own, and the piece after one
    starts a new word. The word's text is its pieces joined, without the marker.

    When no piece at all carries the marker the tokens are not sentencepiece pieces (plain
    words, characters, ...), and each token is its own word rather than all one word.

    >>> group_pieces(["▁The", "▁dog", "s", "▁bark", "</s>"])
    [('The', 0, 1), ('dogs', 1, 3), ('bark', 3, 4), ('</s>', 4, 5)]
    """
    pieces = as_tokens(pieces, "pieces")
    if not marker:
        raise ValueError("marker must be a non-empty string such as '\u2581'")
    uses_marker = any(marker in piece for piece in pieces)
    groups: list[tuple[str, int, int]] = []
    start = 0
    previous_special = True  # the first piece always starts a word
    for index, piece in enumerate(pieces):
        special = is_special_token(piece)
        starts_word = special or previous_special or piece.startswith(marker) or not uses_marker
        if starts_word and index > start:
            groups.append((_join_pieces(pieces[start:index], marker), start, index))
            start = index
        previous_special = special
    if pieces:
        groups.append((_join_pieces(pieces[start:], marker), start, len(pieces)))
    return groups


def _join_pieces(pieces: Sequence[str], marker: str) -> str:
    if len(pieces) == 1 and is_special_token(pieces[0]):
        return pieces[0]
    word = "".join(pieces).replace(marker, " ").strip()
    # A piece that is the bare marker (sentencepiece emits "▁" before some symbols) alone: keep it visible.
    return word if word else marker


def merge_subwords(
    weights: Any,
    src_pieces: Sequence[str],
    out_pieces: Sequence[str],
    marker: str = SPIECE_MARKER,
    output_words: str = "mean",
) -> tuple[np.ndarray, list[str], list[str]]:
    """An attention matrix over pieces, ``weights [T, S]`` (rows: output pieces), as one over the
    words ``group_pieces`` finds: ``(word_weights [T', S'], src_words [S'], out_words [T'])``, by
    the rule of the module docstring (``merge_spans``). Row i sums to the mean of its pieces'
    row sums (1 when every piece's row sums to 1). ``output_words="sum"`` sums an output word's
    rows instead: the rule for saliency, since a word's log-probability is the sum of its pieces'."""
    matrix = as_matrix(weights)
    src_pieces = as_tokens(src_pieces, "src_pieces")
    out_pieces = as_tokens(out_pieces, "out_pieces")
    check_matrix_shape(matrix, src_pieces, out_pieces)
    src_groups = group_pieces(src_pieces, marker)
    out_groups = group_pieces(out_pieces, marker)
    merged = merge_spans(matrix, [(start, stop) for _, start, stop in src_groups],
                         [(start, stop) for _, start, stop in out_groups], output_words)
    return merged, [word for word, _, _ in src_groups], [word for word, _, _ in out_groups]


# --------------------------------------------------------------------------- words from exact spans


def spans_of(ids_per_word: Sequence[Sequence[int]], unk_id: int = UNK_ID) -> tuple[list[int], list[Span]]:
    """The pieces of words encoded alone, laid end to end: ``(ids, spans)``, ``ids[start:stop]`` the
    pieces of each word. A word whose encoding is empty (only characters the tokenizer's
    normaliser deletes, such as a zero-width space) becomes one ``unk_id`` piece, so it keeps its
    row or column."""
    ids: list[int] = []
    spans: list[Span] = []
    for word_ids in ids_per_word:
        word_ids = list(word_ids) or [unk_id]
        spans.append((len(ids), len(ids) + len(word_ids)))
        ids.extend(word_ids)
    return ids, spans


def word_pieces(
    tokenizer: Any, words: Sequence[str], unk_id: int = UNK_ID,
) -> tuple[list[int], list[Span]]:
    """``spans_of`` for ``words`` encoded one by one with ``tokenizer`` (an object with
    ``encode_many``, such as ``attnmt.data.Tokenizer``, or a function from a list of words to
    their piece ids).

    sentencepiece splits on whitespace before segmenting, so a word encoded alone gets exactly the
    pieces it gets inside the sentence, and the word owning each piece is known without guessing
    from "▁" marks, which fail for words sentencepiece splits oddly (``x☃y`` → ``▁ <unk> y``).
    """
    if isinstance(words, str):
        raise TypeError("word_pieces: words must be a list of words, not one string (split it first)")
    encode: Callable[[list[str]], Sequence[Sequence[int]]] = getattr(tokenizer, "encode_many", tokenizer)
    return spans_of(encode(list(words)) if len(words) else [], unk_id)


def _span_starts(spans: Sequence[Span], length: int, name: str) -> np.ndarray:
    """Start positions of ``spans``, after checking that they tile ``0 … length`` without gaps."""
    position = 0
    for start, stop in spans:
        if start != position or stop <= start:
            raise ValueError(f"{name} must tile 0..{length} with non-empty consecutive spans, got {list(spans)}")
        position = stop
    if position != length:
        raise ValueError(f"{name} cover {position} pieces but the weights have {length}")
    return np.asarray([start for start, _ in spans], dtype=np.int64)


def merge_spans(weights: Any, src_spans: Sequence[Span], out_spans: Sequence[Span],
                output_words: str = "mean") -> np.ndarray:
    """Piece weights ``[n, m]`` as word weights ``[T, S]`` (float64), the words given by their spans:
    ``W[i, j] = mean_{t ∈ Q(i)} sum_{s ∈ P(j)} weights[t, s]`` with P(j) = range(*src_spans[j]) and
    Q(i) = range(*out_spans[i]); with ``output_words="sum"``, sum_{t ∈ Q(i)} in place of the mean."""
    if output_words not in ("mean", "sum"):
        raise ValueError(f"merge_spans: output_words must be 'mean' or 'sum', got {output_words!r}")
    matrix = np.asarray(weights, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"merge_spans: weights must be [n, m], got shape {matrix.shape}")
    if not src_spans or not out_spans:
        return np.zeros((len(out_spans), len(src_spans)))
    src_starts = _span_starts(src_spans, matrix.shape[1], "src_spans")
    out_starts = _span_starts(out_spans, matrix.shape[0], "out_spans")
    per_source_word = np.add.reduceat(matrix, src_starts, axis=1)  # [n, S]
    summed = np.add.reduceat(per_source_word, out_starts, axis=0)  # [T, S]
    if output_words == "sum":
        return summed
    sizes = np.asarray([stop - start for start, stop in out_spans], dtype=np.float64)
    return summed / sizes[:, None]
