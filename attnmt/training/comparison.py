"""Comparing attention mechanisms: each trained with several seeds, evaluated, and summarised
(``attnmt compare``). Evaluating one run is ``attnmt.evaluation.evaluate``'s.

A comparison of mechanisms is a folder::

    OUT/runs/<mechanism>-seed<N>/     one ordinary run folder per mechanism and seed (attnmt train)
        eval-<split>[-beamK].json     its test scores (the same file ``attnmt evaluate`` writes)
    OUT/summary.md, .csv, .json       per mechanism: mean, standard deviation and variance over the
    OUT/summary.png                   seeds of test perplexity, BLEU and chrF; a bar chart (drawn by
                                      the ``Figures`` given: ``attnmt.compare_mechanisms`` gives visual/'s)

Runs go seed by seed (seed 1 of every mechanism, then seed 2, ...), so a comparison stopped early
still compares every mechanism, and the summary is rewritten after every run. Running the same
comparison again continues it: a run whose training has finished and whose eval json exists is
reused, a finished run without scores is evaluated, and an interrupted run resumes from its last
checkpoint (exactly: see attnmt.training).

The runs, their statistics and the summary files are ``attnmt.evaluation.summary``'s.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnmt.attention.provenance import code_record
from attnmt.attention.registry import canonical_name, folder_label
from attnmt.attention.trusted_code import remember as remember_code
from attnmt.attribution.methods import AttributionOptions
from attnmt.data import load_split
from attnmt.decoding.translator import Translator
from attnmt.errors import ConfigError, ConfigMismatch
from attnmt.evaluation.agreement import run_agreement
from attnmt.evaluation.evaluate import evaluate_run
from attnmt.evaluation.summary import (
    METRICS,
    Comparison,
    RunOutcome,
    check_summary_files,
    number_text,
    write_summary,
)
from attnmt.runs.folder import (
    CONFIG_FILE,
    LAST,
    eval_json_path,
    read_code_summary,
    read_saved_config,
    resolve_resume_config,
    training_finished,
    writer_lock,
)
from attnmt.runs.folder import METRICS as METRICS_FILE
from attnmt.runs.run_config import RunConfig, load_config
from attnmt.runtime.device import describe, enable_tf32, resolve_device
from attnmt.runtime.reading import DataTooLarge, read_text_bounded
from attnmt.training.trainer import Trainer, ValidationHook


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _float_or_nan(value: Any) -> float:
    return math.nan if value is None else float(value)


@dataclass(frozen=True)
class Figures:
    """The pictures a comparison draws, given from above (training draws nothing itself).

    on_validation: hooks every run's trainer calls after validation (``attnmt.training.ValidationHook``).
    chart: the bar chart of a comparison as PNG bytes, written as summary.png (None: no chart).
    """

    on_validation: Sequence[ValidationHook] = ()
    chart: Callable[[Comparison], bytes] | None = None


# ================================================================================================
# Statistics over runs

def _check_same_config(run_dir: Path, requested: RunConfig) -> RunConfig:
    """The config to continue ``run_dir`` with: its own, with the requested limits; ConfigError when
    the comparison asks for a different one (another data set, model, lr, ...)."""
    saved = read_saved_config(run_dir)
    if saved is None:
        return requested
    try:
        return resolve_resume_config(saved, requested, {}, run_dir)
    except ConfigMismatch as mismatch:  # in the comparison's words, not train's advice to resume
        raise ConfigError(
            f"{run_dir}: this run was made with another config than the comparison asks for now: "
            f"{'; '.join(mismatch.differences)}. Use another --out folder, or the settings the comparison "
            "was started with"
        ) from None
    except ConfigError as error:
        raise ConfigError(f"{run_dir / CONFIG_FILE}: not a run config attnmt can continue ({error}); move the "
                          "folder away, or use another --out folder") from None


def run_folder(out: str | Path, mechanism: str, seed: int) -> Path:
    """``out/runs/<mechanism>-seed<seed>``; a user spec's folder is named by its file and class
    (``examples/my_attention.py:MyAttention`` -> ``my_attention.py-MyAttention``)."""
    return Path(out) / "runs" / f"{folder_label(mechanism)}-seed{seed}"



def _stop_reason(run_dir: Path) -> str | None:
    """Why the finished run stopped (its ``summary`` record in metrics.jsonl), or None."""
    lines = [line for line in (run_dir / METRICS_FILE).read_text(encoding="utf-8").splitlines() if line.strip()]
    reason = json.loads(lines[-1]).get("stop_reason") if lines else None
    return reason if isinstance(reason, str) else None


def _readable_report(path: Path) -> dict[str, Any] | None:
    """The scores an earlier evaluation wrote, or None when the file is damaged (not JSON, not a
    mapping, a metric that is not a finite number): the run is then evaluated again."""
    try:
        report = json.loads(read_text_bounded(path))
    except (OSError, ValueError, DataTooLarge):
        return None
    if not isinstance(report, dict):
        return None
    for metric in METRICS:
        value = report.get(metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
    return report


def _check_limit_kept(run_dir: Path, requested: RunConfig) -> None:
    """ConfigError when a finished run was stopped by a limit the comparison now sets otherwise
    (it would be scored as if trained to the new limit)."""
    reason = _stop_reason(run_dir) or ""
    for limit in ("max_steps", "max_epochs", "max_minutes"):
        if reason.startswith(f"{limit}="):
            stopped_at = reason.removeprefix(f"{limit}=").split()[0]
            asked = getattr(requested.training, limit)
            if str(asked) != stopped_at and not (asked is not None and float(stopped_at) == float(asked)):
                raise ConfigError(
                    f"{run_dir}: this run stopped at {limit}={stopped_at}, but the comparison asks for "
                    f"{limit}={asked}; reusing it would score it as if trained to the new limit. Use another "
                    "--out folder, or the limits the comparison was started with"
                )


def _complete_run(run_dir: Path, requested, split: str, beam: int, log: Callable[[str], None],  # noqa: PLR0913 (one run's settings, passed on from compare_mechanisms)
                  show_progress: bool, verbose: bool, trust_run_code: bool = False,
                  on_validation: Sequence[ValidationHook] = ()) -> tuple[str, dict[str, Any]]:
    """Bring one run of a comparison to an eval json, doing only what is missing; returns
    (status, eval report). status: "reused" (trained and scored before), "evaluated" (trained
    before), "resumed" (from its last.pt) or "trained"."""
    report_path = eval_json_path(run_dir, split, beam)
    finished = training_finished(run_dir)
    started_before = run_dir.is_dir() and any(run_dir.iterdir())
    config = _check_same_config(run_dir, requested) if started_before else requested
    if started_before:
        _check_same_code(run_dir, requested.model.attention)
    if finished:
        _check_limit_kept(run_dir, requested)
    if finished and report_path.is_file():
        report = _readable_report(report_path)
        if report is not None:
            return "reused", report
        log(f"{report_path} is damaged; evaluating {run_dir} again")
        status = "evaluated"
    elif finished:
        status = "evaluated"
        log(f"training finished earlier, evaluating {run_dir}")
    if not finished:
        # A folder without last.pt was stopped before its first checkpoint: Trainer(resume=True)
        # starts it again, as a new run.
        status = "resumed" if (run_dir / LAST).is_file() else "trained"
        log(f"{'resuming' if status == 'resumed' else 'restarting' if started_before else 'training'} {run_dir}")
        Trainer(config, run_dir, resume=started_before, show_progress=show_progress, verbose=verbose,
                trust_run_code=trust_run_code, named_attention=requested.model.attention,
                on_validation=on_validation).run()
    return status, evaluate_run(run_dir, split=split, beam=beam, progress=show_progress,
                                device=config.training.device, trust_run_code=trust_run_code).report


def _check_same_code(run_dir: Path, attention: str | None) -> None:
    """ConfigError when ``run_dir`` was trained with other code than the user mechanism
    ``attention`` names now (its file edited since): reusing its scores would credit the new code
    with them. The comparison names the file now, so its code is listed as trusted here, as a new
    training lists it (``attnmt.attention.trusted_code``)."""
    record = code_record(attention) if attention is not None else None
    if record is None:
        return
    kept = read_code_summary(run_dir)
    if kept is None or kept.get("sha256") != record.sha256:
        was = f"SHA-256 {str(kept.get('sha256'))[:12]}…" if kept else "no record of its code"
        raise ConfigError(
            f"{run_dir}: this run was trained with other code than {attention!r} holds now ({was} in the run, "
            f"{record.sha256[:12]}… in {record.path}); its scores belong to that code. Use another --out folder, "
            "or put the file back as it was"
        )
    remember_code(record.sha256, record.spec)


MAX_RUNS = 1000  # seeds per mechanism; more is a typo, not a study (each run is a whole training)


def compare_mechanisms(  # noqa: PLR0913 (the options of `attnmt compare`, each a keyword)
    config_path: str | Path,
    mechanisms: Sequence[str],
    runs: int,
    out: str | Path,
    split: str = "test",
    beam: int = 1,
    limits: dict[str, Any] | None = None,
    set_options: Sequence[str] = (),
    show_progress: bool = True,
    verbose: bool = False,
    log: Callable[[str], None] = print,
    device: str | None = None,
    trust_run_code: bool = False,
    overwrite: bool = False,
    say: Callable[[str], None] | None = None,
    saliency: AttributionOptions | None = None,
    figures: Figures = Figures(),
) -> Comparison:
    """Train ``mechanisms`` × seeds 1..``runs`` from ``config_path`` into ``out/runs/``, evaluate each
    run on ``split`` with ``beam`` and write ``out/summary.{md,csv,json,png}`` (see the module doc).

    limits: ``{"max_epochs": N, "max_steps": N, "max_minutes": M}`` (None values ignored), per run.
    set_options: ``["section.key=value", ...]`` as ``attnmt train --set``.
    log: receives one line when a run starts and one when it is done, with its scores.
    say: receives the status line of where the runs train (default: ``log``).
    device: where every run trains and is evaluated (None: the config's ``training.device``).
    trust_run_code: a run of a user mechanism whose file changed since it was trained resumes and is
    evaluated with the copy the run keeps (else UntrustedCodeError).
    overwrite: replace summary files in ``out`` that an earlier comparison did not write (else ConfigError).
    saliency: also measure how each run's attention agrees with its gradient saliency on its own
    outputs of ``split`` (``attnmt.evaluation.agreement``; kept in the run folder and reused).
    figures: the heatmaps of every run's validation and the summary's chart (``Figures``); none here,
    ``attnmt.compare_mechanisms`` (``attnmt.workflows``) gives visual/'s.
    """
    mechanisms = [str(m) for m in mechanisms]
    if not mechanisms:
        raise ConfigError("give at least one attention mechanism to compare")
    try:
        names = [canonical_name(m) for m in mechanisms]
    except (TypeError, ValueError) as error:
        raise ConfigError(f"--attention: {error}") from None
    labels = [folder_label(name) for name in names]
    duplicated = sorted({m for m, label in zip(mechanisms, labels) if labels.count(label) > 1})
    if duplicated:
        raise ConfigError(f"mechanisms={' '.join(mechanisms)}: {', '.join(duplicated)} name the same mechanism "
                          "(or the same file and class) more than once")
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise ConfigError(f"runs={runs!r}: must be an integer from 1 to {MAX_RUNS} (seeds 1..runs per mechanism)")
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise ConfigError(f"beam={beam!r}: must be an integer >= 1")
    limits = {key: value for key, value in (limits or {}).items() if value is not None}
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a folder; choose another folder")
    check_summary_files(out, overwrite)

    def config_for(mechanism: str, seed: int):
        return load_config(config_path, {"attention": mechanism, "seed": seed, "device": device, **limits},
                           list(set_options))

    # Every mechanism name and the split are checked before anything is trained.
    first = {mechanism: config_for(mechanism, 1) for mechanism in mechanisms}
    data = first[mechanisms[0]].data
    sources = load_split(data, split).src  # ConfigError for a split the config lacks, before anything is trained
    split_name = data.canonical_split(split)

    with writer_lock(out, "compare"):  # one comparison at a time writes into out
        comparison = Comparison(
            out=out, config=str(config_path), mechanisms=mechanisms, runs=runs, split=split_name, beam=beam,
            limits=limits, set_options=list(set_options), saliency=saliency,
        )
        where = resolve_device(first[mechanisms[0]].training.device)
        (say or log)(describe(where, first[mechanisms[0]].training.precision, enable_tf32(where)))  # as trained
        total = len(mechanisms) * runs
        number = 0
        for seed in range(1, runs + 1):
            for mechanism in mechanisms:
                number += 1
                label = f"[{number}/{total}] {mechanism} seed {seed}"
                run_dir = run_folder(out, mechanism, seed)
                requested = first[mechanism] if seed == 1 else config_for(mechanism, seed)
                started = time.perf_counter()
                def log_run(what: str, label: str = label) -> None:
                    log(f"{label}: {what}")

                status, report = _complete_run(run_dir, requested, split_name, beam, log_run, show_progress, verbose,
                                               trust_run_code, figures.on_validation)
                outcome = RunOutcome(
                    mechanism=mechanism, seed=seed, run_dir=run_dir, status=status,
                    perplexity=float(report["perplexity"]), bleu=float(report["bleu"]), chrf=float(report["chrf"]),
                    step=report.get("step"), seconds=time.perf_counter() - started if status != "reused" else 0.0,
                    stop_reason=_stop_reason(run_dir) if training_finished(run_dir) else None,
                )
                if saliency is not None:
                    translator = Translator.load(run_dir, device=requested.training.device,
                                                 trust_run_code=trust_run_code)
                    agreement = run_agreement(translator, run_dir, split_name, sources, beam, saliency,
                                              progress=show_progress)
                    outcome.rank_correlation = _float_or_nan(agreement["rank_correlation"])
                    outcome.top1 = _float_or_nan(agreement["top1"])
                comparison.outcomes.append(outcome)
                took = f" in {_duration(outcome.seconds)}" if status != "reused" else ""
                log(
                    f"{label}: {status}{took}: {split_name} perplexity {outcome.perplexity:.2f}, "
                    f"BLEU {outcome.bleu:.2f}, chrF {outcome.chrf:.2f}"
                    + (f" (step {outcome.step})" if outcome.step is not None else "")
                    + (f"; attention-saliency rank correlation {number_text(outcome.rank_correlation)}, top-1 "
                       f"{number_text(outcome.top1)}" if saliency is not None else "")
                )
                write_summary(comparison, figures.chart)
        return comparison


