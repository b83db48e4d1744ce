"""What each request of ``attnmt serve`` computes: plain functions from a request's JSON to the
answer's JSON, over the loaded models (``attnmt.serve.models``). The HTTP layer
(``attnmt.serve.server``) only parses, checks where a request comes from and writes the answer;
these functions are what the tests call in-process.

Every value a request gives is checked and bounded here (``RequestError``, a 4xx answer with one
line): a sentence of at most ``MAX_SENTENCE_CHARS`` characters and as many pieces as each model
takes, a beam of at most ``MAX_BEAM``, at most ``MAX_SALIENCY_STEPS`` saliency steps or samples,
links of words that exist. A model is named by the name it was loaded under; nothing a request
says is read as a path, a pickle or code.

Matrices go to the page over words, as the viewer shows them: pieces merged by
``attnmt.data.pieces.merge_subwords`` (a source word's pieces summed, an output word's averaged
for attention and summed for saliency),
one per decoder layer and head ([L][h][T'][S']), plus ``search``, the matrix the search reports.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch

from attnmt.alignment import TranslatorAligner, alignment_error_rate
from attnmt.attention.user_code import UserCodeError
from attnmt.attribution.methods import ATTENTION, NAMES, check_applies
from attnmt.data.pieces import group_pieces, merge_subwords
from attnmt.decoding.head_interventions import decoder_attention
from attnmt.decoding.interventions import REPLACEMENTS, pinned_attention, replaced_attention, watched_step
from attnmt.decoding.search import length_penalty
from attnmt.errors import AttnmtError, ConfigError
from attnmt.evaluation.explain import ExplainSettings, Explanation, Foil, explain_one
from attnmt.evaluation.faithfulness import RANDOM
from attnmt.evaluation.tracing import trace_word
from attnmt.models.head_gates import Head, masked_heads, parse_heads
from attnmt.serve.equations import equation_mathml
from attnmt.serve.jobs import BUSY, STOPPING, InlineJobs, ModelWorkers
from attnmt.serve.models import ServedModel
from attnmt.visual.export import attention_lines, attention_records

__all__ = ["MAX_BEAM", "MAX_SENTENCE_CHARS", "RequestError", "Views"]

MAX_SENTENCE_CHARS = 1000
MAX_BEAM = 16
MAX_SALIENCY_STEPS = 64
#: integrated-gradient steps and SmoothGrad samples by default, fewer than ``attnmt explain``'s to
#: stay quick; the page names them beside the figures
SERVE_STEPS = 10
MAX_LINKS = 2000
MAX_PREFIX_WORDS = 200


#: what one head of a Transformer computes at output step t (Vaswani et al., 2017), for the step view
HEAD_EQUATION = ("e_t,l = q_t,i · k_l,i / √d_head (or the run's own score);  α_t = softmax(e_t) over the source;  "
                 "head_i(t) = Σ_l α_t,l v_l,i;  output(t) = W^O [head_1(t); …; head_h(t)] + b^O")


class RequestError(Exception):
    """A request that cannot be answered as asked: ``status`` (4xx) and one line saying why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _sentence_faithfulness(explanation: Explanation, method: str) -> dict[str, dict[str, float]] | None:
    """Comprehensiveness and sufficiency AOPC (1-3 words) of the attention, ``method`` and a random
    ranking on this sentence, from its explanation; None for a source without a word to remove."""
    figures = {ATTENTION: explanation.methods[ATTENTION].faithfulness, method: explanation.methods[method].faithfulness,
               RANDOM: explanation.random}
    if not figures[RANDOM].comprehensiveness:
        return None
    return {name: {"comprehensiveness": round(found.comprehensiveness_aopc["words"], 3),
                   "sufficiency": round(found.sufficiency_aopc["words"], 3)} for name, found in figures.items()}


def _pieces(payload: dict, key: str) -> list[str] | None:
    """An optional list of at most MAX_PREFIX_WORDS pieces (strings) of ``payload``."""
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and 0 < len(p) <= 100 for p in value):
        raise RequestError(400, f"{key}: give the hypothesis's pieces (a list of strings)")
    if len(value) > 4 * MAX_PREFIX_WORDS:
        raise RequestError(413, f"{key}: more than {4 * MAX_PREFIX_WORDS} pieces")
    return value


