"""Greedy and batched beam search over any model with the incremental-decoding interface.

The model needs (the contract of ``attnmt.models``)::

    encoded = model.encode(src [B, S], src_mask [B, S])           # .index_select(index) -> same type
    state = model.init_decoder_state(encoded)                     # .index_select(index) -> same type
    log_probs [N, V], attention [N, S], state = model.decode_step(prev_tokens [N], state, encoded, step)

and, optionally, ``encoded.with_beams(K)``: the encoding serving K consecutive decoder rows per
sentence without copying it (the RNN has it); otherwise beam search repeats each sentence's
encoding K times.

Beam search keeps every sentence and every beam in one tensor: N = B·K rows go through one
``decode_step`` per output position (the first step runs one row per sentence, since its K beams
would all be BOS, and its K best continuations become the beams). A step scores all K·V
continuations of each sentence, keeps the 2K best, sets aside those ending in EOS among the top K
as finished hypotheses, and continues the K best that do not.

Scores are sums of the model's log-probabilities (accumulated in float64). Finished hypotheses
are ranked by the GNMT length normalisation (Wu et al. 2016)::

    normalized_score = score / lp(Y),    lp(Y) = ((5 + |Y|) / 6)^α

with |Y| the number of predicted tokens including EOS; α = 0 ranks by the raw score. A sentence of
source length |x| (its real tokens, the EOS the batcher appends included) gets at most
max_len = ⌊max_len_a·|x| + max_len_b⌋ tokens before EOS; at that step EOS is the only choice. PAD
and BOS are never produced.

When to stop. Log-probabilities are ≤ 0, so a live hypothesis with score s can only fall as it
grows, and a finished version of it, of |Y| ≤ L_max = max_len + 1 tokens (EOS included), has a
normalized score of at most::

    bound(s) = s / lp(L_max)      (s ≤ 0 and lp grows with |Y| for α > 0; bound = s for α = 0)

A sentence is done when it has ``n_best`` finished hypotheses and no live beam's bound exceeds
the ``n_best``-th best of them (nothing the search could still find would enter the answer), or
when it has reached its length limit. The answer is therefore the same as if every beam were
followed to the length limit; stopping as soon as K hypotheses have ended instead lets a few
low-scoring early EOS candidates end the search while a much better live beam is still growing.
Done sentences leave the batch, so the tensors shrink as sentences finish: not one by one but
once they are ``RETIRED_FRACTION`` of the sentences in it, because moving the encoder states
([B, S, D] per tensor, [B·K, S, D] without ``with_beams``) costs a good part of a decoder step;
until then their rows ride along and are ignored. Beam size 1 is defined as greedy search (the
most probable token at every step, stopping at the first EOS).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass
from itertools import count
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attnmt.checks import dataclass_from_dict, is_int, is_number
from attnmt.device import check_device_name
from attnmt.errors import ConfigError
from attnmt.precision import check_precision
from attnmt.special_tokens import BOS_ID, EOS_ID, PAD_ID

__all__ = ["MAX_LEN_A", "MAX_LEN_B", "Hypothesis", "SearchConfig", "beam_search", "greedy_search", "length_penalty"]

#: The largest max_len_a and max_len_b a search takes: an output 10 times its source's length plus
#: 1,000 tokens is already no translation, and an untrained model that never ends a sentence
#: decodes every step of the limit.
MAX_LEN_A = 10
MAX_LEN_B = 1000


@dataclass
class SearchConfig:
    """Defaults of decoding (the ``search:`` section of a run config; the only place they are written):
    the ``Translator`` takes one, and the functions below take their defaults from it.

    beam        1 = greedy search
    alpha       GNMT length penalty of beam search ((5 + |y|) / 6) ** alpha; 0 = none
    max_len_a, max_len_b   an output has at most max_len_a · |x| + max_len_b tokens (at most
                MAX_LEN_A and MAX_LEN_B: beyond them an untrained model would decode for hours)
    batch_size  sentences decoded at once
    precision   "fp32", "bf16" or "fp16": the search's matrix products under autocast
                (log-probabilities and scores stay float32 / float64); faster on CPUs with
                AVX512-BF16 or AMX and on GPUs, and its outputs can differ from fp32 ones
    device      where to search: auto (CUDA, else MPS, else the CPU), cpu, cuda, cuda:N or mps
    """

    beam: int = 1
    alpha: float = 0.6
    max_len_a: float = 1.5
    max_len_b: int = 10
    batch_size: int = 64
    precision: str = "fp32"
    device: str = "auto"

    def __post_init__(self) -> None:
        for key in ("beam", "batch_size"):
            if not is_int(getattr(self, key)) or getattr(self, key) < 1:
                raise ConfigError(f"search.{key}: must be an integer >= 1, got {getattr(self, key)!r}")
        if not is_int(self.max_len_b) or not 0 <= self.max_len_b <= MAX_LEN_B:
            raise ConfigError(f"search.max_len_b: must be an integer from 0 to {MAX_LEN_B}, got {self.max_len_b!r}")
        for key in ("alpha", "max_len_a"):
            if not is_number(getattr(self, key)) or getattr(self, key) < 0:
                raise ConfigError(f"search.{key}: must be a number >= 0, got {getattr(self, key)!r}")
            setattr(self, key, float(getattr(self, key)))
        if self.max_len_a > MAX_LEN_A:
            raise ConfigError(f"search.max_len_a: at most {MAX_LEN_A} (an output {MAX_LEN_A} times as long as "
                              f"its source), got {self.max_len_a!r}")
        check_precision(self.precision, "search.precision")
        check_device_name(self.device, "search.device")

    @classmethod
    def from_dict(cls, values: dict | None) -> "SearchConfig":
        return dataclass_from_dict(cls, values, "search")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)



# Done sentences leave beam search's tensors once they are this share of the sentences there.
RETIRED_FRACTION = 0.1


@dataclass
class Hypothesis:
    """One output sentence.

    tokens:           the predicted ids, without BOS and EOS
    score:            Σ log P of every predicted token, EOS included
    normalized_score: score / ((5 + len(tokens) + 1) / 6)^α
    attention:        [len(tokens) + 1, S_real] float32 (the last row is the step that produced
                      EOS; columns are the real source positions), or None when not asked for
    """

    tokens: list[int]
    score: float
    normalized_score: float
    attention: np.ndarray | None = None


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α."""
    return ((5.0 + length) / 6.0) ** alpha


