"""oneDNN's cache of compiled kernels, made large enough for the batch shapes of a training run.

On a CPU, PyTorch runs bf16 matrix products and the LSTMs (and some float32 operators) through
oneDNN, which compiles a kernel ("primitive") for each shape it meets and keeps the newest
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` of them (1,024 unless set). Token-bucketed batches have ever
new shapes: an epoch of the five-minute RNN recipe is 1,086 batches of 203 different
(sentences, source length, target length) triples, and its first three epochs met 4,287 different
kernels. With 1,024 places the cache evicts a kernel before its shape comes back, so most steps
compile kernels again: on 2 cores of an AMD EPYC, 2,782 compilations in every 300 steps, about a
seventh of the time; the recipe trained 5,046 steps in five minutes against 6,597 with this
module's capacity (docs/experiments.md, "A training step's speed").

``enlarge_kernel_cache`` sets the variable to ``KERNEL_CACHE_CAPACITY`` (16,384) for this process
unless the user set it. oneDNN reads it once, when it makes its first kernel, so the call must come
before the process's first bf16 product or LSTM: the command line makes it before any command
runs, and the trainer before it builds its model (a notebook that has already trained or
translated in bf16 keeps the capacity it started with). The kernels kept hold memory: the
five-minute runs peaked 0.7 to 1.0 GiB higher. A kernel found in the cache computes what a new one
would: the same seed trains the same numbers, only faster.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass

__all__ = ["KERNEL_CACHE_CAPACITY", "KERNEL_CACHE_VARIABLE", "KernelCacheSetting", "enlarge_kernel_cache"]

KERNEL_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
KERNEL_CACHE_CAPACITY = 16384


@dataclass(frozen=True)
class KernelCacheSetting:
    """The capacity in force after ``enlarge_kernel_cache``: attnmt's, or the user's where they set one."""

    capacity: str

    def describe(self) -> str:
        return f"kernels: oneDNN keeps up to {self.capacity} compiled kernels ({KERNEL_CACHE_VARIABLE})"


def enlarge_kernel_cache(environment: MutableMapping[str, str] | None = None) -> KernelCacheSetting:
    """Set $ONEDNN_PRIMITIVE_CACHE_CAPACITY to ``KERNEL_CACHE_CAPACITY`` in ``environment`` (this
    process's environment by default) unless it is set already: a user's value is kept."""
    environment = os.environ if environment is None else environment
    given = environment.get(KERNEL_CACHE_VARIABLE, "").strip()
    if not given:
        given = environment[KERNEL_CACHE_VARIABLE] = str(KERNEL_CACHE_CAPACITY)
    return KernelCacheSetting(given)
