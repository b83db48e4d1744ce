"""Attention in Jupyter: translations render inline as the interactive viewer of ``attnmt view``.

``attnmt.show(translator, sentences, beam=5)`` translates and returns an ``AttentionView``; as
the last expression of a cell it renders as the viewer (one heatmap per sentence, per head for
multi-head models; ``saliency="gradient"`` adds the gradient saliency beside it).
``Translator.translate`` returns ``Translations``, a list that renders the same way when its
translations carry their attention (``return_attention=True``), else as a table of texts
(``translations_html``): ``import attnmt`` in a running IPython kernel registers that
display with IPython, so that the translator itself imports nothing of the presentation.

The viewer is the self-contained page of ``attnmt.visual.viewer.attention_viewer_page`` (inline
CSS and JavaScript, no network) inside an ``<iframe srcdoc=...>``: its script and styles stay apart
from the notebook's, and it runs alike in JupyterLab, the classic Notebook, VS Code and Colab.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attnmt.attribution.methods import AttributionOptions
from attnmt.data.pieces import merge_subwords
from attnmt.visual.examples import view_examples
from attnmt.visual.viewer import attention_viewer_page, write_attention_viewer

__all__ = ["AttentionView", "show", "translation_example", "translations_html"]

ROW_PIXELS = 26  # a heatmap row of the viewer, about


class AttentionView:
    """Viewer examples (``write_attention_viewer``'s dicts) that render as the viewer in a notebook.

    ``view.save(path)`` writes the same page as a file; ``view.html()`` gives its text."""

    def __init__(self, examples: Sequence[Mapping[str, Any]], title: str = "attnmt attention viewer") -> None:
        self.examples = list(examples)
        self.title = title

    def html(self) -> str:
        return attention_viewer_page(self.examples, self.title)

    def save(self, path, overwrite: bool = True):
        return write_attention_viewer(self.examples, path, self.title, overwrite=overwrite)

    def _height(self) -> int:
        """Room for the folded examples and the first one open, which is all the iframe shows at once."""
        first = self.examples[0] if self.examples else {}
        rows = len(first.get("out_tokens", []))
        return min(900, 230 + 48 * len(self.examples) + ROW_PIXELS * rows)

    def _repr_html_(self) -> str:
        return (f'<iframe class="attnmt-viewer" srcdoc="{html.escape(self.html(), quote=True)}" '
                f'style="width: 100%; height: {self._height()}px; border: 1px solid #ddd;" '
                f'title="{html.escape(self.title, quote=True)}"></iframe>')

    def __repr__(self) -> str:
        return f"AttentionView({len(self.examples)} examples)"


def translation_example(translation) -> dict[str, Any]:
    """A viewer example of one ``Translation`` with its attention (the search's own matrix),
    merged from subword pieces into words."""
    weights, src_words, out_words = merge_subwords(
        np.asarray(translation.attention, dtype=np.float64), translation.src_pieces, translation.out_pieces
    )
    return {"source": translation.source, "output": translation.output, "src_tokens": src_words,
            "out_tokens": out_words, "weights": weights, "meta": {"log P": round(translation.score, 2)}}


def show(
    translator,
    sentences: str | Sequence[str],
    beam: int | None = None,
    references: Sequence[str] | None = None,
    merge_pieces: bool = True,
    title: str | None = None,
    saliency: AttributionOptions | str | None = None,
) -> AttentionView:
    """Translate ``sentences`` (one string or several) and return their attention as an
    ``AttentionView``: in a notebook, the interactive viewer; per head for multi-head models. With
    ``saliency`` ("gradient", "smoothgrad", "integrated" or a AttributionOptions) the gradient
    saliency of each output stands beside its attention, with their agreement word by word."""
    if isinstance(sentences, str):
        sentences = [sentences]
    examples = view_examples(translator, list(sentences), references=references, beam=beam,
                             merge_pieces=merge_pieces, saliency=saliency)
    return AttentionView(examples, title or f"attnmt: {len(examples)} translation{'s' if len(examples) != 1 else ''}")


def translations_html(translations) -> str:
    """The HTML of a ``Translation`` or a list of them in a notebook: the viewer when every one
    carries its attention, else a table of source and translation."""
    translations = [translations] if hasattr(translations, "output") else list(translations)
    if translations and all(translation.attention is not None for translation in translations):
        return AttentionView([translation_example(t) for t in translations], "attnmt translations")._repr_html_()
    rows = "".join(f"<tr><td>{html.escape(t.source)}</td><td>{html.escape(t.output)}</td></tr>" for t in translations)
    return f"<table><tr><th>source</th><th>translation</th></tr>{rows}</table>"

