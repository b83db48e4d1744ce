"""An RNN encoder–decoder with attention from the registry, in three decoder flows.

Read top to bottom: the config, the encoder, the three decoder flows (a parallel one, and those of
Bahdanau et al. 2015 and Luong et al. 2015), then the incremental-decoding interface that search
uses. Shapes are batch-first: B sentences, S source positions, T target positions, E = embed_dim,
H = hidden_dim (decoder), H_e = encoder hidden size per direction, D_c = the attention's context
size (its ``output_dim``; the encoder state size 2·H_e for every mechanism of the registry), V =
target vocabulary.

Encoder, a bidirectional LSTM (or GRU) over the source::

    z_t       = W_e w_t                                          embeddings           [B, S, E]
    h→_t      = LSTM→(z_t, h→_{t-1}),   h←_t = LSTM←(z_t, h←_{t+1})
    h̄_t       = [h→_t; h←_t]                                     encoder states       [B, S, 2H_e]
    h_sent^l  = ReLU(W_b^l [h→_S; h←_1] + b_b^l)                  one per decoder layer [L_d, B, H]

Padding never enters the recurrences: each direction is one fused RNN call over the padded batch,
the backward one over every sentence reversed *within its own length* (``_reverse_within``), so
h←_t starts at the last real token; h→_S is the forward state at the *last real* token of each
sentence and h←_1 the backward state at the first. (``pack_padded_sequence`` gives the same
numbers, but its backward pass on CPU costs several times more.) Decoder layer l is initialised
from encoder layer ``max(0, L_e − L_d + l)`` (the top layers face each other); an LSTM's memory
cell starts at 0 (h_sent initialises only h).

Decoder, three flows (``RNNConfig.flow``); b_i = W_d m_i is the embedding of the previous target
token (BOS at i = 0), Attn is any registry mechanism with keys = values = the encoder states:

``parallel`` (the default: the attention reads the current state and feeds only the output)::

    h_0 = h_sent;   h_i = LSTM(b_i, h_{i-1});   a_i = Attn(h_i, h̄_1..S)
    P(m_{i+1} | m_≤i, w) = softmax(W_o [a_i; h_i] + b_o)

  The context never enters the recurrence, so teacher-forced training runs the decoder LSTM over
  the whole target in one fused call and asks the attention all T queries in one batched
  ``attend(query [B, T, H])`` — no Python loop over time.

``bahdanau`` (Bahdanau et al. 2015): the query is the *previous* state, the context
is an input of the recurrence::

    c_i = Attn(s_{i-1}, h̄);   s_i = LSTM([b_i; c_i], s_{i-1});   P = softmax(W_o [c_i; s_i] + b_o)

``luong`` (Luong et al. 2015, with input feeding)::

    h_i = LSTM([b_i; h̃_{i-1}], h_{i-1});   c_i = Attn(h_i, h̄);   h̃_i = tanh(W_c [c_i; h_i]);
    P = softmax(W_s h̃_i + b_s),   h̃_0 = 0

  The last two are step loops in training (the context or h̃ of step i feeds step i+1); the keys
  are prepared once per batch and each step only scores its query. With
  ``output_embedding: true`` every flow also gives b_i to the output layer (Bahdanau's deep
  output, without the maxout). With ``tie_output: true`` the output weights are the target
  embeddings, logits = W_d (W_p x) + b with a projection W_p to E when x is not E-sized.

Dropout (``dropout``) is applied to the embeddings, to the output layer's input and between
stacked RNN layers. Every step flow shares one step function between ``forward`` and
``decode_step``, so incremental decoding reproduces teacher forcing.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attnmt.attention.functional import padding_mask
from attnmt.attention.mechanisms import Attention, PreparedKeys
from attnmt.attention.registry import build_attention, is_builtin
from attnmt.data.special_tokens import PAD_ID
from attnmt.errors import ConfigError
from attnmt.models.common import check_target_mask, log_probabilities
from attnmt.models.config import ModelConfig
from attnmt.models.dropout import DROPOUT_MASKS, Dropout, dropout

# On CUDA, cuDNN copies the four weight tensors of a layer into one buffer at each torch.lstm call of
# the encoder (it runs each layer and direction alone, on the module's own tensors) and warns each
# time. The copy is a few MB against a whole recurrence, and nothing a user can act on.
CUDNN_WEIGHT_COPY_WARNING = "RNN module weights are not part of single contiguous chunk"

__all__ = [
    "CELLS",
    "FLOWS",
    "RNNConfig",
    "RNNDecoderState",
    "RNNEncoderOutput",
    "RNNSeq2Seq",
]

CELLS = ("lstm", "gru")
FLOWS = ("parallel", "bahdanau", "luong")


# ================================================================================================
# Configuration
# ================================================================================================


@dataclass
class RNNConfig(ModelConfig):
    """Every knob of the RNN translator (the ``model:`` section of a run config, ``type: rnn``).

    embed_dim           E, size of source and target embeddings
    hidden_dim          H, decoder state size (and the attention's query size)
    encoder_hidden_dim  H_e, encoder state size per direction; None = hidden_dim // 2, so the
                        encoder states [h→; h←] have the decoder's size (``dot`` needs that)
    encoder_layers      L_e, stacked bidirectional layers
    decoder_layers      L_d, stacked decoder layers
    dropout             on embeddings, the output layer's input and between stacked layers
    dropout_mask        how its masks are drawn: "bernoulli" (F.dropout) or "bytes", cheaper on a
                        CPU (``attnmt.models.dropout``)
    cell                "lstm" or "gru"
    attention           a registry name (``attnmt.attention.ATTENTION_TYPES``), aliases allowed
    attention_options   keyword options of that mechanism, e.g. {"kq_dim": 256} for scaled_dot
    flow                "parallel", "bahdanau" (Bahdanau et al. 2015) or "luong" (Luong et al. 2015)
    tie_output          output weights = target embeddings (projecting to E first if needed)
    output_embedding    also feed the previous target embedding b_i to the output layer
    """

    type: ClassVar[str] = "rnn"
    #: options named otherwise before 0.2.0 (old name -> name now)
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"tie_embeddings": "tie_output"}

    embed_dim: int = 256
    hidden_dim: int = 512
    encoder_hidden_dim: int | None = None
    encoder_layers: int = 1
    decoder_layers: int = 1
    dropout: float = 0.3
    dropout_mask: str = "bernoulli"
    cell: str = "lstm"
    attention: str = "scaled_dot"
    attention_options: dict[str, Any] = field(default_factory=dict)
    flow: str = "parallel"
    tie_output: bool = False
    output_embedding: bool = False

    # -- derived sizes ----------------------------------------------------------------------------
    @property
    def encoder_state_dim(self) -> int:
        """Size of an encoder state h̄_t = [h→_t; h←_t]: 2·H_e."""
        per_direction = self.hidden_dim // 2 if self.encoder_hidden_dim is None else self.encoder_hidden_dim
        return 2 * per_direction

    # -- validation -------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ConfigError naming the first invalid option; normalises names (``sdp`` → ``scaled_dot``)."""
        for name in ("embed_dim", "hidden_dim", "encoder_layers", "decoder_layers"):
            self.check_size(name)
        if self.encoder_hidden_dim is not None:
            self.check_size("encoder_hidden_dim")
        elif self.hidden_dim < 2:
            raise ConfigError(
                f"model.hidden_dim={self.hidden_dim} leaves no encoder size (hidden_dim // 2); "
                "set encoder_hidden_dim"
            )
        self.check_fraction("dropout")
        self.check_choice("dropout_mask", DROPOUT_MASKS)
        self.check_choice("cell", CELLS)
        self.check_choice("flow", FLOWS)
        for name in ("tie_output", "output_embedding"):
            self.check_flag(name)
        self.check_attention_name()
        if self.attention == "local-m" and "gaussian" not in self.attention_options:
            # recorded, because a run saved before the option records nothing and had the Gaussian
            # (attnmt.runs.run_config.SAVED_BEFORE_ATTENTION_OPTIONS)
            self.attention_options = {**self.attention_options, "gaussian": False}
        if not is_builtin(self.attention):
            return  # a user's mechanism: its code is imported when the model is built, not to read a config
        # Build the mechanism on the meta device: checks its options and sizes (e.g. dot needs
        # query size == key size) without allocating memory or drawing random numbers.
        try:
            with torch.device("meta"):
                build_attention(
                    self.attention, self.hidden_dim, self.encoder_state_dim, self.encoder_state_dim,
                    **self.attention_options,
                )
        except (TypeError, ValueError, RuntimeError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__  # not torch's C++ frames
            raise ConfigError(
                f"model.attention {self.attention!r} with attention_options {self.attention_options} "
                f"(hidden_dim={self.hidden_dim}, encoder states of size {self.encoder_state_dim}): {reason}"
            ) from None


# ================================================================================================
# What the encoder hands the decoder, and the decoder's state between steps
# ================================================================================================


@dataclass
class RNNEncoderOutput:
    """The encoded source batch.

    states:       [B, S, 2H_e]  h̄_t (zeros at padding)
    mask:         [B, S]        bool, True = real source token
    prepared:     the attention's PreparedKeys (keys projected once per batch)
    sentence:     [L_d, B, H]   h_sent, the decoder's initial state per layer
    beams:        decoder rows per sentence: 1, or K after ``with_beams(K)``, when rows
                  b·K … b·K + K − 1 of the decoder state are the K beams of sentence b
    """

    states: torch.Tensor
    mask: torch.Tensor
    prepared: PreparedKeys
    sentence: torch.Tensor
    beams: int = 1

    def index_select(self, index: torch.Tensor) -> RNNEncoderOutput:
        """Sentences ``index`` (beam search drops finished ones; without ``with_beams`` it also
        repeats each sentence once per beam)."""
        return replace(
            self,
            states=self.states.index_select(0, index),
            mask=self.mask.index_select(0, index),
            prepared=self.prepared.index_select(index),
            sentence=self.sentence.index_select(1, index),
        )

    def with_beams(self, beams: int) -> RNNEncoderOutput:
        """The same encoding for K = ``beams`` consecutive decoder rows per sentence, without
        copying it: the K queries of a sentence then attend to its keys in one product, as the T
        queries of teacher forcing do. ``init_decoder_state`` gives B·K rows."""
        if self.beams != 1 or isinstance(beams, bool) or not isinstance(beams, int) or beams < 1:
            raise ValueError(f"with_beams: need beams >= 1 on an encoding of one row per sentence, got {beams!r}"
                             f" (this one has beams={self.beams})")
        return replace(self, beams=beams)


@dataclass
class RNNDecoderState:
    """The decoder between two steps, for N rows (sentences × beams).

    hidden:  [L_d, N, H]  h_i of every layer
    cell:    [L_d, N, H]  the LSTM memory c_i (None for a GRU)
    feed:    [N, H]       h̃_i, fed into the next step (``luong`` flow only, else None)
    """

    hidden: torch.Tensor
    cell: torch.Tensor | None = None
    feed: torch.Tensor | None = None

    @property
    def rnn_state(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """What nn.LSTM / nn.GRU take as ``hx``."""
        return self.hidden if self.cell is None else (self.hidden, self.cell)

    def index_select(self, index: torch.Tensor) -> RNNDecoderState:
        """Rows ``index`` (beam search reorders hypotheses with it)."""
        return replace(
            self,
            hidden=self.hidden.index_select(1, index),
            cell=None if self.cell is None else self.cell.index_select(1, index),
            feed=None if self.feed is None else self.feed.index_select(0, index),
        )


# ================================================================================================
# The model
# ================================================================================================


class RNNSeq2Seq(nn.Module):
    """Bidirectional RNN encoder, attention, RNN decoder (see the module docstring for the equations).

    Interface (the contract of ``attnmt.models``)::

        logits, attention = model(src [B, S], src_mask [B, S], tgt_in [B, T], return_attention, tgt_mask)
            logits [B, T, V] ([N, V] at the N True positions of tgt_mask [B, T] when given);
            attention [B, T, S] (True), [B, 1, h, T, S] per head ("heads", L = 1 layer), or None
        encoded = model.encode(src, src_mask)                      -> RNNEncoderOutput
        state = model.init_decoder_state(encoded)                  -> RNNDecoderState
        log_probs, weights, state = model.decode_step(prev_tokens [N], state, encoded, step)
            log_probs [N, V], weights [N, S]

    ``attention_heads`` is the number of heads of the mechanism (1 except for ``multihead``);
    ``forward(..., return_attention="heads")`` gives their weights one by one. The decoder attends
    over the source once per step: ``cross_attention_layers`` is 1.
    """

    model_type = "rnn"
    cross_attention_layers = 1
    state_bytes_per_token = 0  # the decoder state is one fixed-size hidden state per row

    def __init__(self, config: RNNConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        if not isinstance(config, RNNConfig):
            raise TypeError(f"config must be an RNNConfig, got {type(config).__name__}")
        for name, size in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size)):
            if isinstance(size, bool) or not isinstance(size, int) or size <= PAD_ID:
                raise ValueError(f"{name} must be a positive integer, got {size!r}")
        self.config = config
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        E, H, D_enc = config.embed_dim, config.hidden_dim, config.encoder_state_dim
        rnn_class = nn.LSTM if config.cell == "lstm" else nn.GRU

        # Encoder (module docstring).
        self.src_embedding = nn.Embedding(src_vocab_size, E, padding_idx=PAD_ID)
        self.encoder_rnn = rnn_class(
            E, D_enc // 2, num_layers=config.encoder_layers, batch_first=True, bidirectional=True,
            dropout=config.dropout if config.encoder_layers > 1 else 0.0,
        )
        self.bridge = nn.ModuleList(nn.Linear(D_enc, H) for _ in range(config.decoder_layers))

        # Attention over the encoder states: query h (size H), keys = values = h̄ (size 2H_e).
        self.attention: Attention = build_attention(config.attention, H, D_enc, D_enc, **config.attention_options)
        self.attention_heads = self.attention.num_heads
        D_c = self.attention.output_dim

        # Decoder (the parallel flow's LSTM, or the Bahdanau / Luong recurrences).
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, E, padding_idx=PAD_ID)
        extra_input = {"parallel": 0, "bahdanau": D_c, "luong": H}[config.flow]
        self.decoder_rnn = rnn_class(
            E + extra_input, H, num_layers=config.decoder_layers, batch_first=True,
            dropout=config.dropout if config.decoder_layers > 1 else 0.0,
        )
        if config.flow == "luong":
            self.attentional = nn.Linear(D_c + H, H, bias=False)  # W_c
            output_input = H
        else:
            output_input = D_c + H
        if config.output_embedding:
            output_input += E

        # Output layer: W_o x + b_o, or W_d (W_p x) + b with tied embeddings.
        if config.tie_output:
            self.output_projection = nn.Linear(output_input, E, bias=False) if output_input != E else nn.Identity()
            self.output_bias = nn.Parameter(torch.zeros(tgt_vocab_size))
        else:
            self.output = nn.Linear(output_input, tgt_vocab_size)
        self.dropout = Dropout(config.dropout, config.dropout_mask)

        for embedding in (self.src_embedding, self.tgt_embedding):
            # Small embeddings: with tied output weights N(0, 1) rows would give huge first logits.
            nn.init.uniform_(embedding.weight, -0.1, 0.1)
            with torch.no_grad():
                embedding.weight[PAD_ID].zero_()

    # --------------------------------------------------------------------------------------------
    # Encoder
    # --------------------------------------------------------------------------------------------

    @property
    def source_token_embedding(self) -> nn.Module:
        """The source embedding table, whose output saliency is taken against (``attnmt.attribution``)."""
        return self.src_embedding

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> RNNEncoderOutput:
        """src [B, S] long, src_mask [B, S] bool (right-padded) -> RNNEncoderOutput (module docstring)."""
        lengths = _check_source(src, src_mask)
        _check_autocast(self.config.cell, src.device)
        embedded = self.dropout(self.src_embedding(src))  # z: [B, S, E]
        states, final_hidden = self._bidirectional_encoder(embedded, src_mask, lengths)  # h̄: [B, S, 2H_e]
        # [h→_S; h←_1] per encoder layer: the forward state at the last real token and the
        # backward state at the first.
        summaries = torch.cat([final_hidden[:, 0], final_hidden[:, 1]], dim=-1)  # [L_e, B, 2H_e]
        L_e, L_d = self.config.encoder_layers, self.config.decoder_layers
        sentence = torch.stack(
            [torch.relu(bridge(summaries[max(0, L_e - L_d + layer)])) for layer, bridge in enumerate(self.bridge)]
        )  # h_sent: [L_d, B, H]
        prepared = self.attention.prepare(states, states, src_mask)
        return RNNEncoderOutput(states=states, mask=src_mask, prepared=prepared, sentence=sentence)

    def _bidirectional_encoder(self, embedded: torch.Tensor, src_mask: torch.Tensor, lengths: torch.Tensor) -> Any:
        """``encoder_rnn``'s layers and directions, one fused RNN call each, on right-padded input.

        embedded [B, S, E] -> (states [B, S, 2H_e], zeros at padding; finals [L_e, 2, B, H_e], the
        forward state at each sentence's last real token and the backward state at its first).
        The backward direction reads each sentence reversed within its length, so it starts at
        the last real token; what the forward direction computes past the end is masked away.
        Dropout between layers as in nn.LSTM / nn.GRU. Same numbers as packing the batch.
        """
        rnn = self.encoder_rnn
        B, S, _ = embedded.shape
        reverse = _reverse_within(lengths, S)  # [B, S]: position t <-> length - 1 - t
        last = (lengths - 1).view(B, 1)
        keep = src_mask.unsqueeze(-1).to(embedded.dtype)
        initial = embedded.new_zeros(1, B, rnn.hidden_size)
        hx = initial if self.config.cell == "gru" else (initial, initial)
        run = torch.gru if self.config.cell == "gru" else torch.lstm
        inputs, finals = embedded, []
        for layer in range(rnn.num_layers):
            if layer > 0:
                inputs = dropout(inputs, rnn.dropout, self.training, self.config.dropout_mask)
            outputs = []
            for suffix, order in (("", None), ("_reverse", reverse)):
                weights = [getattr(rnn, f"{name}_l{layer}{suffix}")
                           for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
                sequence = inputs if order is None else _gather_time(inputs, order)
                layer_run = functools.partial(_one_layer, run, weights=weights, training=self.training)
                states = _recurrent(layer_run, sequence, hx)  # [B, S, H_e]
                # The direction's final state: at the last real token of the sequence it read.
                finals.append(_gather_time(states, last).squeeze(1))
                outputs.append(states if order is None else _gather_time(states, order))
            inputs = torch.cat(outputs, dim=-1) * keep
        return inputs, torch.stack(finals).view(rnn.num_layers, 2, B, -1)

    def init_decoder_state(self, encoded: RNNEncoderOutput) -> RNNDecoderState:
        """h_0 = h_sent; c_0 = 0 for an LSTM; h̃_0 = 0 for the ``luong`` flow.
        [L_d, B·K, H] with K = ``encoded.beams``."""
        hidden = encoded.sentence
        if encoded.beams > 1:
            hidden = hidden.repeat_interleave(encoded.beams, dim=1)
        cell = torch.zeros_like(hidden) if self.config.cell == "lstm" else None
        feed = hidden.new_zeros(hidden.shape[1:]) if self.config.flow == "luong" else None
        return RNNDecoderState(hidden=hidden, cell=cell, feed=feed)

    # --------------------------------------------------------------------------------------------
    # Teacher-forced decoding (training, perplexity)
    # --------------------------------------------------------------------------------------------

    def forward(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_in: torch.Tensor,
        return_attention: bool | str = False,
        tgt_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: src [B, S], src_mask [B, S], tgt_in [B, T] (BOS + tokens).

        Returns ``(logits [B, T, V], attention)`` with attention [B, T, S] when
        ``return_attention`` is True, [B, 1, h, T, S] (one layer, one map per head, h =
        ``attention_heads``) when it is "heads", None when False. With ``tgt_mask`` [B, T] (bool, True = a real
        target token) the output layer runs only there: logits [N, V], N = tgt_mask.sum(), the
        rows of ``logits[tgt_mask]`` without computing the padding's.
        """
        if return_attention not in (False, True, "heads"):
            raise ValueError(f"return_attention must be False, True or 'heads', got {return_attention!r}")
        if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"tgt_in must be [B, T] with B={src.shape[0]}, got {tuple(tgt_in.shape)}")
        encoded = self.encode(src, src_mask)
        state = self.init_decoder_state(encoded)
        embedded = self.dropout(self.tgt_embedding(tgt_in))  # b: [B, T, E]
        heads = return_attention == "heads"
        if self.config.flow == "parallel":
            features, weights = self._parallel_decoder(embedded, state, encoded.prepared, heads)
        else:
            features, weights = self._step_loop_decoder(embedded, state, encoded.prepared, heads)
        if tgt_mask is not None:
            features = features[check_target_mask(tgt_mask, tgt_in)]  # [N, F]
        logits = self._logits(features)
        if heads:
            weights = weights.unsqueeze(1)  # [B, L = 1, h, T, S]: the contract's shape for every model
        return logits, (weights if return_attention else None)

    def _parallel_decoder(self, embedded: torch.Tensor, state: Any, prepared: PreparedKeys, heads: bool) -> Any:
        """All T steps at once (the parallel flow): one RNN call, one batched attention.

        embedded [B, T, E] -> features [B, T, D_c + H (+E)], weights [B, T, S] or [B, h, T, S].
        """
        outputs, _ = _recurrent(self.decoder_rnn, embedded, state.rnn_state)  # h_1..T: [B, T, H]
        context, weights = self._attend(outputs, prepared, None, heads)  # a: [B, T, D_c]
        return self._features([context, outputs], embedded), weights

    def _step_loop_decoder(self, embedded: torch.Tensor, state: Any, prepared: PreparedKeys, heads: bool) -> Any:
        """The ``bahdanau`` and ``luong`` flows: one ``_step`` per target position.

        The output layer, the expensive part, still runs once over all steps afterwards.
        """
        features, weights = [], []
        for step in range(embedded.shape[1]):
            step_features, step_weights, state = self._step(embedded[:, step], state, prepared, step, heads)
            features.append(step_features)
            weights.append(step_weights)
        return torch.stack(features, dim=1), torch.stack(weights, dim=-2)

    # --------------------------------------------------------------------------------------------
    # One decoder step (shared by the step loops and by incremental decoding)
    # --------------------------------------------------------------------------------------------

    def _step(
        self, embedded: torch.Tensor, state: RNNDecoderState, prepared: PreparedKeys, step: int, heads: bool = False,
        beams: int = 1, token_gates: torch.Tensor | None = None,
    ) -> Any:
        """embedded b_i [N, E] -> (features [N, F], weights [N, S] or [N, h, S], new state).

        ``beams``: K decoder rows per row of ``prepared`` (``RNNEncoderOutput.with_beams``).
        ``token_gates``: W_ih b_i + b of the first decoder layer, looked up (``_token_gates``).
        """
        flow = self.config.flow
        if flow == "bahdanau":
            context, weights = self._attend(state.hidden[-1], prepared, step, heads, beams)  # query s_{i-1}
            hidden, state = self._rnn_step(torch.cat([embedded, context], -1), state, token_gates)
            return self._features([context, hidden], embedded), weights, state
        if flow == "luong":
            assert state.feed is not None  # the luong flow's state always carries h̃_{i-1}
            hidden, state = self._rnn_step(torch.cat([embedded, state.feed], -1), state, token_gates)
            context, weights = self._attend(hidden, prepared, step, heads, beams)
            attentional = torch.tanh(self.attentional(torch.cat([context, hidden], -1)))  # h̃_i
            return self._features([attentional], embedded), weights, replace(state, feed=attentional)
        hidden, state = self._rnn_step(embedded, state, token_gates)  # parallel
        context, weights = self._attend(hidden, prepared, step, heads, beams)
        return self._features([context, hidden], embedded), weights, state

    def _rnn_step(
        self, inputs: torch.Tensor, state: RNNDecoderState, token_gates: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, RNNDecoderState]:
        """One time step of the stacked decoder RNN, with ``decoder_rnn``'s own weights.

        inputs [N, in] -> (top layer's h_i [N, H], new state). Per layer ``torch.lstm_cell``
        (i, f, g, o = σ, σ, tanh, σ of W_ih x + b_ih + W_hh h + b_hh; c' = f·c + i·g;
        h' = o·tanh(c')) or ``torch.gru_cell``: the equations of nn.LSTM / nn.GRU, without the
        per-call set-up that makes a length-1 nn.LSTM call several times slower on CPU.
        Dropout between layers as in nn.LSTM. With ``token_gates`` [N, G] (the first layer's
        W_ih b_i + b for the embedding part b_i of ``inputs``, from ``_token_gates``) the first
        layer multiplies only the rest of its input and the state (``_cell_from_gates``).
        """
        rnn = self.decoder_rnn
        hiddens, cells = [], []
        for layer in range(rnn.num_layers):
            if layer > 0 and rnn.dropout > 0:
                inputs = dropout(inputs, rnn.dropout, self.training, self.config.dropout_mask)
            weights = (
                getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"weight_hh_l{layer}"),
                getattr(rnn, f"bias_ih_l{layer}"), getattr(rnn, f"bias_hh_l{layer}"),
            )
            cell_state = None if state.cell is None else state.cell[layer]
            if layer == 0 and token_gates is not None:
                embed_dim = self.config.embed_dim
                input_gates = token_gates
                if inputs.shape[-1] > embed_dim:  # bahdanau / luong: the context part still multiplies
                    input_gates = torch.addmm(token_gates, inputs[:, embed_dim:], weights[0][:, embed_dim:].t())
                inputs, cell = _cell_from_gates(input_gates, state.hidden[layer], cell_state, weights[1], weights[3])
            elif cell_state is None:
                inputs, cell = torch.gru_cell(inputs, state.hidden[layer], *weights), None
            else:
                inputs, cell = torch.lstm_cell(inputs, (state.hidden[layer], cell_state), *weights)
            if cell is not None:
                cells.append(cell)
            hiddens.append(inputs)
        new_state = RNNDecoderState(
            hidden=torch.stack(hiddens), cell=torch.stack(cells) if cells else None, feed=state.feed
        )
        return inputs, new_state

    def _attend(self, query: torch.Tensor, prepared: PreparedKeys, step: Any, heads: bool, beams: int = 1) -> Any:
        """The mechanism's (context, weights); per-head weights [.., h, (T,) S] when ``heads``.

        With ``beams`` K > 1, query [B·K, Dq] holds the K beams of each of the B sentences of
        ``prepared``: they attend as one [B, K, Dq] query (all at decoding step ``step``).
        """
        if beams > 1:
            grouped = query.view(-1, beams, query.shape[-1])  # [B, K, Dq]
            steps = None if step is None else torch.full(grouped.shape[:2], step, dtype=torch.long, device=query.device)
            context, weights = self._attend(grouped, prepared, steps, heads)  # [B, K, D_c], [B, K, S] / [B, h, K, S]
            if heads:
                weights = weights.transpose(1, 2)  # [B, K, h, S]
            return context.flatten(0, 1), weights.flatten(0, 1)
        if heads:
            attend_heads = getattr(self.attention, "attend_heads", None)  # multihead's own per-head weights
            if attend_heads is not None:
                return attend_heads(query, prepared, step)
            context, weights = self.attention.attend(query, prepared, step)
            return context, weights.unsqueeze(1)
        return self.attention.attend(query, prepared, step)

    def _features(self, parts: list[torch.Tensor], embedded: torch.Tensor) -> torch.Tensor:
        """The output layer's input: [a; h] (or [h̃]), followed by b_i with ``output_embedding``."""
        if self.config.output_embedding:
            parts = [*parts, embedded]
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def _logits(self, features: torch.Tensor) -> torch.Tensor:
        """Eq. 12 before the softmax: [..., F] -> [..., V]."""
        features = self.dropout(features)
        if self.config.tie_output:
            return F.linear(self.output_projection(features), self.tgt_embedding.weight, self.output_bias)
        return self.output(features)

    # --------------------------------------------------------------------------------------------
    # Incremental decoding (search)
    # --------------------------------------------------------------------------------------------

    def decode_step(
        self, prev_tokens: torch.Tensor, state: RNNDecoderState, encoded: RNNEncoderOutput, step: int
    ) -> tuple[torch.Tensor, torch.Tensor, RNNDecoderState]:
        """One output token for N rows: prev_tokens [N] (BOS at step 0) ->
        (log_probs [N, V], attention weights [N, S], new state). Same numbers as ``forward``."""
        if prev_tokens.dim() != 1 or prev_tokens.shape[0] != state.hidden.shape[1]:
            raise ValueError(
                f"prev_tokens must be [N] with N={state.hidden.shape[1]} (the state's rows), "
                f"got {tuple(prev_tokens.shape)}"
            )
        embedded = self.dropout(self.tgt_embedding(prev_tokens))  # [N, E]
        # Search (no dropout, no gradient) looks the first layer's input projection up.
        token_gates = None if self.training or torch.is_grad_enabled() else self._token_gates(prev_tokens)
        features, weights, state = self._step(
            embedded, state, encoded.prepared, step, beams=encoded.beams, token_gates=token_gates
        )
        return log_probabilities(self._logits(features)), weights, state

    def _token_gates(self, tokens: torch.Tensor) -> torch.Tensor:
        """W_ih[:, :E] W_d[y] + b for tokens y [N] -> [N, G]: the decoder's first-layer input
        projection of their embeddings (b = b_ih + b_hh for an LSTM, b_ih for a GRU).

        Computed for the whole target vocabulary once per version of those weights ([V, G], one
        matrix product) and then looked up, so a search step skips an [N, E] × [E, G] product.
        The cache key holds each tensor's storage and version counter, which every in-place
        update (optimizer steps, ``load_state_dict``) advances.
        """
        weight_ih, bias_ih, bias_hh = (self.decoder_rnn.get_parameter(name)
                                       for name in ("weight_ih_l0", "bias_ih_l0", "bias_hh_l0"))
        sources = (self.tgt_embedding.weight, weight_ih, bias_ih, bias_hh)
        key = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in sources)
        if getattr(self, "_token_gate_key", None) != key:
            bias = bias_ih + bias_hh if self.config.cell == "lstm" else bias_ih
            embedding_part = weight_ih[:, : self.config.embed_dim]
            with torch.autocast(self.tgt_embedding.weight.device.type, enabled=False):  # in the weights' precision
                self._token_gate_table = F.linear(self.tgt_embedding.weight, embedding_part, bias).detach()
            self._token_gate_key = key
        return self._token_gate_table.index_select(0, tokens)


def _check_source(src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
    """Validate src [B, S] / src_mask [B, S] (bool, right-padded, ≥ 1 real token); returns lengths [B]."""
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.dtype != torch.long:
        raise TypeError(f"src must be a [B, S] long tensor, got {getattr(src, 'dtype', type(src).__name__)} "
                        f"{tuple(getattr(src, 'shape', ()))}")
    if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool or src_mask.shape != src.shape:
        raise ValueError(
            f"src_mask must be a bool tensor of src's shape {tuple(src.shape)}, got "
            f"{getattr(src_mask, 'dtype', type(src_mask).__name__)} {tuple(getattr(src_mask, 'shape', ()))}"
        )
    lengths = src_mask.sum(dim=1)
    if src.shape[0] and int(lengths.min()) < 1:
        raise ValueError(f"every source sentence needs at least one real token; lengths {lengths.tolist()}")
    if not torch.equal(src_mask, padding_mask(lengths, src.shape[1])):
        raise ValueError("src_mask must be right-padded: True for the first src_lengths positions of a row, then False")
    return lengths


#: False once oneDNN has refused a bf16 LSTM on this CPU (no AVX512: "could not create a primitive
#: descriptor for the LSTM forward propagation primitive"); such LSTMs then run in float32
_cpu_bf16_sequences = True


def _recurrent(call: Callable[[torch.Tensor, Any], Any], sequence: torch.Tensor, hx: Any) -> Any:
    """``call(sequence, hx)``: an LSTM or GRU over a whole sequence. Under CPU bf16 autocast PyTorch
    hands an LSTM to oneDNN, which has no bf16 kernel on CPUs without AVX512; there the recurrence
    runs in float32 (the rest of the model stays in bf16)."""
    global _cpu_bf16_sequences
    cpu_bf16 = sequence.device.type == "cpu" and torch.is_autocast_enabled("cpu") and \
        torch.get_autocast_dtype("cpu") == torch.bfloat16
    with warnings.catch_warnings():  # here, not at import: pytest or a notebook may reset filters
        warnings.filterwarnings("ignore", message=CUDNN_WEIGHT_COPY_WARNING, category=UserWarning)
        if not cpu_bf16 or _cpu_bf16_sequences:
            try:
                return call(sequence, hx)
            except RuntimeError as error:
                if not cpu_bf16 or "primitive descriptor" not in str(error):
                    raise
                _cpu_bf16_sequences = False
        with torch.autocast("cpu", enabled=False):
            return call(sequence.float(), _as_float(hx))


def _one_layer(run: Any, sequence: torch.Tensor, hx: Any, weights: list[torch.Tensor], training: bool) -> torch.Tensor:
    """``torch.lstm`` / ``torch.gru`` (``run``) of one layer in one direction, batch-first: [B, S, H]."""
    return run(sequence, hx, weights, True, 1, 0.0, training, False, True)[0]


def _as_float(hx: Any) -> Any:
    """An RNN's initial state (None, a tensor, or an LSTM's pair) in float32."""
    if hx is None or isinstance(hx, torch.Tensor):
        return None if hx is None else hx.float()
    return tuple(h.float() for h in hx)


def _check_autocast(cell: str, device: torch.device) -> None:
    """ConfigError for float16 autocast of an LSTM on the CPU, where PyTorch has no float16 LSTM
    kernel (the GRU, and every model on a GPU, run fine)."""
    if (cell == "lstm" and device.type == "cpu" and torch.is_autocast_enabled("cpu")
            and torch.get_autocast_dtype("cpu") == torch.float16):
        raise ConfigError("precision fp16: PyTorch has no float16 LSTM on the CPU; use bf16 there (or fp16 on a GPU)")


def _cell_from_gates(input_gates: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor | None,
                     weight_hh: torch.Tensor, bias_hh: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One LSTM (``cell`` given) or GRU (``cell`` None) step from its input projection.

    input_gates = W_ih x + b_ih [N, G], plus b_hh for an LSTM (then ``bias_hh`` is not added again)::

        LSTM: i, f, g, o = chunks of input_gates + W_hh h;  c' = σ(f)·c + σ(i)·tanh(g);  h' = σ(o)·tanh(c')
        GRU:  r = σ(x_r + W_hr h + b_hr);  z = σ(x_z + W_hz h + b_hz);  n = tanh(x_n + r·(W_hn h + b_hn))
              h' = n + z·(h − n)

    -> (h' [N, H], c' [N, H] or None): the numbers of ``torch.lstm_cell`` / ``torch.gru_cell``.
    """
    if cell is not None:
        gates = torch.addmm(input_gates, hidden, weight_hh.t())
        in_gate, forget_gate, candidate, out_gate = gates.chunk(4, dim=1)
        cell = torch.addcmul(torch.sigmoid(forget_gate) * cell, torch.sigmoid(in_gate), torch.tanh(candidate))
        return torch.sigmoid(out_gate) * torch.tanh(cell), cell
    x_r, x_z, x_n = input_gates.chunk(3, dim=1)
    h_r, h_z, h_n = F.linear(hidden, weight_hh, bias_hh).chunk(3, dim=1)
    reset = torch.sigmoid(x_r + h_r)
    update = torch.sigmoid(x_z + h_z)
    new = torch.tanh(torch.addcmul(x_n, reset, h_n))
    return torch.addcmul(new, update, hidden - new), None


def _reverse_within(lengths: torch.Tensor, total: int) -> torch.Tensor:
    """[B, S] indices that reverse each row's first ``lengths[b]`` positions and keep the rest."""
    positions = torch.arange(total, device=lengths.device).expand(lengths.shape[0], total)
    ends = lengths.unsqueeze(1) - 1
    return torch.where(positions <= ends, ends - positions, positions)


def _gather_time(sequence: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """sequence [B, S, D], index [B, S'] -> [B, S', D] with row b's positions ``index[b]``."""
    return sequence.gather(1, index.unsqueeze(-1).expand(-1, -1, sequence.shape[-1]))

