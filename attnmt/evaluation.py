"""Evaluating a translator: perplexity, BLEU and chrF of a split, at one beam size or several.

One module serves validation during training, ``attnmt evaluate``, ``attnmt compare`` and the
benchmarks.

Perplexity (teacher forcing: the decoder reads the reference prefix ``y_<t``)::

    NLL = -(1/N) Σ_{sentences} Σ_{t=1..|y|+1} log p(y_t | y_<t, x)        (y_{|y|+1} = EOS)
    PPL = exp(NLL)

over the N real target tokens (EOS included, padding excluded) and without label smoothing, so
it is the model's true per-token likelihood. Note that it is a per-*subword* perplexity: it
depends on the tokenizer and compares only runs that share one.

BLEU (Papineni et al., 2002) and chrF (Popović, 2015) are computed by sacrebleu on the
detokenized, cased output against the raw references, with sacrebleu's default ``13a``
tokenization, so the numbers are comparable with published ones; each comes with its sacrebleu
signature. A lower-cased BLEU is reported too, as many Multi30k papers quote it.

Files (names in ``attnmt.runs``): ``evaluate_run`` writes a run's hypotheses and its eval json;
``evaluate_beam_sizes`` writes the hypotheses of every beam size and the beam-size table.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from sacrebleu.metrics import BLEU, CHRF

from attnmt.data import ParallelCorpus, batches_for_inference, load_split
from attnmt.errors import ConfigError
from attnmt.files import write_text_atomic
from attnmt.models.losses import token_losses
from attnmt.runs import beam_table_path, checkpoint_path, eval_json_path, hyps_path
from attnmt.tables import format_table
from attnmt.translator import Translation, Translator

# --------------------------------------------------------------------------- perplexity


@dataclass
class PerplexityResult:
    """Teacher-forced likelihood of a corpus: mean NLL per token (nats) and its exponential."""

    loss: float
    perplexity: float
    num_tokens: int


def likelihood_sums(model, batches: Iterable) -> tuple[float, int]:
    """``(Σ −log p, number of real target tokens)`` of ``model`` on ``batches``, teacher forced on
    the model's device, in eval mode (no dropout; the mode is restored afterwards)."""
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    total_nll = 0.0
    total_tokens = 0
    try:
        with torch.no_grad():
            for batch in batches:
                batch = batch.to(device)
                logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, tgt_mask=batch.tgt_mask)
                _, nll_sum, count = token_losses(logits, batch.tgt_out, batch.tgt_mask)
                total_nll += float(nll_sum)
                total_tokens += count
    finally:
        model.train(was_training)
    return total_nll, total_tokens


def perplexity(model, batches: Iterable) -> PerplexityResult:
    """Perplexity of ``model`` on ``batches`` (attnmt.data Batch objects), teacher forced."""
    return perplexity_from_sums(*likelihood_sums(model, batches))


def perplexity_from_sums(nll_sum: float, num_tokens: int) -> PerplexityResult:
    """``exp(nll_sum / num_tokens)``; NaN values when there are no tokens."""
    if num_tokens <= 0:
        return PerplexityResult(float("nan"), float("nan"), 0)
    loss = nll_sum / num_tokens
    return PerplexityResult(loss, math.exp(min(loss, 700.0)), num_tokens)


def corpus_perplexity(translator: Translator, corpus: ParallelCorpus, max_tokens: int = 4096) -> PerplexityResult:
    """Perplexity of ``translator`` on a whole corpus (never cut), batched by ``max_tokens``."""
    src_ids = translator.tokenizers.src.encode_many(corpus.src)
    tgt_ids = translator.tokenizers.tgt.encode_many(corpus.tgt)
    return perplexity(translator.model, batches_for_inference(src_ids, max_tokens=max_tokens, tgt_ids=tgt_ids))


# --------------------------------------------------------------------------- BLEU and chrF


