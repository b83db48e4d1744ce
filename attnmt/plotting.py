"""Pictures of attention: heatmaps (PNG, SVG, PDF) and a self-contained HTML viewer.

An attention matrix ``weights: [T, S]`` holds, in row ``t``, the distribution
``alpha_t = softmax(score(s_t, h_1..S))`` that output token ``t`` put over the ``S``
source tokens, so each row sums to 1 (or to 0 for a row with nothing to attend to).
Rows are output tokens, columns are source tokens — in the heatmaps as in the viewer.

Everything here is a pure function of NumPy arrays (anything ``np.asarray`` accepts,
including CPU/GPU torch tensors) and lists of strings, so any model can feed it:

- :func:`merge_subwords` turns a matrix over sentencepiece pieces into one over words;
- :func:`plot_attention` draws one matrix as a heatmap file;
- :func:`write_attention_viewer` writes one HTML file (no network, no external files)
  in which a reader hovers over output words to see where they looked, per layer and head.

Plots use matplotlib's object API (``Figure`` + ``FigureCanvasAgg``) and never pyplot,
so they need no display, leak no global figure state, and can be drawn from threads.
Files are written atomically (``attnmt.files``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnmt.files import atomic_writer, write_text_atomic

__all__ = [
    "SPIECE_MARKER",
    "attention_viewer_page",
    "group_pieces",
    "is_special_token",
    "merge_subwords",
    "plot_attention",
    "write_attention_viewer",
]

#: sentencepiece's word-boundary marker (U+2581): a piece that starts with it starts a word.
SPIECE_MARKER = "\u2581"

# "<s>", "</s>", "<eos>", "<unk>", "<pad>", "<2en>", ...: never glued to a neighbouring piece.
_SPECIAL_TOKEN = re.compile(r"^<[^<>\s]+>$")

PLOT_FORMATS = ("png", "svg", "pdf")

# matplotlib reads svg.fonttype from the global rcParams while saving; changing it briefly
# (so SVG labels stay real, searchable text) is serialised so our own threads never race.
_SVG_SAVE_LOCK = threading.Lock()


# --------------------------------------------------------------------------- inputs


def _as_matrix(weights: Any, name: str = "weights") -> np.ndarray:
    """``weights`` as a float64 ``[T, S]`` array; torch tensors are detached and moved to CPU."""
    if hasattr(weights, "detach") and hasattr(weights, "cpu"):  # a torch tensor, without importing torch
        weights = weights.detach().cpu().float().numpy()
    try:
        matrix = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a 2-D array of numbers, got {type(weights).__name__}: {error}") from None
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be 2-D [T, S] (output tokens × source tokens), got shape {matrix.shape}")
    return matrix


def _as_tokens(tokens: Any, name: str) -> list[str]:
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be a list of tokens, not one string {tokens[:40]!r} (split it first)")
    try:
        return [str(token) for token in tokens]
    except TypeError:
        raise TypeError(f"{name} must be a list of tokens, got {type(tokens).__name__}") from None


def _check_shape(matrix: np.ndarray, src_tokens: list[str], tgt_tokens: list[str], name: str = "weights") -> None:
    expected = (len(tgt_tokens), len(src_tokens))
    if matrix.shape != expected:
        raise ValueError(
            f"{name} has shape {matrix.shape} but there are {len(tgt_tokens)} output tokens and "
            f"{len(src_tokens)} source tokens, so it must have shape {expected} [T, S]"
        )


# --------------------------------------------------------------------------- subwords


def is_special_token(token: str) -> bool:
    """True for tokens such as ``</s>``, ``<eos>``, ``<unk>``: they always stand as their own word."""
    return bool(_SPECIAL_TOKEN.match(token))


def group_pieces(pieces: Sequence[str], marker: str = SPIECE_MARKER) -> list[tuple[str, int, int]]:
    """Group sentencepiece pieces into words: ``[(word, start, stop), ...]`` with ``pieces[start:stop]``.

    A piece starting with ``marker`` starts a new word; any other piece continues the word
    before it. Special tokens (``<...>``) are words of their own, and the piece after one
    starts a new word. The word's text is its pieces joined, without the marker.

    When no piece at all carries the marker the tokens are not sentencepiece pieces (plain
    words, characters, ...), and each token is its own word rather than all one word.

    >>> group_pieces(["▁The", "▁dog", "s", "▁bark", "</s>"])
    [('The', 0, 1), ('dogs', 1, 3), ('bark', 3, 4), ('</s>', 4, 5)]
    """
    pieces = _as_tokens(pieces, "pieces")
    if not marker:
        raise ValueError("marker must be a non-empty string such as '\u2581'")
    uses_marker = any(marker in piece for piece in pieces)
    groups: list[tuple[str, int, int]] = []
    start = 0
    previous_special = True  # the first piece always starts a word
    for index, piece in enumerate(pieces):
        special = is_special_token(piece)
        starts_word = special or previous_special or piece.startswith(marker) or not uses_marker
        if starts_word and index > start:
            groups.append((_join_pieces(pieces[start:index], marker), start, index))
            start = index
        previous_special = special
    if pieces:
        groups.append((_join_pieces(pieces[start:], marker), start, len(pieces)))
    return groups


def _join_pieces(pieces: Sequence[str], marker: str) -> str:
    if len(pieces) == 1 and is_special_token(pieces[0]):
        return pieces[0]
    word = "".join(pieces).replace(marker, " ").strip()
    # A piece that is the bare marker (sentencepiece emits "▁" before some symbols) alone: keep it visible.
    return word if word else marker


def merge_subwords(
    weights: Any,
    src_pieces: Sequence[str],
    tgt_pieces: Sequence[str],
    marker: str = SPIECE_MARKER,
) -> tuple[np.ndarray, list[str], list[str]]:
    """Merge an attention matrix over subword pieces into one over words.

    weights: [T, S] over output pieces (rows) and source pieces (columns).
    Returns ``(word_weights [T', S'], src_words [S'], tgt_words [T'])`` where, with ``P(j)``
    the pieces of source word ``j`` and ``Q(i)`` the pieces of output word ``i``,

        word_weights[i, j] = mean_{t in Q(i)} sum_{s in P(j)} weights[t, s]

    Summing over a source word's pieces keeps the attention mass that went to the word;
    averaging over an output word's pieces keeps each row a distribution: row ``i`` sums to
    the mean of its pieces' row sums (1 when every piece's row sums to 1).
    Pieces are grouped by :func:`group_pieces`.
    """
    matrix = _as_matrix(weights)
    src_pieces = _as_tokens(src_pieces, "src_pieces")
    tgt_pieces = _as_tokens(tgt_pieces, "tgt_pieces")
    _check_shape(matrix, src_pieces, tgt_pieces)
    src_groups = group_pieces(src_pieces, marker)
    tgt_groups = group_pieces(tgt_pieces, marker)

    # Columns first (sum), then rows (mean): both are linear, so the order does not matter.
    column_sums = np.stack([matrix[:, start:stop].sum(axis=1) for _, start, stop in src_groups], axis=1) \
        if src_groups else np.zeros((matrix.shape[0], 0))
    merged = np.stack([column_sums[start:stop].mean(axis=0) for _, start, stop in tgt_groups], axis=0) \
        if tgt_groups else np.zeros((0, column_sums.shape[1]))
    return merged, [word for word, _, _ in src_groups], [word for word, _, _ in tgt_groups]


# --------------------------------------------------------------------------- target files


def _prepare_target(path: str | os.PathLike, overwrite: bool) -> Path:
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(f"{target} is a folder; give a file name to write to")
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists; pass overwrite=True to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


# --------------------------------------------------------------------------- heatmaps


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


def plot_attention(
    weights: Any,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
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

    Source tokens are the columns (labels on top, rotated), output tokens the rows; colours
    use one fixed scale from 0 to 1 so plots of different sentences compare. The figure grows
    with the sentence lengths and the font shrinks (down to 6 pt) so up to ~100 tokens stay
    readable. ``fmt`` (``png``, ``svg`` or ``pdf``) defaults to the suffix of ``path``.
    ``merge_pieces`` merges sentencepiece pieces into words first (:func:`merge_subwords`).
    ``annotate`` writes each weight in its cell (default: when both sides have ≤ 12 tokens).
    Raises ValueError when the shape does not match the token counts.
    """
    target = Path(path)
    chosen_format = _plot_format(target, fmt)
    matrix = _as_matrix(weights)
    src_tokens = _as_tokens(src_tokens, "src_tokens")
    tgt_tokens = _as_tokens(tgt_tokens, "tgt_tokens")
    _check_shape(matrix, src_tokens, tgt_tokens)
    if merge_pieces:
        matrix, src_tokens, tgt_tokens = merge_subwords(matrix, src_tokens, tgt_tokens)
    n_out, n_src = matrix.shape
    if n_out == 0 or n_src == 0:
        raise ValueError(f"weights has shape {matrix.shape}: there is nothing to plot")
    target = _prepare_target(target, overwrite)

    src_labels = [_label(token) for token in src_tokens]
    tgt_labels = [_label(token) for token in tgt_tokens]
    longest = max(n_out, n_src)
    fontsize = float(np.clip(12.0 - 0.08 * longest, 6.0, 11.0))
    # A cell is at least as tall as a label line; small matrices get bigger cells.
    cell = float(np.clip(4.0 / longest, fontsize * 1.6 / 72.0, 0.5))  # inches
    char_width = 0.62 * fontsize / 72.0  # inches per character, roughly, for DejaVu Sans
    left = 0.3 + char_width * max(len(label) for label in tgt_labels)
    top = 0.4 + 0.87 * char_width * max(len(label) for label in src_labels) + (0.5 if title else 0.0)
    matrix_width, matrix_height = n_src * cell, n_out * cell
    bar_width, bar_gap = 0.18, 0.2
    width = left + matrix_width + bar_gap + bar_width + 0.8
    height = top + matrix_height + 0.3

    figure = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_axes((left / width, 0.3 / height, matrix_width / width, matrix_height / height))
    colours = matplotlib.colormaps.get_cmap(cmap).with_extremes(bad="#d0d0d0")  # NaN (a model bug) shows grey
    image = axes.imshow(
        np.ma.masked_invalid(matrix), cmap=colours, vmin=0.0, vmax=1.0,
        aspect="auto", interpolation="nearest",
    )

    axes.set_xticks(range(n_src))
    axes.set_yticks(range(n_out))
    text_style = {"fontsize": fontsize, "parse_math": False}  # "$" in a token is not TeX
    axes.set_xticklabels(src_labels, rotation=60, ha="left", va="bottom", rotation_mode="anchor", **text_style)
    axes.set_yticklabels(tgt_labels, **text_style)
    axes.xaxis.tick_top()
    axes.tick_params(axis="both", length=0, pad=3)
    axes.set_xlabel("source", fontsize=fontsize, color="#555555", parse_math=False)
    axes.xaxis.set_label_position("top")
    axes.set_ylabel("output", fontsize=fontsize, color="#555555", parse_math=False)
    if longest <= 60:  # thin white lines between cells help the eye follow a row
        axes.set_xticks(np.arange(-0.5, n_src, 1.0), minor=True)
        axes.set_yticks(np.arange(-0.5, n_out, 1.0), minor=True)
        axes.grid(which="minor", color="white", linewidth=0.6)
        axes.tick_params(which="minor", length=0)
    for spine in axes.spines.values():
        spine.set_visible(False)

    if annotate is None:
        annotate = longest <= 12
    if annotate:
        for row in range(n_out):
            for col in range(n_src):
                value = matrix[row, col]
                if not math.isfinite(value):
                    continue
                axes.text(
                    col, row, f"{value:.2f}".lstrip("0") if 0 <= value < 1 else f"{value:.2g}",
                    ha="center", va="center", fontsize=max(fontsize - 2.5, 5.0),
                    color="white" if value > 0.55 else "#333333",
                )

    bar_height = min(max(matrix_height, 1.2), 4.0)
    bar_axes = figure.add_axes((
        (left + matrix_width + bar_gap) / width,
        (0.3 + matrix_height - bar_height) / height,
        bar_width / width,
        bar_height / height,
    ))
    colorbar = figure.colorbar(image, cax=bar_axes)
    colorbar.ax.tick_params(labelsize=max(fontsize - 1.0, 6.0))
    colorbar.outline.set_visible(False)
    if title:
        figure.suptitle(title, fontsize=fontsize + 2, y=1.0 - 0.15 / height, va="top", parse_math=False)

    def save(handle) -> None:
        options = {"format": chosen_format, "bbox_inches": "tight", "pad_inches": 0.12,
                   "metadata": plot_metadata(chosen_format, title)}
        if chosen_format == "svg":
            with _SVG_SAVE_LOCK, matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "attnmt"}):
                figure.savefig(handle, **options)
        else:
            figure.savefig(handle, dpi=dpi, **options)

    with atomic_writer(target) as handle:
        save(handle)
    return target


