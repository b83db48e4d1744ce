"""Alignment weights from word vectors: target words attend over source words.

Every target word j asks "which source word am I?" with its vector as the query; the source
words' vectors are the keys (and values):

    weights = softmax(Q Kᵀ · scale)          Q: [T, d] target vectors, K: [S, d] source vectors
    weights: [T, S], row j is the distribution of target word j over the source words (sums to 1)

computed by ``attnmt.attention.reference.scaled_dot_product_attention``. The orientation
``[len(tgt), len(src)]`` is the one of a translator's decoder attention (and of the heatmaps).

Two scorings (:class:`VectorScoring`):

* ``scaled_dot``: the plain formula of scaled dot-product attention (Vaswani et al. 2017): raw
  vectors, scale = 1/√d.
* ``cosine`` (the default): vectors scaled to unit length, scale = 1/τ, plus a distortion prior.
  Raw dot products let the longest vectors (frequent words with many co-occurrences) win almost
  every row; cosines compare directions only. τ sets how peaked a row is, which matters for
  methods that compare rows and columns (src→tgt argmax reads columns of the row-normalised
  matrix, itermax and grow-diag combine both). The distortion prior adds ``−κ (t_j − s_i)²``
  to the score of target j and source i, with relative positions ``t_j = (j + ½)/T`` and
  ``s_i = (i + ½)/S``: like fast_align's diagonal tension it prefers links near the diagonal,
  and it is what tells apart two occurrences of one word (static vectors cannot). It is written
  as two extra coordinates — a positional encoding — so the whole stays one dot product:

      q_j = [q̂_j / τ,  2κ t_j,  1]      k_i = [k̂_i,  s_i,  −κ s_i²]
      q_j · k_i = cos(q_j, k_i)/τ − κ (t_j − s_i)² + κ t_j²

  and the last term, the same for the whole row j, cancels in the row's softmax.

τ and κ default to :data:`DEFAULT_TEMPERATURE` and :data:`DEFAULT_DISTORTION`, chosen on the 37
trial pairs of the HLT-NAACL 2003 English–French gold (never on its test set) by
``benchmarks/alignment_vectors.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnmt.alignment.vectors import WordVectors
from attnmt.attention.reference import scaled_dot_product_attention
from attnmt.errors import DataError
from attnmt.runtime.choices import SCORINGS

__all__ = [
    "DEFAULT_DISTORTION",
    "DEFAULT_TEMPERATURE",
    "SCORINGS",
    "VectorAligner",
    "VectorAttention",
    "VectorScoring",
    "unit_rows",
    "vector_attention",
]

#: softmax temperature τ for cosine scores: the best for ``intersect`` on the trial set, with vectors
#: from ``attnmt embed`` on the Hansards (docs/results.md, "Word alignment from word vectors")
DEFAULT_TEMPERATURE = 0.2
#: strength κ of the squared-distance distortion prior (tuned with τ on the trial set)
DEFAULT_DISTORTION = 10.0


@dataclass(frozen=True)
class VectorScoring:
    """How vector attention scores a (target, source) pair.

    normalize: ``"cosine"`` (unit vectors) or ``"none"`` (raw dot products).
    temperature: scores are divided by it; None means √d (the scale of Vaswani et al. 2017).
    distortion: κ ≥ 0 of the prior −κ (t_j − s_i)² on relative positions (0 = none).
    """

    normalize: str = "cosine"
    temperature: float | None = DEFAULT_TEMPERATURE
    distortion: float = DEFAULT_DISTORTION

    def __post_init__(self) -> None:
        if self.normalize not in ("cosine", "none"):
            raise ValueError(f"normalize={self.normalize}: must be 'cosine' or 'none'")
        if self.temperature is not None and not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature={self.temperature}: must be a positive number (or None for √d)")
        if not (math.isfinite(self.distortion) and self.distortion >= 0):
            raise ValueError(f"distortion={self.distortion}: must be a number >= 0")

    @classmethod
    def scaled_dot(cls) -> VectorScoring:
        """The plain formula: softmax(Q Kᵀ / √d) on raw vectors, no prior."""
        return cls(normalize="none", temperature=None, distortion=0.0)

    @classmethod
    def named(cls, name: str, temperature: float | None = None, distortion: float | None = None) -> VectorScoring:
        """``"cosine"`` (defaults tuned on the trial set) or ``"scaled_dot"``, with optional overrides."""
        if name == "scaled_dot":
            base = cls.scaled_dot()
        elif name == "cosine":
            base = cls()
        else:
            raise ValueError(f"unknown scoring {name!r}; choose one of {', '.join(SCORINGS)}")
        return cls(
            normalize=base.normalize,
            temperature=base.temperature if temperature is None else temperature,
            distortion=base.distortion if distortion is None else distortion,
        )

    def describe(self, dim: int) -> str:
        """One line, e.g. ``cosine, τ=0.1, κ=10``."""
        temperature = self.temperature if self.temperature is not None else math.sqrt(dim)
        name = "cosine" if self.normalize == "cosine" else "raw dot product"
        return f"{name}, τ={temperature:.4g}, κ={self.distortion:.4g}"


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """``matrix [..., d]`` with each row scaled to L2 norm 1; zero rows (unknown words) stay zero."""
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def relative_positions(length: int) -> np.ndarray:
    """``(i + ½) / length`` for i = 0 … length−1: where each word sits in its sentence, in (0, 1)."""
    return (np.arange(length, dtype=np.float64) + 0.5) / max(length, 1)


def vector_attention(
    src_vectors: np.ndarray,
    tgt_vectors: np.ndarray,
    scoring: VectorScoring = VectorScoring(),
) -> tuple[np.ndarray, np.ndarray]:
    """Target words attending over source words: ``(weights [T, S], output [T, d])``, float64.

    src_vectors: [S, d] (keys and values), tgt_vectors: [T, d] (queries). ``output`` is the
    attention's context vectors, ``weights @ src_vectors``. Empty sentences give empty matrices.
    """
    keys = np.asarray(src_vectors, dtype=np.float64)
    queries = np.asarray(tgt_vectors, dtype=np.float64)
    if keys.ndim != 2 or queries.ndim != 2 or keys.shape[1] != queries.shape[1]:
        raise ValueError(
            f"vector_attention: src_vectors [S, d] and tgt_vectors [T, d] must share d, got "
            f"{keys.shape} and {queries.shape}"
        )
    source_length, dim = keys.shape
    target_length = queries.shape[0]
    if source_length == 0 or target_length == 0:
        return np.zeros((target_length, source_length)), np.zeros((target_length, dim))
    values = keys
    temperature = scoring.temperature if scoring.temperature is not None else math.sqrt(dim)
    if scoring.normalize == "cosine":
        keys, queries = unit_rows(keys), unit_rows(queries)
    queries = queries / temperature
    if scoring.distortion > 0:
        kappa = scoring.distortion
        t = relative_positions(target_length)[:, None]
        s = relative_positions(source_length)[:, None]
        queries = np.hstack([queries, 2.0 * kappa * t, np.ones_like(t)])
        keys = np.hstack([keys, s, -kappa * s * s])
    output, weights = scaled_dot_product_attention(queries, keys, values, scale=1.0)
    return weights, output


@dataclass
class VectorAttention:
    """The result of aligning one sentence pair with vectors (see :meth:`VectorAligner.attend`)."""

    weights: np.ndarray  # [T, S]
    output: np.ndarray  # [T, d]
    unknown_src: list[str] = field(default_factory=list)
    unknown_tgt: list[str] = field(default_factory=list)


@dataclass
class VectorAligner:
    """Vector attention as a weight function for :func:`attnmt.alignment.align_corpus`.

    ``aligner(src_tokens, tgt_tokens) -> weights [len(tgt), len(src)]``; unknown words get the
    zero vector (with cosine scoring their row is decided by the distortion prior alone).
    With ``lowercase`` the tokens are lower-cased before the lookup (vectors from ``attnmt embed``
    are lower-case), so the aligner can share cased words with a translator in a
    :class:`attnmt.alignment.CombinedAligner`.
    """

    src_vectors: WordVectors
    tgt_vectors: WordVectors
    scoring: VectorScoring = field(default_factory=VectorScoring)
    lowercase: bool = False

    def __post_init__(self) -> None:
        if self.src_vectors.dim != self.tgt_vectors.dim:
            raise DataError(
                f"source vectors have {self.src_vectors.dim} dimensions, target vectors "
                f"{self.tgt_vectors.dim}: they are not one space"
            )

    def attend(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> VectorAttention:
        """Weights, context vectors and unknown words of one tokenized pair."""
        if self.lowercase:
            src_tokens, tgt_tokens = [token.lower() for token in src_tokens], [token.lower() for token in tgt_tokens]
        src_matrix, unknown_src = self.src_vectors.lookup(src_tokens)
        tgt_matrix, unknown_tgt = self.tgt_vectors.lookup(tgt_tokens)
        weights, output = vector_attention(src_matrix, tgt_matrix, self.scoring)
        return VectorAttention(weights, output, unknown_src, unknown_tgt)

    def __call__(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> np.ndarray:
        return self.attend(src_tokens, tgt_tokens).weights
