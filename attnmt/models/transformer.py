"""The Transformer translator of Vaswani et al. (2017), "Attention Is All You Need".

Read top to bottom: configuration, positions, embeddings, the feed-forward block, the encoder
layer, the decoder layer, the model (teacher forcing, encoding, incremental decoding).

The whole model in equations (B sentences, S source and T target positions, d = d_model,
h heads, d_h = d / h, N_enc encoder and N_dec decoder layers, V the target vocabulary size)::

    X⁰ = Dropout(√d · E_src[x] + P[0:S])                     x: [B, S] ids  ->  X⁰: [B, S, d]
    Xˡ = EncoderLayer(Xˡ⁻¹; source padding mask)             l = 1 … N_enc,   X = X^{N_enc}
    Y⁰ = Dropout(√d · E_tgt[y] + P[0:T])                     y: [B, T] ids (BOS + tokens)
    Yˡ = DecoderLayer(Yˡ⁻¹, X; causal ∧ target padding, source padding)     l = 1 … N_dec
    P(y_{t+1} | y_≤t, x) = softmax(Y^{N_dec} W_out)          logits: [B, T, V]

(with pre-norm, X and Y^{N_dec} pass through one more LayerNorm). E are the token embeddings, P the
positions (sinusoids or a learned table), and W_out the output projection, tied to E_tgt (and
E_src = E_tgt too with ``share_embeddings``).

Every attention is multi-head scaled dot-product attention (``attnmt.attention.multihead``)::

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O
    head_i = softmax(Q W_i^Q (K W_i^K)ᵀ / √d_h  masked) · V W_i^V

Masks are boolean, True = may attend (see ``attnmt.attention.functional``):

- encoder self-attention: source padding, ``[B, 1, 1, S]`` — a real word never looks at padding;
- decoder self-attention: causal ∧ target padding, ``[B, 1, T, T]`` — position t sees 0 … t;
- cross-attention: source padding, ``[B, 1, 1, S]``.

Residual blocks come in two flavours, chosen by ``norm``:

    post-norm (the paper):  z = LayerNorm(z + Dropout(Sublayer(z)))
    pre-norm (default):     z = z + Dropout(Sublayer(LayerNorm(z)))     plus a final LayerNorm

Pre-norm trains without a long warm-up and is the safer default for small data; post-norm is what
the paper describes.

Incremental decoding (search) never recomputes the prefix. ``encode`` runs the encoder and
projects the encoder states into every decoder layer's cross-attention keys and values once per
sentence; each ``decode_step`` embeds one new token, appends its self-attention key and value to a
per-layer cache, and attends with the single new query. The result equals teacher forcing on the
whole prefix (a test checks it to 1e-5).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.attention.functional import causal_mask
from attnmt.attention.multihead import MultiHeadAttention
from attnmt.attention.registry import is_builtin
from attnmt.attention.user_adapter import build_user_score
from attnmt.data.special_tokens import PAD_ID
from attnmt.errors import ConfigError
from attnmt.models.common import check_target_mask, log_probabilities
from attnmt.models.config import ModelConfig
from attnmt.models.dropout import DROPOUT_MASKS, Dropout

__all__ = [
    "DecoderLayer",
    "EncoderLayer",
    "FeedForward",
    "Transformer",
    "TransformerConfig",
    "TransformerDecoderState",
    "TransformerEncoderOutput",
    "sinusoidal_positions",
]

MODEL_TYPE = "transformer"
POSITION_KINDS = ("sinusoidal", "learned")
NORM_KINDS = ("pre", "post")


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass
class TransformerConfig(ModelConfig):
    """Every knob of the Transformer.

    d_model:            width d of every layer's input and output (embeddings too)
    num_heads:          number of attention heads h; d_model must be divisible by it
    ffn_dim:            inner width of the position-wise feed-forward block
    encoder_layers:     N_enc, number of encoder layers
    decoder_layers:     N_dec, number of decoder layers
    dropout:            on embeddings+positions, on every sublayer output before the residual sum,
                        and on the feed-forward block's hidden activations
    dropout_mask:       how those masks are drawn: "bernoulli" (F.dropout) or "bytes", cheaper on a
                        CPU (``attnmt.models.dropout``); the attention weights' dropout is torch's
    attention_dropout:  on the attention weights
    positions:          "sinusoidal" (fixed, any length) or "learned" (at most max_positions)
    max_positions:      longest sequence with a learned position (sinusoids have no limit)
    norm:               "pre" (LayerNorm inside the residual branch) or "post" (the paper's)
    share_embeddings:   one matrix for source embeddings, target embeddings and the output
                        projection; needs a joint vocabulary (src_vocab_size == tgt_vocab_size)
    tie_output:         target embedding matrix = output projection (Press & Wolf, 2017)
    attention:          "scaled_dot" (q·kᵀ/√d_head), or a user's score class (``file.py:Class``,
                        ``module:Class``, a registered name) used in every attention layer
    attention_options:  keyword options of that class
    pruned_heads:       heads this model no longer holds, as ``PART:LAYER:HEAD`` of the model it was
                        pruned from (``attnmt prune``; PART encoder_self, decoder_self or cross): an
                        attention keeps its other heads, each of d_model / num_heads dimensions
    """

    type: ClassVar[str] = MODEL_TYPE
    #: options named otherwise before 0.2.0 (old name -> name now)
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"heads": "num_heads"}

    d_model: int = 256
    num_heads: int = 4
    ffn_dim: int = 1024
    encoder_layers: int = 3
    decoder_layers: int = 3
    dropout: float = 0.1
    dropout_mask: str = "bernoulli"
    attention_dropout: float = 0.1
    positions: str = "sinusoidal"
    max_positions: int = 512
    norm: str = "pre"
    share_embeddings: bool = False
    tie_output: bool = True
    attention: str = "scaled_dot"
    attention_options: dict[str, Any] = field(default_factory=dict)
    pruned_heads: list[str] = field(default_factory=list)

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid option; normalises names (``sdp`` → ``scaled_dot``)."""
        for name in ("d_model", "num_heads", "ffn_dim", "encoder_layers", "decoder_layers", "max_positions"):
            self.check_size(name)
        if self.d_model % self.num_heads:
            raise ConfigError(f"model.d_model={self.d_model} is not divisible by model.num_heads={self.num_heads}")
        for name in ("dropout", "attention_dropout"):
            self.check_fraction(name)
        self.check_choice("dropout_mask", DROPOUT_MASKS)
        self.check_choice("positions", POSITION_KINDS)
        self.check_choice("norm", NORM_KINDS)
        for name in ("share_embeddings", "tie_output"):
            self.check_flag(name)
        self.check_attention_name()
        if is_builtin(self.attention) and self.attention != "scaled_dot":
            raise ConfigError(
                f"model.attention: the Transformer's heads use scaled_dot; {self.attention!r} is a mechanism of "
                "the RNN. A user's class with score(q, k) can replace the scaled dot product"
            )
        if self.share_embeddings and not self.tie_output:
            raise ConfigError("model.share_embeddings: true shares the output projection too, so model.tie_output "
                              "cannot be false")
        self.pruned_heads = self._checked_pruned_heads()

    def _checked_pruned_heads(self) -> list[str]:
        """model.pruned_heads: a list of distinct PART:LAYER:HEAD within this model's parts, layers
        and heads (from 1), in the order parts, layers and heads come."""
        if not isinstance(self.pruned_heads, list) or not all(isinstance(item, str) for item in self.pruned_heads):
            raise ConfigError(f"model.pruned_heads must be a list of PART:LAYER:HEAD, got {self.pruned_heads!r}")
        layers = {"encoder_self": self.encoder_layers, "decoder_self": self.decoder_layers,
                  "cross": self.decoder_layers}
        found = set()
        for item in self.pruned_heads:
            fields = item.split(":")
            if (len(fields) != 3 or fields[0] not in layers or not fields[1].isdigit() or not fields[2].isdigit()
                    or not 1 <= int(fields[1]) <= layers[fields[0]] or not 1 <= int(fields[2]) <= self.num_heads):
                raise ConfigError(f"model.pruned_heads: {item!r} is not PART:LAYER:HEAD of this model (parts "
                                  f"{', '.join(layers)}; layers 1-{self.encoder_layers} / 1-{self.decoder_layers}, "
                                  f"heads 1-{self.num_heads})")
            found.add((list(layers).index(fields[0]), int(fields[1]), int(fields[2])))
        parts = list(layers)
        return [f"{parts[part]}:{layer}:{head}" for part, layer, head in sorted(found)]

    def to_dict(self) -> dict[str, Any]:
        """A plain mapping with ``type`` first; ``pruned_heads`` only when some are, so an unpruned
        model's config is written as before the option existed."""
        values = super().to_dict()
        if not values["pruned_heads"]:
            del values["pruned_heads"]
        return values

    def kept_heads(self, part: str, layer: int) -> list[int]:
        """The heads (from 0, in the numbering of the unpruned model) that attention ``part`` of
        ``layer`` (from 0) holds."""
        pruned = {int(item.split(":")[2]) - 1 for item in self.pruned_heads
                  if item.split(":")[0] == part and int(item.split(":")[1]) == layer + 1}
        return [head for head in range(self.num_heads) if head not in pruned]


