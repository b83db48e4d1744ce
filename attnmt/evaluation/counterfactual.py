"""Does a mechanism's attention matter to what the RNN writes? Counterfactual attention, after
Jain & Wallace (2019, "Attention is not Explanation").

The translator force-decodes its own output y. At each decoder step t, with the decoder's state
exactly as the model's own weights left it, the attention weights α_t [S] are replaced by each of

    permuted    α_t permuted at random over the real source positions (seeded)
    uniform     1/S on every real source position
    other step  α_t' of another step t' ≠ t of the same sentence (drawn at random, seeded)

through the same pin that ``attnmt serve`` uses (``attnmt.decoding.interventions.pinned_attention``;
c_t = Σ_s w_s v_s with the mechanism's own values), and the next-word distribution q is compared
with the model's own p::

    total variation   TV(p, q) = ½ Σ_v |p_v − q_v|                        in [0, 1]
    Jensen–Shannon    JS(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m),  m = ½(p + q)  in bits, in [0, 1]
    changed           [argmax q ≠ argmax p]

Each figure is the mean over the output tokens. It holds for the RNN's mechanisms whose context
is Σ_s α_s v_s with one head (``can_intervene``), and for each cross-attention head of a Transformer
(``head``: every other head and layer attends as its own); the others are refused in one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnmt.decoding.interventions import can_intervene, pinned_attention, watched_step
from attnmt.errors import ConfigError
from attnmt.models.head_gates import Head

__all__ = ["COUNTERFACTUALS", "Counterfactual", "counterfactual_attention", "divergences"]

COUNTERFACTUALS = ("permuted", "uniform", "other step")


@dataclass
class Counterfactual:
    """Means over output tokens (module docstring) of one kind of replaced attention."""

    total_variation: float
    jensen_shannon: float
    changed: float
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"total_variation": self.total_variation, "jensen_shannon": self.jensen_shannon,
                "changed": self.changed, "tokens": self.tokens}

    @staticmethod
    def mean(items: Sequence[Counterfactual]) -> Counterfactual:
        """The token-weighted mean of several sentences' figures."""
        tokens = sum(item.tokens for item in items)
        if not tokens:
            return Counterfactual(math.nan, math.nan, math.nan, 0)
        total_variation, jensen_shannon, changed = (sum(getattr(item, name) * item.tokens for item in items) / tokens
                                                    for name in ("total_variation", "jensen_shannon", "changed"))
        return Counterfactual(total_variation, jensen_shannon, changed, tokens)


def divergences(log_p: torch.Tensor, log_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TV, JS (bits) and argmax change of each row of q [N, V] against p [V] (log-probabilities)."""
    p, q = log_p.double().exp().expand_as(log_q), log_q.double().exp()
    total_variation = 0.5 * (p - q).abs().sum(-1)
    m = 0.5 * (p + q)
    log_m = m.clamp_min(1e-300).log()

    def kl(a: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
        return torch.where(a > 0, a * (log_a - log_m), torch.zeros_like(a)).sum(-1)

    jensen_shannon = (0.5 * kl(p, log_p.double().expand_as(log_q)) + 0.5 * kl(q, log_q.double())) / math.log(2)
    changed = (log_q.argmax(-1) != log_p.argmax(-1)).double()
    return total_variation, jensen_shannon.clamp(0.0, 1.0), changed


def counterfactual_attention(model: Any, source: Sequence[int], output: Sequence[int], *, start: int,
                             seed: int = 0, head: Head | None = None) -> dict[str, Counterfactual]:
    """The three counterfactuals of one pair (complete rows of ids) on attnmt's RNN ``model``, or on
    cross-attention head ``head`` of attnmt's Transformer."""
    if head is not None and head.part != "cross":
        raise ConfigError(f"{head.label()}: counterfactual attention replaces weights over the source: "
                          "a cross-attention head")
    if not can_intervene(model):
        raise ConfigError("counterfactual attention replaces one head's weights over the source in an RNN; "
                          "this model has several heads, no attention of its own, or is not attnmt's RNN")
    device = next(model.parameters()).device
    generator = np.random.default_rng(seed)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            src = torch.tensor([list(source)], device=device)
            encoded = model.encode(src, torch.ones_like(src, dtype=torch.bool))
            inputs = [start, *output[:-1]]
            own = _own_steps(model, encoded, inputs, head)  # [(log p [V], α [S], state before)]
            kinds = _kinds(len(output), len(source), [weights for _, weights, _ in own], generator)
            figures: dict[str, list[torch.Tensor]] = {kind: [] for kind in kinds}
            several = encoded.index_select(torch.zeros(len(kinds), dtype=torch.long, device=device))
            for step, (log_p, _, state) in enumerate(own):
                replaced = torch.stack([kinds[kind][step] for kind in kinds]).to(device)
                rows = state.index_select(torch.zeros(len(kinds), dtype=torch.long, device=device))
                token = torch.full((len(kinds),), inputs[step], dtype=torch.long, device=device)
                with pinned_attention(model, step, replaced, head=head):
                    log_q, _, _ = model.decode_step(token, rows, several, step)
                measured = divergences(log_p, log_q.cpu())
                for index, kind in enumerate(kinds):
                    figures[kind].append(torch.stack([values[index] for values in measured]))
    finally:
        model.train(was_training)
    result = {}
    for kind, values in figures.items():
        stacked = torch.stack(values) if values else torch.zeros(0, 3)
        means = stacked.mean(0) if len(values) else torch.full((3,), math.nan)
        result[kind] = Counterfactual(float(means[0]), float(means[1]), float(means[2]), len(values))
    return result


def _own_steps(model: Any, encoded: Any, inputs: Sequence[int], head: Head | None = None
               ) -> list[tuple[torch.Tensor, torch.Tensor, Any]]:
    """The model's own steps: each step's log-probabilities [V], weights [S] (the mechanism's, or
    ``head``'s) and the state it started from."""
    device = encoded.states.device
    state = model.init_decoder_state(encoded)
    steps = []
    for step, token in enumerate(inputs):
        if head is None:
            log_p, weights, next_state = model.decode_step(torch.tensor([token], device=device), state, encoded, step)
            weights = weights[0]
        else:
            with watched_step(model, step, head) as seen:
                log_p, _, next_state = model.decode_step(torch.tensor([token], device=device), state, encoded, step)
            weights = seen[0].weights
        steps.append((log_p[0].cpu(), weights.cpu(), state))
        state = next_state
    return steps


def _kinds(steps: int, positions: int, own: list[torch.Tensor], generator: np.random.Generator
           ) -> dict[str, list[torch.Tensor]]:
    """The replacement weights of every step, per kind (``other step`` only with two steps or more)."""
    kinds: dict[str, list[torch.Tensor]] = {"permuted": [], "uniform": []}
    for weights in own:
        kinds["permuted"].append(weights[torch.from_numpy(generator.permutation(positions))])
        kinds["uniform"].append(torch.full((positions,), 1.0 / positions, dtype=weights.dtype))
    if steps > 1:
        kinds["other step"] = []
        for step in range(steps):
            other = int(generator.integers(steps - 1))
            kinds["other step"].append(own[other + (other >= step)])
    return kinds
