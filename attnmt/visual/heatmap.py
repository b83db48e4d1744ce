"""Heatmaps of attention: one matrix as a PNG, SVG or PDF file.

An attention matrix ``weights: [T, S]`` holds, in row ``t``, the distribution
``alpha_t = softmax(score(s_t, h_1..S))`` that output token ``t`` put over the ``S`` source
tokens, so each row sums to 1 (or to 0 for a row with nothing to attend to). Rows are output
tokens, columns source tokens, in the heatmaps as in the viewer (``attnmt.visual.viewer``).

The figure is a pure function of a NumPy array (anything ``np.asarray`` takes, torch tensors
included) and two lists of strings, so any model can feed it. It uses matplotlib's object API
(``Figure`` + ``FigureCanvasAgg``) and never pyplot, so it needs no display, leaks no global
figure state, and can be drawn from threads. Files are written atomically, with no date in them,
so the same matrix gives the same bytes.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from attnmt.data.pieces import as_matrix, as_tokens, check_matrix_shape, merge_subwords
from attnmt.runtime.atomic_files import atomic_writer, check_target
from attnmt.runtime.choices import PLOT_FORMATS

__all__ = ["PLOT_FORMATS", "draw_validation_examples", "plot_attention", "plot_metadata"]

logger = logging.getLogger(__name__)


# matplotlib reads svg.fonttype from the global rcParams while saving; changing it briefly
# (so SVG labels stay real, searchable text) is serialised so our own threads never race.
_SVG_SAVE_LOCK = threading.Lock()


def _label(token: str, limit: int = 24) -> str:
    """A token as a one-line axis label: control characters shown, long tokens shortened."""
    text = "".join(ch if ch.isprintable() else "\N{REPLACEMENT CHARACTER}" for ch in token)
    if not text.strip():
        return "\N{OPEN BOX}"  # an empty or blank token still gets a visible label
    return text if len(text) <= limit else text[: limit - 1] + "\N{HORIZONTAL ELLIPSIS}"


def _plot_format(path: Path, fmt: str | None) -> str:
    chosen = (fmt or path.suffix.lstrip(".") or "png").lower()
    if chosen not in PLOT_FORMATS:
        raise ValueError(f"cannot write a heatmap as {chosen!r} ({path}); use one of {', '.join(PLOT_FORMATS)}")
    return chosen


@dataclass(frozen=True)
class _Layout:
    """Where everything of a heatmap goes, in inches, for a matrix of ``rows`` × ``columns`` cells.

    The font shrinks with the longer side (11 pt down to 6 pt), so that up to about 100 tokens stay
    readable; a cell is at least as tall as a label line, and small matrices get bigger cells.
    The margins make room for the longest labels: output labels on the left, source labels on
    top, rotated by 60°.
    """

    rows: int
    columns: int
    longest_out_label: int  # characters
    longest_src_label: int
    titled: bool

    BOTTOM = 0.3  # margin below the matrix
    BAR_WIDTH, BAR_GAP, RIGHT = 0.18, 0.2, 0.8  # the colour bar, the gap before it, the margin after it
    GRID_UP_TO = 60  # white lines between cells up to this many tokens on the longer side
    ANNOTATE_UP_TO = 12  # weights written in the cells up to this many tokens (by default)

    @property
    def longest(self) -> int:
        return max(self.rows, self.columns)

    @property
    def fontsize(self) -> float:
        return float(np.clip(12.0 - 0.08 * self.longest, 6.0, 11.0))

    @property
    def cell(self) -> float:
        return float(np.clip(4.0 / self.longest, self.fontsize * 1.6 / 72.0, 0.5))

    @property
    def char_width(self) -> float:
        return 0.62 * self.fontsize / 72.0  # inches per character, roughly, for DejaVu Sans

    @property
    def left(self) -> float:
        return 0.3 + self.char_width * self.longest_out_label

    @property
    def top(self) -> float:
        return 0.4 + 0.87 * self.char_width * self.longest_src_label + (0.5 if self.titled else 0.0)

    @property
    def matrix_size(self) -> tuple[float, float]:
        return self.columns * self.cell, self.rows * self.cell

    @property
    def figure_size(self) -> tuple[float, float]:
        width, height = self.matrix_size
        return (self.left + width + self.BAR_GAP + self.BAR_WIDTH + self.RIGHT, self.top + height + self.BOTTOM)

    def matrix_box(self) -> tuple[float, float, float, float]:
        """The matrix axes as (left, bottom, width, height) fractions of the figure."""
        (width, height), (figure_width, figure_height) = self.matrix_size, self.figure_size
        return (self.left / figure_width, self.BOTTOM / figure_height, width / figure_width, height / figure_height)

    def bar_box(self) -> tuple[float, float, float, float]:
        """The colour bar's axes: beside the matrix, top-aligned, 1.2 to 4 inches tall."""
        (width, height), (figure_width, figure_height) = self.matrix_size, self.figure_size
        bar_height = min(max(height, 1.2), 4.0)
        return ((self.left + width + self.BAR_GAP) / figure_width, (self.BOTTOM + height - bar_height) / figure_height,
                self.BAR_WIDTH / figure_width, bar_height / figure_height)