def _divergence(output: Sequence[str], alternative: Sequence[str]) -> int:
    """The first position where ``alternative`` differs from ``output`` (RequestError if none)."""
    for t, (mine, theirs) in enumerate(zip(output, alternative)):
        if mine != theirs:
            return t
    raise RequestError(400, "alternative: it does not differ from the translation where both have pieces")


def _contrast_view(explanation: Explanation, method: str) -> dict[str, Any]:
    """The contrasted step as the page shows it: the output word and the foil, the contrast, and
    the attribution of the contrast over the source words (one row)."""
    contrast, translation = explanation.contrast, explanation.translation
    assert contrast is not None
    step = contrast.steps[0]
    row = explanation.attributions[method][step:step + 1]
    merged, src_words, _ = merge_subwords(row, translation.src_pieces, [translation.out_pieces[step]],
                                          output_words="sum")
    words = _words_of(translation.out_pieces)
    word_index = len(_words_of(translation.out_pieces[: step + 1])) - 1
    return {"step": step + 1, "word": words[word_index] if 0 <= word_index < len(words) else contrast.outputs[0],
            "output_piece": contrast.outputs[0], "foil": contrast.foils[0], "value": round(contrast.values[0], 3),
            "depends_on_output": method not in contrast.unchanged, "scores": _rounded(merged)[0],
            "src_words": src_words}


def _rounded(matrix: np.ndarray) -> list[list[float]]:
    return np.round(np.asarray(matrix, dtype=np.float64), 4).tolist()


def _text(payload: dict, key: str, limit: int = MAX_SENTENCE_CHARS, required: bool = True) -> str:
    value = payload.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise RequestError(400, f"{key}: give some words (a string)")
    if len(value) > limit:
        raise RequestError(413, f"{key}: {len(value)} characters, more than {limit}; split it into sentences")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (\ud800 in the JSON): no text a tokenizer can read
        raise RequestError(400, f"{key}: holds a lone surrogate (\\ud800-\\udfff), which is not text") from None
    return " ".join(value.split())


def _integer(payload: dict, key: str, default: int, low: int, high: int) -> int:
    value = payload.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(400, f"{key}: an integer from {low} to {high}, got {value!r:.40}")
    return value


def _words_of(pieces: Sequence[str]) -> list[str]:
    return merge_subwords(np.zeros((1, len(pieces))), pieces, ["x"])[1]


def _source_positions(words: Sequence[str], sentence: str) -> list[int | None]:
    """For each of a model's source words, the whitespace word of ``sentence`` it starts in (None
    for "</s>"): models that tokenize differently are linked by word through this."""
    spaced = sentence.split()
    owner = [index for index, word in enumerate(spaced) for _ in word]  # the word of each character
    positions: list[int | None] = []
    offset = 0
    for word in words:
        if word == "</s>" or offset >= len(owner):
            positions.append(None)
            continue
        positions.append(owner[offset])
        offset += len(word.replace("\u2581", "")) or 1
    return positions


