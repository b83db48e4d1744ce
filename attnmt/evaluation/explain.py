"""One explanation of a translation: what ``attnmt explain``, serve, the static viewer and the
notebook all compute, each only formatting the result.

For each translation (the model's own output, force-decoded), every asked method gives an
attribution [T, S] over the source pieces: ``attention`` (what the search returns: the last
decoder layer's cross-attention averaged over its heads) or any method of the attribution registry
(``attnmt.attribution.methods``: gradients, value norms, erasure, ALTI+, rollout). Each is then

- merged into words by one rule (``word_matrix``: a source word's pieces summed; an output word's
  rows averaged for attention, summed for an attribution, whose scores add up as log-probabilities do);
- scored for faithfulness (``attnmt.evaluation.faithfulness``: comprehensiveness and sufficiency
  AOPC, beside a random ranking);
- compared with the attention (``attnmt.evaluation.agreement``: Spearman's ρ over source words,
  top-1 agreement);
- timed (seconds for the attribution itself, not its scoring).

ALTI+ and rollout add each output piece's source share (the rest is the target prefix's); an RNN
with one head adds counterfactual attention (``attnmt.evaluation.counterfactual``), and attnmt's
Transformer the same for each cross-attention head (``head_counterfactuals``, by ``cross:LAYER:HEAD``).

Contrastive explanations ("why y_t and not y′_t?", Yin & Neubig, 2022): with a ``Foil``, every
method that depends on the output explains log p(y_t | y_<t, x) − log p(y′_t | y_<t, x) at the
positions that have a foil, and faithfulness is measured on that contrast. The foil is a word the
user names at one output position, or, with ``Foil.NEXT``, the model's best other piece at every
position. Methods that do not depend on the output (attention, value norms, ALTI+, rollout) give
their usual matrix, and the result says so (``Contrast.unchanged``).

``ExplainSettings`` holds the one set of defaults; serve asks for fewer integrated-gradient steps
and SmoothGrad samples to stay quick and shows them beside its figures, and ``attnmt explain
--steps 10 --samples 10`` gives the same numbers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnmt.attribution.forced import NO_FOIL
from attnmt.attribution.methods import ATTENTION, METHODS, NAMES, AttributionOptions, why_not
from attnmt.attribution.methods import DEFAULT_EXPLAINED as DEFAULT_METHODS
from attnmt.attribution.methods import SAMPLES as DEFAULT_SAMPLES
from attnmt.attribution.methods import STEPS as DEFAULT_STEPS
from attnmt.data.pieces import merge_subwords
from attnmt.data.special_tokens import BOS_ID, PAD_ID
from attnmt.decoding.base import BaseTranslator, Translation
from attnmt.decoding.interventions import can_intervene, needs_head
from attnmt.errors import ConfigError
from attnmt.evaluation.agreement import translation_agreement
from attnmt.evaluation.counterfactual import Counterfactual, counterfactual_attention
from attnmt.evaluation.faithfulness import RANDOM, Faithfulness, translation_faithfulness
from attnmt.models.head_gates import parse_heads

__all__ = ["ATTENTION", "DEFAULT_METHODS", "EXPLAIN_METHODS", "Contrast", "ExplainSettings", "Explanation", "Foil",
           "MethodReport", "check_methods", "explain", "explain_one", "word_matrix"]

#: what ``attnmt explain --methods`` takes
EXPLAIN_METHODS = (ATTENTION, *NAMES)
#: the methods whose scores hold the source's share of each output piece (the registry says which)
SHARE_METHODS = tuple(name for name, record in METHODS.items() if record.source_share)


@dataclass(frozen=True)
class Foil:
    """What a contrastive explanation contrasts with: ``word`` (a target word that the model's
    vocabulary holds as one piece; with ``piece``, a piece as ``Translation.out_pieces`` writes it)
    at output piece ``step`` (1-based), or ``Foil.NEXT``: the model's best other piece at every
    position."""

    word: str
    step: int | None = None
    piece: bool = False

    NEXT = "next"

    @property
    def is_next(self) -> bool:
        return self.word == Foil.NEXT


@dataclass(frozen=True)
class ExplainSettings:
    """The one set of defaults of an explanation: the attributions' settings (``steps`` for
    integrated gradients, ``samples`` and ``noise`` for SmoothGrad, ``seed`` for SmoothGrad and
    the random rankings), the random rankings averaged for the baseline, whether to add
    counterfactual attention, and the foil of a contrastive explanation (None: none)."""

    steps: int = DEFAULT_STEPS
    samples: int = DEFAULT_SAMPLES
    noise: float = AttributionOptions.noise
    seed: int = 0
    random_orders: int = 3
    counterfactual: bool = True
    foil: Foil | None = None

    def options(self, method: str) -> AttributionOptions:
        return AttributionOptions(method, samples=self.samples, noise=self.noise, steps=self.steps, seed=self.seed)

    def describe(self, method: str) -> str:
        """How a page names ``method`` with these settings ("integrated gradients (10 steps)")."""
        return "attention" if method == ATTENTION else self.options(method).describe()


@dataclass
class Contrast:
    """The contrast of one translation: at each output position in ``steps`` (0-based), the output
    piece ``outputs[i]`` against the foil ``foils[i]``, and ``values[i]`` = log p(y_t) − log p(y′_t).
    ``unchanged`` names the methods whose matrix does not depend on the output (the same for
    any foil)."""

    foil: str
    steps: list[int]
    outputs: list[str]
    foils: list[str]
    values: list[float]
    unchanged: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"foil": self.foil, "steps": [t + 1 for t in self.steps], "outputs": self.outputs, "foils": self.foils,
                "values": self.values, "unchanged": self.unchanged}


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
    """Everything measured on one sentence (module docstring)."""

    translation: Translation
    attributions: dict[str, np.ndarray]
    methods: dict[str, MethodReport]
    random: Faithfulness
    counterfactual: dict[str, Counterfactual] | None = None
    notes: list[str] = field(default_factory=list)
    contrast: Contrast | None = None
    head_counterfactuals: dict[str, dict[str, Counterfactual]] | None = None

    def word_matrix(self, method: str) -> tuple[np.ndarray, list[str], list[str]]:
        """``method``'s matrix over words: (scores [T', S'], source words, output words)."""
        return word_matrix(self.attributions[method], self.translation, method)

    def to_dict(self) -> dict[str, Any]:
        result = {"source": self.translation.source, "output": self.translation.output,
                  "methods": {method: report.to_dict() for method, report in self.methods.items()},
                  RANDOM: self.random.to_dict(),
                  "counterfactual": None if self.counterfactual is None else
                  {kind: figure.to_dict() for kind, figure in self.counterfactual.items()}}
        if self.head_counterfactuals is not None:
            result["head_counterfactuals"] = {head: {kind: figure.to_dict() for kind, figure in kinds.items()}
                                              for head, kinds in self.head_counterfactuals.items()}
        if self.contrast is not None:
            result["contrast"] = self.contrast.to_dict()
        return result