@contextmanager
def _inference(model):
    """Evaluation mode (no dropout) and no autograd, restoring the model's mode afterwards."""
    was_training = bool(getattr(model, "training", False))
    if hasattr(model, "eval"):
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training and hasattr(model, "train"):
            model.train(True)


def _check_arguments(src, src_mask, max_len_a, max_len_b, alpha) -> torch.Tensor:
    """Validate the common arguments; returns the source lengths [B]."""
    if not isinstance(src, torch.Tensor) or src.dim() != 2:
        raise ValueError(f"src must be a [B, S] tensor, got {tuple(getattr(src, 'shape', ()))}")
    if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool or src_mask.shape != src.shape:
        raise ValueError(f"src_mask must be a bool tensor of src's shape {tuple(src.shape)}")
    if max_len_a < 0 or max_len_b < 0:
        raise ValueError(f"max_len_a and max_len_b must be >= 0, got {max_len_a}, {max_len_b}")
    if alpha < 0:
        raise ValueError(f"alpha (length penalty exponent) must be >= 0, got {alpha}")
    return src_mask.sum(dim=1)


def _max_lengths(src_lengths: torch.Tensor, max_len_a: float, max_len_b: float) -> list[int]:
    """⌊a·|x| + b⌋ tokens (EOS excluded) per sentence."""
    return [int(max_len_a * length + max_len_b) for length in src_lengths.tolist()]


def _restrict(log_probs: torch.Tensor, force_eos: torch.Tensor | None) -> torch.Tensor:
    """Forbid PAD and BOS; rows where ``force_eos`` is True may only produce EOS (in place)."""
    log_probs[:, PAD_ID] = float("-inf")
    log_probs[:, BOS_ID] = float("-inf")
    if force_eos is not None and bool(force_eos.any()):
        eos = log_probs[:, EOS_ID].clone()
        log_probs[force_eos] = float("-inf")
        log_probs[:, EOS_ID] = eos
    return log_probs


def _hypothesis(tokens, score, alpha, attention_rows, source_length) -> Hypothesis:
    attention = None
    if attention_rows is not None:
        attention = attention_rows[:, :source_length].float().cpu().numpy()
    return Hypothesis(
        tokens=list(tokens),
        score=float(score),
        normalized_score=float(score) / length_penalty(len(tokens) + 1, alpha),
        attention=attention,
    )


# ================================================================================================
# Greedy search
# ================================================================================================