class Views:
    """The answers of ``attnmt serve`` over ``models`` (each request is a dict from JSON)."""

    def __init__(self, models: Sequence[ServedModel], examples: Sequence[dict] = (),
                 jobs: InlineJobs | ModelWorkers | None = None):
        self.models = {served.name: served for served in models}
        self.examples = list(examples)
        self.jobs = jobs or InlineJobs()  # where model work runs (attnmt.serve.jobs says why it matters)

    # -- choosing -----------------------------------------------------------------------------------

    def _chosen(self, payload: dict) -> list[ServedModel]:
        names = payload.get("models")
        if names is None:
            return list(self.models.values())
        if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
            raise RequestError(400, "models: a list of model names")
        unknown = [name for name in names if name not in self.models]
        if unknown:
            raise RequestError(404, f"models: no model named {unknown[0]!r:.60}; loaded: {', '.join(self.models)}")
        return [self.models[name] for name in dict.fromkeys(names)]

    def _one(self, payload: dict, needs: str | None = None) -> ServedModel:
        name = payload.get("model")
        if not isinstance(name, str):
            raise RequestError(400, "model: the name of one loaded model")
        served = self._chosen({"models": [name]})[0]
        if needs == "prefix" and not served.can_decode_from_prefix:
            raise RequestError(400, f"model {served.name!r}: a Hugging Face model cannot decode from a prefix here")
        if needs == "intervene" and not served.can_intervene:
            raise RequestError(400, f"model {served.name!r}: only attnmt's Transformer and an RNN with a one-head "
                                    "mechanism can be stepped through or pinned")
        return served

    @staticmethod
    def _intervened_head(served: ServedModel, payload: dict) -> Head | None:
        """The one cross-attention head ``payload["head"]`` names (``cross:LAYER:HEAD``) for a
        Transformer, which needs one; None for an RNN, which has one."""
        spec = _text(payload, "head", limit=100, required=False)
        if not served.intervenes_per_head:
            if spec and spec != "cross:1:1":
                raise RequestError(400, f"head: model {served.name!r} has one attention head, cross:1:1")
            return None
        if not spec:
            raise RequestError(400, f"head: model {served.name!r} is a Transformer; name one cross-attention head, "
                                    "e.g. cross:1:1 (choose one head's matrix on the page)")
        heads = Views._heads(served, spec)
        if len(heads) != 1 or heads[0].part != "cross":
            raise RequestError(400, f"head: {spec!r:.60} must name one cross-attention head, e.g. cross:1:1")
        return heads[0]

    def _run(self, served: ServedModel, work: Callable[[], Any], priority: int = 0) -> Any:
        """``work()`` on ``served`` under its lock, as a job (``self.jobs``; slow work at priority 1);
        a user's or a model's error in one 4xx line."""
        def job() -> Any:
            with served.lock:
                return work()

        try:
            return self.jobs.run(served.name, job, priority)
        except UserCodeError as error:
            raise RequestError(500, f"model {served.name!r}: {error}") from None
        except AttnmtError as error:
            raise RequestError(400, f"model {served.name!r}: {error}") from None
        except RuntimeError as error:
            if str(error) in (STOPPING, BUSY):
                raise RequestError(503, str(error)) from None
            raise

    def _check_length(self, served: ServedModel, sentence: str) -> None:
        problem = getattr(served.translator, "source_problem", lambda text: None)(sentence)
        if problem is not None:
            raise RequestError(413, f"model {served.name!r}: the sentence has {problem}")

    # -- answers ------------------------------------------------------------------------------------

    def models_page(self) -> dict[str, Any]:
        """``GET /api/models``: the models, and the test-set examples to pick from."""
        return {"models": [served.describe() for served in self.models.values()], "examples": self.examples,
                "saliency_methods": list(NAMES), "max_beam": MAX_BEAM,
                "max_sentence_chars": MAX_SENTENCE_CHARS}

    def translate(self, payload: dict) -> dict[str, Any]:
        """``POST /api/translate`` {sentence, beam?, n_best?, models?}: each model's translation,
        its log-probability, the seconds it took, its attention per layer and head over words, and
        with n_best > 1 its best hypotheses by beam search."""
        sentence = _text(payload, "sentence")
        beam = _integer(payload, "beam", 1, 1, MAX_BEAM)
        n_best = _integer(payload, "n_best", 1, 1, beam)
        chosen = self._chosen(payload)
        spec = _text(payload, "mask_heads", limit=4000, required=False)
        masks = {served.name: self._heads(served, spec) for served in chosen}
        for served in chosen:
            self._check_length(served, sentence)
        answers = [self._run(served, partial(self._translation_view, served, sentence, beam, n_best,
                                             masks[served.name])) for served in chosen]
        return {"sentence": sentence, "source_words": sentence.split(), "beam": beam, "models": answers}

    @staticmethod
    def _heads(served: ServedModel, spec: str) -> list[Head]:
        """The heads ``spec`` names in ``served``'s model; 400 naming the ranges when it names none."""
        try:
            return parse_heads(spec, served.translator.attributed_model, where="mask_heads")
        except ConfigError as error:
            raise RequestError(400, f"{served.name}: {error}") from None

    def _translation_view(self, served: ServedModel, sentence: str, beam: int, n_best: int,
                          heads: Sequence[Head] = ()) -> dict[str, Any]:
        started = time.perf_counter()
        translator = served.translator
        with masked_heads(translator.attributed_model, heads):
            if n_best > 1 and served.can_decode_from_prefix:
                hypotheses = translator.translate_n_best(sentence, beam, n_best)
            else:
                hypotheses = list(translator.translate([sentence], beam=beam, return_attention=True))
            best = hypotheses[0]
            view = self.matrices(served, best)
        view["mask_heads"] = [head.label() for head in heads]
        alpha = translator.search_config.alpha
        view.update(seconds=round(time.perf_counter() - started, 4), beam=beam, alpha=alpha,
                    hypotheses=[{"output": hypothesis.output, "score": round(float(hypothesis.score), 4),
                                 "normalized": round(float(hypothesis.score)
                                                     / length_penalty(len(hypothesis.out_pieces), alpha), 4),
                                 "words": _words_of(hypothesis.out_pieces),
                                 "pieces": list(hypothesis.out_pieces)} for hypothesis in hypotheses])
        view["source_positions"] = _source_positions(view["src_words"], sentence)
        return view

    def matrices(self, served: ServedModel, translation, forced: int = 0) -> dict[str, Any]:
        """One translation as the page shows it: words, pieces, the search's matrix and every
        layer's and head's over words (force-decoded: ``read_attention``)."""
        every_head = np.asarray(served.translator.read_attention([translation])[0], dtype=np.float64)
        layers = []
        src_words: list[str] = []
        out_words: list[str] = []
        for layer in every_head:
            heads = []
            for head in layer:
                merged, src_words, out_words = merge_subwords(head, translation.src_pieces, translation.out_pieces)
                heads.append(_rounded(merged))
            layers.append(heads)
        search = merge_subwords(np.asarray(translation.attention, dtype=np.float64), translation.src_pieces,
                                translation.out_pieces)[0]
        return {"model": served.name, "output": translation.output, "score": round(float(translation.score), 4),
                "src_words": src_words, "out_words": out_words, "src_pieces": list(translation.src_pieces),
                "out_pieces": list(translation.out_pieces), "search": _rounded(search), "layers": layers,
                "forced_words": len(_words_of(translation.out_pieces[:forced])) if forced else 0}

    def saliency(self, payload: dict) -> dict[str, Any]:
        """``POST /api/saliency`` {sentence, model, method, steps?, samples?, beam?, alternative?}:
        this sentence's explanation (``attnmt.evaluation.explain``, the one ``attnmt explain``
        computes, with ``steps`` integrated-gradient steps and ``samples`` SmoothGrad copies, 10 each
        by default to stay quick; ``method`` names them): the attribution over the source words, its
        agreement with the attention (mean rank correlation and top-1 agreement over output words),
        and comprehensiveness and sufficiency AOPC over 1-3 words for the attention, the method and
        a random ranking. ``attnmt explain --methods attention,METHOD --steps S --samples N --foil
        ... --step ...`` prints the same figures.

        With ``alternative`` (the pieces of an n-best hypothesis) it is contrastive: "why this and
        not that?" at the first output piece where the alternative differs from the translation,
        the alternative's piece as the foil; ``contrast`` then gives that step, the two words, the
        contrast log p(y_t) − log p(y′_t) and the attribution of the contrast over the source words."""
        sentence = _text(payload, "sentence")
        served = self._one(payload)
        method = payload.get("method", "gradient")
        if method not in NAMES:
            raise RequestError(400, f"method: one of {', '.join(NAMES)}, got {method!r:.40}")
        settings = ExplainSettings(samples=_integer(payload, "samples", SERVE_STEPS, 1, MAX_SALIENCY_STEPS),
                                   steps=_integer(payload, "steps", SERVE_STEPS, 1, MAX_SALIENCY_STEPS),
                                   counterfactual=False)
        beam = _integer(payload, "beam", 1, 1, MAX_BEAM)
        alternative = _pieces(payload, "alternative")
        self._check_length(served, sentence)
        try:
            check_applies(served.translator.attributed_model, method)
        except ConfigError as error:
            raise RequestError(400, str(error)) from None

        def work() -> dict[str, Any]:
            started = time.perf_counter()
            translation = served.translator.translate([sentence], beam=beam, return_attention=True)[0]
            chosen = settings
            if alternative is not None:
                step = _divergence(translation.out_pieces, alternative)
                chosen = replace(settings, foil=Foil(alternative[step], step + 1, piece=True))
            try:
                explanation = explain_one(served.translator, translation, [ATTENTION, method], chosen)
            except ConfigError as error:
                raise RequestError(400, str(error)) from None
            report = explanation.methods[method]
            merged = explanation.word_matrix(method)[0]
            agreement = report.rank_correlation
            answer = {"model": served.name, "method": settings.describe(method), "saliency": _rounded(merged),
                      "agreement": None if agreement is None or not math.isfinite(agreement) else round(agreement, 3),
                      "top1": None if report.top1 is None else round(report.top1, 3),
                      "faithfulness": _sentence_faithfulness(explanation, method)}
            if explanation.contrast is not None:
                answer["contrast"] = _contrast_view(explanation, method)
            answer["seconds"] = round(time.perf_counter() - started, 3)
            return answer

        return self._run(served, work, priority=1)

    def counterfactual(self, payload: dict) -> dict[str, Any]:
        """``POST /api/counterfactual`` {sentence, model, kind}: an RNN's greedy translation when the
        attention of every step is replaced (``kind``: permuted or uniform;
        ``attnmt.decoding.interventions.replaced_attention``), beside its own."""
        sentence = _text(payload, "sentence")
        served = self._one(payload, needs="intervene")
        kind = payload.get("kind")
        if kind not in REPLACEMENTS:
            raise RequestError(400, f"kind: one of {', '.join(REPLACEMENTS)}, got {kind!r:.40}")
        head = self._intervened_head(served, payload)
        self._check_length(served, sentence)

        def work() -> dict[str, Any]:
            translator = served.translator
            own = translator.translate([sentence], beam=1)[0]
            with replaced_attention(translator.model, kind, head=head):
                translation = translator.translate([sentence], beam=1, return_attention=True)[0]
            view = self.matrices(served, translation)
            view.update(kind=kind, original_output=own.output, head=None if head is None else head.label())
            return view

        return self._run(served, work)

    def trace(self, payload: dict) -> dict[str, Any]:
        """``POST /api/trace`` {sentence, model, word}: causal tracing of output word ``word`` (from
        1) of the model's translation (``attnmt.evaluation.tracing``): the probability of the word
        regained by restoring each encoder and decoder state of a run whose source word the
        attention ranks first was noised, restored minus corrupted."""
        sentence = _text(payload, "sentence")
        served = self._one(payload, needs="prefix")
        self._check_length(served, sentence)
        word = _integer(payload, "word", 1, 1, 10_000)

        def work() -> dict[str, Any]:
            try:
                trace = trace_word(served.translator, sentence, word, samples=10)
            except ConfigError as error:
                raise RequestError(400, f"{served.name}: {error}") from None
            return {"model": served.name, **trace.to_dict(),
                    "encoder": [[round(v, 4) for v in row] for row in trace.encoder],
                    "decoder": [[round(v, 4) for v in row] for row in trace.decoder]}

        return self._run(served, work, priority=1)

    def prefix(self, payload: dict) -> dict[str, Any]:
        """``POST /api/prefix`` {sentence, model, prefix}: the model's translation that begins with
        the words ``prefix``, decoded greedily from there; ``forced_words`` says how many it was given."""
        sentence = _text(payload, "sentence")
        served = self._one(payload, needs="prefix")
        prefix = _text(payload, "prefix", required=False)
        if len(prefix.split()) > MAX_PREFIX_WORDS:
            raise RequestError(413, f"prefix: more than {MAX_PREFIX_WORDS} words")
        self._check_length(served, sentence)

        def work() -> dict[str, Any]:
            translator = served.translator
            pieces = translator.tokenizers.tgt.encode(prefix) if prefix else []
            translation = translator.translate_from_prefix(sentence, pieces)
            view = self.matrices(served, translation, forced=len(pieces))
            view["source_positions"] = _source_positions(view["src_words"], sentence)
            return view

        return self._run(served, work)

    def pin(self, payload: dict) -> dict[str, Any]:
        """``POST /api/pin`` {sentence, model, step, source_word}: an RNN's translation when its
        attention at output word ``step`` is pinned on source word ``source_word`` (spread evenly over
        its pieces); the words before ``step`` are the model's own (its greedy translation)."""
        sentence = _text(payload, "sentence")
        served = self._one(payload, needs="intervene")
        head = self._intervened_head(served, payload)
        self._check_length(served, sentence)

        def work() -> dict[str, Any]:
            translator = served.translator
            original, step, first_piece, pieces = _up_to_step(translator, sentence, payload)
            src_groups = _groups(original.src_pieces)
            source_word = _integer(payload, "source_word", 0, 0, len(src_groups) - 1)
            weights = torch.zeros(len(original.src_pieces))
            start, stop = src_groups[source_word]
            weights[start:stop] = 1.0 / (stop - start)
            with pinned_attention(translator.model, first_piece, weights, head=head):
                translation = translator.translate_from_prefix(sentence, pieces)
            view = self.matrices(served, translation, forced=first_piece)
            view.update(pinned={"step": step, "source_word": source_word,
                                "head": None if head is None else head.label()},
                        original_output=original.output,
                        source_positions=_source_positions(_words_of(translation.src_pieces), sentence))
            return view

        return self._run(served, work)

    def step(self, payload: dict) -> dict[str, Any]:
        """``POST /api/step`` {sentence, model, step}: one decoder step of an RNN as its mechanism
        computes it: the scores e_s of each source piece, the weights α_s = softmax, and the context
        c = Σ α_s v_s (its first dimensions and its norm), with the mechanism's own equation."""
        sentence = _text(payload, "sentence")
        served = self._one(payload, needs="intervene")
        head = self._intervened_head(served, payload)
        self._check_length(served, sentence)

        def work() -> dict[str, Any]:
            translator = served.translator
            original, step, piece, ids = _up_to_step(translator, sentence, payload)
            with watched_step(translator.model, piece, head=head) as seen:
                translator.translate_from_prefix(sentence, ids)
            record = seen[0]
            model_config = translator.run_config.model
            if head is None:
                attention = translator.model.attention
                mechanism = type(attention).__name__
            else:  # one head of a Transformer's cross-attention: its own query, keys and values
                attention = decoder_attention(translator.model, head)
                mechanism = f"{type(attention).__name__}, head {head.label()}"
            context = record.context.float()
            return {
                "model": served.name, "step": step, "output_piece": original.out_pieces[piece],
                "src_pieces": list(original.src_pieces), "mechanism": mechanism,
                "head": None if head is None else head.label(),
                "equation": (HEAD_EQUATION if head is not None else
                             (type(attention).__doc__ or "").strip().replace("``", "")),
                "equation_mathml": None if head is not None else equation_mathml(
                    str(getattr(model_config, "attention", "")), getattr(model_config, "attention_options", None)),
                "scores": None if record.scores is None else [round(float(v), 4) for v in record.scores.float()],
                "weights": [round(float(v), 4) for v in record.weights.float()],
                "context": [round(float(v), 4) for v in context[:16]], "context_size": int(context.numel()),
                "context_norm": round(float(context.norm()), 4),
            }

        return self._run(served, work)

    def gold(self, payload: dict) -> dict[str, Any]:
        """``POST /api/gold`` {sentence, reference, links, possible?, models?}: each model's links
        between the source and the reference words, read from its attention when force-decoding the
        reference (``TranslatorAligner``), and their precision, recall and AER against the sure
        ``links`` and the ``possible`` ones ("i-j" pairs, 0-based: source word i, reference word j)."""
        sentence = _text(payload, "sentence")
        reference = _text(payload, "reference")
        text = _text(payload, "links", limit=20 * MAX_LINKS, required=False)
        src_words, tgt_words = sentence.split(), reference.split()
        sure = _links(text, len(src_words), len(tgt_words))
        possible = sure | _links(_text(payload, "possible", limit=20 * MAX_LINKS, required=False), len(src_words),
                                 len(tgt_words))
        chosen = self._chosen(payload)
        answers = []
        for served in chosen:
            self._check_length(served, sentence)

            def work(served: ServedModel = served) -> dict[str, Any]:
                predicted = TranslatorAligner(served.translator).align([src_words], [tgt_words])[0]
                scores = alignment_error_rate([predicted], [sure], [possible])
                return {"model": served.name, "links": sorted([list(link) for link in predicted]),
                        **{key: round(value, 4) for key, value in scores.items()}}

            answers.append(self._run(served, work, priority=1))
        return {"source_words": src_words, "reference_words": tgt_words, "gold": sorted(map(list, sure)),
                "models": answers}

    def export(self, payload: dict) -> str:
        """``POST /api/export`` {sentence, beam?, models?}: each model's translation and attention as
        the lines of a .jsonl attention file (``attnmt.load_attention`` reads it)."""
        sentence = _text(payload, "sentence")
        beam = _integer(payload, "beam", 1, 1, MAX_BEAM)
        lines = []
        for number, served in enumerate(self._chosen(payload)):
            self._check_length(served, sentence)

            def work(served: ServedModel = served, number: int = number) -> str:
                translation = served.translator.translate([sentence], beam=beam, return_attention=True)[0]
                return attention_lines(attention_records(served.translator, [translation], indices=[number]))

            lines.append(self._run(served, work, priority=1))
        return "".join(lines)


