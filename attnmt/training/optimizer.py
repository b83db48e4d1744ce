"""Adam (Kingma & Ba 2015) in the form ``training.adam`` names: the same update, three ways to run it.

For every weight θ with gradient g, at step t (β₁ = 0.9, β₂ = 0.999, ε = 1e-8, lr α)::

    m ← β₁ m + (1 − β₁) g        v ← β₂ v + (1 − β₂) g²
    θ ← θ − α · (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)

- ``fused``: one kernel walks every weight once (PyTorch's ``fused=True``); on a CPU a step of the
  fast RNN recipe's 2.1M weights takes a fraction of the time of the other forms
  (``benchmarks/experiments/step_ab.py --lever adam``; docs/experiments.md, "A training step's speed");
- ``foreach``: each operation above runs once over the list of weights;
- ``for_loop``: the operations run weight by weight, a dozen small kernels each;
- ``pytorch``: PyTorch's own choice, foreach on CUDA and for_loop elsewhere. Runs saved before
  the option existed trained this way, and resume this way (``attnmt.runs.folder``).

The forms round differently (float32 results differ by about 1e-7), so one seed trains slightly
different numbers with each; their optimizer states are the same and load into one another.

``training.weight_decay`` λ > 0 makes it AdamW (Loshchilov & Hutter 2019): before the update above,
every weight matrix shrinks, decoupled from the gradient and its moments::

    θ ← θ − α λ θ

Only weights with two or more dimensions decay (matrices and embedding tables); biases and
LayerNorm gains do not. With λ = 0 (the default, and every run saved before the option) the
optimizer is plain Adam with one group of weights, as before.
"""

from __future__ import annotations

import torch

from attnmt.runs.run_config import ADAM_FORMS

__all__ = ["build_adam", "load_adam_state"]


def _form_options(form: str) -> dict[str, bool | None]:
    """Adam's ``foreach`` and ``fused`` arguments for ``form`` (None: PyTorch chooses)."""
    if form not in ADAM_FORMS:
        raise ValueError(f"Adam: form must be one of {', '.join(ADAM_FORMS)}, got {form!r}")
    return {"foreach": {"foreach": True, "for_loop": False}.get(form), "fused": True if form == "fused" else None}


def build_adam(model: torch.nn.Module, lr: float, form: str, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """Adam over ``model``'s parameters, in ``form`` (``ADAM_FORMS``); AdamW with decoupled
    ``weight_decay`` on the weight matrices when it is above 0."""
    options = _form_options(form)
    if weight_decay == 0.0:
        return torch.optim.Adam(model.parameters(), lr=lr, **options)  # type: ignore[arg-type]
    parameters = list(model.parameters())
    groups = [{"params": [p for p in parameters if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, **options)  # type: ignore[arg-type]


def load_adam_state(optimizer: torch.optim.Optimizer, state: dict, form: str) -> None:
    """Continue from a saved ``optimizer.state_dict()`` in ``form``: ``load_state_dict`` alone would
    also take the saved form (each parameter group holds its ``foreach`` and ``fused``)."""
    optimizer.load_state_dict(state)
    for group in optimizer.param_groups:
        group.update(_form_options(form))
