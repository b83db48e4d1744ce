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

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import count
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attnmt.data.special_tokens import BOS_ID, EOS_ID, PAD_ID
from attnmt.runs.run_config import SearchConfig

__all__ = ["Hypothesis", "beam_search", "greedy_search", "length_penalty"]

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
def _inference(model: Any) -> Iterator[None]:
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


def _check_arguments(src: torch.Tensor, src_mask: torch.Tensor, max_len_a: float, max_len_b: float,
                     alpha: float) -> torch.Tensor:
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


def _hypothesis(tokens: Sequence[int], score: float | torch.Tensor, alpha: float, attention_rows: Any,
                source_length: int) -> Hypothesis:
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
    model: Any,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len_a: float = SearchConfig.max_len_a,
    max_len_b: float = SearchConfig.max_len_b,
    return_attention: bool = True,
    alpha: float = SearchConfig.alpha,
    prefix: Sequence[Sequence[int]] | None = None,
) -> list[Hypothesis]:
    """The most probable next token at every step, for all B sentences at once.

    src [B, S], src_mask [B, S] -> B hypotheses in input order. ``alpha`` only sets
    ``normalized_score`` (comparable with beam search's). ``prefix``: for each sentence, tokens
    (without BOS and EOS) its output begins with, whatever the model prefers; the search goes on
    from there, and the score counts the forced tokens' log-probabilities too. A prefix longer
    than the length limit moves the limit to its end.
    """
    src_lengths = _check_arguments(src, src_mask, max_len_a, max_len_b, alpha)
    batch = src.shape[0]
    max_lengths = _max_lengths(src_lengths, max_len_a, max_len_b)
    forced = None
    if prefix is not None:
        if len(prefix) != batch or any(int(token) in (PAD_ID, BOS_ID, EOS_ID) for row in prefix for token in row):
            raise ValueError(f"prefix must give {batch} lists of tokens without PAD, BOS or EOS")
        max_lengths = [max(limit, len(row)) for limit, row in zip(max_lengths, prefix)]
        width = max((len(row) for row in prefix), default=0)
        forced = torch.full((batch, width), -1, dtype=torch.long, device=src.device)
        for b, row in enumerate(prefix):
            forced[b, : len(row)] = torch.as_tensor(list(row), dtype=torch.long)
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
            if forced is not None and step < forced.shape[1]:
                use = forced[:, step] >= 0
                chosen = forced[:, step].clamp(min=0)
                best = torch.where(use, chosen, best)
                best_scores = torch.where(use, log_probs.gather(1, chosen[:, None]).squeeze(1), best_scores)
            best = best.masked_fill(finished, PAD_ID)
            scores += best_scores.double().masked_fill(finished, 0.0)
            tokens.append(best)
            if return_attention:
                attention.append(weights)
            finished |= best == EOS_ID
            if bool(finished.all()):
                break
            prev = best
        rows = torch.stack(tokens, dim=1).tolist()
        weights_of = torch.stack(attention, dim=1) if return_attention else None
        hypotheses = []
        for b in range(batch):
            length = rows[b].index(EOS_ID)
            hypotheses.append(
                _hypothesis(
                    rows[b][:length], scores[b], alpha,
                    weights_of[b, : length + 1] if weights_of is not None else None, int(src_lengths[b]),
                )
            )
    return hypotheses


# ================================================================================================
# Beam search
# ================================================================================================


def beam_search(  # noqa: PLR0913 (the search settings of SearchConfig, each a keyword)
    model: Any,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    beam: int = 5,
    alpha: float = SearchConfig.alpha,
    max_len_a: float = SearchConfig.max_len_a,
    max_len_b: float = SearchConfig.max_len_b,
    n_best: int = 1,
    return_attention: bool = True,
) -> list[list[Hypothesis]]:
    """Batched beam search: src [B, S], src_mask [B, S] -> for each sentence, its ``n_best`` best
    hypotheses by normalized score (best first); fewer only when the vocabulary allows no more.

    ``beam`` (the beam size K) 1 *is* greedy search (``greedy_search``'s hypotheses, one per
    sentence): with one beam, the stopping rule of the module docstring could otherwise follow a
    live beam past the first EOS and return something longer than greedy search does.
    """
    src_lengths = _check_arguments(src, src_mask, max_len_a, max_len_b, alpha)
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise ValueError(f"beam must be a positive integer, got {beam!r}")
    if isinstance(n_best, bool) or not isinstance(n_best, int) or not 1 <= n_best <= beam:
        raise ValueError(f"n_best must be an integer in [1, beam={beam}], got {n_best!r}")
    if beam == 1:
        greedy = greedy_search(model, src, src_mask, max_len_a=max_len_a, max_len_b=max_len_b,
                               return_attention=return_attention, alpha=alpha)
        return [[hypothesis] for hypothesis in greedy]
    if src.shape[0] == 0:
        return []
    # The n_best best finished hypotheses of each sentence so far, best first.
    finished: list[list[Hypothesis]] = [[] for _ in range(src.shape[0])]
    with _inference(model):
        beams = _Beams(model, src, src_mask, _max_lengths(src_lengths, max_len_a, max_len_b), alpha, beam)
        for step in count():
            # 1. One decoder step for every live row (one row per sentence at the first step).
            log_probs, weights, beams.state = model.decode_step(beams.prev, beams.state, beams.encoded, step)
            log_probs = _restrict(log_probs, beams.eos_only(step))
            if return_attention:
                beams.record_attention(weights)
            # 2. The 2K best continuations of each sentence over its beams.
            candidates = _best_continuations(log_probs, beams.scores, beam)
            # 3. Those ending in EOS among the top K become hypotheses (the n_best best are kept).
            beams.finish(candidates, finished, step, n_best, src_lengths.tolist(), return_attention)
            # 4. The K best that do not end continue.
            rows, next_tokens = beams.continue_best(candidates)
            # 5. Sentences that can no longer improve are done; the tensors follow the rows kept.
            done = beams.done(finished, step, n_best)
            if all(done):
                break
            beams.advance(rows, next_tokens, done, step, return_attention)
    return finished