def _up_to_step(translator, sentence: str, payload: dict) -> tuple[Any, int, int, list[int]]:
    """The model's own translation of ``sentence``, the output word ``payload["step"]`` of it, that
    word's first piece, and the piece ids before it (the prefix that leads the model there)."""
    original = translator.translate([sentence], return_attention=True)[0]
    out_groups = _groups(original.out_pieces)
    step = _integer(payload, "step", 0, 0, len(out_groups) - 1)
    first_piece = out_groups[step][0]
    ids = [translator.tokenizers.tgt.piece_to_id(piece) for piece in original.out_pieces[:first_piece]]
    return original, step, first_piece, ids


def _groups(pieces: Sequence[str]) -> list[tuple[int, int]]:
    """The [start, stop) piece span of each word of ``pieces`` (``merge_subwords``' words)."""
    return [(start, stop) for _, start, stop in group_pieces(list(pieces))]


MAX_INDEX_DIGITS = 6  # a word index of a sentence of at most 1,000 characters


def _links(text: str, sources: int, targets: int) -> set[tuple[int, int]]:
    """Pharaoh links "i-j ..." (0-based) within the sentence; RequestError naming a bad one."""
    links = set()
    for item in text.replace(",", " ").split():
        left, dash, right = item.partition("-")
        if not dash or not (left.isascii() and left.isdigit()) or not (right.isascii() and right.isdigit()):
            raise RequestError(400, f"links: {item!r:.20} is not i-j (source word i, reference word j, from 0)")
        if len(left) > MAX_INDEX_DIGITS or len(right) > MAX_INDEX_DIGITS or int(left) >= sources \
                or int(right) >= targets:  # (int() of thousands of digits would fail: it is never tried)
            raise RequestError(400, f"links: {item!r:.20} names a word the sentences do not have ({sources} "
                                    f"source, {targets} reference words)")
        i, j = int(left), int(right)
        links.add((i, j))
    if len(links) > MAX_LINKS:
        raise RequestError(413, f"links: more than {MAX_LINKS}")
    return links
