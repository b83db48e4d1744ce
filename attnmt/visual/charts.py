"""Bar charts of runs compared (``attnmt compare``'s summary.png), and the grid of heads (``attnmt heads --plot``).

One panel per metric: per group (a mechanism) the mean over its runs as a bar, ± one standard
deviation as an error bar, and every run as a dot; the caller gives the statistics (the
comparison's own, ``attnmt.training.comparison.Statistics``), and an undefined one is drawn as
none. matplotlib's Figure API with the Agg canvas (no pyplot).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnmt.runtime.atomic_files import write_bytes_atomic
from attnmt.visual.heatmap import as_plain_text, plot_metadata

__all__ = ["heads_grid", "prune_curves_chart", "runs_chart_png", "trace_chart"]


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


def heads_grid(report: Any, path: str | Path) -> Path:
    """``attnmt heads --plot``: one layers × heads grid per part of ``report`` (a HeadsReport),
    each cell coloured by its head's Δ loss (red: the loss rises when the head is switched off) and
    labelled with it; written atomically as PNG or SVG by the file's suffix."""
    parts = [part for part in ("encoder_self", "decoder_self", "cross") if any(row.part == part for row in report.rows)]
    figure = Figure(figsize=(4.2 * len(parts), 3.2), layout="constrained")
    FigureCanvasAgg(figure)
    largest = max((abs(row.delta_loss) for row in report.rows), default=1.0) or 1.0
    for index, part in enumerate(parts, start=1):
        rows = [row for row in report.rows if row.part == part]
        layers, heads = max(row.layer for row in rows), max(row.head for row in rows)
        grid = np.full((layers, heads), np.nan)
        for row in rows:
            grid[row.layer - 1, row.head - 1] = row.delta_loss
        axes = figure.add_subplot(1, len(parts), index)
        image = axes.imshow(grid, cmap="RdBu_r", vmin=-largest, vmax=largest, aspect="auto")
        for (layer, head), value in np.ndenumerate(grid):
            axes.text(head, layer, f"{value:+.3f}", ha="center", va="center", fontsize=7,
                      color="white" if abs(value) > 0.6 * largest else "black")
        axes.set_xticks(range(heads), [str(k + 1) for k in range(heads)])
        axes.set_yticks(range(layers), [str(k + 1) for k in range(layers)])
        axes.set_xlabel("head")
        axes.set_ylabel("layer")
        axes.set_title(part.replace("_", " "))
    figure.colorbar(image, ax=figure.axes, label="Δ loss when switched off", shrink=0.8)
    figure.suptitle(f"{report.model}: {report.sentences} pairs, ablation {report.ablation}")
    as_plain_text(figure)
    target = Path(path)
    buffer = io.BytesIO()
    chosen = target.suffix.lower().lstrip(".") or "png"
    figure.savefig(buffer, format=chosen, dpi=120, metadata=plot_metadata(chosen, None))
    return write_bytes_atomic(target, buffer.getvalue())


def prune_curves_chart(curves: Sequence[Any], base: float, title: str, path: str | Path) -> Path:
    """``attnmt heads --prune-curve --curve-plot``: BLEU against the number of heads removed, one line
    per order (``attnmt.evaluation.heads.PruneCurve``; random orders thin and grey), with the band
    0.5 BLEU below ``base``; written atomically as PNG or SVG by the file's suffix."""
    figure = Figure(figsize=(6.4, 4.0), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    colours = {"ablation": "#b91c1c", "importance": "#1d4ed8", "confidence": "#15803d"}
    for curve in curves:
        steps = range(len(curve.bleu))
        if curve.order == "random":
            axes.plot(steps, curve.bleu, color="#9ca3af", linewidth=1,
                      label="random" if curve.seed == 0 else None)
        else:
            axes.plot(steps, curve.bleu, color=colours.get(curve.order), linewidth=2, label=curve.order)
    axes.axhline(base - 0.5, color="#6b7280", linestyle="--", linewidth=1, label="0.5 BLEU below all heads")
    axes.set_xlabel("heads removed")
    axes.set_ylabel("BLEU")
    axes.legend(fontsize=8)
    axes.set_title(title)
    as_plain_text(figure)
    target = Path(path)
    buffer = io.BytesIO()
    chosen = target.suffix.lower().lstrip(".") or "png"
    figure.savefig(buffer, format=chosen, dpi=120, metadata=plot_metadata(chosen, None))
    return write_bytes_atomic(target, buffer.getvalue())


def trace_chart(trace: Any, path: str | Path) -> Path:
    """``attnmt trace --plot``: the indirect effect of each restored state (``attnmt.evaluation.
    tracing.Trace``), the encoder's layers over the source pieces and the decoder's over the output
    pieces, one heatmap each; written atomically as PNG or SVG by the file's suffix."""
    decoder_columns = ["<s>", *trace.out_pieces][:len(trace.decoder[0])]
    figure = Figure(figsize=(max(6.0, 0.5 * (len(trace.src_pieces) + len(decoder_columns)) + 2), 3.4),
                    layout="constrained")
    FigureCanvasAgg(figure)
    largest = max(abs(v) for grid in (trace.encoder, trace.decoder) for row in grid for v in row) or 1.0
    for index, (name, grid, columns) in enumerate((("encoder", trace.encoder, trace.src_pieces),
                                                   ("decoder", trace.decoder, decoder_columns)), start=1):
        axes = figure.add_subplot(1, 2, index)
        image = axes.imshow(np.asarray(grid), cmap="RdBu_r", vmin=-largest, vmax=largest, aspect="auto")
        axes.set_xticks(range(len(columns)), columns, rotation=60, fontsize=8)
        axes.set_yticks(range(len(grid)), [str(layer) for layer in range(len(grid))])
        axes.set_ylabel("layer (0: embeddings)" if name == "encoder" and len(grid) > 1 else "layer")
        axes.set_title(f"{name}: restored minus corrupted")
    figure.colorbar(image, ax=figure.axes, label="p(word)", shrink=0.8)
    pieces = " ".join(trace.out_pieces[k - 1] for k in trace.word_pieces)
    figure.suptitle(f"word {trace.word} ({pieces}); corrupted {' '.join(trace.corrupted)}; "
                    f"clean {trace.clean:.3f}, corrupted {trace.corrupt:.3f}", fontsize=9)
    as_plain_text(figure)
    target = Path(path)
    buffer = io.BytesIO()
    chosen = target.suffix.lower().lstrip(".") or "png"
    figure.savefig(buffer, format=chosen, dpi=120, metadata=plot_metadata(chosen, None))
    return write_bytes_atomic(target, buffer.getvalue())