@dataclass
class _Candidates:
    """The 2K best continuations of each active sentence, [active, 2K] each: their total scores
    (float64), the decoder row each extends, its token, and whether that token is EOS."""

    scores: torch.Tensor
    rows: torch.Tensor
    tokens: torch.Tensor
    eos: torch.Tensor


def _best_continuations(log_probs: torch.Tensor, scores: torch.Tensor, K: int) -> _Candidates:
    """The 2K best continuations of each sentence, over its beams × V tokens. A beam adds the same
    score to all its tokens, so they lie among the 2K best tokens of each beam: those are selected
    in the model's precision first, and the float64 scores added to K·2K candidates, not K·V."""
    active, beams = scores.shape  # beams: 1 at the first step, then K
    row_offsets = torch.arange(active, device=scores.device).unsqueeze(1) * beams  # first row of each sentence
    per_beam = min(2 * K, log_probs.shape[-1])
    beam_log_probs, beam_tokens = log_probs.topk(per_beam, dim=1)  # [N, 2K]
    candidates = (scores.unsqueeze(-1) + beam_log_probs.view(active, beams, per_beam)).view(active, beams * per_beam)
    cand_scores, cand_index = candidates.topk(min(2 * K, beams * per_beam), dim=1)
    cand_rows = cand_index // per_beam + row_offsets
    cand_tokens = beam_tokens.view(active, beams * per_beam).gather(1, cand_index)
    if cand_scores.shape[1] < 2 * K:
        # A vocabulary under 2K tokens: dead (-inf) candidates fill up to 2K, so at least K of them
        # are not EOS (each beam has one EOS) and K beams go on.
        missing = 2 * K - cand_scores.shape[1]
        cand_scores = F.pad(cand_scores, (0, missing), value=float("-inf"))
        cand_rows = torch.cat([cand_rows, row_offsets.expand(active, missing)], dim=1)
        cand_tokens = F.pad(cand_tokens, (0, missing), value=PAD_ID)
    return _Candidates(cand_scores, cand_rows, cand_tokens, cand_tokens == EOS_ID)


