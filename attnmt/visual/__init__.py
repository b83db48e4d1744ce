"""Presentation: pictures of what attention does, and attention kept for your own analyses.

- ``heatmap``: one matrix as a PNG, SVG or PDF heatmap.
- ``viewer``: one self-contained HTML page of interactive heatmaps (``attnmt view``).
- ``examples``: translations with their attention, per layer and head, as the viewer shows them.
- ``notebook``: the viewer inline in Jupyter (``attnmt.show``, ``AttentionView``).
- ``curves``: training loss, validation perplexity and BLEU of runs (``attnmt curves``).
- ``export``: every layer's and head's weights of translations in .npz or .jsonl
  (``attnmt translate --attention-out``, ``attnmt.load_attention``).

Public names load from their module on first use.
"""

from attnmt.runtime.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    **dict.fromkeys(["PLOT_FORMATS", "plot_attention", "plot_metadata"], "heatmap"),
    **dict.fromkeys(["attention_viewer_page", "write_attention_viewer"], "viewer"),
    **dict.fromkeys(["named_heads", "view_examples"], "examples"),
    **dict.fromkeys(["AttentionView", "show", "translation_example", "translations_html"], "notebook"),
    **dict.fromkeys(["Curves", "plot_curves", "read_curves"], "curves"),
    **dict.fromkeys(["FORMATS", "AttentionRecord", "attention_records", "check_attention_path", "load_attention",
                     "save_attention"], "export"),
})
