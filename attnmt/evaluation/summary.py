"""The runs of a comparison of mechanisms, their statistics, and the summary files it writes
(``summary.md``, ``.csv``, ``.json``, and a chart drawn from above as ``summary.png``).

Statistics over the n runs of a mechanism (values x_1 … x_n)::

    mean = (1/n) Σ x_i,    var = 1/(n−1) Σ (x_i − mean)²,    std = √var

the sample (n − 1) estimates, as ``statistics.variance`` and ``numpy.var(ddof=1)``; undefined
(NaN, written as an empty cell / null) for a single run. Training and scheduling the runs is
``attnmt.training.comparison``'s.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnmt.attention.registry import short_name
from attnmt.attribution.methods import AttributionOptions
from attnmt.errors import ConfigError
from attnmt.runtime.atomic_files import write_bytes_atomic, write_text_atomic
from attnmt.runtime.tables import format_table

__all__ = ["METRICS", "SUMMARY_FILES", "Comparison", "RunOutcome", "Statistics", "check_summary_files", "number_text",
           "write_summary"]

METRICS = ("perplexity", "bleu", "chrf")
AGREEMENT_METRICS = ("rank_correlation", "top1")  # with saliency: attnmt.evaluation.agreement
METRIC_LABELS = {"perplexity": "perplexity", "bleu": "BLEU", "chrf": "chrF",
                 "rank_correlation": "attention-saliency rank correlation", "top1": "top-1 agreement"}


# ================================================================================================


@dataclass
class Statistics:
    """Mean, sample standard deviation and sample variance of n values (NaN std/var for n < 2)."""

    n: int
    mean: float
    std: float
    var: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Statistics:
        values = [float(v) for v in values]
        if not values:
            return cls(0, math.nan, math.nan, math.nan)
        if len(values) == 1:
            return cls(1, values[0], math.nan, math.nan)
        variance = statistics.variance(values)
        return cls(len(values), statistics.fmean(values), math.sqrt(variance), variance)


def number_text(value: float, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals, or "–" when it is undefined (None or NaN)."""
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _mean_std(stats: Statistics, digits: int = 2) -> str:
    if stats.n == 0 or math.isnan(stats.mean):  # no runs, or a measure undefined for them
        return "–"
    if stats.n == 1:
        return number_text(stats.mean, digits)
    return f"{stats.mean:.{digits}f} ± {stats.std:.{digits}f}"


def _json_number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


# ================================================================================================
# Mechanisms over seeds
# ================================================================================================


@dataclass
class RunOutcome:
    """One (mechanism, seed) run of a comparison and its test scores."""

    mechanism: str
    seed: int
    run_dir: Path
    status: str  # "reused", "evaluated", "trained", "resumed"
    perplexity: float
    bleu: float
    chrf: float
    step: int | None
    seconds: float  # this session's training + evaluation time (0 for a reused run)
    stop_reason: str | None = None  # what stopped its training: the limit it was trained to, or early stopping
    rank_correlation: float = math.nan  # with saliency: attnmt.evaluation.agreement
    top1: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["run_dir"] = str(self.run_dir)
        for name in AGREEMENT_METRICS:  # NaN (not measured, or no word counted) is null, as JSON has no NaN
            values[name] = _json_number(values[name])
        return values


