"""Evaluating a translator on a split: perplexity, BLEU and chrF (``attnmt.evaluation.scores``),
at one beam size or several, and the files ``attnmt evaluate`` writes.

Files (names in ``attnmt.runs.folder``): ``evaluate_run`` writes a run's hypotheses and its eval json;
``evaluate_beam_sizes`` writes the hypotheses of every beam size and the beam-size table.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnmt.data import ParallelCorpus, batches_for_inference, load_split
from attnmt.decoding.translator import Translation, Translator
from attnmt.errors import ConfigError
from attnmt.evaluation.scores import PerplexityResult, Scores, corpus_scores, perplexity
from attnmt.runs.folder import (
    beam_table_path,
    checkpoint_path,
    data_of_run,
    eval_json_path,
    hyps_path,
)
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.outputs import check_writable_folder
from attnmt.runtime.tables import format_table
from attnmt.runtime.threads import following

__all__ = ["BEAM_HEADERS", "BeamEvaluation", "BeamResult", "CorpusEvaluation", "RunEvaluation", "beam_table",
           "compare_beam_sizes", "corpus_perplexity", "data_of_run", "evaluate_beam_sizes", "evaluate_corpus",
           "evaluate_run"]


def corpus_perplexity(translator: Translator, corpus: ParallelCorpus, max_tokens: int = 4096) -> PerplexityResult:
    """Perplexity of ``translator`` on a whole corpus (never cut), batched by ``max_tokens``."""
    src_ids = translator.tokenizers.src.encode_many(corpus.src)
    tgt_ids = translator.tokenizers.tgt.encode_many(corpus.tgt)
    batches = batches_for_inference(src_ids, max_tokens=max_tokens, tgt_ids=tgt_ids)
    return perplexity(translator.model, following(getattr(translator, "threads", None), batches))


# --------------------------------------------------------------------------- a whole split


@dataclass
class CorpusEvaluation:
    """Everything ``attnmt evaluate`` reports about one split."""

    split: str
    beam: int
    perplexity: PerplexityResult
    scores: Scores
    sources: list[str]
    references: list[str]
    translations: list[Translation]  # in corpus order

    @property
    def hypotheses(self) -> list[str]:
        return [t.output for t in self.translations]

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (without the translations, which go to the hyps file)."""
        return {
            "split": self.split,
            "beam": self.beam,
            "num_sentences": len(self.sources),
            "loss": self.perplexity.loss,
            "perplexity": self.perplexity.perplexity,
            "num_tokens": self.perplexity.num_tokens,
            **self.scores.to_dict(),
        }


def evaluate_corpus(
    translator: Translator,
    corpus: ParallelCorpus,
    split: str = "test",
    beam: int = 1,
    batch_size: int | None = None,
    max_tokens: int = 4096,
    return_attention: bool = False,
    progress: bool = False,
) -> CorpusEvaluation:
    """Perplexity (teacher forced) and BLEU/chrF (decoded with ``beam``) of ``translator`` on ``corpus``."""
    scored = corpus_perplexity(translator, corpus, max_tokens)
    translations = translator.translate(
        corpus.src, beam=beam, batch_size=batch_size, return_attention=return_attention, progress=progress
    )
    scores = corpus_scores([t.output for t in translations], corpus.tgt)
    return CorpusEvaluation(split, beam, scored, scores, list(corpus.src), list(corpus.tgt), translations)


def _check_beam(beam: Any, what: str = "beam") -> None:
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise ConfigError(f"{what} must be an integer >= 1, got {beam!r}")


def _open_run(run, checkpoint, split, precision, device, on_load, trust_run_code=False, num_threads=None) -> tuple[
        Path, Translator, str, ParallelCorpus, int]:
    """The checkpoint file, its Translator (shown to ``on_load``), the split's name, its corpus and
    the run's ``data.max_tokens``."""
    path = checkpoint_path(run, checkpoint)
    check_writable_folder(path.parent, f"the run folder {path.parent}, where the scores are written")
    translator = Translator.load(path, precision=precision, device=device, trust_run_code=trust_run_code,
                                 num_threads=num_threads)
    if on_load is not None:
        on_load(translator)
    assert translator.run_config is not None  # loaded from a run
    data = data_of_run(path.parent, translator.run_config.data)
    return path, translator, data.canonical_split(split), load_split(data, split), data.max_tokens


