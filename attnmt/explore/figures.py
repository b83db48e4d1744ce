"""The figures of the demonstrations (``attnmt explore --plot``): one PNG per demonstration, drawn
with matplotlib's object API on the Agg canvas (no pyplot state, no display needed).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnmt.explore.results import (
    CLOSE_ENOUGH,
    AverageResult,
    CopyResult,
    MultiheadResult,
    NoiseStatistics,
    NoisyResult,
)
from attnmt.runtime.atomic_files import atomic_writer

__all__ = ["plot_average", "plot_copy", "plot_multihead", "plot_noisy"]


def _new_figure(columns: int, title: str):
    figure = Figure(figsize=(4.6 * columns, 3.8), layout="constrained")
    axes = figure.subplots(1, columns, squeeze=False)[0]
    figure.suptitle(title)
    return figure, axes


def _save_png(figure, path: str | os.PathLike) -> Path:
    """Write the figure to path atomically (``attnmt.runtime.atomic_files``)."""
    FigureCanvasAgg(figure)
    with atomic_writer(path) as stream:
        figure.savefig(stream, format="png", dpi=110)
    return Path(path)


def plot_copy(result: CopyResult, path: str | os.PathLike) -> Path:
    """Error ‖a − v_j‖ and weight α_j against c/√d. Returns the path written."""
    j = result.target
    figure, (error_axis, weight_axis) = _new_figure(2, f"copy: q = c·k_{j} makes a → v_{j}")
    x = result.logit_scales
    error_axis.loglog(x, np.maximum(result.error, 1e-300), "o-")
    error_axis.axhline(CLOSE_ENOUGH, color="grey", linestyle=":", label=f"{CLOSE_ENOUGH:g}")
    error_axis.set(xlabel="c/√d", ylabel=f"‖a − v_{j}‖", title="distance to the copied value")
    error_axis.legend()
    weight_axis.semilogx(x, result.weight_on_target, "o-", label=f"α_{j}")
    others = np.delete(result.weights, j, axis=1)
    weight_axis.semilogx(x, others.max(axis=1), "s--", label="largest other α")
    weight_axis.set(xlabel="c/√d", ylabel="attention weight", ylim=(-0.02, 1.02), title="weights")
    weight_axis.legend()
    return _save_png(figure, path)


def plot_average(result: AverageResult, path: str | os.PathLike) -> Path:
    """Error ‖a − (v_a + v_b)/2‖ and the weights α_a, α_b, others against c/√d."""
    a, b = result.pair
    figure, (error_axis, weight_axis) = _new_figure(
        2, f"average: q = c·(k_{a} + k_{b}) makes a → (v_{a} + v_{b})/2"
    )
    x = result.logit_scales
    error_axis.loglog(x, np.maximum(result.error, 1e-300), "o-")
    error_axis.axhline(CLOSE_ENOUGH, color="grey", linestyle=":", label=f"{CLOSE_ENOUGH:g}")
    error_axis.set(xlabel="c/√d", ylabel=f"‖a − (v_{a}+v_{b})/2‖", title="distance to the average")
    error_axis.legend()
    weight_axis.semilogx(x, result.weight_a, "o-", label=f"α_{a}")
    weight_axis.semilogx(x, result.weight_b, "x--", label=f"α_{b}")
    weight_axis.semilogx(x, result.weight_others, "s-", label=f"{result.num_keys - 2} others together")
    weight_axis.axhline(0.5, color="grey", linestyle=":")
    weight_axis.set(xlabel="c/√d", ylabel="attention weight", ylim=(-0.02, 1.02), title="weights")
    weight_axis.legend()
    return _save_png(figure, path)


def _weight_histograms(axis, statistics: NoiseStatistics, betas: np.ndarray, label: str) -> None:
    bins = np.linspace(0.0, 1.0, 41)
    for beta, weights in zip(betas, statistics.weight_a):
        axis.hist(weights, bins=bins, histtype="step", linewidth=1.4, label=f"β = {beta:g}")
    # Headroom above the tallest bar keeps the legend off the spikes at 0, 0.5 and 1.
    axis.set(xlabel=label, ylabel="resamplings", yscale="log", ylim=(0.7, 30 * statistics.weight_a.shape[-1]))
    axis.legend(fontsize="small", ncols=3, loc="upper center")


def plot_noisy(result: NoisyResult, path: str | os.PathLike) -> Path:
    """Histogram of α_a per β, and std α_a / share near an endpoint against β (one head)."""
    a, b = result.pair
    figure, (histogram_axis, spread_axis) = _new_figure(
        2, f"noisy keys, one head, q = c·(μ_{a} + μ_{b}), c/√d = {result.logit_scale:g}"
    )
    _weight_histograms(histogram_axis, result.single, result.betas, f"α_{a} over resamplings")
    histogram_axis.set_title(f"where α_{a} lands (0.5 = the average)")
    spread_axis.plot(result.betas, result.single.std_weight_a, "o-", label=f"std of α_{a}")
    spread_axis.plot(
        result.betas, result.single.fraction_near_endpoint, "s--", label=f"share nearer v_{a} or v_{b}"
    )
    spread_axis.set(xlabel="β (std of λ)", ylim=(-0.02, 1.02), title="swing of the output")
    spread_axis.legend()
    return _save_png(figure, path)


def plot_multihead(result: MultiheadResult, path: str | os.PathLike) -> Path:
    """One head against two heads: std α_a, mean distance, and α_a histograms at the largest β."""
    a, b = result.pair
    figure, (spread_axis, distance_axis, histogram_axis) = _new_figure(
        3, f"noisy keys: one head q = c·(μ_{a} + μ_{b}) vs two heads q₁ = c·μ_{a}, q₂ = c·μ_{b}"
    )
    for statistics, style, label in ((result.single, "o-", "1 head"), (result.two_heads, "s-", "2 heads")):
        spread_axis.plot(result.betas, statistics.std_weight_a, style, label=label)
        distance_axis.plot(result.betas, statistics.mean_distance, style, label=label)
    spread_axis.set(xlabel="β (std of λ)", ylabel=f"std of α_{a}", title=f"swing of α_{a}")
    spread_axis.legend()
    distance_axis.axhline(result.half_gap, color="grey", linestyle=":", label=f"‖v_{a} − v_{b}‖/2")
    distance_axis.set(
        xlabel="β (std of λ)", ylabel=f"mean ‖a − (v_{a}+v_{b})/2‖", title="distance to the average"
    )
    distance_axis.legend()
    bins = np.linspace(0.0, 1.0, 41)
    worst = len(result.betas) - 1
    histogram_axis.hist(result.single.weight_a[worst], bins=bins, alpha=0.6, label="1 head")
    histogram_axis.hist(result.two_heads.weight_a[worst], bins=bins, alpha=0.6, label="2 heads")
    histogram_axis.set(
        xlabel=f"α_{a} over resamplings", ylabel="resamplings", yscale="log",
        title=f"β = {result.betas[worst]:g}",
    )
    histogram_axis.legend()
    return _save_png(figure, path)
