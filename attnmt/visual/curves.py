"""Training curves of one or several runs, read from their ``metrics.jsonl`` (``attnmt curves``).

A run's ``metrics.jsonl`` has one JSON record a line: ``train`` records every ``log_every`` steps
(the training loss, ``loss``, in nats per target token), ``epoch`` records at each epoch's end and
``valid`` records at a validation inside an epoch (``val_ppl``, the validation perplexity, and
``val_bleu``, BLEU on up to ``bleu_max_sentences`` validation sentences), each with its ``step``
and ``elapsed`` seconds of training.

``plot_curves`` draws them in a grid of 2 × 3 panels, every run in its own colour:

    columns   training loss | validation perplexity (log scale) | validation BLEU
    rows      against training steps | against minutes of training

Panels in one column share their y axis and panels in one row their x axis, so runs and panels
compare at a glance.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from attnmt.errors import ConfigError, DataError
from attnmt.runs.folder import METRICS
from attnmt.runtime.atomic_files import atomic_writer
from attnmt.visual.heatmap import PLOT_FORMATS, as_plain_text, plot_metadata

__all__ = ["Curves", "plot_curves", "read_curves"]

PLAIN = FuncFormatter(lambda value, _: f"{value:g}")  # 20, 30, 60 on a log axis, not 2 x 10^1


@dataclass
class Curves:
    """What one run's metrics.jsonl holds, as (step, minutes, value) points per quantity."""

    name: str
    train_loss: list[tuple[int, float, float]] = field(default_factory=list)
    valid_ppl: list[tuple[int, float, float]] = field(default_factory=list)
    valid_bleu: list[tuple[int, float, float]] = field(default_factory=list)


def read_curves(run_dir: str | os.PathLike, name: str | None = None) -> Curves:
    """The curves of ``run_dir`` (a run folder, or its metrics.jsonl); DataError naming the file
    and line when it is missing or not metrics of attnmt."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / METRICS
    if not path.is_file():
        raise DataError(f"{path}: no such file (is {run_dir} a run folder of attnmt train?)")
    curves = Curves(name or (path.parent.name if path.name == METRICS else path.stem))
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 ({error.reason})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            kind = record.get("type")
            if kind == "train":
                point = (int(record["step"]), float(record["elapsed"]) / 60)
                curves.train_loss.append((*point, float(record["loss"])))
            elif kind in ("valid", "epoch"):  # a validation in an epoch, or at its end
                point = (int(record["step"]), float(record["elapsed"]) / 60)
                curves.valid_ppl.append((*point, float(record["val_ppl"])))
                if record.get("val_bleu") is not None:
                    curves.valid_bleu.append((*point, float(record["val_bleu"])))
        except json.JSONDecodeError as error:
            raise DataError(f"{path}, line {number}: not JSON ({error.msg})") from None
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise DataError(f"{path}, line {number}: not a metrics record of attnmt ({type(error).__name__}: "
                            f"{error})") from None
    if not curves.train_loss and not curves.valid_ppl:
        raise DataError(f"{path}: no training or validation records yet")
    return curves


def _names(runs: Sequence[Path]) -> list[str]:
    """Each run's folder name, or its path where two folders share a name."""
    names = [Path(run).name or str(run) for run in runs]
    return [str(run) if names.count(name) > 1 else name for run, name in zip(runs, names)]


def _check_target(path: Path, overwrite: bool) -> str:
    """The figure format of ``path``; ConfigError for a folder, another format, or a file without
    ``overwrite``."""
    chosen_format = (path.suffix.lstrip(".") or "png").lower()
    if chosen_format not in PLOT_FORMATS:
        raise ConfigError(f"{path}: cannot draw curves as {chosen_format!r}; use one of {', '.join(PLOT_FORMATS)}")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give a file name")
    if path.exists() and not overwrite:
        raise ConfigError(f"{path}: already exists; pass overwrite=True to replace it")
    return chosen_format


def plot_curves(
    runs: Sequence[str | os.PathLike],
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    title: str | None = None,
    dpi: int = 120,
) -> Path:
    """Draw the curves of ``runs`` (run folders) into ``path`` (.png, .svg or .pdf) atomically;
    returns the path. ConfigError for a target that exists without ``overwrite`` or of another
    format; DataError for a run without metrics."""
    path = Path(path)
    chosen_format = _check_target(path, overwrite)
    if not runs:
        raise ConfigError("give at least one run folder")
    all_curves = [read_curves(run, name) for run, name in zip(runs, _names([Path(run) for run in runs]))]

    figure = Figure(figsize=(13, 7.2), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(2, 3, sharex="row", sharey="col", squeeze=False)
    columns = [("train_loss", "training loss (nats / token)"), ("valid_ppl", "validation perplexity"),
               ("valid_bleu", "validation BLEU")]
    colours = [f"C{k % 10}" for k in range(len(all_curves))]
    for column, (attribute, label) in enumerate(columns):
        for row, (x_index, x_label) in enumerate([(0, "training steps"), (1, "minutes of training")]):
            axes = grid[row][column]
            for curves, colour in zip(all_curves, colours):
                points = getattr(curves, attribute)
                if points:
                    axes.plot([p[x_index] for p in points], [p[2] for p in points], color=colour,
                              marker="o" if attribute != "train_loss" else None, markersize=3, linewidth=1.4,
                              label=curves.name)
            if not any(getattr(curves, attribute) for curves in all_curves):
                axes.text(0.5, 0.5, "no records", transform=axes.transAxes, ha="center", va="center", color="#888888")
            axes.set_xlabel(x_label)
            axes.grid(True, color="#dddddd", linewidth=0.6)
            if row == 0:
                axes.set_title(label)
            if attribute == "valid_ppl" and any(curves.valid_ppl for curves in all_curves):
                axes.set_yscale("log")
                axes.yaxis.set_major_formatter(PLAIN)
                axes.yaxis.set_minor_formatter(PLAIN)
    handles, labels = grid[0][0].get_legend_handles_labels()
    if not handles:
        handles, labels = grid[0][1].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), frameon=False)
    if title:
        figure.suptitle(title)
    as_plain_text(figure)
    with atomic_writer(path) as handle:
        figure.savefig(handle, format=chosen_format, dpi=dpi, metadata=plot_metadata(chosen_format, title))
    return path