def plot_attention(  # noqa: PLR0913 (a figure's options, each a keyword)
    weights: Any,
    src_tokens: list[str] | tuple[str, ...],
    out_tokens: list[str] | tuple[str, ...],
    path: str | os.PathLike,
    title: str | None = None,
    merge_pieces: bool = False,
    fmt: str | None = None,
    *,
    annotate: bool | None = None,
    cmap: Any = "Blues",
    dpi: int = 150,
    overwrite: bool = True,
) -> Path:
    """Draw ``weights: [T, S]`` as a heatmap file and return its path.

    Source tokens are the columns (labels on top, rotated), output tokens the rows; colours use
    one fixed scale from 0 to 1 so that plots of different sentences compare. The figure grows with
    the sentence lengths and the font shrinks (``_Layout``). ``fmt`` (``png``, ``svg`` or ``pdf``)
    defaults to the suffix of ``path``. ``merge_pieces`` merges sentencepiece pieces into words
    first (``attnmt.data.pieces.merge_subwords``). ``annotate`` writes each weight in its cell
    (default: when both sides have at most 12 tokens). ValueError when the shape does not match
    the token counts.
    """
    target = Path(path)
    chosen_format = _plot_format(target, fmt)
    matrix = as_matrix(weights)
    src_tokens = as_tokens(src_tokens, "src_tokens")
    out_tokens = as_tokens(out_tokens, "out_tokens")
    check_matrix_shape(matrix, src_tokens, out_tokens)
    if merge_pieces:
        matrix, src_tokens, out_tokens = merge_subwords(matrix, src_tokens, out_tokens)
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"weights has shape {matrix.shape}: there is nothing to plot")
    target = check_target(target, overwrite)
    src_labels = [_label(token) for token in src_tokens]
    out_labels = [_label(token) for token in out_tokens]
    layout = _Layout(matrix.shape[0], matrix.shape[1], max(map(len, out_labels)), max(map(len, src_labels)),
                     bool(title))
    figure = Figure(figsize=layout.figure_size, dpi=dpi)
    FigureCanvasAgg(figure)
    image = _draw_matrix(figure, layout, matrix, src_labels, out_labels, cmap)
    if annotate is None:
        annotate = layout.longest <= layout.ANNOTATE_UP_TO
    if annotate:
        _annotate(figure.axes[0], matrix, layout.fontsize)
    colorbar = figure.colorbar(image, cax=figure.add_axes(layout.bar_box()))
    colorbar.ax.tick_params(labelsize=max(layout.fontsize - 1.0, 6.0))
    colorbar.outline.set_visible(False)
    if title:
        figure.suptitle(title, fontsize=layout.fontsize + 2, y=1.0 - 0.15 / layout.figure_size[1], va="top",
                        parse_math=False)
    with atomic_writer(target) as handle:
        options: dict[str, Any] = {"format": chosen_format, "bbox_inches": "tight", "pad_inches": 0.12,
                                   "metadata": plot_metadata(chosen_format, title)}
        if chosen_format == "svg":
            with _SVG_SAVE_LOCK, matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "attnmt"}):
                figure.savefig(handle, **options)
        else:
            figure.savefig(handle, dpi=dpi, **options)
    return target


