"""Metrics of a translator: perplexity, BLEU and chrF, and tables over several runs.

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
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


# --------------------------------------------------------------------------- token losses


def token_losses(logits, targets, mask, label_smoothing: float = 0.0):
    """Summed losses over the real target tokens.

    logits:  [B, T, V]  unnormalised scores of the next token, or [N, V] those of the N real
                        tokens only (``model(..., tgt_mask=mask)``: ``logits[mask]`` already)
    targets: [B, T]     the reference tokens (tokens + EOS, padded)
    mask:    [B, T]     True for real tokens, False for padding
    Returns ``(loss_sum, nll_sum, num_tokens)``: ``loss_sum`` is the training loss summed over the
    real tokens (cross-entropy with label smoothing ε against ``(1-ε)·onehot + ε/V``), ``nll_sum``
    the plain negative log-likelihood summed over them (a float tensor without gradient), and
    ``num_tokens`` how many real tokens there are. Padding positions are not even scored.
    """
    import torch
    import torch.nn.functional as F

    selected_already = logits.dim() == 2 and mask.shape == targets.shape and logits.shape[0] == int(mask.sum())
    if not selected_already and (logits.dim() != 3 or targets.shape != logits.shape[:2] or mask.shape != targets.shape):
        raise ValueError(
            f"token_losses: expected logits [B, T, V] or [N, V] (N = real tokens), targets [B, T], "
            f"mask [B, T]; got {tuple(logits.shape)}, {tuple(targets.shape)}, {tuple(mask.shape)}"
        )
    selected = logits if selected_already else logits[mask]  # [N, V]
    gold = targets[mask]  # [N]
    log_probs = F.log_softmax(selected.float(), dim=-1)
    nll = -log_probs.gather(1, gold.unsqueeze(1)).squeeze(1)  # [N]
    if label_smoothing > 0.0:
        smooth = -log_probs.mean(dim=-1)  # cross-entropy against the uniform distribution
        loss = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    else:
        loss = nll
    with torch.no_grad():
        nll_sum = nll.sum().detach()
    return loss.sum(), nll_sum, int(gold.numel())


@dataclass
class PerplexityResult:
    """Teacher-forced likelihood of a corpus: mean NLL per token (nats) and its exponential."""

    loss: float
    perplexity: float
    num_tokens: int


def perplexity(model, batches: Iterable) -> PerplexityResult:
    """Perplexity of ``model`` on ``batches`` (attnmt.data Batch objects), teacher forced.

    The model is put in eval mode (no dropout) for the computation and restored afterwards.
    """
    import torch

    was_training = model.training
    model.eval()
    total_nll = 0.0
    total_tokens = 0
    try:
        with torch.no_grad():
            for batch in batches:
                logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, tgt_mask=batch.tgt_mask)
                _, nll_sum, count = token_losses(logits, batch.tgt_out, batch.tgt_mask)
                total_nll += float(nll_sum)
                total_tokens += count
    finally:
        model.train(was_training)
    return perplexity_from_sums(total_nll, total_tokens)


def perplexity_from_sums(nll_sum: float, num_tokens: int) -> PerplexityResult:
    """``exp(nll_sum / num_tokens)``; NaN values when there are no tokens."""
    if num_tokens <= 0:
        return PerplexityResult(float("nan"), float("nan"), 0)
    loss = nll_sum / num_tokens
    return PerplexityResult(loss, math.exp(min(loss, 700.0)), num_tokens)


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
    from sacrebleu.metrics import BLEU

    _check_pairs(hypotheses, references)
    metric = BLEU(lowercase=lowercase)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return float(result.score), str(metric.get_signature())


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """BLEU (cased), chrF and lower-cased BLEU of detokenized hypotheses against raw references."""
    from sacrebleu.metrics import BLEU, CHRF

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


# --------------------------------------------------------------------------- tables


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value; NaN, NaN for none)."""
    values = [float(v) for v in values]
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def format_mean_std(values: Sequence[float], digits: int = 2) -> str:
    """``"34.12 ± 0.53"`` (mean ± sample standard deviation), ``"34.12"`` for one value."""
    mean, std = mean_and_std(values)
    if math.isnan(mean):
        return "–"
    return f"{mean:.{digits}f}" if len(values) == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 2) -> str:
    """A Markdown table (readable as plain text too): numbers right-aligned, floats with ``digits`` decimals."""
    if any(len(row) != len(headers) for row in rows):
        raise ValueError(f"format_table: every row needs {len(headers)} cells")

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "–" if math.isnan(value) else f"{value:.{digits}f}"
        return str(value)

    cells = [[cell(value) for value in row] for row in rows]
    numeric = [
        all(isinstance(row[column], (int, float)) and not isinstance(row[column], bool) for row in rows) and bool(rows)
        for column in range(len(headers))
    ]
    widths = [max([len(str(h))] + [len(row[c]) for row in cells]) for c, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        padded = [v.rjust(w) if numeric[c] else v.ljust(w) for c, (v, w) in enumerate(zip(values, widths))]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if numeric[c] else ("-" * (w + 2)) for c, w in enumerate(widths)) + "|"
    return "\n".join([line([str(h) for h in headers]), rule] + [line(row) for row in cells])


# --------------------------------------------------------------------------- a whole test set


@dataclass
class CorpusEvaluation:
    """Everything ``attnmt evaluate`` reports about one split."""

    split: str
    beam: int
    perplexity: PerplexityResult
    scores: Scores
    sources: list[str]
    references: list[str]
    translations: list[Any]  # attnmt.translator.Translation, in corpus order

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
    translator,
    corpus,
    split: str = "test",
    beam: int = 1,
    batch_size: int | None = None,
    max_tokens: int = 4096,
    return_attention: bool = False,
    progress: bool = False,
) -> CorpusEvaluation:
    """Perplexity (teacher forced) and BLEU/chrF (decoded with ``beam``) of ``translator`` on ``corpus``.

    translator: an attnmt.translator.Translator; corpus: an attnmt.data.ParallelCorpus (never cut).
    """
    from attnmt.data import batches_for_inference

    src_ids = translator.tokenizers.src.encode_many(corpus.src)
    tgt_ids = translator.tokenizers.tgt.encode_many(corpus.tgt)
    scored = perplexity(translator.model, batches_for_inference(src_ids, max_tokens=max_tokens, tgt_ids=tgt_ids))
    translations = translator.translate(
        corpus.src, beam=beam, batch_size=batch_size, return_attention=return_attention, progress=progress
    )
    scores = corpus_scores([t.output for t in translations], corpus.tgt)
    return CorpusEvaluation(split, beam, scored, scores, list(corpus.src), list(corpus.tgt), translations)