@dataclass
class Scores:
    """Corpus-level scores of hypotheses against one reference each."""

    bleu: float
    bleu_signature: str
    chrf: float
    chrf_signature: str
    bleu_lowercase: float
    bleu_lowercase_signature: str
    bleu_details: str  # sacrebleu's one-line summary: n-gram precisions, brevity penalty, lengths
    num_sentences: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references must be lists of sentences, not strings")
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def bleu(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False) -> tuple[float, str]:
    """sacrebleu corpus BLEU (13a tokenization) and its signature."""
    _check_pairs(hypotheses, references)
    metric = BLEU(lowercase=lowercase)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return float(result.score), str(metric.get_signature())


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """BLEU (cased), chrF and lower-cased BLEU of detokenized hypotheses against raw references."""
    _check_pairs(hypotheses, references)
    hypotheses, references = list(hypotheses), [list(references)]
    cased, chrf, lower = BLEU(), CHRF(), BLEU(lowercase=True)
    cased_result = cased.corpus_score(hypotheses, references)
    chrf_result = chrf.corpus_score(hypotheses, references)
    lower_result = lower.corpus_score(hypotheses, references)
    return Scores(
        bleu=float(cased_result.score),
        bleu_signature=str(cased.get_signature()),
        chrf=float(chrf_result.score),
        chrf_signature=str(chrf.get_signature()),
        bleu_lowercase=float(lower_result.score),
        bleu_lowercase_signature=str(lower.get_signature()),
        bleu_details=str(cased_result),
        num_sentences=len(hypotheses),
    )


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


def _open_run(run, checkpoint, split, precision, device, on_load) -> tuple[Path, Translator, str, ParallelCorpus]:
    """The checkpoint file, its Translator (shown to ``on_load``), the split's name and its corpus."""
    path = checkpoint_path(run, checkpoint)
    translator = Translator.load(path, precision=precision, device=device)
    if on_load is not None:
        on_load(translator)
    data = translator.run_config.data
    return path, translator, data.canonical_split(split), load_split(data, split)


@dataclass
class RunEvaluation:
    """What ``evaluate_run`` computed and wrote."""

    report: dict[str, Any]  # the eval json: run, checkpoint, split, beam, perplexity, bleu, chrf, ...
    result: CorpusEvaluation
    translator: Translator
    json_path: Path
    hyps_path: Path


def evaluate_run(
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
) -> RunEvaluation:
    """Score a run folder (or checkpoint file) on ``split``; write its hyps and eval json (names in
    ``attnmt.runs``). ``beam`` / ``precision`` / ``device`` None = the run's ``search`` section;
    ``on_load`` sees the translator once it is loaded (the CLI says where it runs)."""
    if beam is not None:
        _check_beam(beam)
    path, translator, name, corpus = _open_run(run, checkpoint, split, precision, device, on_load)
    run_dir = path.parent
    beam = translator.search.beam if beam is None else beam
    result = evaluate_corpus(
        translator, corpus, split=name, beam=beam, batch_size=batch_size,
        max_tokens=translator.run_config.data.max_tokens, return_attention=return_attention, progress=progress,
    )
    hyps_file = write_text_atomic(hyps_path(run_dir, name, beam, translator.precision),
                                  "".join(h + "\n" for h in result.hypotheses))
    report = {"run": str(run_dir), "checkpoint": path.name, **result.to_dict(), "precision": translator.precision,
              "device": str(translator.device), "step": translator.step}
    json_file = write_text_atomic(eval_json_path(run_dir, name, beam, translator.precision),
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


def evaluate_beam_sizes(
    run: str | Path,
    beams: Sequence[int],
    split: str = "test",
    checkpoint: str = "best",
    batch_size: int | None = None,
    progress: bool = False,
    precision: str | None = None,
    device: str | None = None,
    on_load: Callable[[Translator], None] | None = None,
) -> BeamEvaluation:
    """Perplexity once, then BLEU, chrF, lengths and decoding time per beam size; writes the hyps
    of every beam size and the table as ``beam-<split>.json`` and ``.md``."""
    path, translator, name, corpus = _open_run(run, checkpoint, split, precision, device, on_load)
    run_dir = path.parent
    ppl = corpus_perplexity(translator, corpus, translator.run_config.data.max_tokens)
    results = compare_beam_sizes(translator, corpus, beams, batch_size=batch_size, progress=progress)
    for result in results:
        write_text_atomic(hyps_path(run_dir, name, result.beam, translator.precision),
                          "".join(h + "\n" for h in result.hypotheses))
    search, step = translator.search, translator.step
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