def word_matrix(scores: np.ndarray, translation: Translation, method: str) -> tuple[np.ndarray, list[str], list[str]]:
    """The one rule that merges a matrix over pieces into words (module docstring)."""
    return merge_subwords(np.asarray(scores, dtype=np.float64), translation.src_pieces, translation.out_pieces,
                          output_words="mean" if method == ATTENTION else "sum")


def check_methods(translator: BaseTranslator, methods: Sequence[str]) -> None:
    """ConfigError (one line, naming the methods that apply) for an unknown method or one that
    cannot read this translator's model."""
    usable = [ATTENTION, *translator.attribution_methods()]
    for method in methods:
        if method not in EXPLAIN_METHODS:
            raise ConfigError(f"--methods: unknown method {method!r:.40}. For this model use one of: "
                              f"{', '.join(usable)}")
        reason = None if method == ATTENTION else why_not(translator.attributed_model, method)
        if reason is not None:
            raise ConfigError(f"--methods: {reason}. For this model use one of: {', '.join(usable)}")


def explain(translator: BaseTranslator, translations: Sequence[Translation], methods: Sequence[str], *,
            random_orders: int = 3, seed: int = 0, counterfactual: bool = True,
            settings: ExplainSettings | None = None) -> list[Explanation]:
    """An Explanation for each of ``translations`` (made with ``return_attention=True``).
    ``settings`` replaces ``random_orders``, ``seed`` and ``counterfactual`` when given."""
    if settings is None:
        settings = ExplainSettings(seed=seed, random_orders=random_orders, counterfactual=counterfactual)
    check_methods(translator, methods)
    foils = None if settings.foil is None else foil_rows(translator, translations, settings.foil)
    matrices: dict[str, list[np.ndarray]] = {}
    seconds: dict[str, float] = {}
    for method in methods:
        start = time.perf_counter()
        if method == ATTENTION:
            matrices[method] = [np.asarray(t.attention, dtype=np.float64) for t in translations]
        else:
            matrices[method] = [m.astype(np.float64) for m in
                                translator.read_attributions(translations, settings.options(method), foils=foils)]
        seconds[method] = (time.perf_counter() - start) / max(1, len(translations))
    return [_explained(translator, translation, {method: matrices[method][k] for method in methods}, seconds,
                       settings, None if foils is None else foils[k])
            for k, translation in enumerate(translations)]