@dataclass
class Comparison:
    """The settings and the finished runs of a comparison (``compare_mechanisms``)."""

    out: Path
    config: str
    mechanisms: list[str]
    runs: int
    split: str
    beam: int
    limits: dict[str, Any]
    set_options: list[str]
    outcomes: list[RunOutcome] = field(default_factory=list)
    saliency: AttributionOptions | None = None

    @property
    def metrics(self) -> tuple[str, ...]:
        """The scores of every run: perplexity, BLEU, chrF, and with saliency the agreement."""
        return METRICS + (AGREEMENT_METRICS if self.saliency is not None else ())

    def statistics(self) -> dict[str, dict[str, Statistics]]:
        """mechanism -> metric -> Statistics over its finished runs (mechanisms without any omitted)."""
        table = {}
        for mechanism in self.mechanisms:
            runs = [o for o in self.outcomes if o.mechanism == mechanism]
            if runs:
                table[mechanism] = {metric: Statistics.of([getattr(o, metric) for o in runs])
                                    for metric in self.metrics}
        return table

    def summary_table(self) -> str:
        """Markdown: per mechanism, mean ± std and variance of each metric."""
        headers = ["attention", "runs"]
        for metric in self.metrics:
            headers += [f"{METRIC_LABELS[metric]} (mean ± std)", f"{METRIC_LABELS[metric]} var"]
        rows = []
        for mechanism, by_metric in self.statistics().items():
            row: list[Any] = [mechanism, by_metric[METRICS[0]].n]
            for metric in self.metrics:
                stats = by_metric[metric]
                row += [_mean_std(stats), stats.var]
            rows.append(row)
        return format_table(headers, rows)

    def runs_table(self) -> str:
        agreement = self.saliency is not None
        rows = [[o.mechanism, o.seed, o.perplexity, o.bleu, o.chrf,
                 *([o.rank_correlation, o.top1] if agreement else []), "–" if o.step is None else o.step,
                 str(o.run_dir)] for o in self.outcomes]
        return format_table(["attention", "seed", "perplexity", "BLEU", "chrF",
                             *(["rank correlation", "top-1"] if agreement else []), "steps", "run"], rows)

    def chart_data(self) -> dict[str, Any]:
        """The keyword arguments of ``attnmt.visual.charts.runs_chart_png`` for this comparison: per
        mechanism with finished runs and per metric, its mean and standard deviation
        (``statistics``) and the value of each run."""
        table = self.statistics()
        bars = {mechanism: {metric: (stats.mean, stats.std) for metric, stats in by_metric.items()}
                for mechanism, by_metric in table.items()}
        dots = {mechanism: {metric: [getattr(o, metric) for o in self.outcomes if o.mechanism == mechanism]
                            for metric in self.metrics}
                for mechanism in table}
        counts = sorted({by_metric[METRICS[0]].n for by_metric in table.values()})
        runs = "no" if not counts else str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        return {
            "bars": bars,
            "dots": dots,
            "titles": {metric: METRIC_LABELS[metric] + (" (lower is better)" if metric == "perplexity" else "")
                       for metric in self.metrics},
            "suptitle": f"{self.split}: mean ± standard deviation over {runs} runs (dots: single runs)",
            "labels": {mechanism: short_name(mechanism) for mechanism in table},
            "from_zero": [metric for metric in self.metrics if metric != "rank_correlation"],
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "mechanisms": self.mechanisms,
            "runs_per_mechanism": self.runs,
            "split": self.split,
            "beam": self.beam,
            "limits": self.limits,
            "set": self.set_options,
            "saliency": None if self.saliency is None else asdict(self.saliency),
            "statistics": {
                mechanism: {
                    metric: {"n": s.n, "mean": _json_number(s.mean), "std": _json_number(s.std),
                             "var": _json_number(s.var)}
                    for metric, s in by_metric.items()
                }
                for mechanism, by_metric in self.statistics().items()
            },
            "runs": [o.to_dict() for o in self.outcomes],
        }



SUMMARY_FILES = ("summary.md", "summary.csv", "summary.json", "summary.png")


def check_summary_files(out: Path, overwrite: bool) -> None:
    """ConfigError when ``out`` holds summary files that no comparison wrote (a summary.json of its
    own says one did), unless ``overwrite``: compare never replaces a user's own files silently."""
    existing = [name for name in SUMMARY_FILES if (out / name).exists()]
    if not existing or overwrite:
        return
    try:
        earlier = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        ours = isinstance(earlier, dict) and {"mechanisms", "runs_per_mechanism", "statistics"} <= set(earlier)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        ours = False
    if not ours:
        raise ConfigError(f"--out {out} holds {', '.join(existing)}, which no comparison wrote; compare writes "
                          f"{', '.join(SUMMARY_FILES)} there: choose another folder, or pass --overwrite")


# ================================================================================================
# Summary files
# ================================================================================================


def write_summary(comparison: Comparison, chart: Callable[[Comparison], bytes] | None = None) -> dict[str, Path]:
    """Write summary.md, summary.csv, summary.json and, drawn by ``chart``, summary.png into
    ``comparison.out``."""
    out = comparison.out
    beam = "greedy search" if comparison.beam == 1 else f"beam {comparison.beam}"
    markdown = (
        f"# Attention mechanisms compared\n\n"
        f"config `{comparison.config}`; {comparison.split}, {beam}; seeds 1–{comparison.runs}"
        + (f"; limits {', '.join(f'{k}={v}' for k, v in comparison.limits.items())}" if comparison.limits else "")
        + (f"; set {', '.join(comparison.set_options)}" if comparison.set_options else "")
        + "\n\nMean ± sample standard deviation and sample variance (n − 1) over the runs.\n\n"
        + comparison.summary_table()
        + "\n\n## Runs\n\n"
        + comparison.runs_table()
        + ("\n\n![summary](summary.png)\n" if chart is not None else "\n")
    )
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    metrics = comparison.metrics
    header = ["attention", "runs"] + [f"{metric}_{stat}" for metric in metrics for stat in ("mean", "std", "var")]
    writer.writerow(header)
    for mechanism, by_metric in comparison.statistics().items():
        row: list[Any] = [mechanism, by_metric[METRICS[0]].n]
        for metric in metrics:
            stats = by_metric[metric]
            row += ["" if math.isnan(v) else repr(float(v)) for v in (stats.mean, stats.std, stats.var)]
        writer.writerow(row)
    paths = {
        "md": write_text_atomic(out / "summary.md", markdown),
        "csv": write_text_atomic(out / "summary.csv", buffer.getvalue()),
        "json": write_text_atomic(out / "summary.json", json.dumps(comparison.to_dict(), indent=2) + "\n"),
    }
    if chart is not None:
        paths["png"] = write_bytes_atomic(out / "summary.png", chart(comparison))
    return paths