def greedy_search(
    model,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len_a: float = SearchConfig.max_len_a,
    max_len_b: float = SearchConfig.max_len_b,
    return_attention: bool = True,
    alpha: float = SearchConfig.alpha,
) -> list[Hypothesis]:
    """The most probable next token at every step, for all B sentences at once.

    src [B, S], src_mask [B, S] -> B hypotheses in input order. ``alpha`` only sets
    ``normalized_score`` (comparable with beam search's).
    """
    src_lengths = _check_arguments(src, src_mask, max_len_a, max_len_b, alpha)
    batch = src.shape[0]
    max_lengths = _max_lengths(src_lengths, max_len_a, max_len_b)
    limit = torch.tensor(max_lengths, device=src.device)
    with _inference(model):
        encoded = model.encode(src, src_mask)
        state = model.init_decoder_state(encoded)
        prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=src.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
        scores = torch.zeros(batch, dtype=torch.float64, device=src.device)
        tokens, attention = [], []
        for step in range(max(max_lengths, default=0) + 1):
            log_probs, weights, state = model.decode_step(prev, state, encoded, step)
            log_probs = _restrict(log_probs, limit <= step)
            best_scores, best = log_probs.max(dim=-1)
            best = best.masked_fill(finished, PAD_ID)
            scores += best_scores.double().masked_fill(finished, 0.0)
            tokens.append(best)
            if return_attention:
                attention.append(weights)
            finished |= best == EOS_ID
            if bool(finished.all()):
                break
            prev = best
        tokens = torch.stack(tokens, dim=1).tolist()
        attention = torch.stack(attention, dim=1) if return_attention else None
        hypotheses = []
        for b in range(batch):
            length = tokens[b].index(EOS_ID)
            hypotheses.append(
                _hypothesis(
                    tokens[b][:length], scores[b], alpha,
                    attention[b, : length + 1] if return_attention else None, int(src_lengths[b]),
                )
            )
    return hypotheses


# ================================================================================================
# Beam search
# ================================================================================================


