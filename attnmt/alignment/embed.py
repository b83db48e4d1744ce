"""English and French word vectors in one space, built offline from a parallel corpus.

Method: *sentence co-occurrence, cosine-normalised, factorised by a truncated SVD* — a
cross-lingual latent semantic analysis of a classic word-association score, in which a word and
its translation, occurring in the same sentence pairs, get vectors pointing the same way. With N
sentence pairs, an English vocabulary e (V_e words) and a French one f (V_f words):

1. Incidence matrices ``X_e: [N, V_e]`` and ``X_f: [N, V_f]``, ``X[n, w] = 1`` when word w occurs
   in pair n (repeats in a sentence count once).
2. Cross-lingual co-occurrence ``C = X_eᵀ X_f: [V_e, V_f]``, ``C[e, f]`` = number of pairs with e
   on one side and f on the other; ``n_e = Σ_n X_e[n, e]`` and ``n_f`` are the pair frequencies.
3. Association ``A[e, f] = C[e, f] / √(n_e n_f)`` — the cosine between the incidence columns of e
   and f (Ochiai coefficient): 1 for words that always occur together, near 0 for unrelated ones,
   and, unlike PMI, not inflated for rare words.
4. Truncated SVD ``A ≈ U_k Σ_k V_kᵀ`` (``scipy.sparse.linalg.svds``, ARPACK, k = ``dim``):
   English vectors ``E = U_k Σ_k^p``, French vectors ``F = V_k Σ_k^p``. With ``p = ½`` the dot
   product reconstructs the association, ``E Fᵀ ≈ A``; the default ``p = 0`` (the singular
   vectors themselves, every dimension weighted alike, as Levy et al. (2015) recommend for
   cosine similarity) aligns better on the trial pairs than p = ¼ or p = ½.
   Singular vectors have an arbitrary sign; each column is flipped so that its largest-magnitude
   English entry is positive, which makes the output independent of the solver's sign choice.

Why this association: on the 37 trial pairs of the HLT-NAACL 2003 Hansards gold it aligns better
than PPMI (Levy & Goldberg's recipe), and keeping only the pairs that co-occur more often than
chance, or subtracting the chance co-occurrence, changed nothing that mattered (the figures:
docs/experiments.md, "Word alignment"). No monolingual context windows are added:
they pull words of one topic together, which helps similarity tasks but blurs exactly the
distinctions alignment needs (``economic`` vs ``european``). The SVD is the slow step; a higher
rank aligns better but costs several times more.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sparse
from scipy.sparse.linalg import LinearOperator, svds
from tqdm import tqdm

from attnmt.alignment.vectors import WordVectors
from attnmt.errors import ConfigError, DataError

__all__ = [
    "EMBED_METHOD",
    "association_matrix",
    "build_vocabulary",
    "cooccurrence_counts",
    "train_cross_lingual_vectors",
]

EMBED_METHOD = "sentence-cooccurrence-ochiai-svd"


def build_vocabulary(sentences: Sequence[Sequence[str]], min_count: int) -> list[str]:
    """Words seen at least ``min_count`` times, most frequent first (ties in string order)."""
    if min_count < 1:
        raise ConfigError(f"min_count must be >= 1, got {min_count}")
    counts = Counter(token for sentence in sentences for token in sentence)
    kept = [word for word, count in counts.items() if count >= min_count]
    return sorted(kept, key=lambda word: (-counts[word], word))


def _incidence(sentences: Sequence[Sequence[str]], index: dict[str, int], progress, label: str):
    """``X: [N, V]`` CSR with ``X[n, w] = 1`` when word w occurs in sentence n."""
    pointers = np.zeros(len(sentences) + 1, np.int64)
    columns: list[int] = []
    for row, sentence in enumerate(tqdm(sentences, desc=f"counting {label}", unit=" pairs",
                                        disable=not progress, mininterval=0.5)):
        ids = {index[token] for token in sentence if token in index}
        columns.extend(sorted(ids))
        pointers[row + 1] = len(columns)
    data = np.ones(len(columns), np.float32)
    return sparse.csr_matrix((data, np.asarray(columns, np.int64), pointers), shape=(len(sentences), len(index)))


def cooccurrence_counts(src_sentences, tgt_sentences, src_words, tgt_words, progress: bool = False):
    """Sentence co-occurrence ``C = X_srcᵀ X_tgt: [V_src, V_tgt]`` and pair frequencies ``n_src, n_tgt``.

    Returns ``(C as scipy CSR float32, n_src [V_src] float64, n_tgt [V_tgt] float64)``.
    """
    src_index = {word: row for row, word in enumerate(src_words)}
    tgt_index = {word: row for row, word in enumerate(tgt_words)}
    src_incidence = _incidence(src_sentences, src_index, progress, "source words")
    tgt_incidence = _incidence(tgt_sentences, tgt_index, progress, "target words")
    counts = (src_incidence.T @ tgt_incidence).tocsr()
    src_frequency = np.asarray(src_incidence.sum(axis=0), np.float64).ravel()
    tgt_frequency = np.asarray(tgt_incidence.sum(axis=0), np.float64).ravel()
    return counts, src_frequency, tgt_frequency


def association_matrix(counts, src_frequency: np.ndarray, tgt_frequency: np.ndarray):
    """Ochiai association ``A[e, f] = C[e, f] / √(n_e n_f)`` as a CSR float32 matrix."""
    coo = counts.tocoo()
    denominator = np.sqrt(src_frequency[coo.row] * tgt_frequency[coo.col])
    values = (coo.data / np.where(denominator > 0, denominator, 1.0)).astype(np.float32)
    return sparse.csr_matrix((values, (coo.row, coo.col)), shape=counts.shape)


def _counted_operator(matrix, bar):
    """``matrix`` as a LinearOperator that advances a progress bar at every product ARPACK asks for."""
    transposed = matrix.T.tocsr()

    class _Counted(LinearOperator):
        def __init__(self):
            super().__init__(dtype=matrix.dtype, shape=matrix.shape)

        def _matvec(self, x):
            bar.update(1)
            return matrix @ x

        def _rmatvec(self, x):
            bar.update(1)
            return transposed @ x

        def _matmat(self, x):
            bar.update(1)
            return matrix @ x

        def _rmatmat(self, x):
            bar.update(1)
            return transposed @ x

    return _Counted()


def truncated_svd(matrix, k: int, seed: int, progress: bool = False):
    """The k largest singular triplets of a sparse matrix, largest first, signs fixed.

    Returns ``(U [m, k], s [k], V [n, k])`` with ``matrix ≈ U diag(s) Vᵀ``.
    """
    with tqdm(desc=f"SVD (k={k}, matrix-vector products)", unit=" products", disable=not progress,
              mininterval=0.5) as bar:
        u, s, vt = svds(_counted_operator(matrix, bar), k=k, random_state=np.random.default_rng(seed))
    order = np.argsort(-s, kind="stable")
    u, s, v = u[:, order], s[order], vt[order].T
    # svds may return the sign of each singular pair either way: fix it for reproducible files.
    signs = np.sign(u[np.argmax(np.abs(u), axis=0), np.arange(k)])
    signs[signs == 0] = 1.0
    return u * signs, s, v * signs


def train_cross_lingual_vectors(
    src_sentences: Sequence[Sequence[str]],
    tgt_sentences: Sequence[Sequence[str]],
    *,
    dim: int = 300,
    min_count: int = 2,
    seed: int = 0,
    singular_power: float = 0.0,
    progress: bool = False,
) -> tuple[WordVectors, WordVectors, dict]:
    """Source and target word vectors in one space from tokenized sentence pairs (see module doc).

    src_sentences, tgt_sentences: the same number of token lists, pair n translating pair n.
    Returns ``(src_vectors, tgt_vectors, info)``; ``info`` records the method, parameters,
    vocabulary sizes, number of non-zeros, the singular values and the seconds spent.
    Raises DataError for corpora of different lengths, ConfigError when ``dim`` is not below
    both vocabulary sizes.
    """
    if len(src_sentences) != len(tgt_sentences):
        raise DataError(
            f"the parallel corpus is uneven: {len(src_sentences)} source and {len(tgt_sentences)} "
            "target sentences"
        )
    if dim < 1:
        raise ConfigError(f"dim must be >= 1, got {dim}")
    if not isinstance(singular_power, (int, float)) or not -1.0 <= singular_power <= 1.0:
        raise ConfigError(f"singular_power must be a number from -1 to 1 (0: no weighting, 0.5: square roots), "
                          f"got {singular_power!r}")
    started = time.perf_counter()
    src_words = build_vocabulary(src_sentences, min_count)
    tgt_words = build_vocabulary(tgt_sentences, min_count)
    largest = min(len(src_words), len(tgt_words)) - 1
    if largest < 1:
        raise ConfigError(
            f"min_count={min_count} keeps {len(src_words)} source and {len(tgt_words)} target words: too few "
            "for any vectors; lower it, or give more sentence pairs"
        )
    if dim > largest:
        raise ConfigError(
            f"dim={dim} is too large: with min_count={min_count} the vocabularies have "
            f"{len(src_words)} and {len(tgt_words)} words, so dim can be at most {max(largest, 0)}"
        )
    counts, src_frequency, tgt_frequency = cooccurrence_counts(
        src_sentences, tgt_sentences, src_words, tgt_words, progress
    )
    association = association_matrix(counts, src_frequency, tgt_frequency)
    u, s, v = truncated_svd(association, dim, seed, progress)
    weight = s ** singular_power
    src_vectors = WordVectors(src_words, (u * weight).astype(np.float32))
    tgt_vectors = WordVectors(tgt_words, (v * weight).astype(np.float32))
    info = {
        "method": EMBED_METHOD,
        "description": "source/target vectors U S^p and V S^p from the truncated SVD of the "
        "sentence co-occurrence matrix normalised to C[e,f]/sqrt(n_e n_f) (Ochiai)",
        "dim": dim,
        "min_count": min_count,
        "seed": seed,
        "singular_power": singular_power,
        "pairs": len(src_sentences),
        "src_vocabulary": len(src_words),
        "tgt_vocabulary": len(tgt_words),
        "nonzeros": int(association.nnz),
        "singular_values": [round(float(value), 6) for value in s],
        "seconds": round(time.perf_counter() - started, 2),
    }
    return src_vectors, tgt_vectors, info
