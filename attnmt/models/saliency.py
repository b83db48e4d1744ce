"""Gradient saliency of a translation: how much each source token moves the score of each output
token, the usual second opinion beside attention.

As in the read-out of attention (``attnmt.models.readout``), the decoder is force-decoded: it reads
a given output ``y`` for a source ``x`` under teacher forcing. The score of output position t is
its log-probability, a function of the source token embeddings e = (e_1 … e_S), e_s ∈ R^E (the
output of the model's source embedding table, before any scale or positions the model adds)::

    f_t(e) = log p(y_t | y_<t, x)

The saliency of source token s for output token t, by each method:

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
same alone and in any batch. Integrated gradients
(Sundararajan et al., 2017) run from the all-zero embedding to e, by the midpoint rule; they are
complete, Σ_s a[t, s] ≈ f_t(e) − f_t(0), the error shrinking as m grows (docs/experiments.md,
"Integrated gradients' completeness", gives it on trained runs). Scores can be negative: a source
token can make an output token less likely.

For one pair, with complete rows of token ids as the read-out takes them::

    scores   [T, S] float32   row t: the saliency of every source token for output token t

Pairs are read in batches under a token budget, B · max(S, T) ≤ ``max_tokens``, longest first. For
each output position t one backward pass takes the gradient of Σ_b f_t over the batch's pairs b: in
eval mode, with the source mask, pair b's score depends on its own embeddings only, so the
gradient there is its own. A batch costs n (or m, or 1) forward passes, each with T backward passes.

The same registry of names holds the attributions made for attention models
(``attnmt.models.attribution``: ``value_norm``, ``erasure``, ``alti``, ``rollout``); ``saliency``
reads them batch by batch in the same way and yields the same [T, S] matrices, so every place that
takes a saliency method takes them too. A method that cannot read the model is refused before any
work, in one line that names the methods that can.

The source embedding table is found by ``source_embedding``: a model names it by a
``source_token_embedding`` attribute. When the table is shared with the target side, its first call
in a forward pass is the source's (every model here encodes before it decodes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attnmt.errors import ConfigError
from attnmt.models.attribution import attribution, not_applicable
from attnmt.models.common import log_probabilities
from attnmt.models.readout import (
    ATTNMT_SPECIALS,
    DEFAULT_MAX_TOKENS,
    ForcedBatch,
    SpecialIds,
    batch_plan,
    batches_in_eval_mode,
)
from attnmt.runtime.checks import is_int
from attnmt.runtime.choices import (
    ATTRIBUTION_METHODS,
    GRADIENT_METHODS,
    SALIENCY_METHODS,
    SALIENCY_NOISE,
    SALIENCY_SAMPLES,
    SALIENCY_STEPS,
)
from attnmt.runtime.device import available_memory

__all__ = ["ATTRIBUTION_METHODS", "DEFAULT_NOISE", "DEFAULT_SAMPLES", "DEFAULT_STEPS", "GRADIENT_METHODS",
           "SALIENCY_METHODS", "SaliencyOptions", "check_method_applies", "check_saliency_options", "saliency",
           "saliency_bytes", "source_embedding", "usable_methods", "why_not"]

DEFAULT_SAMPLES, DEFAULT_NOISE, DEFAULT_STEPS = SALIENCY_SAMPLES, SALIENCY_NOISE, SALIENCY_STEPS


def check_saliency_options(method: str, samples: int, noise: float, steps: int) -> None:
    """ConfigError naming the first option out of range."""
    if method not in SALIENCY_METHODS:
        raise ConfigError(f"saliency={method!r}: must be one of {', '.join(SALIENCY_METHODS)}")
    for name, value in (("samples", samples), ("steps", steps)):
        if not is_int(value) or not 1 <= value <= 10_000:
            raise ConfigError(f"saliency_{name}={value!r}: must be an integer from 1 to 10000")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 10:
        raise ConfigError(f"saliency_noise={noise!r}: must be a number from 0 to 10")


@dataclass(frozen=True)
class SaliencyOptions:
    """Which saliency, with its settings (module docstring): ``method`` one of SALIENCY_METHODS,
    ``samples`` and ``noise`` for SmoothGrad, ``steps`` for integrated gradients, ``seed`` for
    SmoothGrad's noise. Checked when made."""

    method: str = "gradient"
    samples: int = DEFAULT_SAMPLES
    noise: float = DEFAULT_NOISE
    steps: int = DEFAULT_STEPS
    seed: int = 0

    def __post_init__(self) -> None:
        check_saliency_options(self.method, self.samples, self.noise, self.steps)

    @classmethod
    def of(cls, value: SaliencyOptions | str) -> SaliencyOptions:
        """``value`` itself, or the default settings of the method it names."""
        return value if isinstance(value, SaliencyOptions) else cls(value)

    def describe(self) -> str:
        """The method and the settings it uses, e.g. "integrated gradients (50 steps)"."""
        if self.method in METHOD_NAMES:
            return METHOD_NAMES[self.method]
        if self.method == "smoothgrad":
            return f"SmoothGrad ({self.samples} samples, noise {self.noise:g})"
        if self.method == "integrated":
            return f"integrated gradients ({self.steps} steps)"
        return "gradient × input"

    def as_keywords(self) -> dict[str, Any]:
        """The keywords of ``saliency``."""
        return asdict(self)