def explain_one(translator: BaseTranslator, translation: Translation, methods: Sequence[str],
                settings: ExplainSettings) -> Explanation:
    """``explain`` of one translation: what serve, the viewer and the notebook call."""
    return explain(translator, [translation], methods, settings=settings)[0]


def _explained(translator: BaseTranslator, translation: Translation, attributions: dict[str, np.ndarray],
               seconds: dict[str, float], settings: ExplainSettings, foils: list[int] | None) -> Explanation:
    measured = translation_faithfulness(translator, translation, attributions, random_orders=settings.random_orders,
                                        seed=settings.seed, foils=foils)
    reports = {}
    for method, scores in attributions.items():
        rho, top1 = None, None
        if method != ATTENTION and translation.attention is not None:
            correlations, same_top, _ = translation_agreement(np.asarray(translation.attention)[None, None], scores,
                                                              translation)
            rho = float(np.mean(correlations)) if correlations else None
            top1 = float(np.mean(same_top)) if same_top else None
        share = scores.sum(axis=1).tolist() if method in SHARE_METHODS else None
        reports[method] = MethodReport(measured.get(method, Faithfulness()), rho, top1, seconds[method], share)
    figures, per_head, notes = None, None, []
    model = translator.attributed_model
    if settings.counterfactual and model is not None and can_intervene(model):
        sources, outputs = translator.piece_ids([translation])
        if needs_head(model):  # a Transformer: each cross-attention head in turn, the others as they are
            per_head = {head.label(): counterfactual_attention(model, sources[0], outputs[0], start=BOS_ID,
                                                               seed=settings.seed, head=head)
                        for head in parse_heads("cross:*:*", model)}
        else:
            figures = counterfactual_attention(model, sources[0], outputs[0], start=BOS_ID, seed=settings.seed)
    elif settings.counterfactual:
        notes.append("counterfactual attention: only for attnmt's Transformer and an RNN whose mechanism has one "
                     "head and its own weights over the source; not for this model")
    contrast = None
    if foils is not None and settings.foil is not None:
        contrast = _contrast(translator, translation, foils, settings.foil, list(attributions))
    return Explanation(translation, attributions, reports, measured.get(RANDOM, Faithfulness()), figures, notes,
                       contrast, per_head)