@dataclass
class RunEvaluation:
    """What ``evaluate_run`` computed and wrote."""

    report: dict[str, Any]  # the eval json: run, checkpoint, split, beam, perplexity, bleu, chrf, ...
    result: CorpusEvaluation
    translator: Translator
    json_path: Path
    hyps_path: Path


def evaluate_run(  # noqa: PLR0913 (the options of `attnmt evaluate`, each a keyword)
    run: str | Path,
    split: str = "test",
    beam: int | None = None,
    checkpoint: str = "best",
    batch_size: int | None = None,
    return_attention: bool = False,
    progress: bool = False,
    precision: str | None = None,
    device: str | None = None,
    on_load: Callable[[Translator], None] | None = None,
    trust_run_code: bool = False,
    num_threads: int | None = None,
    mask_heads: str = "",
    ablation: str = "zero",
) -> RunEvaluation:
    """Score a run folder (or checkpoint file) on ``split``; write its hyps and eval json (names in
    ``attnmt.runs.folder``). ``beam`` / ``precision`` / ``device`` None = the run's ``search`` section;
    ``on_load`` sees the translator once it is loaded (the CLI says where it runs); ``trust_run_code``
    and ``num_threads`` (None: the count follows the machine) as for ``Translator.load``.
    ``mask_heads`` (``PART:LAYER:HEAD,...``) switches heads off (``ablation``: zero, or their mean
    output over the validation set) for the whole evaluation; its files then end in
    ``-heads-<8 hex digits of the heads and ablation>`` and the report names the heads."""
    from attnmt.evaluation.heads import heads_switched_off  # it reads runs as this module does

    if beam is not None:
        _check_beam(beam)
    path, translator, name, corpus, max_tokens = _open_run(run, checkpoint, split, precision, device, on_load,
                                                                trust_run_code, num_threads)
    run_dir = path.parent
    beam = translator.search_config.beam if beam is None else beam
    with heads_switched_off(translator, mask_heads, ablation, run_dir) as heads:
        result = evaluate_corpus(
            translator, corpus, split=name, beam=beam, batch_size=batch_size,
            max_tokens=max_tokens, return_attention=return_attention, progress=progress,
        )
    labels = [head.label() for head in heads]
    variant = "heads-" + hashlib.sha256(f"{','.join(labels)};{ablation}".encode()).hexdigest()[:8] if heads else ""
    hyps_file = write_text_atomic(hyps_path(run_dir, name, beam, translator.precision, variant),
                                  "".join(h + "\n" for h in result.hypotheses))
    report = {"run": str(run_dir), "checkpoint": path.name, **result.to_dict(), "precision": translator.precision,
              "device": str(translator.device), "step": translator.step,
              **({"mask_heads": labels, "ablation": ablation} if heads else {})}
    json_file = write_text_atomic(eval_json_path(run_dir, name, beam, translator.precision, variant),
                                  json.dumps(report, indent=2) + "\n")
    return RunEvaluation(report, result, translator, json_file, hyps_file)


# --------------------------------------------------------------------------- beam sizes


@dataclass
class BeamResult:
    """Scores of one beam size on a corpus. Lengths are whitespace-separated words."""

    beam: int
    bleu: float
    chrf: float
    bleu_lowercase: float
    average_length: float  # mean output length
    length_ratio: float  # total output words / total reference words
    seconds: float  # decoding time (translation only, not the scoring)
    num_sentences: int
    hypotheses: list[str] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values.pop("hypotheses")
        return values


