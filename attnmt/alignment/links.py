"""From attention weights to word alignment links, for one sentence or a whole corpus.

Every function here takes ``weights: [T, S]`` — row j is target word j's attention over the S
source words, as vector attention and a translator's decoder produce it — and returns a set of
links ``(i, j)``: source position i, target position j, both 0-based, source first (the Pharaoh
``i-j`` convention). A row or column whose weights are all zero (a word that attended to nothing,
or that nothing attended to) proposes no link. Ties go to the lower position.

Methods (:data:`LINK_METHODS`):

* ``src2tgt``: every source word i links to the target word that gives it the most weight,
  ``argmax_j weights[j, i]``.
* ``tgt2src``: every target word j links to the source word it attends to most,
  ``argmax_i weights[j, i]`` (the usual reading of a decoder's attention).
* ``intersect`` / ``union`` of the two: high precision / high recall.
* ``grow-diag``: start from the intersection and repeatedly add links of the union that neighbour
  (also diagonally) an existing link and touch a so-far unaligned word (Koehn et al., 2003);
  ``grow-diag-final`` then adds union links whose source or target word is still unaligned,
  ``grow-diag-final-and`` only those whose source and target words both are.
* ``itermax`` (Jalili Sabet et al., 2020, SimAlign): mutual argmax (= ``intersect``), then up to
  ``max_iterations − 1`` more rounds of mutual argmax on a modified matrix where pairs with both
  words aligned are excluded and pairs with one aligned word are discounted by ``discount``
  (0.9), so that unaligned words get a second chance.
* :func:`threshold_links` (not a method name, it takes a number): every pair whose weight
  reaches a threshold; :func:`add_confident_links` then adds the pairs that one of two directions
  alone is confident of, where a word is still unlinked.
* ``match``: the one-to-one matching with the largest total weight (the assignment problem,
  ``scipy.optimize.linear_sum_assignment``): min(S, T) links, every word at most once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment
from tqdm import tqdm

from attnmt.data.corpus import read_lines
from attnmt.errors import DataError
from attnmt.runtime.choices import LINK_METHODS, SYMMETRIZATIONS

__all__ = [
    "LINK_METHODS",
    "Links",
    "add_confident_links",
    "align_corpus",
    "extract_links",
    "grow_diag_links",
    "intersect_links",
    "itermax_links",
    "match_links",
    "read_word_pairs",
    "src2tgt_links",
    "symmetrize",
    "tgt2src_links",
    "threshold_links",
    "union_links",
]

Links = set[tuple[int, int]]



def _as_weights(weights) -> np.ndarray:
    matrix = np.asarray(weights, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"weights must be a [T, S] matrix, got shape {matrix.shape}")
    if np.isnan(matrix).any():
        raise ValueError(f"weights of shape {matrix.shape} contain NaN")
    return matrix


def tgt2src_links(weights) -> Links:
    """Each target word j → its most-attended source word ``argmax_i weights[j, i]``."""
    matrix = _as_weights(weights)
    if matrix.size == 0:
        return set()
    best = matrix.argmax(axis=1)
    live = matrix.max(axis=1) > 0
    return {(int(best[j]), j) for j in range(matrix.shape[0]) if live[j]}


def src2tgt_links(weights) -> Links:
    """Each source word i → the target word giving it the most weight ``argmax_j weights[j, i]``."""
    matrix = _as_weights(weights)
    if matrix.size == 0:
        return set()
    best = matrix.argmax(axis=0)
    live = matrix.max(axis=0) > 0
    return {(i, int(best[i])) for i in range(matrix.shape[1]) if live[i]}


def intersect_links(weights) -> Links:
    """Links that are the argmax in both directions (mutual best)."""
    return src2tgt_links(weights) & tgt2src_links(weights)


def union_links(weights) -> Links:
    """Links that are the argmax in either direction."""
    return src2tgt_links(weights) | tgt2src_links(weights)


_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_links(weights, final: bool = False) -> Links:
    """Koehn's grow-diag(-final) symmetrisation of the two argmax directions (see module doc)."""
    return symmetrize(src2tgt_links(weights), tgt2src_links(weights), "grow-diag-final" if final else "grow-diag")