# --------------------------------------------------------------------------------------------
# Foils
# --------------------------------------------------------------------------------------------


def foil_rows(translator: BaseTranslator, translations: Sequence[Translation], foil: Foil) -> list[list[int]]:
    """Each translation's row of foil ids (``NO_FOIL`` where a position has none); ConfigError,
    naming the option, for a step out of range, a word the vocabulary does not hold as one piece,
    or a foil equal to the output piece it stands against."""
    sources, outputs = translator.piece_ids(translations)
    if foil.is_next:
        return [runner_up(translator, source, output) for source, output in zip(sources, outputs)]
    if foil.piece:
        pieces = translator.target_ids([foil.word])
        if pieces[0] == translator.unk_id and translator.target_pieces(pieces)[0] != foil.word:
            raise ConfigError(f"foil {foil.word!r:.40}: not a piece of the model's target vocabulary")
    else:
        pieces = translator.encode_words([foil.word], side="target")[0] if foil.word.strip() else []
    if len(pieces) != 1:
        shown = " ".join(translator.target_pieces(pieces))
        raise ConfigError(f"--foil {foil.word!r:.40}: the model's vocabulary writes it as {len(pieces)} pieces "
                          f"({shown or 'none'}); name a word that is one piece")
    rows = []
    for k, (translation, output) in enumerate(zip(translations, outputs)):
        step = foil.step
        if step is None or not 1 <= step <= len(output):
            raise ConfigError(f"--step {step}: sentence {k + 1} has output pieces 1 to {len(output)} "
                              f"({' '.join(translation.out_pieces)})")
        if output[step - 1] == pieces[0]:
            raise ConfigError(f"--foil {foil.word!r:.40} at --step {step}: that is the output piece itself; "
                              "name another word")
        row = [NO_FOIL] * len(output)
        row[step - 1] = pieces[0]
        rows.append(row)
    return rows


def runner_up(translator: BaseTranslator, source: Sequence[int], output: Sequence[int]) -> list[int]:
    """At each output position, the piece the model finds most likely after the output's own (its
    special pieces left out: padding, the start symbol, the unknown piece)."""
    model = translator.attributed_model
    specials = getattr(translator, "specials", None)
    start = BOS_ID if specials is None else specials.start
    device = next(model.parameters()).device
    src = torch.tensor([list(source)], device=device)
    with torch.inference_mode():
        logits, _ = model(src, torch.ones_like(src, dtype=torch.bool), torch.tensor([[start, *output[:-1]]],
                                                                                     device=device),
                          return_attention="heads")
    scores = logits[0].float().clone()
    left_out = {start, translator.unk_id, PAD_ID if specials is None else specials.pad}
    scores[:, sorted(i for i in left_out if 0 <= i < scores.shape[-1])] = -float("inf")
    scores[torch.arange(len(output)), torch.tensor(list(output))] = -float("inf")
    return scores.argmax(-1).tolist()


def _contrast(translator: BaseTranslator, translation: Translation, foils: list[int], foil: Foil,
              methods: list[str]) -> Contrast:
    steps = [t for t, piece in enumerate(foils) if piece != NO_FOIL]
    sources, outputs = translator.piece_ids([translation])
    row = [token if piece == NO_FOIL else piece for piece, token in zip(foils, outputs[0])]
    reading = next(iter(translator.force_decode(sources, outputs, log_probs=True, foils=[row])))[1]
    assert reading.log_probs is not None and reading.foil_log_probs is not None
    values = [float(reading.log_probs[t]) - float(reading.foil_log_probs[t]) for t in steps]
    unchanged = [m for m in methods if m == ATTENTION or not METHODS[m].depends_on_output]
    return Contrast(foil.word, steps, [translation.out_pieces[t] for t in steps],
                    translator.target_pieces([foils[t] for t in steps]), values, unchanged)

