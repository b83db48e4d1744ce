"""Which picture of a translation is faithful? ``attnmt explain`` sentence by sentence.

For each translation (the model's own output, force-decoded), every asked method gives an
attribution [T, S] over the source pieces: ``attention`` (what the search returns: the last
decoder layer's cross-attention averaged over its heads) or any method of the saliency registry
(``attnmt.models.saliency``: gradients, value norms, erasure, ALTI+, rollout). Each is then

- scored for faithfulness (``attnmt.evaluation.faithfulness``: comprehensiveness and sufficiency
  AOPC, beside a random ranking);
- compared with the attention (``attnmt.evaluation.agreement``: Spearman's ρ over source words,
  top-1 agreement);
- timed (seconds for the attribution itself, not its scoring).

ALTI+ and rollout add each output piece's source share (the rest is the target prefix's), and an
RNN with one head adds counterfactual attention (``attnmt.evaluation.counterfactual``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnmt.data.special_tokens import BOS_ID
from attnmt.decoding.base import BaseTranslator, Translation
from attnmt.decoding.interventions import can_intervene
from attnmt.evaluation.agreement import translation_agreement
from attnmt.evaluation.counterfactual import Counterfactual, counterfactual_attention
from attnmt.evaluation.faithfulness import RANDOM, Faithfulness, translation_faithfulness
from attnmt.models.saliency import SaliencyOptions, why_not
from attnmt.runtime.choices import EXPLAIN_DEFAULT_METHODS
from attnmt.runtime.choices import EXPLAIN_METHODS as CHOICES_EXPLAIN

__all__ = ["ATTENTION", "DEFAULT_METHODS", "EXPLAIN_METHODS", "Explanation", "MethodReport", "check_methods", "explain"]

ATTENTION = "attention"
#: what ``attnmt explain --methods`` takes; the methods explained when none are named (those that apply)
EXPLAIN_METHODS, DEFAULT_METHODS = CHOICES_EXPLAIN, EXPLAIN_DEFAULT_METHODS


@dataclass
class MethodReport:
    """One method on one sentence."""

    faithfulness: Faithfulness
    rank_correlation: float | None = None  # with the attention; None for the attention itself
    top1: float | None = None
    seconds: float = 0.0
    source_share: list[float] | None = None  # per output piece: alti and rollout

    def to_dict(self) -> dict[str, Any]:
        return {**self.faithfulness.to_dict(), "rank_correlation": self.rank_correlation, "top1": self.top1,
                "seconds": self.seconds, "source_share": self.source_share}


@dataclass
class Explanation:
    """Everything ``attnmt explain`` measured on one sentence."""

    translation: Translation
    attributions: dict[str, np.ndarray]
    methods: dict[str, MethodReport]
    random: Faithfulness
    counterfactual: dict[str, Counterfactual] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.translation.source, "output": self.translation.output,
                "methods": {method: report.to_dict() for method, report in self.methods.items()},
                RANDOM: self.random.to_dict(),
                "counterfactual": None if self.counterfactual is None else
                {kind: figure.to_dict() for kind, figure in self.counterfactual.items()}}


def check_methods(translator: BaseTranslator, methods: Sequence[str]) -> None:
    """ConfigError (one line, naming the methods that apply) for an unknown method or one that
    cannot read this translator's model."""
    from attnmt.errors import ConfigError

    usable = [ATTENTION, *translator.saliency_methods()]
    for method in methods:
        if method not in EXPLAIN_METHODS:
            raise ConfigError(f"--methods: unknown method {method!r:.40}. For this model use one of: "
                              f"{', '.join(usable)}")
        reason = None if method == ATTENTION else why_not(translator.attributed_model, method)
        if reason is not None:
            raise ConfigError(f"--methods: {reason}. For this model use one of: {', '.join(usable)}")


def explain(translator: BaseTranslator, translations: Sequence[Translation], methods: Sequence[str], *,
            random_orders: int = 3, seed: int = 0, counterfactual: bool = True) -> list[Explanation]:
    """An Explanation for each of ``translations`` (made with ``return_attention=True``)."""
    check_methods(translator, methods)
    matrices: dict[str, list[np.ndarray]] = {}
    seconds: dict[str, float] = {}
    for method in methods:
        start = time.perf_counter()
        if method == ATTENTION:
            matrices[method] = [np.asarray(t.attention, dtype=np.float64) for t in translations]
        else:
            matrices[method] = [m.astype(np.float64) for m in
                                translator.read_saliency(translations, SaliencyOptions(method, seed=seed))]
        seconds[method] = (time.perf_counter() - start) / max(1, len(translations))
    model = translator.attributed_model
    explanations = []
    for k, translation in enumerate(translations):
        attributions = {method: matrices[method][k] for method in methods}
        measured = translation_faithfulness(translator, translation, attributions, random_orders=random_orders,
                                            seed=seed)
        reports = {}
        for method in methods:
            rho, top1 = None, None
            if method != ATTENTION and translation.attention is not None:
                correlations, same_top, _ = translation_agreement(
                    np.asarray(translation.attention)[None, None], attributions[method], translation)
                rho = float(np.mean(correlations)) if correlations else None
                top1 = float(np.mean(same_top)) if same_top else None
            share = attributions[method].sum(axis=1).tolist() if method in ("alti", "rollout") else None
            reports[method] = MethodReport(measured.get(method, Faithfulness()), rho, top1, seconds[method], share)
        figures, notes = None, []
        if counterfactual and model is not None and can_intervene(model):
            sources, outputs = translator.piece_ids([translation])
            figures = counterfactual_attention(model, sources[0], outputs[0], start=BOS_ID, seed=seed)
        elif counterfactual:
            notes.append("counterfactual attention: only for an RNN whose mechanism has one head and its own "
                         "weights over the source; not for this model")
        explanations.append(Explanation(translation, attributions, reports, measured.get(RANDOM, Faithfulness()),
                                        figures, notes))
    return explanations