#: how the attributions of attnmt.models.attribution are named on a page or in a file
METHOD_NAMES = {"value_norm": "value norms ‖α f(v)‖", "erasure": "erasure (leave one out)",
                "alti": "ALTI+ contributions", "rollout": "attention rollout"}


def why_not(model: nn.Module, method: str) -> str | None:
    """Why ``method`` cannot read ``model`` (one line), or None when it can."""
    reason = not_applicable(model, method)
    if reason is None and method in GRADIENT_METHODS and not isinstance(
            getattr(model, "source_token_embedding", None), nn.Module):
        reason = f"{method} needs the model's source embedding table, which {type(model).__name__} does not name"
    return reason


def usable_methods(model: nn.Module) -> list[str]:
    """The methods of SALIENCY_METHODS that can read ``model``."""
    return [method for method in SALIENCY_METHODS if why_not(model, method) is None]


def check_method_applies(model: nn.Module, method: str) -> None:
    """ConfigError, one line naming the methods that do apply, when ``method`` cannot read ``model``
    (rollout on an RNN, value_norm on a mechanism that hides its values)."""
    reason = why_not(model, method)
    if reason is not None:
        raise ConfigError(f"{reason}. For this model use one of: {', '.join(usable_methods(model)) or 'none'}")


def source_embedding(model: nn.Module) -> nn.Module:
    """The module whose output is the source token embeddings e (module docstring)."""
    module = getattr(model, "source_token_embedding", None)
    if not isinstance(module, nn.Module):
        raise ConfigError(f"{type(model).__name__} does not name its source embedding table "
                          "(a source_token_embedding attribute), so its saliency cannot be read")
    return module


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


def _points(method: str, batch: ForcedBatch, sources: Sequence[Sequence[int]], samples: int, noise: float,
            steps: int, seed: int) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    """The points where the gradient is taken, each a function of the batch's embeddings e
    [B, S, E] (module docstring)."""
    if method == "gradient":
        return [lambda e: e]
    if method == "integrated":
        def scaled(alpha: float) -> Callable[[torch.Tensor], torch.Tensor]:
            return lambda e: alpha * e
        return [scaled((k - 0.5) / steps) for k in range(1, steps + 1)]
    lengths = [len(sources[k]) for k in batch.pairs]
    generators = [torch.Generator().manual_seed(seed) for _ in batch.pairs]  # one per pair: batch-free draws

    sigmas: list[float] = []  # per pair, from its clean embeddings: the same for every copy

    def noisy(e: torch.Tensor) -> torch.Tensor:
        if not sigmas:
            sigmas.extend(noise * float(own.max() - own.min()) if own.numel() > 1 else noise
                          for own in (e[row, :length] for row, length in enumerate(lengths)))
        drawn = torch.zeros(e.shape, dtype=e.dtype)
        for row, (length, generator, sigma) in enumerate(zip(lengths, generators, sigmas)):
            standard = torch.randn(length, e.shape[-1], generator=generator, dtype=torch.float64)
            drawn[row, :length] = (sigma * standard).to(e.dtype)
        return e + drawn.to(e.device)
    return [noisy] * samples


def saliency_bytes(batch: int, src_len: int, out_len: int, vocab: int, embed_dim: int) -> int:
    """About what one batch holds at once: the logits, their log-softmax and its gradient (float32),
    and the embeddings, their gradient and the scores."""
    return 3 * batch * out_len * vocab * 4 + 3 * batch * src_len * embed_dim * 4 + batch * out_len * src_len * 4


