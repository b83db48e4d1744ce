"""Training and comparing as a user runs them: ``attnmt.training``'s functions with the pictures of
``attnmt.visual`` wired in. These are ``attnmt.train`` and ``attnmt.compare_mechanisms``, and
what ``attnmt train`` and ``attnmt compare`` call.

Training sits below presentation in the layers (a trainer draws nothing; it calls the hooks it is
given), so the wiring lives here, above both:

- every validation draws heatmaps of the first ``training.examples`` validation sentences into
  ``RUN/examples/`` (``attnmt.visual.heatmap.draw_validation_examples``);
- a comparison's summary.png is ``attnmt.visual.charts.runs_chart_png`` of its runs.
"""

from __future__ import annotations

from typing import Any

from attnmt.evaluation.summary import Comparison
from attnmt.training.comparison import Figures
from attnmt.training.comparison import compare_mechanisms as compare_mechanisms_bare
from attnmt.training.trainer import TrainResult
from attnmt.training.trainer import train as train_bare
from attnmt.visual.charts import runs_chart_png
from attnmt.visual.heatmap import draw_validation_examples

__all__ = ["FIGURES", "compare_mechanisms", "train"]


def comparison_chart(comparison: Comparison) -> bytes:
    """summary.png of ``comparison``: a bar chart per metric over its runs."""
    return runs_chart_png(**comparison.chart_data())


#: the figures a comparison draws: example heatmaps at every run's validation, and the chart
FIGURES = Figures(on_validation=(draw_validation_examples,), chart=comparison_chart)


def train(config, run_dir, **options: Any) -> TrainResult:
    """``attnmt.training.train(config, run_dir, **options)`` with the example heatmaps drawn at each
    validation (``training.examples`` of them; none when it is 0)."""
    hooks = (draw_validation_examples, *options.pop("on_validation", ()))
    return train_bare(config, run_dir, on_validation=hooks, **options)


def compare_mechanisms(config_path, mechanisms, runs, out, **options: Any) -> Comparison:
    """``attnmt.training.compare_mechanisms`` with its figures drawn: every run's example heatmaps
    and summary.png."""
    options.setdefault("figures", FIGURES)
    return compare_mechanisms_bare(config_path, mechanisms, runs, out, **options)