def beam_search(
    model,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    beam_size: int = 5,
    alpha: float = SearchConfig.alpha,
    max_len_a: float = SearchConfig.max_len_a,
    max_len_b: float = SearchConfig.max_len_b,
    n_best: int = 1,
    return_attention: bool = True,
) -> list[list[Hypothesis]]:
    """Batched beam search: src [B, S], src_mask [B, S] -> for each sentence, its ``n_best`` best
    hypotheses by normalized score (best first); fewer only when the vocabulary allows no more.

    ``beam_size`` 1 *is* greedy search (``greedy_search``'s hypotheses, one per sentence): with
    one beam, the stopping rule of the module docstring could otherwise follow a live beam past
    the first EOS and return something longer than greedy search does.
    """
    src_lengths = _check_arguments(src, src_mask, max_len_a, max_len_b, alpha)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
    if isinstance(n_best, bool) or not isinstance(n_best, int) or not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be an integer in [1, beam_size={beam_size}], got {n_best!r}")
    if beam_size == 1:
        greedy = greedy_search(model, src, src_mask, max_len_a=max_len_a, max_len_b=max_len_b,
                               return_attention=return_attention, alpha=alpha)
        return [[hypothesis] for hypothesis in greedy]
    K = beam_size
    batch = src.shape[0]
    device = src.device
    source_lengths = src_lengths.tolist()
    # The n_best best finished hypotheses of each sentence so far, best first.
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    if batch == 0:
        return []

    with _inference(model):
        # The first step has one row per sentence (its K beams would all start alike from BOS);
        # its K best continuations become the K beams.
        encoded = model.encode(src, src_mask)
        shared = hasattr(encoded, "with_beams")  # the K beams of a sentence will share its encoding
        state = model.init_decoder_state(encoded)

        # The active sentences (original indices), their length limits, and K beams for each.
        sentence_ids = list(range(batch))
        retired = [False] * batch  # done sentences whose rows are still in the tensors
        limits = _max_lengths(src_lengths, max_len_a, max_len_b)
        # lp(L_max) of each active sentence: divides a live score into its best reachable normalized score.
        longest_penalty = torch.tensor([length_penalty(limit + 1, alpha) for limit in limits],
                                       dtype=torch.float64, device=device)
        scores = torch.zeros((batch, 1), dtype=torch.float64, device=device)  # [active, beams per sentence]
        tokens = torch.empty(batch, 0, dtype=torch.long, device=device)  # [N, t]
        attention = None  # [N, t, S] once the first step has run
        prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
        positions = torch.arange(2 * K, device=device)

        for step in count():
            active, beams = scores.shape  # beams: 1 at the first step, then K
            row_offsets = torch.arange(active, device=device).unsqueeze(1) * beams  # first row of each sentence
            log_probs, weights, state = model.decode_step(prev, state, encoded, step)
            vocab = log_probs.shape[-1]
            force_eos = None
            if step >= min(limits):
                force_eos = torch.tensor([limit <= step for limit in limits], device=device).repeat_interleave(beams)
            log_probs = _restrict(log_probs, force_eos)

            # The 2K best continuations of each sentence, over its K beams × V tokens. A beam adds
            # the same score to all its tokens, so they lie among the 2K best tokens of each beam:
            # select those in the model's precision first, then add the float64 scores to K·2K
            # candidates instead of K·V.
            per_beam = min(2 * K, vocab)
            beam_log_probs, beam_tokens = log_probs.topk(per_beam, dim=1)  # [N, 2K]
            candidates = (scores.unsqueeze(-1) + beam_log_probs.view(active, beams, per_beam))
            candidates = candidates.view(active, beams * per_beam)
            cand_scores, cand_index = candidates.topk(min(2 * K, beams * per_beam), dim=1)
            cand_rows = cand_index // per_beam + row_offsets  # the row in N each candidate extends
            cand_tokens = beam_tokens.view(active, beams * per_beam).gather(1, cand_index)
            if cand_scores.shape[1] < 2 * K:
                # A vocabulary under 2K tokens: dead (-inf) candidates fill up to 2K, so at least K
                # of them are not EOS (each beam has one EOS) and K beams go on.
                missing = 2 * K - cand_scores.shape[1]
                cand_scores = F.pad(cand_scores, (0, missing), value=float("-inf"))
                cand_rows = torch.cat([cand_rows, row_offsets.expand(active, missing)], dim=1)
                cand_tokens = F.pad(cand_tokens, (0, missing), value=PAD_ID)
            cand_eos = cand_tokens == EOS_ID
            if return_attention:
                step_attention = weights.unsqueeze(1)
                attention = step_attention if attention is None else torch.cat([attention, step_attention], dim=1)

            # EOS among the top K (and reachable) ends a hypothesis; keep the n_best best per sentence.
            ending = cand_eos[:, :K] & (cand_scores[:, :K] > float("-inf"))
            if bool(ending.any()):
                for i, j in ending.nonzero().tolist():
                    if retired[i]:
                        continue
                    sentence = sentence_ids[i]
                    kept = finished[sentence]
                    score = float(cand_scores[i, j])
                    if len(kept) == n_best and score / length_penalty(step + 1, alpha) <= kept[-1].normalized_score:
                        continue  # cannot enter the n_best
                    row = int(cand_rows[i, j])
                    kept.append(_hypothesis(
                        tokens[row].tolist(), score, alpha,
                        attention[row] if return_attention else None, source_lengths[sentence],
                    ))
                    kept.sort(key=lambda h: -h.normalized_score)  # stable: earlier first among equals
                    del kept[n_best:]

            # The K best candidates that do not end continue (EOS ones are pushed to the back).
            order = (positions[: cand_scores.shape[1]] + cand_eos * (2 * K)).topk(K, dim=1, largest=False).indices
            rows = cand_rows.gather(1, order)
            next_tokens = cand_tokens.gather(1, order)
            scores = cand_scores.gather(1, order)

            # Done: at the length limit, or no live beam can still beat the n_best-th finished one.
            best_live = scores.max(dim=1).values  # [active], ≤ 0
            reachable = torch.maximum(best_live, best_live / longest_penalty).tolist()
            done = []
            for i, (sentence, limit) in enumerate(zip(sentence_ids, limits)):
                kept = finished[sentence]
                done.append(
                    retired[i]
                    or limit <= step
                    or reachable[i] == float("-inf")  # no live beam left to extend
                    or (len(kept) == n_best and reachable[i] <= kept[-1].normalized_score)
                )
            if all(done):
                break
            retired = done
            keep = None
            if sum(done) >= max(1, RETIRED_FRACTION * len(done)):
                kept_rows = [i for i, is_done in enumerate(done) if not is_done]
                keep = torch.tensor(kept_rows, device=device)
                rows, next_tokens, scores = rows[keep], next_tokens[keep], scores[keep]
                sentence_ids = [sentence_ids[i] for i in kept_rows]
                limits = [limits[i] for i in kept_rows]
                longest_penalty = longest_penalty[keep]
                retired = [False] * len(kept_rows)
            rows = rows.reshape(-1)
            if shared:  # one row per sentence
                if keep is not None:
                    encoded = encoded.index_select(keep)
                if step == 0:
                    encoded = encoded.with_beams(K)
            elif keep is not None or step == 0:
                # One row per decoder row: the rows of a sentence share its encoding, so ``rows``
                # selects (and after the first step, repeats) the kept sentences' encodings.
                encoded = encoded.index_select(rows)
            state = state.index_select(rows)
            tokens = torch.cat([tokens[rows], next_tokens.reshape(-1, 1)], dim=1)
            if return_attention:
                attention = attention[rows]
            prev = next_tokens.reshape(-1)

    return finished
