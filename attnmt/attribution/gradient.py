"""Gradient attributions: how much each source token moves the score of each output token.

The decoder is force-decoded (``attnmt.models.readout``): it reads a given output ``y`` for a
source ``x`` under teacher forcing. The score f_t of output position t (``attnmt.attribution.forced``:
log p(y_t | y_<t, x), or its contrast with a foil) is a function of the source token embeddings
e = (e_1 … e_S), e_s ∈ R^E (the output of the model's source embedding table, before any scale or
positions the model adds). The attribution of source token s for output token t, by each method::

    gradient      a[t, s] = ∇_{e_s} f_t(e) · e_s                          (gradient × input)
    smoothgrad    a[t, s] = (1/n) Σ_k ∇_{e_s} f_t(ẽ_k) · ẽ_{k,s},  ẽ_k = e + ε_k,  ε_k ~ N(0, σ² I)
    integrated    a[t, s] = e_s · (1/m) Σ_k ∇_{e_s} f_t(α_k e),     α_k = (k − ½) / m,  k = 1 … m

Gradient × input is Simonyan et al. (2014)'s gradient taken times the input. SmoothGrad (Smilkov
et al., 2017) averages over n noisy copies of the pair's embeddings; here it smooths gradient ×
input, so each copy's gradient is multiplied by that copy (as Captum's
``NoiseTunnel(InputXGradient)``). σ is ``noise`` times the range of the pair's own source
embeddings (max − min over every component of its real tokens), the paper's "noise level", which it
recommends at 10–20%; the default is 15%. Each pair draws its noise from its own generator seeded
with ``seed`` (standard normal draws in float64, [S_pair, E] per copy), so its SmoothGrad is the
same alone and in any batch. Integrated gradients (Sundararajan et al., 2017) run from the all-zero
embedding to e, by the midpoint rule; they are complete, Σ_s a[t, s] ≈ f_t(e) − f_t(0), the error
shrinking as m grows (docs/experiments.md, "Integrated gradients' completeness", gives it on
trained runs). Scores can be negative: a source token can make an output token less likely.

For each output position t one backward pass takes the gradient of Σ_b f_t over the batch's pairs
b: in eval mode, with the source mask, pair b's score depends on its own embeddings only, so the
gradient there is its own. A batch costs n (or m, or 1) forward passes, each with T backward passes.

The source embedding table is found by ``source_embedding``: a model names it by a
``source_token_embedding`` attribute. When the table is shared with the target side, its first call
in a forward pass is the source's (every model here encodes before it decodes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from attnmt.attribution.forced import Request, batch_foils, explained_scores
from attnmt.errors import ConfigError
from attnmt.models.common import log_probabilities
from attnmt.models.readout import ForcedBatch
from attnmt.runtime.device import available_memory

__all__ = ["applies", "compute", "memory_bytes", "prepare", "source_embedding"]


def applies(model: Any, name: str) -> str | None:
    """Every model that names its source embedding table."""
    if not isinstance(getattr(model, "source_token_embedding", None), nn.Module):
        return f"{name} needs the model's source embedding table, which {type(model).__name__} does not name"
    return None


def source_embedding(model: nn.Module) -> nn.Module:
    """The module whose output is the source token embeddings e (module docstring)."""
    module = getattr(model, "source_token_embedding", None)
    if not isinstance(module, nn.Module):
        raise ConfigError(f"{type(model).__name__} does not name its source embedding table "
                          "(a source_token_embedding attribute), so its saliency cannot be read")
    return module


def memory_bytes(batch: int, src_len: int, out_len: int, vocab: int, embed_dim: int) -> int:
    """About what one batch holds at once: the logits, their log-softmax and its gradient (float32),
    and the embeddings, their gradient and the scores."""
    return 3 * batch * out_len * vocab * 4 + 3 * batch * src_len * embed_dim * 4 + batch * out_len * src_len * 4


def prepare(name: str, model: nn.Module, plan: Sequence[Sequence[int]], request: Request) -> None:
    """ConfigError before any work when a batch of ``plan`` would need more than half the memory
    free on the model's device (a smaller ``max_tokens`` fits)."""
    device = next(model.parameters()).device
    available = available_memory(device)
    if not plan or available is None:
        return
    vocab = _output_size(model)
    embed_dim = int(getattr(source_embedding(model), "embedding_dim", 0) or 0)
    sources, outputs = request.sources, request.outputs
    needed = max(memory_bytes(len(pairs), max(len(sources[k]) for k in pairs), max(len(outputs[k]) for k in pairs),
                              vocab, embed_dim) for pairs in plan)
    if needed > available // 2:
        raise ConfigError(f"max_tokens={request.max_tokens}: saliency of a batch needs about {needed / 2**20:,.0f} "
                          f"MiB, more than half of the {available / 2**20:,.0f} MiB free on {device}; "
                          "use a smaller max_tokens")