# --------------------------------------------------------------------------------------------
# Positions and embeddings
# --------------------------------------------------------------------------------------------


def sinusoidal_positions(length: int, d_model: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The fixed position encodings of the paper, [length, d_model].

        P[pos, 2i]   = sin(pos / 10000^(2i/d))
        P[pos, 2i+1] = cos(pos / 10000^(2i/d))

    Computed in float64 so that long tables stay accurate, then cast to ``dtype``.
    """
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # [L, 1]
    inverse_frequency = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )  # [ceil(d/2)]
    angles = position * inverse_frequency  # [L, ceil(d/2)]
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.to(dtype)


class PositionalEncoding(nn.Module):
    """P[start : start+L] for a sequence that begins at position ``start``: returns [L, d].

    Learned positions are a parameter table of ``max_positions`` rows. Sinusoids are a function of
    the shape, so they are not part of the state dict: they are computed on first use on the
    model's device and dtype, kept, and recomputed longer when a sequence needs more rows.
    """

    def __init__(self, kind: str, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.kind = kind
        self.d_model = d_model
        self.max_positions = max_positions
        self._sinusoids: torch.Tensor | None = None
        if kind == "learned":
            self.table = nn.Embedding(max_positions, d_model)
            nn.init.normal_(self.table.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, length: int, start: int, like: torch.Tensor) -> torch.Tensor:
        """Positions start … start+length-1 on the device and dtype of ``like``."""
        end = start + length
        if self.kind == "learned":
            if end > self.max_positions:
                raise ValueError(
                    f"position {end - 1} is beyond the {self.max_positions} learned positions "
                    f"(max_positions); use shorter sequences or positions: sinusoidal"
                )
            return self.table.weight[start:end]
        table = self._sinusoids
        if table is None or table.shape[0] < end or table.device != like.device or table.dtype != like.dtype:
            rows = max(end, self.max_positions, 0 if table is None else table.shape[0])
            table = sinusoidal_positions(rows, self.d_model, torch.float64).to(device=like.device, dtype=like.dtype)
            self._sinusoids = table
        return table[start:end]


class Embeddings(nn.Module):
    """Token embedding scaled by √d plus positions, then dropout.

        embed(y)[b, t] = Dropout(√d · E[y_bt] + P[start + t])       y: [B, L] -> [B, L, d]

    The √d scale keeps embeddings (initialised with std d^-½, as suits a matrix shared with
    the output projection) on the same scale as the positions, whose entries are of size 1.
    """

    def __init__(self, tokens: nn.Embedding, positions: PositionalEncoding, dropout: float,
                 dropout_mask: str = "bernoulli") -> None:
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.scale = math.sqrt(tokens.embedding_dim)
        self.dropout = Dropout(dropout, dropout_mask)

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        embedded = self.tokens(ids)
        x = embedded * self.scale + self.positions(ids.shape[1], start, like=embedded)
        return self.dropout(x)


# --------------------------------------------------------------------------------------------
# The layers
# --------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    """Position-wise feed-forward block: FFN(z) = W₂ Dropout(ReLU(W₁ z + b₁)) + b₂.

    z: [B, L, d] -> [B, L, d]; W₁: d × ffn_dim, W₂: ffn_dim × d; applied to each position alike.
    """

    def __init__(self, d_model: int, ffn_dim: int, dropout: float, dropout_mask: str = "bernoulli") -> None:
        super().__init__()
        self.expand = nn.Linear(d_model, ffn_dim)
        self.contract = nn.Linear(ffn_dim, d_model)
        self.dropout = Dropout(dropout, dropout_mask)
        for linear in (self.expand, self.contract):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.contract(self.dropout(F.relu(self.expand(z))))


class Residual(nn.Module):
    """One residual block around a sublayer, pre- or post-norm.

        pre:  z + Dropout(f(LayerNorm(z)))
        post: LayerNorm(z + Dropout(f(z)))

    Split in two halves, ``before`` (what f reads) and ``after`` (how f's output is added), because
    the attention sublayers also return their weights and their cached keys and values.
    """

    def __init__(self, d_model: int, dropout: float, norm: str, dropout_mask: str = "bernoulli") -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.pre_norm = norm == "pre"
        self.dropout = Dropout(dropout, dropout_mask)

    def before(self, z: torch.Tensor) -> torch.Tensor:
        return self.norm(z) if self.pre_norm else z

    def after(self, z: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        z = z + self.dropout(sublayer_output)
        return z if self.pre_norm else self.norm(z)

    def forward(self, z: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return self.after(z, sublayer(self.before(z)))


def _multi_head_attention(config: TransformerConfig, part: str, layer: int) -> MultiHeadAttention:
    """One attention layer: scaled dot-product heads, or the user's score class of ``config.attention``;
    ``part`` and ``layer`` (from 0) say which, for the heads a pruned model keeps."""
    score = None
    head_dim = config.d_model // config.num_heads
    if config.attention != "scaled_dot":
        score = build_user_score(config.attention, head_dim, **config.attention_options)
    kept = len(config.kept_heads(part, layer))
    return MultiHeadAttention(config.d_model, kept, dropout=config.attention_dropout, score=score,
                              head_dim=None if kept == config.num_heads else head_dim)


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward, each inside a residual block.

        Z  = Residual(X, X ↦ MultiHead(X, X, X; source padding mask))
        X' = Residual(Z, FFN)

    x: [B, S, d], src_mask: [B, S] bool (True = real token) -> [B, S, d]
    """

    def __init__(self, config: TransformerConfig, layer: int = 0) -> None:
        super().__init__()
        d = config.d_model
        self.self_attention = _multi_head_attention(config, "encoder_self", layer)
        self.feed_forward = FeedForward(d, config.ffn_dim, config.dropout, config.dropout_mask)
        self.attention_block = Residual(d, config.dropout, config.norm, config.dropout_mask)
        self.feed_forward_block = Residual(d, config.dropout, config.norm, config.dropout_mask)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x = self.attention_block(x, lambda z: self.self_attention(z, z, z, key_padding_mask=src_mask)[0])
        return self.feed_forward_block(x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder, feed-forward; each in a residual block.

        Z₁ = Residual(Y,  Y ↦ MultiHead(Y, Y, Y; causal ∧ target padding))
        Z₂ = Residual(Z₁, Z ↦ MultiHead(Z, X, X; source padding))      X: the encoder output
        Y' = Residual(Z₂, FFN)

    y: [B, T, d] new positions; the self-attention keys and values are those of ``past`` (the
    cached prefix, [B, h, t₀, d_h] each, or None) followed by the new positions'. The
    cross-attention keys and values [B, h, S, d_h] were projected from X once per sentence.

    Returns ``(y' [B, T, d], keys, values [B, h, t₀+T, d_h] (the grown cache),
    cross-attention weights [B, h, T, S] or None)``.
    """

    def __init__(self, config: TransformerConfig, layer: int = 0) -> None:
        super().__init__()
        d = config.d_model
        self.self_attention = _multi_head_attention(config, "decoder_self", layer)
        self.cross_attention = _multi_head_attention(config, "cross", layer)
        self.feed_forward = FeedForward(d, config.ffn_dim, config.dropout, config.dropout_mask)
        self.self_attention_block = Residual(d, config.dropout, config.norm, config.dropout_mask)
        self.cross_attention_block = Residual(d, config.dropout, config.norm, config.dropout_mask)
        self.feed_forward_block = Residual(d, config.dropout, config.norm, config.dropout_mask)

    def forward(
        self,
        y: torch.Tensor,
        self_mask: torch.Tensor,
        cross_keys: torch.Tensor,
        cross_values: torch.Tensor,
        cross_mask: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        # Masked self-attention over the cached prefix and the new positions.
        block, attention = self.self_attention_block, self.self_attention
        z = block.before(y)
        keys, values = attention.project_key_value(z, z)
        if past is not None:
            keys = torch.cat([past[0], keys], dim=2)
            values = torch.cat([past[1], values], dim=2)
        output, _ = attention.attend(attention.project_query(z), keys, values, self_mask, need_weights=False)
        y = block.after(y, output)

        # Cross-attention: the queries come from the target, keys and values from the source.
        block, attention = self.cross_attention_block, self.cross_attention
        output, cross_weights = attention.attend(
            attention.project_query(block.before(y)), cross_keys, cross_values, cross_mask, need_weights=need_weights
        )
        y = block.after(y, output)

        y = self.feed_forward_block(y, self.feed_forward)
        return y, keys, values, cross_weights


# --------------------------------------------------------------------------------------------
# What search carries between steps
# --------------------------------------------------------------------------------------------


@dataclass
class TransformerEncoderOutput:
    """What ``encode`` computes once per sentence.

    states:       [B, S, d]                X, the encoder's output
    mask:         [B, S] bool              True = real source token
    cross_keys:   N_dec × [B, h, S, d_h]   X W^K of each decoder layer's cross-attention
    cross_values: N_dec × [B, h, S, d_h]   X W^V of each decoder layer's cross-attention
    """

    states: torch.Tensor
    mask: torch.Tensor
    cross_keys: tuple[torch.Tensor, ...]
    cross_values: tuple[torch.Tensor, ...]

    def index_select(self, index: torch.Tensor) -> TransformerEncoderOutput:
        """Sentences ``index`` (beam search repeats and reorders sentences with it)."""
        return TransformerEncoderOutput(
            states=self.states.index_select(0, index),
            mask=self.mask.index_select(0, index),
            cross_keys=tuple(k.index_select(0, index) for k in self.cross_keys),
            cross_values=tuple(v.index_select(0, index) for v in self.cross_values),
        )


@dataclass
class TransformerDecoderState:
    """The self-attention cache after t decoded positions.

    keys, values: N_dec × [N, h, t, d_h]   each decoder layer's projected keys/values of the prefix
    target_mask:  [N, t] bool              True = a real (non-padding) token of the prefix
    """

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    target_mask: torch.Tensor

    @property
    def length(self) -> int:
        """Number of positions decoded so far (t)."""
        return self.target_mask.shape[1]

    def index_select(self, index: torch.Tensor) -> TransformerDecoderState:
        """Hypotheses ``index`` (beam search reorders hypotheses with it)."""
        return TransformerDecoderState(
            keys=tuple(k.index_select(0, index) for k in self.keys),
            values=tuple(v.index_select(0, index) for v in self.values),
            target_mask=self.target_mask.index_select(0, index),
        )


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


class Transformer(nn.Module):
    """Encoder–decoder Transformer implementing the model contract of attnmt (``attnmt.models``).

    - ``forward(src, src_mask, tgt_in, return_attention=False) -> (logits [B, T, V], attention)``
      teacher forcing. ``return_attention``:
        False            -> None
        True / "last"    -> [B, T, S]            last decoder layer's cross-attention, mean over heads
        "layers"         -> [B, N_dec, T, S]     every layer's cross-attention, mean over heads
        "heads"          -> [B, N_dec, h, T, S]  every layer and head
      Rows are distributions over the real source positions (padding gets weight 0).
    - ``encode(src, src_mask) -> TransformerEncoderOutput``
    - ``init_decoder_state(encoded) -> TransformerDecoderState`` (an empty cache)
    - ``decode_step(prev_tokens [N], state, encoded, step) -> (log_probs [N, V], attention [N, S],
      new_state)``, attention = last layer's cross-attention, mean over heads.

    Per-head weights of a translation: run ``forward`` on BOS + the output tokens with
    ``return_attention="heads"``; incremental decoding computes exactly the same weights.
    """

    model_type = MODEL_TYPE

    def __init__(self, config: TransformerConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = PAD_ID):
        super().__init__()
        for name, size in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size)):
            if isinstance(size, bool) or not isinstance(size, int) or size <= pad_id:
                raise ValueError(f"Transformer: {name} must be an integer > pad_id={pad_id}, got {size!r}")
        if config.share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ConfigError(
                f"model.share_embeddings: true needs a joint vocabulary, but the source "
                f"vocabulary has {src_vocab_size} entries and the target vocabulary {tgt_vocab_size}"
            )
        self.config = config
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.pad_id = pad_id
        d = config.d_model

        target_tokens = self._token_embedding(tgt_vocab_size, d, pad_id)
        source_tokens = target_tokens if config.share_embeddings else self._token_embedding(src_vocab_size, d, pad_id)
        self.source_embeddings = Embeddings(
            source_tokens, PositionalEncoding(config.positions, d, config.max_positions), config.dropout,
            config.dropout_mask,
        )
        self.target_embeddings = Embeddings(
            target_tokens, PositionalEncoding(config.positions, d, config.max_positions), config.dropout,
            config.dropout_mask,
        )

        self.encoder_layers = nn.ModuleList(EncoderLayer(config, n) for n in range(config.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config, n) for n in range(config.decoder_layers))
        # Pre-norm leaves the residual stream unnormalised; one LayerNorm on top of each stack fixes that.
        pre_norm = config.norm == "pre"
        self.encoder_norm = nn.LayerNorm(d) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if pre_norm else nn.Identity()

        self.output_projection = nn.Linear(d, tgt_vocab_size, bias=False)
        if config.tie_output:
            self.output_projection.weight = target_tokens.weight
        else:
            nn.init.normal_(self.output_projection.weight, mean=0.0, std=d**-0.5)

    @staticmethod
    def _token_embedding(vocab_size: int, d_model: int, pad_id: int) -> nn.Embedding:
        embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(embedding.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            embedding.weight[pad_id].zero_()
        return embedding

    @property
    def source_token_embedding(self) -> nn.Module:
        """The source token table (shared with the target's when ``share_embeddings``; the encoder
        calls it first), whose output saliency is taken against (``attnmt.attribution``)."""
        return self.source_embeddings.tokens

    @property
    def cross_attention_layers(self) -> int:
        """Number of decoder layers L, each with attention over the source."""
        return self.config.decoder_layers

    @property
    def attention_heads(self) -> int:
        """Number of heads h of every attention (forward can return per-head weights)."""
        return self.config.num_heads

    @property
    def state_bytes_per_token(self) -> int:
        """Bytes the decoder state of one search row grows by per output token: the float32 keys
        and values of every decoder layer's self-attention cache, and the prefix mask
        (2 · L · d_model · 4 + 1)."""
        return 2 * self.config.decoder_layers * self.config.d_model * 4 + 1

    # ---- teacher forcing ------------------------------------------------------------------

    def forward(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_in: torch.Tensor,
        return_attention: bool | str = False,
        tgt_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits of every next target token given the whole shifted target.

        src: [B, S] ids, src_mask: [B, S] bool (True = real), tgt_in: [B, T] ids (BOS + tokens,
        padded with pad_id) -> logits [B, T, V_tgt] and the cross-attention (see the class doc).
        With ``tgt_mask`` [B, T] (bool, True = a real target token) the output projection runs
        only there: logits [N, V_tgt], the rows of ``logits[tgt_mask]``.
        """
        kind = self._attention_kind(return_attention)
        if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"tgt_in must be [B, T] with B={src.shape[0]} as in src, got {tuple(tgt_in.shape)}")
        encoded = self.encode(src, src_mask)
        target_length = tgt_in.shape[1]
        # Position t may look at positions 0 … t that hold real tokens: [B, 1, T, T].
        target_real = tgt_in != self.pad_id
        self_mask = (causal_mask(target_length, device=tgt_in.device) & target_real[:, None, :]).unsqueeze(1)
        need_weights: bool | str = "last" if kind == "last" else kind is not None
        states, _, weights = self._decode(tgt_in, 0, self_mask, encoded, None, need_weights)
        last = len(self.decoder_layers) - 1
        if tgt_mask is not None:
            states = states[check_target_mask(tgt_mask, tgt_in)]  # [N, d]
        logits = self.output_projection(states)
        if kind is None:
            return logits, None
        layer_weights = [w for w in weights if w is not None]  # every layer's, since weights were asked for
        if kind == "last":
            return logits, self._head_mean(layer_weights[-1], last)
        stacked = torch.stack(layer_weights, dim=1)  # [B, N_dec, h, T, S]
        if kind == "layers":
            return logits, torch.stack([self._head_mean(w, n) for n, w in enumerate(layer_weights)], dim=1)
        return logits, stacked

    def _head_mean(self, weights: torch.Tensor, layer: int) -> torch.Tensor:
        """The mean over the heads [B, h, ...] -> [B, ...] of decoder layer ``layer``'s cross-attention:
        over the heads it holds (a pruned layer's removed heads are zeros in ``weights``)."""
        kept = self._decoder_layers()[layer].cross_attention.num_heads
        if kept == self.config.num_heads:
            return weights.mean(dim=1)
        return weights.sum(dim=1) / max(kept, 1)

    @staticmethod
    def _attention_kind(return_attention: bool | str | None) -> str | None:
        """None (no weights), "last", "layers" or "heads"; ValueError for anything else."""
        if return_attention is None or return_attention is False:
            return None
        if return_attention is True:
            return "last"
        if isinstance(return_attention, str) and return_attention in ("last", "layers", "heads"):
            return return_attention
        raise ValueError(
            f"return_attention must be False, True, 'last', 'layers' or 'heads', got {return_attention!r}"
        )

    # ---- encoder ------------------------------------------------------------------------------

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> TransformerEncoderOutput:
        """X = the encoder stack on the embedded source, plus every decoder layer's cross K and V.

        src: [B, S] long, src_mask: [B, S] bool -> TransformerEncoderOutput.
        """
        if src.dim() != 2:
            raise ValueError(f"src must be [B, S] token ids, got shape {tuple(src.shape)}")
        if src_mask.shape != src.shape or src_mask.dtype != torch.bool:
            raise ValueError(
                f"src_mask must be a bool tensor shaped like src {tuple(src.shape)}, "
                f"got {src_mask.dtype} {tuple(src_mask.shape)}"
            )
        x = self.source_embeddings(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        x = self.encoder_norm(x)
        cross = [layer.cross_attention.project_key_value(x, x) for layer in self._decoder_layers()]
        return TransformerEncoderOutput(
            states=x,
            mask=src_mask,
            cross_keys=tuple(keys for keys, _ in cross),
            cross_values=tuple(values for _, values in cross),
        )

    # ---- decoder ------------------------------------------------------------------------------

    def _decoder_layers(self) -> list[DecoderLayer]:
        """The decoder layers, typed (``nn.ModuleList`` holds them as plain modules)."""
        return cast(list[DecoderLayer], list(self.decoder_layers))

    def _decode(
        self,
        tokens: torch.Tensor,
        start: int,
        self_mask: torch.Tensor,
        encoded: TransformerEncoderOutput,
        state: TransformerDecoderState | None,
        need_weights: bool | str,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], list[torch.Tensor | None]]:
        """The decoder stack on target positions ``start …`` given the cached prefix (or none).

        tokens: [B, T] -> (Y^{N_dec} after the final norm [B, T, d], per-layer grown (keys, values),
        per-layer cross-attention weights [B, h, T, S] or None). ``need_weights``: True for
        every layer's weights, "last" for the last layer's only, False for none.
        """
        last = len(self.decoder_layers) - 1
        cross_mask = encoded.mask[:, None, None, :]
        y = self.target_embeddings(tokens, start)
        caches, weights = [], []
        for index, layer in enumerate(self.decoder_layers):
            past = None if state is None else (state.keys[index], state.values[index])
            y, keys, values, layer_weights = layer(
                y,
                self_mask,
                encoded.cross_keys[index],
                encoded.cross_values[index],
                cross_mask,
                past=past,
                need_weights=need_weights is True or (need_weights == "last" and index == last),
            )
            caches.append((keys, values))
            weights.append(None if layer_weights is None else self._full_heads(layer_weights, index))
        return self.decoder_norm(y), caches, weights

    def _full_heads(self, weights: torch.Tensor, layer: int) -> torch.Tensor:
        """A pruned cross-attention's weights [B, h_kept, T, S] in the unpruned model's heads
        [B, h, T, S], zeros for the heads it no longer holds: every model of a config has one shape."""
        if weights.shape[1] == self.config.num_heads:
            return weights
        full = weights.new_zeros(weights.shape[0], self.config.num_heads, *weights.shape[2:])
        kept = torch.tensor(self.config.kept_heads("cross", layer), device=weights.device, dtype=torch.long)
        return full.index_copy(1, kept, weights)

    def init_decoder_state(self, encoded: TransformerEncoderOutput) -> TransformerDecoderState:
        """An empty self-attention cache for every sentence of ``encoded``."""
        batch = encoded.states.shape[0]
        head_dim = self.config.d_model // self.config.num_heads
        empty = [encoded.states.new_zeros(batch, layer.self_attention.num_heads, 0, head_dim)
                 for layer in self._decoder_layers()]  # a pruned layer holds fewer heads
        return TransformerDecoderState(
            keys=tuple(empty),
            values=tuple(empty),
            target_mask=torch.zeros(batch, 0, dtype=torch.bool, device=encoded.states.device),
        )

    def decode_step(
        self,
        prev_tokens: torch.Tensor,
        state: TransformerDecoderState,
        encoded: TransformerEncoderOutput,
        step: int,
    ) -> tuple[torch.Tensor, torch.Tensor, TransformerDecoderState]:
        """One step of incremental decoding.

        prev_tokens: [N] long, the token at position ``step`` (BOS when step = 0); ``state`` holds
        positions 0 … step-1. Returns log P(y_{step+1} | y_≤step, x): [N, V], the last layer's
        cross-attention averaged over heads: [N, S], and the state with position ``step`` added.
        """
        rows = state.target_mask.shape[0]
        if prev_tokens.dim() != 1 or prev_tokens.shape[0] != rows:
            raise ValueError(
                f"prev_tokens must be [N] with N={rows} (the state's rows), got {tuple(prev_tokens.shape)}"
            )
        if step != state.length:
            raise ValueError(f"decode_step: step={step} but the decoder state holds {state.length} positions")
        target_mask = torch.cat([state.target_mask, (prev_tokens != self.pad_id).unsqueeze(1)], dim=1)
        # The new query may look at every real token of the prefix, itself included: [N, 1, 1, t+1].
        self_mask = target_mask[:, None, None, :]
        states, caches, weights = self._decode(prev_tokens.unsqueeze(1), step, self_mask, encoded, state, "last")
        log_probs = log_probabilities(self.output_projection(states[:, 0]))
        new_state = TransformerDecoderState(
            keys=tuple(keys for keys, _ in caches),
            values=tuple(values for _, values in caches),
            target_mask=target_mask,
        )
        last = weights[-1]
        assert last is not None  # "last": the last layer's weights
        return log_probs, self._head_mean(last[:, :, 0], len(self.decoder_layers) - 1), new_state