def symmetrize(forward: Links, backward: Links, method: str = "grow-diag-final") -> Links:
    """One set of links from two directional ones (Och & Ney, 2003; Koehn et al., 2003).

    ``forward`` and ``backward`` are links ``(i_src, j_tgt)`` of the same pair from two aligners,
    e.g. the two directions of eflomal, or the argmax of each translation direction's attention.
    Methods (:data:`SYMMETRIZATIONS`): ``intersect``, ``union``; ``grow-diag`` starts from the
    intersection and adds union links that neighbour (also diagonally) a link and bring in a word
    not yet aligned, until none is added; ``grow-diag-final`` then adds union links with a word
    still unaligned on either side; ``grow-diag-final-and`` only those with both words unaligned.
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrisation {method!r}; choose one of {', '.join(SYMMETRIZATIONS)}")
    union = set(forward) | set(backward)
    links = set(forward) & set(backward)
    if method == "intersect":
        return links
    if method == "union":
        return union
    aligned_src = {i for i, _ in links}
    aligned_tgt = {j for _, j in links}
    added = True
    while added:
        added = False
        for i, j in sorted(links):
            for di, dj in _NEIGHBOURS:
                candidate = (i + di, j + dj)
                if candidate in union and candidate not in links and (
                    candidate[0] not in aligned_src or candidate[1] not in aligned_tgt
                ):
                    links.add(candidate)
                    aligned_src.add(candidate[0])
                    aligned_tgt.add(candidate[1])
                    added = True
    if method in ("grow-diag-final", "grow-diag-final-and"):
        both = method == "grow-diag-final-and"
        for direction in (forward, backward):
            for i, j in sorted(direction):
                src_free, tgt_free = i not in aligned_src, j not in aligned_tgt
                if ((src_free and tgt_free) if both else (src_free or tgt_free)) and (i, j) not in links:
                    links.add((i, j))
                    aligned_src.add(i)
                    aligned_tgt.add(j)
    return links


def itermax_links(weights, max_iterations: int = 2, discount: float = 0.9) -> Links:
    """SimAlign's iterative mutual argmax (see module doc); ``max_iterations=1`` is ``intersect``."""
    if max_iterations < 1:
        raise ValueError(f"itermax_links: max_iterations must be >= 1, got {max_iterations}")
    if not 0 <= discount <= 1:
        raise ValueError(f"itermax_links: discount must be in [0, 1], got {discount}")
    matrix = _as_weights(weights)
    if (matrix < 0).any():
        raise ValueError("itermax_links: weights must be >= 0 (the discount assumes it)")
    links = intersect_links(matrix)
    target_length, source_length = matrix.shape
    for _ in range(max_iterations - 1):
        aligned_src = np.zeros(source_length, bool)
        aligned_tgt = np.zeros(target_length, bool)
        for i, j in links:
            aligned_src[i] = aligned_tgt[j] = True
        if aligned_src.all() or aligned_tgt.all():
            break
        one_aligned = aligned_tgt[:, None] ^ aligned_src[None, :]
        both_aligned = aligned_tgt[:, None] & aligned_src[None, :]
        modified = np.where(one_aligned, discount * matrix, matrix)
        modified[both_aligned] = 0.0  # excluded: both words already have a partner
        new = {(i, j) for i, j in intersect_links(modified) if not both_aligned[j, i]}
        if new <= links:
            break
        links |= new
    return links