def compute(name: str, model: nn.Module, batch: ForcedBatch, request: Request) -> torch.Tensor:
    """The scores [B, T, S] of ``name`` for one batch (module docstring), float64 on the CPU."""
    probe = _SourceProbe(source_embedding(model))
    try:
        real = _real_outputs(batch, request.outputs)
        foils = batch_foils(request.foils_of(batch.pairs), batch.targets.shape[1], batch.targets.device)
        total = torch.zeros(*batch.tgt_in.shape, batch.src.shape[1], dtype=torch.float64)
        points = _points(name, batch, request)
        for point in points:
            total += _gradient_times_input(model, probe, point, batch, real, foils, times_point=name == "smoothgrad")
        return total / len(points)
    finally:
        probe.close()


class _SourceProbe:
    """Makes the next call of the source embedding table return a point chosen from its output e,
    as a leaf tensor whose gradient is read: ``arm(point)`` then a forward pass; ``embeddings``
    is e, ``leaf`` the point."""

    def __init__(self, table: nn.Module) -> None:
        self._point: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.embeddings: torch.Tensor | None = None
        self.leaf: torch.Tensor | None = None
        self._handle = table.register_forward_hook(self._hook)

    def arm(self, point: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self._point = point

    def _hook(self, module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor | None:
        if self._point is None:  # a later call: the target side of a shared table
            return None
        point, self._point = self._point, None
        self.embeddings = output.detach()
        at_least_float32 = self.embeddings if self.embeddings.dtype == torch.float64 else self.embeddings.float()
        self.leaf = point(at_least_float32).to(output.dtype).detach().requires_grad_(True)
        return self.leaf

    def close(self) -> None:
        self._handle.remove()


def _points(name: str, batch: ForcedBatch, request: Request) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    """The points where the gradient is taken, each a function of the batch's embeddings e
    [B, S, E] (module docstring)."""
    options = request.options
    if name == "gradient":
        return [lambda e: e]
    if name == "integrated":
        def scaled(alpha: float) -> Callable[[torch.Tensor], torch.Tensor]:
            return lambda e: alpha * e
        return [scaled((k - 0.5) / options.steps) for k in range(1, options.steps + 1)]
    lengths = [len(request.sources[k]) for k in batch.pairs]
    generators = [torch.Generator().manual_seed(options.seed) for _ in batch.pairs]  # one per pair: batch-free draws

    sigmas: list[float] = []  # per pair, from its clean embeddings: the same for every copy

    def noisy(e: torch.Tensor) -> torch.Tensor:
        if not sigmas:
            sigmas.extend(options.noise * float(own.max() - own.min()) if own.numel() > 1 else options.noise
                          for own in (e[row, :length] for row, length in enumerate(lengths)))
        drawn = torch.zeros(e.shape, dtype=e.dtype)
        for row, (length, generator, sigma) in enumerate(zip(lengths, generators, sigmas)):
            standard = torch.randn(length, e.shape[-1], generator=generator, dtype=torch.float64)
            drawn[row, :length] = (sigma * standard).to(e.dtype)
        return e + drawn.to(e.device)
    return [noisy] * options.samples


def _real_outputs(batch: ForcedBatch, outputs: Sequence[Sequence[int]]) -> torch.Tensor:
    """[B, T] bool: True where output position t is a token of the pair's output, not padding."""
    lengths = torch.tensor([len(outputs[k]) for k in batch.pairs])
    return (torch.arange(batch.targets.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).to(batch.targets.device)


def _gradient_times_input(model: Any, probe: _SourceProbe, point: Any, batch: ForcedBatch, real: torch.Tensor,
                          foils: tuple[torch.Tensor, torch.Tensor] | None, times_point: bool = False) -> torch.Tensor:
    """∇_{e_s} f_t(point(e)) · e_s (or · point(e)_s with ``times_point``) for every pair, output
    position t and source position s: [B, T, S]."""
    probe.arm(point)
    # cuDNN's recurrent kernels have no backward pass in eval mode, which saliency needs (no dropout):
    # with cuDNN off, an LSTM or GRU on CUDA runs PyTorch's own kernels, which have one.
    with torch.enable_grad(), torch.backends.cudnn.flags(enabled=False):
        logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, return_attention="heads")
        if probe.leaf is None or probe.embeddings is None:
            raise RuntimeError("saliency: the model never called its source embedding table")
        scores = explained_scores(log_probabilities(logits), batch.targets, foils)  # [B, T]
        scores = scores * real
        embeddings = probe.leaf.detach() if times_point else probe.embeddings
        embeddings = embeddings if embeddings.dtype == torch.float64 else embeddings.float()
        rows = []
        for t in range(scores.shape[1]):
            (gradient,) = torch.autograd.grad(scores[:, t].sum(), probe.leaf, retain_graph=t + 1 < scores.shape[1])
            rows.append((gradient.to(embeddings.dtype) * embeddings).sum(-1))  # [B, S]
    probe.leaf = probe.embeddings = None
    return torch.stack(rows, dim=1).double().cpu()


def _output_size(model: nn.Module) -> int:
    """The size V of the output vocabulary, for the memory estimate."""
    for name in ("tgt_vocab_size", "vocab_size"):
        value = getattr(model, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    projection = getattr(model, "output_projection", None)
    if isinstance(projection, nn.Linear):
        return projection.out_features
    config = getattr(getattr(model, "model", None), "config", None)
    return int(getattr(config, "vocab_size", 0) or 0)
