"""Bar charts of runs compared (``attnmt compare``'s summary.png).

One panel per metric: per group (a mechanism) the mean over its runs as a bar, ± one standard
deviation as an error bar, and every run as a dot; the caller gives the statistics (the
comparison's own, ``attnmt.training.comparison.Statistics``), and an undefined one is drawn as
none. matplotlib's Figure API with the Agg canvas (no pyplot).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnmt.visual.heatmap import as_plain_text

__all__ = ["runs_chart_png"]


def _drawn(value: float) -> float:
    """An undefined statistic (NaN: no run, or one run's standard deviation) drawn as 0."""
    return 0.0 if math.isnan(value) else value


def runs_chart_png(
    bars: Mapping[str, Mapping[str, tuple[float, float]]],
    dots: Mapping[str, Mapping[str, Sequence[float]]],
    titles: Mapping[str, str],
    suptitle: str,
    labels: Mapping[str, str] | None = None,
    from_zero: Sequence[str] = (),
) -> bytes:
    """The chart as PNG bytes.

    bars: ``{group: {metric: (mean, standard deviation)}}``, groups in drawing order.
    dots: ``{group: {metric: [value of run 1, run 2, ...]}}``.
    titles: ``{metric: panel title}``, metrics in drawing order; labels: ``{group: tick label}``
    (default the group's name). from_zero: the metrics whose axis starts at 0.
    """
    groups = list(bars)
    metrics = list(titles)
    figure = Figure(figsize=(3.2 * len(metrics) + 0.4 * max(len(groups) - 3, 0) * len(metrics), 3.6), dpi=120)
    FigureCanvasAgg(figure)
    positions = np.arange(len(groups))
    for column, metric in enumerate(metrics, start=1):
        axes = figure.add_subplot(1, len(metrics), column)
        means = [_drawn(bars[group][metric][0]) for group in groups]
        errors = [_drawn(bars[group][metric][1]) for group in groups]
        axes.bar(positions, means, yerr=errors, capsize=4, color="#9ecae1", edgecolor="#3182bd", linewidth=0.8)
        for position, group in zip(positions, groups):
            runs = dots[group][metric]
            axes.plot([position] * len(runs), runs, "o", color="#08519c", markersize=3, zorder=3)
        axes.set_xticks(positions)
        axes.set_xticklabels([(labels or {}).get(group, group) for group in groups], rotation=30, ha="right")
        axes.set_title(titles[metric], fontsize=10)
        if metric in from_zero:
            axes.set_ylim(bottom=0.0)
        axes.grid(axis="y", color="#dddddd", linewidth=0.6)
        axes.set_axisbelow(True)
    figure.suptitle(suptitle, fontsize=11)
    as_plain_text(figure)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": "attnmt"})
    return buffer.getvalue()