def _draw_matrix(figure: Figure, layout: _Layout, matrix: np.ndarray, src_labels: list[str],
                 out_labels: list[str], cmap: Any):
    """The matrix with its labels (source on top, output on the left) and, for all but large
    matrices, thin white lines between cells that help the eye follow a row; NaN (a model's bug)
    shows grey. Returns the image, for the colour bar."""
    axes = figure.add_axes(layout.matrix_box())
    colours = matplotlib.colormaps.get_cmap(cmap).with_extremes(bad="#d0d0d0")
    image = axes.imshow(np.ma.masked_invalid(matrix), cmap=colours, vmin=0.0, vmax=1.0, aspect="auto",
                        interpolation="nearest")
    rows, columns = matrix.shape
    fontsize = layout.fontsize
    axes.set_xticks(range(columns))
    axes.set_yticks(range(rows))
    text_style: dict[str, Any] = {"fontsize": fontsize, "parse_math": False}  # "$" in a token is not TeX
    axes.set_xticklabels(src_labels, rotation=60, ha="left", va="bottom", rotation_mode="anchor", **text_style)
    axes.set_yticklabels(out_labels, **text_style)
    axes.xaxis.tick_top()
    axes.tick_params(axis="both", length=0, pad=3)
    axes.set_xlabel("source", fontsize=fontsize, color="#555555", parse_math=False)
    axes.xaxis.set_label_position("top")
    axes.set_ylabel("output", fontsize=fontsize, color="#555555", parse_math=False)
    if layout.longest <= layout.GRID_UP_TO:
        axes.set_xticks(np.arange(-0.5, columns, 1.0), minor=True)
        axes.set_yticks(np.arange(-0.5, rows, 1.0), minor=True)
        axes.grid(which="minor", color="white", linewidth=0.6)
        axes.tick_params(which="minor", length=0)
    for spine in axes.spines.values():
        spine.set_visible(False)
    return image


def _annotate(axes, matrix: np.ndarray, fontsize: float) -> None:
    """Each finite weight written in its cell (".42"), white on dark cells."""
    for row in range(matrix.shape[0]):
        for column in range(matrix.shape[1]):
            value = matrix[row, column]
            if not math.isfinite(value):
                continue
            axes.text(column, row, f"{value:.2f}".lstrip("0") if 0 <= value < 1 else f"{value:.2g}",
                      ha="center", va="center", fontsize=max(fontsize - 2.5, 5.0),
                      color="white" if value > 0.55 else "#333333")


def as_plain_text(figure: Figure) -> None:
    """Every text of ``figure`` (titles, labels, legend entries: words and names users typed) is
    drawn as it is written: a "$" never starts TeX, which a title such as "$$$" would break."""
    for text in figure.findobj(Text):
        text.set_parse_math(False)


def plot_metadata(chosen_format: str, title: str | None) -> dict[str, Any]:
    """File metadata that keeps outputs byte-for-byte reproducible (no creation dates)."""
    if chosen_format == "png":
        return {"Software": "attnmt", **({"Title": title} if title else {})}
    if chosen_format == "svg":
        return {"Date": None, **({"Title": title} if title else {})}
    return {"CreationDate": None, "ModDate": None, **({"Title": title} if title else {})}


def draw_validation_examples(translator, corpus, epoch_label: int, run_dir: Path) -> None:
    """A training validation hook (``attnmt.training.ValidationHook``): heatmaps of the greedy
    translations of the first ``training.examples`` validation sentences, drawn into
    ``run_dir/examples/epoch<NN>-<k>.png`` with their pieces merged into words. A matrix that
    cannot be drawn is logged and skipped: it must not stop training."""
    config = translator.run_config
    count = 0 if config is None else min(config.training.examples, len(corpus))
    if count <= 0:
        return
    translations = translator.translate(corpus.src[:count], beam=1, return_attention=True)
    for k, translation in enumerate(translations, start=1):
        if translation.attention is None or translation.attention.size == 0:
            continue
        try:
            plot_attention(
                translation.attention, translation.src_pieces, translation.out_pieces,
                Path(run_dir) / "examples" / f"epoch{epoch_label:02d}-{k}.png",
                title=f"epoch {epoch_label}: {translation.output}", merge_pieces=True,
            )
        except ValueError as error:
            logger.warning("could not plot example %d: %s", k, error)