def plot_metadata(chosen_format: str, title: str | None) -> dict[str, Any]:
    """File metadata that keeps outputs byte-for-byte reproducible (no creation dates)."""
    if chosen_format == "png":
        return {"Software": "attnmt", **({"Title": title} if title else {})}
    if chosen_format == "svg":
        return {"Date": None, **({"Title": title} if title else {})}
    return {"CreationDate": None, "ModDate": None, **({"Title": title} if title else {})}


# --------------------------------------------------------------------------- HTML viewer

_TEMPLATE_NAME = "viewer_template.html"
_PLACEHOLDER = re.compile(r"\{\{(TITLE|CSP|EXAMPLES|COUNT|DATA)\}\}")
_SCRIPT_BLOCK = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _viewer_template() -> str:
    return (Path(__file__).with_name(_TEMPLATE_NAME)).read_text(encoding="utf-8")


def _rounded(matrix: np.ndarray) -> list[list[float]]:
    """Weights with 4 decimals (what the viewer shows, and a compact file); NaN becomes null."""
    return [[round(float(value), 4) if math.isfinite(value) else None for value in row] for row in matrix]


def _format_meta(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy / torch scalars
        try:
            return _format_meta(value.item())
        except (TypeError, ValueError):
            pass
    return str(value)


def _normalise_example(index: int, example: Mapping[str, Any]) -> dict[str, Any]:
    """Check one example and turn it into what the page's script reads."""
    where = f"examples[{index}]"
    if not isinstance(example, Mapping):
        raise TypeError(f"{where} must be a dict, got {type(example).__name__}")
    for key in ("src_tokens", "out_tokens"):
        if key not in example:
            raise ValueError(f"{where} has no {key!r} (keys: {', '.join(map(str, example))})")
    src_tokens = _as_tokens(example["src_tokens"], f"{where}['src_tokens']")
    out_tokens = _as_tokens(example["out_tokens"], f"{where}['out_tokens']")

    matrices: list[tuple[str, Any, str]] = []  # (name shown, matrix, name in error messages)
    if example.get("weights") is not None:
        matrices.append(("weights", example["weights"], f"{where}['weights']"))
    heads = example.get("heads")
    if heads is not None:
        if not isinstance(heads, Mapping):
            raise TypeError(f"{where}['heads'] must map names like 'layer 1 / head 1' to [T, S] matrices")
        matrices.extend((str(name), matrix, f"{where}['heads'][{str(name)!r}]") for name, matrix in heads.items())
    if not matrices:
        raise ValueError(f"{where} has neither 'weights' nor 'heads'")
    names = [name for name, _, _ in matrices]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ValueError(f"{where} names these matrices twice: {', '.join(duplicated)}")

    checked = []
    for name, weights, label in matrices:
        matrix = _as_matrix(weights, label)
        _check_shape(matrix, src_tokens, out_tokens, label)
        checked.append([name, _rounded(matrix)])
    default = "average" if "average" in names else names[0]
    source = str(example.get("source") if example.get("source") is not None else " ".join(src_tokens))
    output = str(example.get("output") if example.get("output") is not None else " ".join(out_tokens))
    reference = example.get("reference")
    meta = example.get("meta") or {}
    if not isinstance(meta, Mapping):
        raise TypeError(f"{where}['meta'] must be a dict of name -> value")
    return {
        "source": source,
        "output": output,
        "reference": None if reference is None else str(reference),
        "src": src_tokens,
        "out": out_tokens,
        "matrices": checked,
        "default": names.index(default),
        "meta": [[str(key), _format_meta(value)] for key, value in meta.items()],
    }


def _example_html(index: int, example: dict[str, Any]) -> str:
    """The static part of one example (texts, meta, matrix chooser); the script adds the heatmap."""
    e = html.escape
    badges = "".join(
        f'<span class="badge"><span class="badge-key">{e(key)}</span> {e(value)}</span>'
        for key, value in example["meta"]
    )
    rows = [("source", example["source"]), ("output", example["output"])]
    if example["reference"] is not None:
        rows.append(("reference", example["reference"]))
    texts = "".join(f'<tr><th scope="row">{e(name)}</th><td class="text-{name}">{e(text)}</td></tr>'
                    for name, text in rows)
    options = "".join(
        f'<option value="{number}"{" selected" if number == example["default"] else ""}>{e(name)}</option>'
        for number, (name, _) in enumerate(example["matrices"])
    )
    chooser = (
        f'<label class="chooser">attention <select class="matrix-select" aria-label="attention matrix">{options}</select></label>'
        if len(example["matrices"]) > 1 else
        f'<span class="chooser">attention: {e(example["matrices"][0][0])}</span>'
    )
    shape = f'{len(example["out"])} output × {len(example["src"])} source tokens'
    return (
        f'<details class="example" id="example-{index + 1}" data-example="{index}"{" open" if index == 0 else ""}>\n'
        f'<summary><span class="number">{index + 1}</span>'
        f'<span class="summary-text"><span class="summary-source">{e(example["source"])}</span>'
        f'<span class="summary-output">{e(example["output"])}</span></span>'
        f'<span class="badges">{badges}</span></summary>\n'
        f'<div class="body">\n<table class="texts">{texts}</table>\n'
        f'<div class="controls">{chooser}<span class="shape">{e(shape)}</span></div>\n'
        f'<div class="readout" aria-live="polite"></div>\n'
        f'<div class="heatmap-wrap"></div>\n</div>\n</details>'
    )


def _json_for_script(value: Any) -> str:
    """JSON that cannot end its <script> element: every <, > and & is written as a \\u escape."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") \
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _script_hashes(template: str) -> str:
    """CSP sources allowing exactly the template's own inline scripts (and nothing injected)."""
    digests = [hashlib.sha256(body.encode("utf-8")).digest() for body in _SCRIPT_BLOCK.findall(template)]
    return " ".join(f"'sha256-{base64.b64encode(digest).decode('ascii')}'" for digest in digests)


def write_attention_viewer(
    examples: Sequence[Mapping[str, Any]],
    path: str | os.PathLike,
    title: str = "attnmt attention viewer",
    *,
    overwrite: bool = True,
) -> Path:
    """Write one self-contained HTML page showing the attention of each example; return its path.

    Each example is a dict::

        {"source": str, "output": str, "reference": str | None,
         "src_tokens": [S tokens], "out_tokens": [T tokens],
         "weights": [T, S]                                   # and/or
         "heads": {"layer 1 / head 1": [T, S], ..., "average": [T, S]},
         "meta": {"bleu": 31.2, ...}}                        # optional

    The page has inline CSS and JavaScript only (no network, a Content-Security-Policy that
    forbids any other script or request). Each example shows a heatmap with one ``.cell``
    element per (output token, source token) carrying ``data-row``, ``data-col`` and
    ``data-weight``; hovering an output word or a cell shades the source words by their
    weight and prints the weights. With ``heads``, a select box picks the matrix shown
    (``average`` first when present). Examples fold, and a filter box searches their text.
    Weights are stored with 4 decimals. All text is escaped.
    """
    if isinstance(examples, Mapping):
        raise TypeError("examples must be a list of example dicts, not one dict")
    page = attention_viewer_page(examples, title)  # checks every example before touching the file
    target = _prepare_target(path, overwrite)
    write_text_atomic(target, page)
    return target


def attention_viewer_page(examples: Sequence[Mapping[str, Any]], title: str = "attnmt attention viewer") -> str:
    """The page ``write_attention_viewer`` writes, as text (what a notebook shows in an iframe)."""
    if isinstance(examples, Mapping):
        raise TypeError("examples must be a list of example dicts, not one dict")
    normalised = [_normalise_example(index, example) for index, example in enumerate(examples)]
    template = _viewer_template()
    values = {
        "TITLE": html.escape(str(title)),
        "CSP": _script_hashes(template),
        "EXAMPLES": "\n".join(_example_html(i, example) for i, example in enumerate(normalised))
        or '<p class="empty">No examples.</p>',
        "COUNT": f"{len(normalised)} example{'' if len(normalised) == 1 else 's'}",
        "DATA": _json_for_script({"examples": normalised}),
    }
    # One pass, so text inserted for one placeholder is never scanned for another.
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template)
