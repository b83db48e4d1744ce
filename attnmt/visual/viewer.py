"""The attention viewer: one self-contained HTML page of interactive heatmaps (``attnmt view``).

Each example is a translation with one attention matrix or several (per layer and head), rows =
output tokens, columns = source tokens (as in ``attnmt.visual.heatmap``). The page has inline CSS
and JavaScript only, from ``viewer_template.html`` beside this file: no network, and a
Content-Security-Policy that allows exactly the template's own scripts. A reader hovers over
output words to see where they looked.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnmt.data.pieces import as_matrix, as_tokens, check_matrix_shape
from attnmt.evaluation.agreement import END, row_agreement
from attnmt.runtime.atomic_files import check_target, write_text_atomic

__all__ = ["attention_viewer_page", "write_attention_viewer"]

_TEMPLATE_NAME = "viewer_template.html"
_PLACEHOLDER = re.compile(r"\{\{(TITLE|CSP|EXAMPLES|COUNT|DATA)\}\}")
_SCRIPT_BLOCK = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _viewer_template() -> str:
    return (Path(__file__).with_name(_TEMPLATE_NAME)).read_text(encoding="utf-8")


def _rounded(matrix: np.ndarray) -> list[list[float | None]]:
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
    src_tokens = as_tokens(example["src_tokens"], f"{where}['src_tokens']")
    out_tokens = as_tokens(example["out_tokens"], f"{where}['out_tokens']")

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

    checked, exact = [], []
    for name, weights, label in matrices:
        matrix = as_matrix(weights, label)
        check_matrix_shape(matrix, src_tokens, out_tokens, label)
        checked.append([name, _rounded(matrix)])
        exact.append(matrix)
    default = "average" if "average" in names else names[0]
    saliency, agreement = _saliency_of(example, where, src_tokens, out_tokens, exact[names.index(default)])
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
        **({} if saliency is None else {"saliency": saliency, "agreement": agreement,
                                        "saliency_method": str(example.get("saliency_method") or "saliency")}),
    }


def _saliency_of(example: Mapping[str, Any], where: str, src_tokens: list[str], out_tokens: list[str],
                 attention: np.ndarray) -> tuple[list | None, list | None]:
    """The example's saliency [T, S] (rounded) and, for each output token, [rank correlation, same
    top source token] of its attention row (the matrix shown first) and its saliency row, over the
    source tokens but "</s>" (``attnmt.evaluation.agreement``); [None, None] for the "</s>" row or
    a row with nothing to rank. (None, None) without saliency."""
    if example.get("saliency") is None:
        return None, None
    matrix = as_matrix(example["saliency"], f"{where}['saliency']")
    check_matrix_shape(matrix, src_tokens, out_tokens, f"{where}['saliency']")
    columns = [j for j, token in enumerate(src_tokens) if token != END]
    agreement: list[list[Any]] = []
    for row, token in enumerate(out_tokens):
        correlations, same_top, _ = row_agreement(attention[None, row, columns], matrix[None, row, columns])
        agreement.append([round(correlations[0], 4), same_top[0]] if token != END and correlations else [None, None])
    return _rounded(matrix), agreement


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
        '<label class="chooser">attention <select class="matrix-select" aria-label="attention matrix">'
        f'{options}</select></label>'
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
         "meta": {"bleu": 31.2, ...},                        # optional
         "saliency": [T, S], "saliency_method": str}         # optional

    With ``saliency`` (signed: ``attnmt.attribution``) a second heatmap stands beside the
    attention, and the readout adds each output word's agreement of the two (rank correlation
    over the source words, and whether the top one is the same: ``attnmt.evaluation.agreement``).

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
    target = check_target(path, overwrite)
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
