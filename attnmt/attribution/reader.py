"""Any attribution of the registry, read for many pairs batch by batch.

As in the read-out of attention (``attnmt.models.readout``), each pair is force-decoded: source
x_1 … x_S, output y_1 … y_T, the decoder reading start, y_1 … y_{T−1}. For each pair the method
(``attnmt.attribution.methods``) gives::

    scores   [T, S] float32   row t: how much each source token s matters to output token t
                              (to f_t, its log-probability or, with a foil, its contrast)

Pairs are read in batches under a token budget, B · max(S, T) ≤ ``max_tokens``, longest first, in
eval mode; every method gives a pair the same scores alone and in any batch. A method that cannot
read the model is refused before any work, in one line that names the methods that can.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from torch import nn

from attnmt.attribution.forced import NO_FOIL, Request
from attnmt.attribution.methods import AttributionOptions, check_applies, check_options
from attnmt.attribution.methods import method as method_record
from attnmt.errors import ConfigError
from attnmt.models.readout import ATTNMT_SPECIALS, DEFAULT_MAX_TOKENS, SpecialIds, batch_plan, batches_in_eval_mode

__all__ = ["attribute", "check_foils"]


def check_foils(sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
                foils: Sequence[Sequence[int]] | None) -> None:
    """ValueError unless each pair's foils are a row of ids as long as its output (``NO_FOIL``
    where a position has none), none equal to the output token it contrasts with."""
    if foils is None:
        return
    if len(foils) != len(outputs):
        raise ValueError(f"attribute: {len(foils)} rows of foils for {len(outputs)} pairs")
    for k, (row, output) in enumerate(zip(foils, outputs)):
        if len(row) != len(output):
            raise ValueError(f"attribute: pair {k + 1} has {len(row)} foils for {len(output)} output tokens")
        for t, (foil, token) in enumerate(zip(row, output)):
            if foil == token:
                raise ValueError(f"attribute: pair {k + 1}, position {t + 1}: the foil is the output token itself")
            if foil != NO_FOIL and (not isinstance(foil, int) or foil < 0):
                raise ValueError(f"attribute: pair {k + 1}, position {t + 1}: foil {foil!r} is not a token id")


def attribute(  # noqa: PLR0913 (the settings, keyword-only, as AttributionOptions holds them)
    model: nn.Module,
    sources: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    *,
    method: str = "gradient",
    samples: int = AttributionOptions.samples,
    noise: float = AttributionOptions.noise,
    steps: int = AttributionOptions.steps,
    seed: int = 0,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    specials: SpecialIds = ATTNMT_SPECIALS,
    foils: Sequence[Sequence[int]] | None = None,
    progress: bool = False,
    before_batch: Callable[[], object] | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """``(k, scores [T, S])`` for every pair ``(sources[k], outputs[k])``, batch by batch (longest
    first); the rows are as in ``attnmt.models.readout.force_decode``. The model runs in eval mode
    and gets its mode back; its parameters' gradients are not touched. ``foils`` (per pair, a row
    as long as its output, ``NO_FOIL`` where there is none) makes an output-dependent method explain
    the contrast; the others ignore them. ``before_batch`` is called before each batch (a
    translator's thread chooser).

    ConfigError for an option out of range, a method that cannot read the model, or (gradients)
    when a batch would need more than half the memory free on the model's device (before any
    work; a smaller ``max_tokens`` fits)."""
    check_options(method, samples, noise, steps)
    record = method_record(method)
    check_applies(model, method)
    check_foils(sources, outputs, foils)
    request = Request(sources, outputs, AttributionOptions(method, samples, noise, steps, seed), specials, max_tokens,
                      foils if record.depends_on_output else None)
    device = next(model.parameters()).device
    plan = batch_plan(sources, outputs, max_tokens, caller="saliency")
    prepare = getattr(importlib.import_module(record.module), "prepare", None)
    if prepare is not None:
        prepare(method, model, plan, request)
    for batch in batches_in_eval_mode(model, plan, sources, outputs, specials, device,
                                      f"attribution ({method})" if progress else None):
        if before_batch is not None:
            before_batch()
        scores = record.compute(model, batch, request)
        for row, k in enumerate(batch.pairs):
            matrix = scores[row, : len(outputs[k]), : len(sources[k])].numpy()
            if not np.isfinite(matrix).all():
                raise ConfigError(f"{method}: the scores of pair {k + 1} are not finite (the model's numbers "
                                  "overflowed); nothing was written for it")
            yield k, matrix.astype(np.float32)