class _Beams:
    """The live part of a batched beam search: the active sentences (their original indices and
    length limits), K beams each (scores [active, K], tokens and attention [N, t, ...], N = active·K
    rows), the encoding and the decoder state. ``retired``: done sentences whose rows still ride
    along until enough of them have ended (``RETIRED_FRACTION``)."""

    def __init__(self, model: Any, src: torch.Tensor, src_mask: torch.Tensor, limits: list[int], alpha: float,
                 K: int) -> None:
        batch, device = src.shape[0], src.device
        self.K, self.alpha = K, alpha
        self.encoded = model.encode(src, src_mask)
        self.shared = hasattr(self.encoded, "with_beams")  # the K beams of a sentence will share its encoding
        self.state = model.init_decoder_state(self.encoded)
        self.sentence_ids = list(range(batch))
        self.retired = [False] * batch
        self.limits = limits
        # lp(L_max) of each active sentence: divides a live score into its best reachable normalized score.
        self.longest_penalty = torch.tensor([length_penalty(limit + 1, alpha) for limit in limits],
                                            dtype=torch.float64, device=device)
        # The first step has one row per sentence (its K beams would all start alike from BOS).
        self.scores = torch.zeros((batch, 1), dtype=torch.float64, device=device)
        self.tokens = torch.empty(batch, 0, dtype=torch.long, device=device)
        self.attention: torch.Tensor | None = None  # [N, t, S] once the first step has run
        self.prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
        self.positions = torch.arange(2 * K, device=device)

    def eos_only(self, step: int) -> torch.Tensor | None:
        """The rows whose sentence reached its length limit (EOS is their only choice), or None."""
        if step < min(self.limits):
            return None
        beams = self.scores.shape[1]
        return torch.tensor([limit <= step for limit in self.limits], device=self.scores.device) \
            .repeat_interleave(beams)

    def record_attention(self, weights: torch.Tensor) -> None:
        step_attention = weights.unsqueeze(1)
        self.attention = step_attention if self.attention is None else torch.cat([self.attention, step_attention], 1)

    def finish(self, candidates: _Candidates, finished: list[list[Hypothesis]], step: int, n_best: int,
               source_lengths: list[int], return_attention: bool) -> None:
        """Each reachable candidate ending in EOS among the top K becomes a hypothesis of its sentence,
        when it enters the sentence's ``n_best`` best.

        The endings' places, scores, rows and tokens reach the host in one transfer each, not one
        per hypothesis: on a GPU every read waits for the device (``benchmarks/gpu.py decode
        --count-syncs`` counted 241 reads a step when they came one at a time)."""
        ending = candidates.eos[:, : self.K] & (candidates.scores[:, : self.K] > float("-inf"))
        places = ending.nonzero()  # [M, 2]: (sentence, candidate) of each ending, row by row
        if places.shape[0] == 0:
            return
        sentences, columns = places.unbind(1)
        rows = candidates.rows[sentences, columns]
        scores, row_ids = candidates.scores[sentences, columns].tolist(), rows.tolist()
        tokens = self.tokens[rows].tolist()
        for k, i in enumerate(sentences.tolist()):
            if self.retired[i]:
                continue
            sentence = self.sentence_ids[i]
            kept = finished[sentence]
            score = scores[k]
            if len(kept) == n_best and score / length_penalty(step + 1, self.alpha) <= kept[-1].normalized_score:
                continue  # cannot enter the n_best
            row = row_ids[k]
            attention = self.attention[row] if return_attention and self.attention is not None else None
            kept.append(_hypothesis(tokens[k], score, self.alpha, attention, source_lengths[sentence]))
            kept.sort(key=lambda h: -h.normalized_score)  # stable: earlier first among equals
            del kept[n_best:]

    def continue_best(self, candidates: _Candidates) -> tuple[torch.Tensor, torch.Tensor]:
        """The K best candidates that do not end (EOS ones are pushed to the back): their rows and
        tokens [active, K]; their scores become the beams' scores."""
        K = self.K
        order = (self.positions[: candidates.scores.shape[1]] + candidates.eos * (2 * K)) \
            .topk(K, dim=1, largest=False).indices
        self.scores = candidates.scores.gather(1, order)
        return candidates.rows.gather(1, order), candidates.tokens.gather(1, order)

    def done(self, finished: list[list[Hypothesis]], step: int, n_best: int) -> list[bool]:
        """Per active sentence: retired, at its length limit, without a live beam, or with n_best
        hypotheses that no live beam can still beat (its best reachable normalized score)."""
        best_live = self.scores.max(dim=1).values  # [active], ≤ 0
        reachable = torch.maximum(best_live, best_live / self.longest_penalty).tolist()
        done = []
        for i, (sentence, limit) in enumerate(zip(self.sentence_ids, self.limits)):
            kept = finished[sentence]
            done.append(
                self.retired[i]
                or limit <= step
                or reachable[i] == float("-inf")  # no live beam left to extend
                or (len(kept) == n_best and reachable[i] <= kept[-1].normalized_score)
            )
        return done

    def advance(self, rows: torch.Tensor, next_tokens: torch.Tensor, done: list[bool], step: int,
                return_attention: bool) -> None:
        """Move to the next step: done sentences retire, and leave the tensors once they are
        ``RETIRED_FRACTION`` of the active ones; encoding, state, tokens and attention follow ``rows``."""
        self.retired = done
        keep = None
        if sum(done) >= max(1, RETIRED_FRACTION * len(done)):
            kept_rows = [i for i, is_done in enumerate(done) if not is_done]
            keep = torch.tensor(kept_rows, device=rows.device)
            rows, next_tokens, self.scores = rows[keep], next_tokens[keep], self.scores[keep]
            self.sentence_ids = [self.sentence_ids[i] for i in kept_rows]
            self.limits = [self.limits[i] for i in kept_rows]
            self.longest_penalty = self.longest_penalty[keep]
            self.retired = [False] * len(kept_rows)
        rows = rows.reshape(-1)
        if self.shared:  # one row per sentence
            if keep is not None:
                self.encoded = self.encoded.index_select(keep)
            if step == 0:
                self.encoded = self.encoded.with_beams(self.K)
        elif keep is not None or step == 0:
            # One row per decoder row: the rows of a sentence share its encoding, so ``rows``
            # selects (and after the first step, repeats) the kept sentences' encodings.
            self.encoded = self.encoded.index_select(rows)
        self.state = self.state.index_select(rows)
        self.tokens = torch.cat([self.tokens[rows], next_tokens.reshape(-1, 1)], dim=1)
        if return_attention and self.attention is not None:
            self.attention = self.attention[rows]
        self.prev = next_tokens.reshape(-1)
