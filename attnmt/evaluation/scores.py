"""The scores of a translator: perplexity, BLEU and chrF. One module serves validation during
training, ``attnmt evaluate``, ``attnmt compare`` and the benchmarks.

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
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from sacrebleu.metrics import BLEU, CHRF

from attnmt.models.losses import token_losses

__all__ = ["PerplexityResult", "Scores", "bleu", "corpus_scores", "likelihood_sums", "perplexity",
           "perplexity_from_sums"]

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
    outputs, reference_sets = list(hypotheses), [list(references)]
    cased, chrf, lower = BLEU(), CHRF(), BLEU(lowercase=True)
    cased_result = cased.corpus_score(outputs, reference_sets)
    chrf_result = chrf.corpus_score(outputs, reference_sets)
    lower_result = lower.corpus_score(outputs, reference_sets)
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