def compare_beam_sizes(
    translator: Translator,
    corpus: ParallelCorpus,
    beams: Sequence[int],
    batch_size: int | None = None,
    progress: bool = False,
) -> list[BeamResult]:
    """Decode ``corpus.src`` with each beam size (1 = greedy) and score against ``corpus.tgt``.

    ``seconds`` is the wall-clock time of ``translator.translate`` alone.
    """
    beams = list(beams)
    if not beams or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in beams):
        raise ConfigError(f"beam sizes must be integers >= 1, got {beams!r}")
    reference_words = sum(len(reference.split()) for reference in corpus.tgt)
    results = []
    for beam in beams:
        started = time.perf_counter()
        translations = translator.translate(corpus.src, beam=beam, batch_size=batch_size, progress=progress)
        seconds = time.perf_counter() - started
        outputs = [t.output for t in translations]
        scores = corpus_scores(outputs, corpus.tgt)
        words = sum(len(output.split()) for output in outputs)
        results.append(BeamResult(
            beam=beam, bleu=scores.bleu, chrf=scores.chrf, bleu_lowercase=scores.bleu_lowercase,
            average_length=words / max(len(outputs), 1), length_ratio=words / max(reference_words, 1),
            seconds=seconds, num_sentences=len(outputs), hypotheses=outputs,
        ))
    return results


BEAM_HEADERS = ["beam", "BLEU", "chrF", "avg length", "length ratio", "seconds", "sentences/s"]


def beam_table(results: Sequence[BeamResult]) -> str:
    """The Markdown table of ``compare_beam_sizes``'s results."""
    rows = [
        [r.beam, r.bleu, r.chrf, r.average_length, r.length_ratio, r.seconds, r.num_sentences / max(r.seconds, 1e-9)]
        for r in results
    ]
    return format_table(BEAM_HEADERS, rows)


@dataclass
class BeamEvaluation:
    """What ``evaluate_beam_sizes`` computed and wrote."""

    header: str  # one line: run, checkpoint, split, length penalty, perplexity
    table: str
    report: dict[str, Any]
    json_path: Path
    markdown_path: Path


def evaluate_beam_sizes(  # noqa: PLR0913 (the options of `attnmt evaluate --beam K...`, each a keyword)
    run: str | Path,
    beams: Sequence[int],
    split: str = "test",
    checkpoint: str = "best",
    batch_size: int | None = None,
    progress: bool = False,
    precision: str | None = None,
    device: str | None = None,
    on_load: Callable[[Translator], None] | None = None,
    trust_run_code: bool = False,
    num_threads: int | None = None,
) -> BeamEvaluation:
    """Perplexity once, then BLEU, chrF, lengths and decoding time per beam size; writes the hyps
    of every beam size and the table as ``beam-<split>.json`` and ``.md``."""
    path, translator, name, corpus, max_tokens = _open_run(run, checkpoint, split, precision, device, on_load,
                                                                trust_run_code, num_threads)
    run_dir = path.parent
    ppl = corpus_perplexity(translator, corpus, max_tokens)
    results = compare_beam_sizes(translator, corpus, beams, batch_size=batch_size, progress=progress)
    for result in results:
        write_text_atomic(hyps_path(run_dir, name, result.beam, translator.precision),
                          "".join(h + "\n" for h in result.hypotheses))
    search, step = translator.search_config, translator.step
    header = (f"{run_dir} ({path.name}{f', step {step}' if step is not None else ''}), {name}: "
              f"{len(corpus)} sentences, length penalty alpha {search.alpha:g}, perplexity {ppl.perplexity:.2f}"
              + ("" if translator.precision == "fp32" else f", {translator.precision} search"))
    report = {
        "run": str(run_dir), "checkpoint": path.name, "step": step, "split": name, "num_sentences": len(corpus),
        "alpha": search.alpha, "max_len_a": search.max_len_a, "max_len_b": search.max_len_b,
        "perplexity": ppl.perplexity, "loss": ppl.loss, "num_tokens": ppl.num_tokens,
        "precision": translator.precision, "device": str(translator.device),
        "results": [result.to_dict() for result in results],
    }
    table = beam_table(results)
    json_path = write_text_atomic(beam_table_path(run_dir, name, translator.precision, ".json"),
                                  json.dumps(report, indent=2) + "\n")
    markdown = (f"# Beam sizes\n\n{header}. Lengths in words; seconds = decoding time; length ratio = output "
                f"words / reference words.\n\n{table}\n")
    markdown_path = write_text_atomic(beam_table_path(run_dir, name, translator.precision, ".md"), markdown)
    return BeamEvaluation(header, table, report, json_path, markdown_path)