def saliency(  # noqa: PLR0913 (the saliency settings, keyword-only, as SaliencyOptions holds them)
    model: nn.Module,
    sources: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    *,
    method: str = "gradient",
    samples: int = DEFAULT_SAMPLES,
    noise: float = DEFAULT_NOISE,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    specials: SpecialIds = ATTNMT_SPECIALS,
    progress: bool = False,
    before_batch: Callable[[], object] | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """``(k, scores [T, S])`` for every pair ``(sources[k], outputs[k])``, batch by batch (longest
    first); the rows are as in ``attnmt.models.readout.force_decode``. The model runs in eval mode
    and gets its mode back; its parameters' gradients are not touched. ``before_batch`` is called
    before each batch (a translator's thread chooser).

    ConfigError for an option out of range, or when a batch would need more than half the memory
    free on the model's device (before any work; a smaller ``max_tokens`` fits)."""
    check_saliency_options(method, samples, noise, steps)
    check_method_applies(model, method)
    device = next(model.parameters()).device
    plan = batch_plan(sources, outputs, max_tokens, caller="saliency")
    if method in ATTRIBUTION_METHODS:
        yield from _attributions(model, method, plan, sources, outputs, specials, max_tokens,
                                 (progress, before_batch))
        return
    table = source_embedding(model)
    vocab = _output_size(model)
    embed_dim = int(getattr(table, "embedding_dim", 0) or 0)
    available = available_memory(device)
    if plan and available is not None:
        needed = max(saliency_bytes(len(pairs), max(len(sources[k]) for k in pairs),
                                    max(len(outputs[k]) for k in pairs), vocab, embed_dim) for pairs in plan)
        if needed > available // 2:
            raise ConfigError(f"max_tokens={max_tokens}: saliency of a batch needs about {needed / 2**20:,.0f} MiB, "
                              f"more than half of the {available / 2**20:,.0f} MiB free on {device}; "
                              "use a smaller max_tokens")
    probe = _SourceProbe(table)
    try:
        for batch in batches_in_eval_mode(model, plan, sources, outputs, specials, device,
                                          f"saliency ({method})" if progress else None):
            if before_batch is not None:
                before_batch()
            real = _real_outputs(batch, outputs)
            total = torch.zeros(*batch.tgt_in.shape, batch.src.shape[1], dtype=torch.float64)
            points = _points(method, batch, sources, samples, noise, steps, seed)
            for point in points:
                total += _gradient_times_input(model, probe, point, batch, real, times_point=method == "smoothgrad")
            total /= len(points)
            for row, k in enumerate(batch.pairs):
                yield k, total[row, : len(outputs[k]), : len(sources[k])].numpy().astype(np.float32)
    finally:
        probe.close()

def _attributions(model: nn.Module, method: str, plan: list[list[int]], sources: Sequence[Sequence[int]],
                  outputs: Sequence[Sequence[int]], specials: SpecialIds, max_tokens: int,
                  reporting: tuple[bool, Callable[[], object] | None]) -> Iterator[tuple[int, np.ndarray]]:
    """``saliency`` for a method of ``attnmt.models.attribution``, batch by batch; ``reporting`` is
    (a progress bar or not, what to call before each batch)."""
    progress, before_batch = reporting
    device = next(model.parameters()).device
    for batch in batches_in_eval_mode(model, plan, sources, outputs, specials, device,
                                      f"attribution ({method})" if progress else None):
        if before_batch is not None:
            before_batch()
        scores = attribution(model, method, batch, sources, outputs, specials=specials, max_tokens=max_tokens)
        for row, k in enumerate(batch.pairs):
            matrix = scores[row, : len(outputs[k]), : len(sources[k])].numpy()
            if not np.isfinite(matrix).all():
                raise ConfigError(f"{method}: the scores of pair {k + 1} are not finite (the model's numbers "
                                  "overflowed); nothing was written for it")
            yield k, matrix.astype(np.float32)


def _real_outputs(batch: ForcedBatch, outputs: Sequence[Sequence[int]]) -> torch.Tensor:
    """[B, T] bool: True where output position t is a token of the pair's output, not padding."""
    lengths = torch.tensor([len(outputs[k]) for k in batch.pairs])
    return (torch.arange(batch.targets.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).to(batch.targets.device)


def _gradient_times_input(model: Any, probe: _SourceProbe, point: Any, batch: ForcedBatch, real: torch.Tensor,
                          times_point: bool = False) -> torch.Tensor:
    """∇_{e_s} f_t(point(e)) · e_s (or · point(e)_s with ``times_point``) for every pair, output
    position t and source position s: [B, T, S]."""
    probe.arm(point)
    # cuDNN's recurrent kernels have no backward pass in eval mode, which saliency needs (no dropout):
    # with cuDNN off, an LSTM or GRU on CUDA runs PyTorch's own kernels, which have one.
    with torch.enable_grad(), torch.backends.cudnn.flags(enabled=False):
        logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, return_attention="heads")
        if probe.leaf is None or probe.embeddings is None:
            raise RuntimeError("saliency: the model never called its source embedding table")
        scores = log_probabilities(logits).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)  # [B, T]
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