def threshold_links(weights, threshold: float) -> Links:
    """Every pair whose weight reaches ``threshold``: ``{(i, j) : weights[j, i] >= threshold}``.

    On the geometric mean of two directions' attention (``attnmt.alignment.combine``) this is
    alignment by agreement: sqrt(p(i | j) · p(j | i)) >= threshold. ValueError unless 0 < threshold <= 1.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold_links: threshold must be in (0, 1], got {threshold}")
    matrix = _as_weights(weights)
    return {(int(i), int(j)) for j, i in zip(*np.nonzero(matrix >= threshold))}


def add_confident_links(links: Links, forward, backward, confident: float) -> Links:
    """``links`` plus every pair that one direction alone is confident of, where a word has no link.

    forward, backward: ``[T, S]`` weights of the same pair read in two directions and put in the same
    orientation (row j = target word j): ``forward[j, i] = p(i | j)``, ``backward[j, i] = p(j | i)``.
    Adds each ``(i, j)`` with ``max(forward[j, i], backward[j, i]) >= confident`` whose source word i
    or target word j has no link in ``links`` (the "final" step of Koehn's grow-diag-final, on weights).
    Meant after :func:`threshold_links` on the two directions' geometric mean (alignment by
    agreement): a word that one direction links to two words ("ne ... pas" to "not") has a small
    agreement with one of them, because the other direction spreads no weight over the pair. Which
    words are unlinked is decided on ``links`` alone, so the result does not depend on an order.
    ValueError unless 0 < confident <= 1 and both matrices have the same shape.
    """
    if not 0 < confident <= 1:
        raise ValueError(f"add_confident_links: confident must be in (0, 1], got {confident}")
    forward, backward = _as_weights(forward), _as_weights(backward)
    if forward.shape != backward.shape:
        raise ValueError(f"add_confident_links: forward {forward.shape} and backward {backward.shape} differ")
    linked_src, linked_tgt = {i for i, _ in links}, {j for _, j in links}
    confident_pairs = np.maximum(forward, backward) >= confident
    added = {(int(i), int(j)) for j, i in zip(*np.nonzero(confident_pairs))
             if int(i) not in linked_src or int(j) not in linked_tgt}
    return set(links) | added


def match_links(weights) -> Links:
    """The one-to-one matching of largest total weight (``linear_sum_assignment``); zero-weight pairs dropped."""
    matrix = _as_weights(weights)
    if matrix.size == 0:
        return set()
    rows, columns = linear_sum_assignment(matrix, maximize=True)
    return {(int(i), int(j)) for j, i in zip(rows, columns) if matrix[j, i] > 0}


_EXTRACTORS: dict[str, Callable[[np.ndarray], Links]] = {
    "src2tgt": src2tgt_links,
    "tgt2src": tgt2src_links,
    "intersect": intersect_links,
    "union": union_links,
    "grow-diag": grow_diag_links,
    "grow-diag-final": lambda weights: grow_diag_links(weights, final=True),
    "grow-diag-final-and": lambda weights: symmetrize(src2tgt_links(weights), tgt2src_links(weights),
                                                      "grow-diag-final-and"),
    "itermax": itermax_links,
    "match": match_links,
}


def extract_links(weights, method: str = "intersect") -> Links:
    """Links ``{(i_src, j_tgt)}`` from ``weights: [T, S]`` with one of :data:`LINK_METHODS`."""
    try:
        extractor = _EXTRACTORS[method]
    except KeyError:
        raise ValueError(f"unknown link method {method!r}; choose one of {', '.join(LINK_METHODS)}") from None
    return extractor(weights)


def read_word_pairs(src_path: str | Path, tgt_path: str | Path) -> tuple[list[list[str]], list[list[str]]]:
    """Line i of both files is pair i, each split on spaces, case kept: (source words, target
    words) per pair. DataError when a file cannot be read or their line counts differ."""
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"parallel files have different line counts: {src_path} has {len(src_lines)} lines, "
            f"{tgt_path} has {len(tgt_lines)} lines"
        )
    return [line.split() for line in src_lines], [line.split() for line in tgt_lines]


def align_corpus(
    weight_fn: Callable[[Sequence[str], Sequence[str]], np.ndarray],
    src_sentences: Sequence[Sequence[str]],
    tgt_sentences: Sequence[Sequence[str]],
    method: str = "intersect",
    *,
    threshold: float | None = None,
    progress: bool = False,
) -> list[Links]:
    """Align every sentence pair: one set of links ``(i_src, j_tgt)`` per pair.

    method: one of :data:`LINK_METHODS`; with ``threshold`` given, :func:`threshold_links` instead.

    weight_fn(src_tokens, tgt_tokens) must return the attention of the target words over the
    source words, ``weights: [len(tgt_tokens), len(src_tokens)]`` (rows = target words, as a
    decoder attends) — e.g. :class:`attnmt.alignment.VectorAligner`, or a translator forced to
    decode the given target. Pairs with an empty side get no links and do not call ``weight_fn``.
    Raises ValueError when the two lists differ in length or a returned matrix has the wrong shape.
    """
    if method not in _EXTRACTORS:
        raise ValueError(f"unknown link method {method!r}; choose one of {', '.join(LINK_METHODS)}")
    if threshold is not None and not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if len(src_sentences) != len(tgt_sentences):
        raise ValueError(
            f"align_corpus: {len(src_sentences)} source sentences but {len(tgt_sentences)} target sentences"
        )
    alignments: list[Links] = []
    pairs = zip(src_sentences, tgt_sentences)
    for number, (src_tokens, tgt_tokens) in enumerate(
        tqdm(pairs, total=len(src_sentences), desc=f"aligning ({method if threshold is None else 'threshold'})",
             unit=" pairs",
             disable=not progress, mininterval=0.5),
        start=1,
    ):
        if not src_tokens or not tgt_tokens:
            alignments.append(set())
            continue
        weights = np.asarray(weight_fn(src_tokens, tgt_tokens))
        expected = (len(tgt_tokens), len(src_tokens))
        if weights.shape != expected:
            raise ValueError(
                f"align_corpus: pair {number}: weight_fn returned shape {weights.shape}, expected "
                f"[len(tgt), len(src)] = {list(expected)}"
            )
        alignments.append(extract_links(weights, method) if threshold is None else threshold_links(weights, threshold))
    return alignments


