"""Which heads carry the translation: each head of a translator switched off in turn, its importance
and its role, over the first N pairs of a split (``attnmt heads``).

For every head h of every attention (``attnmt.models.head_gates``: parts ``encoder_self``,
``decoder_self`` and ``cross``), on the pairs (x, y) of the split, with y the reference and L the
teacher-forced mean negative log-likelihood per target piece, EOS included::

    delta_loss(h)  = L(heads but h) − L(all heads)                    h switched off (zero or mean)
    delta_bleu(h)  = BLEU(search, heads but h) − BLEU(search, all heads)  the run's own search
    importance(h)  = Σ_batches |∂L/∂ξ_h| at ξ = 1, divided by the norm ‖·‖₂ over its layer's heads
                     (Michel, Levy & Neubig, 2019, "Are Sixteen Heads Really Better than One?")
    confidence(h)  = the mean over real queries of the largest weight (Voita et al., 2019)

and, as shares of the real queries (Voita et al.'s roles):

    position       the relative position j − i of the largest weight (self-attention only) that is
                   −1, 0 or +1 most often, and ``position_share`` how often it is that one
    sink           the mean weight on EOS and punctuation keys
    rare           (encoder self-attention) how often the largest weight falls on the sentence's
                   rarest source piece, by its count in the training set (attnmt's runs only)

``importance_rank_correlation`` is Spearman's ρ between importance and delta_loss over all heads.
Switching a head off one at a time costs one teacher-forced pass over the pairs per head (and one
search per head for delta_bleu); the importances come from one backward pass per batch.
"""

from __future__ import annotations

import math
import string
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from attnmt.attribution.trace import is_transformer, trace_transformer
from attnmt.data import load_split
from attnmt.decoding.base import BaseTranslator
from attnmt.decoding.translator import Translator
from attnmt.errors import ConfigError
from attnmt.evaluation.scores import corpus_scores
from attnmt.models.head_gates import (
    ABLATIONS,
    AttentionSlot,
    Head,
    attention_slots,
    gated_heads,
    head_means,
    masked_heads,
)
from attnmt.models.head_gates import parse_heads as parse_head_spec
from attnmt.models.readout import ATTNMT_SPECIALS, DEFAULT_MAX_TOKENS, SpecialIds, batch_plan, forced_batch
from attnmt.runs.folder import data_of_run
from attnmt.runtime.tables import format_table

__all__ = ["PRUNE_ORDERS", "HeadProbe", "HeadRow", "HeadsReport", "PruneCurve", "head_report", "heads_switched_off",
           "mean_nll", "probe_of_run", "prune_curve", "removable_by_part"]

#: pieces that act as attention sinks: the end of a sentence and punctuation
PUNCTUATION = set(string.punctuation) | {"…", "«", "»", "„", "“", "”", "–", "—"}


@dataclass
class HeadProbe:
    """What the measurements read: the pairs as text (``sources``, ``references``) and as complete
    id rows (``src_ids``, ``out_ids``, EOS included), the translator's special ids, and per source
    and target id whether it is a sink (EOS, punctuation) and, for sources, its training count."""

    sources: list[str]
    references: list[str]
    src_ids: list[list[int]]
    out_ids: list[list[int]]
    specials: SpecialIds
    src_sink: Callable[[int], bool]
    tgt_sink: Callable[[int], bool]
    src_counts: Counter | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS

    def batches(self, device: torch.device) -> Iterator[Any]:
        """The pairs as ForcedBatches, longest first (``attnmt.models.readout``)."""
        for pairs in batch_plan(self.src_ids, self.out_ids, self.max_tokens, caller="heads"):
            yield forced_batch(pairs, self.src_ids, self.out_ids, self.specials, device)


def _is_sink(piece: str, eos: bool) -> bool:
    text = piece.replace("▁", "").replace("Ġ", "").strip()
    return eos or (bool(text) and all(character in PUNCTUATION for character in text))


def probe_of_run(translator: BaseTranslator, run_dir: str | Path | None, split: str = "valid", sentences: int = 200,
                 pairs: tuple[Sequence[str], Sequence[str]] | None = None) -> HeadProbe:
    """The first ``sentences`` pairs of a run's ``split`` (attnmt's runs), or ``pairs`` (source and
    reference sentences, e.g. for a Hugging Face model), ready for the measurements."""
    if pairs is None:
        if not isinstance(translator, Translator) or translator.run_config is None or run_dir is None:
            raise ConfigError("heads: a Hugging Face model has no split of its own; give --src FILE --ref FILE")
        data = data_of_run(Path(run_dir), translator.run_config.data)
        corpus = load_split(data, split)
        pairs = (list(corpus.src), list(corpus.tgt))
    sources, references = list(pairs[0])[:sentences], list(pairs[1])[:sentences]
    if not sources or len(sources) != len(references):
        raise ConfigError(f"heads: need source and reference sentences of equal number, got {len(sources)} and "
                          f"{len(references)}")
    if isinstance(translator, Translator):
        src_tok, tgt_tok = translator.tokenizers.src, translator.tokenizers.tgt
        eos = translator.eos_id
        src_ids = [ids + [eos] for ids in src_tok.encode_many(sources)]
        out_ids = [ids + [eos] for ids in tgt_tok.encode_many(references)]
        counts = None
        if run_dir is not None and translator.run_config is not None:
            train = load_split(data_of_run(Path(run_dir), translator.run_config.data), "train")
            counts = Counter(piece for ids in src_tok.encode_many(list(train.src)) for piece in ids)
        return HeadProbe(sources, references, src_ids, out_ids, ATTNMT_SPECIALS,
                         lambda i: _is_sink(src_tok.id_to_piece(i), i == eos),
                         lambda i: _is_sink(tgt_tok.id_to_piece(i), i == eos), counts)
    tokenizer = translator.tokenizer  # type: ignore[attr-defined]
    src_ids = [list(ids) for ids in tokenizer(sources)["input_ids"]]
    out_ids = [list(ids) for ids in tokenizer(text_target=references)["input_ids"]]
    eos = translator.eos_id

    def sink(i: int) -> bool:
        return _is_sink(tokenizer.convert_ids_to_tokens(i), i == eos)

    return HeadProbe(sources, references, src_ids, out_ids, translator.specials, sink, sink)  # type: ignore[attr-defined]


def _forced_model(translator: BaseTranslator) -> Any:
    """What reads (src, src_mask, tgt_in) -> (logits, ...): the run's model, or a Hugging Face
    model behind its readout."""
    return translator.attributed_model


def _token_nll(model: Any, batch: Any, pad: int) -> tuple[torch.Tensor, int]:
    """The summed negative log-likelihood of the batch's target pieces, and their number."""
    logits = model(batch.src, batch.src_mask, batch.tgt_in)[0]
    log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    real = batch.targets != pad
    return -(log_probs * real).sum(), int(real.sum())


def mean_nll(translator: BaseTranslator, probe: HeadProbe) -> float:
    """L: the teacher-forced mean negative log-likelihood per target piece (EOS included)."""
    model = _forced_model(translator)
    total, count = 0.0, 0
    with _eval_mode(model), torch.inference_mode():
        for batch in probe.batches(translator.device):
            loss, tokens = _token_nll(model, batch, probe.specials.pad)
            total, count = total + float(loss), count + tokens
    return total / max(count, 1)


@contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _importances(translator: BaseTranslator, probe: HeadProbe, slots: Sequence[AttentionSlot]) -> dict[
        tuple[str, int], np.ndarray]:
    """Σ over batches of |∂L/∂ξ| per head, L the mean NLL per target piece of all the pairs,
    normalised per layer by its ℓ2 norm (Michel et al., 2019)."""
    model = _forced_model(translator)
    total_tokens = sum(len(ids) for ids in probe.out_ids)
    sums = {(slot.part, slot.layer): torch.zeros(slot.heads, dtype=torch.float64) for slot in slots}
    with _eval_mode(model):
        for batch in probe.batches(translator.device):
            gates = {key: torch.ones(len(total), requires_grad=True, device=translator.device)
                     for key, total in sums.items()}
            with torch.enable_grad(), gated_heads(model, gates):
                loss, _ = _token_nll(model, batch, probe.specials.pad)
                grads = torch.autograd.grad(loss / total_tokens, list(gates.values()), allow_unused=True)
            for key, grad in zip(gates, grads):
                if grad is not None:  # the weights keep no gradient: only the gates are asked
                    sums[key] += grad.detach().abs().double().cpu()
    return {key: (total / max(float(total.norm()), 1e-30)).numpy() for key, total in sums.items()}


def _weights(translator: BaseTranslator, model: Any, batch: Any, pad: int) -> dict[
        tuple[str, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Every attention's weights for the batch: (part, layer) -> (weights [B, h, Lq, Lk], the real
    queries [B, Lq], the key ids [B, Lk])."""
    tgt_real = batch.targets != pad
    found: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    if is_transformer(model):
        trace = trace_transformer(model, batch.src, batch.src_mask, batch.tgt_in)
        for part, blocks, queries, keys in (("encoder_self", trace.encoder, batch.src_mask, batch.src),
                                            ("decoder_self", trace.decoder_self, tgt_real, batch.tgt_in),
                                            ("cross", trace.decoder_cross, tgt_real, batch.src)):
            for layer, block in enumerate(blocks):
                found[(part, layer)] = (block.weights.float(), queries, keys)
        return found
    if hasattr(model, "encoder_rnn"):
        _, weights = model(batch.src, batch.src_mask, batch.tgt_in, return_attention="heads")
        found[("cross", 0)] = (weights[:, 0].float(), tgt_real, batch.src)
        return found
    inner = model.model  # a Hugging Face model behind its readout
    output = inner(input_ids=batch.src, attention_mask=batch.src_mask.long(), decoder_input_ids=batch.tgt_in,
                   output_attentions=True)
    for part, weights_of_layers, queries, keys in (
            ("encoder_self", output.encoder_attentions, batch.src_mask, batch.src),
            ("decoder_self", output.decoder_attentions, tgt_real, batch.tgt_in),
            ("cross", output.cross_attentions, tgt_real, batch.src)):
        for layer, weights in enumerate(weights_of_layers or ()):
            found[(part, layer)] = (weights.float(), queries, keys)
    return found


@dataclass
class _Roles:
    """Running sums of one attention's roles, per head."""

    heads: int
    queries: float = 0.0
    confidence: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sink: np.ndarray = field(default_factory=lambda: np.zeros(0))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    rare: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        self.confidence, self.sink, self.rare = (np.zeros(self.heads) for _ in range(3))
        self.offsets = np.zeros((self.heads, 3))


def _add_roles(roles: _Roles, part: str, weights: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor,
               probe: HeadProbe) -> None:
    """Add one batch's queries of one attention to ``roles`` (module docstring)."""
    sink_of = probe.tgt_sink if part == "decoder_self" else probe.src_sink
    pad = probe.specials.pad
    key_ids = keys.cpu().tolist()
    sinks = torch.tensor([[bool(i != pad and sink_of(int(i))) for i in row] for row in key_ids],
                         dtype=weights.dtype, device=weights.device)  # [B, Lk]
    real = queries.to(weights.dtype)  # [B, Lq]
    top_weight, top_key = weights.max(dim=-1)  # [B, h, Lq]
    roles.queries += float(real.sum())
    roles.confidence += (top_weight * real[:, None]).sum(dim=(0, 2)).double().cpu().numpy()
    roles.sink += ((weights * sinks[:, None, None, :]).sum(-1) * real[:, None]).sum(dim=(0, 2)).double().cpu().numpy()
    if part != "cross":
        offset = top_key - torch.arange(weights.shape[2], device=weights.device)[None, None, :]
        for column, value in enumerate((-1, 0, 1)):
            roles.offsets[:, column] += ((offset == value) * real[:, None]).sum(dim=(0, 2)).double().cpu().numpy()
    if part == "encoder_self" and probe.src_counts is not None:
        rarest = torch.tensor([_rarest(row, probe) for row in key_ids], device=weights.device)  # [B]
        roles.rare += ((top_key == rarest[:, None, None]) * real[:, None]).sum(dim=(0, 2)).double().cpu().numpy()


def _rarest(row: Sequence[int], probe: HeadProbe) -> int:
    """The position of the sentence's rarest piece (EOS, padding and sinks left out; the first of
    ties), or −1 when it has none."""
    counts = probe.src_counts or Counter()
    candidates = [(counts.get(int(i), 0), position) for position, i in enumerate(row)
                  if i != probe.specials.pad and not probe.src_sink(int(i))]
    return min(candidates)[1] if candidates else -1


@dataclass
class HeadRow:
    """One head's line of the report (module docstring); ``layer`` and ``head`` count from 1."""

    part: str
    layer: int
    head: int
    delta_loss: float
    delta_bleu: float | None
    importance: float
    confidence: float
    position: int | None
    position_share: float | None
    sink: float
    rare: float | None
    aer: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {key: (None if isinstance(value, float) and math.isnan(value) else value)
                for key, value in asdict(self).items()}


@dataclass
class HeadsReport:
    """``attnmt heads``: the model, what was measured on, the figures with every head on, one row per
    head, the rank correlation of importance with delta_loss, and the seconds it took."""

    model: str
    split: str
    sentences: int
    ablation: str
    beam: int | None
    loss: float
    bleu: float | None
    rows: list[HeadRow]
    importance_rank_correlation: float
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["heads"] = [row.to_dict() for row in self.rows]
        del values["rows"]
        if math.isnan(self.importance_rank_correlation):
            values["importance_rank_correlation"] = None
        return values

    def table(self) -> str:
        """The rows as a table, most harmful to switch off first."""
        def shown(value: Any, digits: int = 3) -> str:
            return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"

        def position(row: HeadRow) -> str:
            return "–" if row.position is None else f"{row.position:+d} ({row.position_share:.2f})"

        rows = [[f"{row.part}:{row.layer}:{row.head}", f"{row.delta_loss:+.4f}",
                 "–" if row.delta_bleu is None else f"{row.delta_bleu:+.2f}", shown(row.importance),
                 shown(row.confidence), position(row), shown(row.sink), shown(row.rare), shown(row.aer, 4)]
                for row in sorted(self.rows, key=lambda row: -row.delta_loss)]
        return format_table(["head", "Δ loss", "Δ BLEU", "importance", "confidence", "position", "sink", "rare",
                             "AER"], rows)


def head_report(  # noqa: PLR0913 (the options of `attnmt heads`, each a keyword)
    translator: BaseTranslator, probe: HeadProbe, *, name: str = "", split: str = "valid", ablation: str = "zero",
    bleu: bool = True, beam: int | None = None, progress: bool = False,
) -> HeadsReport:
    """Every head of ``translator``'s model, switched off in turn over ``probe`` (module docstring)."""
    if ablation not in ABLATIONS:
        raise ConfigError(f"--ablation must be one of {', '.join(ABLATIONS)}, got {ablation!r}")
    started = time.perf_counter()
    model = _forced_model(translator)
    slots = attention_slots(model)
    means = None
    if ablation == "mean":
        means = head_means(model, [(b.src, b.src_mask, b.tgt_in, b.targets != probe.specials.pad)
                                   for b in probe.batches(translator.device)])
    heads = [Head(slot.part, slot.layer, k) for slot in slots for k in range(slot.heads)]
    beam = (translator.search_config.beam if beam is None else beam) if bleu else None
    base_loss = mean_nll(translator, probe)
    base_bleu = _bleu(translator, probe, beam) if beam is not None else None
    bar = tqdm(total=len(heads), desc="heads", unit=" heads", disable=not progress, leave=False)
    deltas: dict[Head, tuple[float, float | None]] = {}
    for head in heads:
        with masked_heads(model, [head], ablation, means):
            loss = mean_nll(translator, probe) - base_loss
            change = _bleu(translator, probe, beam) - base_bleu if beam is not None and base_bleu is not None else None
        deltas[head] = (loss, change)
        bar.update(1)
    bar.close()
    importance = _importances(translator, probe, slots)
    roles = {(slot.part, slot.layer): _Roles(slot.heads) for slot in slots}
    with _eval_mode(model), torch.inference_mode():
        for batch in probe.batches(translator.device):
            for key, (weights, queries, keys) in _weights(translator, model, batch, probe.specials.pad).items():
                if key in roles:
                    _add_roles(roles[key], key[0], weights, queries, keys, probe)
    rows = [_row(head, deltas[head], importance, roles, probe) for head in heads]
    correlation = _spearman([row.importance for row in rows], [row.delta_loss for row in rows])
    return HeadsReport(name, split, len(probe.sources), ablation, beam, base_loss, base_bleu, rows, correlation,
                       time.perf_counter() - started)


def _row(head: Head, delta: tuple[float, float | None], importance: dict[tuple[str, int], np.ndarray],
         roles: dict[tuple[str, int], _Roles], probe: HeadProbe) -> HeadRow:
    role = roles[(head.part, head.layer)]
    queries = max(role.queries, 1.0)
    position = share = None
    if head.part != "cross":
        column = int(np.argmax(role.offsets[head.head]))
        position, share = (-1, 0, 1)[column], float(role.offsets[head.head, column] / queries)
    rare = float(role.rare[head.head] / queries) if head.part == "encoder_self" and probe.src_counts else None
    return HeadRow(head.part, head.layer + 1, head.head + 1, delta[0], delta[1],
                   float(importance[(head.part, head.layer)][head.head]), float(role.confidence[head.head] / queries),
                   position, share, float(role.sink[head.head] / queries), rare)


def _bleu(translator: BaseTranslator, probe: HeadProbe, beam: int | None) -> float:
    translations = translator.translate(probe.sources, beam=beam)
    return corpus_scores([t.output for t in translations], probe.references).bleu


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) < 2 or len(set(a)) < 2 or len(set(b)) < 2:
        return math.nan
    return float(spearmanr(a, b).statistic)


@contextmanager
def heads_switched_off(translator: BaseTranslator, spec: str, ablation: str = "zero", run_dir: str | Path | None = None,
                       split: str = "valid", sentences: int = 200, where: str = "--mask-heads") -> Iterator[list[Head]]:
    """Within the block, the heads ``spec`` names (``PART:LAYER:HEAD,...``) are switched off in
    ``translator``'s model, for every search and reading; with ``ablation="mean"`` each takes its
    mean output over the first ``sentences`` pairs of the run's ``split``. The block receives the
    heads. An empty spec changes nothing."""
    model = _forced_model(translator)
    heads = parse_head_spec(spec, model, where)
    means = None
    if heads and ablation == "mean":
        probe = probe_of_run(translator, run_dir, split, sentences)
        means = head_means(model, [(b.src, b.src_mask, b.tgt_in, b.targets != probe.specials.pad)
                                   for b in probe.batches(translator.device)])
    with masked_heads(model, heads, ablation, means):
        yield heads


# ---- pruning curves ---------------------------------------------------------------------------------

#: the orders in which ``prune_curve`` removes heads
PRUNE_ORDERS = ("ablation", "importance", "confidence", "random")


@dataclass
class PruneCurve:
    """One order of removal: ``order`` (and its ``seed`` for random), the heads in the order they
    went (labels), and ``bleu[k]`` the BLEU with the first k of them removed (``bleu[0]``: none)."""

    order: str
    heads: list[str]
    bleu: list[float]
    seed: int | None = None

    def removable(self, base: float, within: float = 0.5) -> int:
        """How many heads go, in this order, before the BLEU first falls more than ``within`` below ``base``."""
        count = 0
        for k, value in enumerate(self.bleu[1:], start=1):
            if value < base - within:
                break
            count = k
        return count


def prune_curve(translator: BaseTranslator, probe: HeadProbe, report: HeadsReport, *, beam: int | None = None,
                seeds: int = 3, progress: bool = False) -> list[PruneCurve]:
    """BLEU of the run's own search over ``probe`` as heads are removed one by one (zero ablation), in
    the orders of PRUNE_ORDERS: ``ablation`` removes at each step the head whose removal raises the
    loss least given those already removed (Michel et al., 2019, iterative pruning: the losses are
    measured anew after each removal); ``importance`` and ``confidence`` remove the lowest first (by
    ``report``); ``random`` in ``seeds`` random orders."""
    model = _forced_model(translator)
    searched: int = translator.search_config.beam if beam is None else beam
    heads = [Head(row.part, row.layer - 1, row.head - 1) for row in report.rows]
    rows = {Head(row.part, row.layer - 1, row.head - 1): row for row in report.rows}
    orders: list[tuple[str, int | None, list[Head]]] = [
        ("importance", None, sorted(heads, key=lambda head: rows[head].importance)),
        ("confidence", None, sorted(heads, key=lambda head: rows[head].confidence)),
    ]
    for seed in range(seeds):
        generator = np.random.default_rng(seed)
        orders.append(("random", seed, [heads[k] for k in generator.permutation(len(heads))]))
    bar = tqdm(total=len(heads) * (len(orders) + 1), desc="pruning", unit=" heads", disable=not progress, leave=False)
    curves = [PruneCurve("ablation", *_iterative(translator, model, probe, heads, searched, bar))]
    for order, order_seed, sequence in orders:
        values = [report.bleu if report.beam == searched and report.bleu is not None
                  else _bleu(translator, probe, searched)]
        for k in range(1, len(sequence) + 1):
            with masked_heads(model, sequence[:k]):
                values.append(_bleu(translator, probe, searched))
            bar.update(1)
        curves.append(PruneCurve(order, [head.label() for head in sequence], values, order_seed))
    bar.close()
    return curves


def _iterative(translator: BaseTranslator, model: Any, probe: HeadProbe, heads: Sequence[Head], beam: int,
               bar: Any) -> tuple[list[str], list[float]]:
    """Michel et al.'s order and the BLEU after each removal."""
    removed: list[Head] = []
    values = [_bleu(translator, probe, beam)]
    remaining = list(heads)
    while remaining:
        losses = []
        for head in remaining:
            with masked_heads(model, [*removed, head]):
                losses.append(mean_nll(translator, probe))
        chosen = remaining.pop(int(np.argmin(losses)))
        removed.append(chosen)
        with masked_heads(model, removed):
            values.append(_bleu(translator, probe, beam))
        bar.update(1)
    return [head.label() for head in removed], values


def removable_by_part(curve: PruneCurve, base: float, within: float = 0.5) -> dict[str, int]:
    """Of the heads ``curve`` removes within ``within`` BLEU of ``base``, how many of each part."""
    counts = Counter(label.split(":")[0] for label in curve.heads[:curve.removable(base, within)])
    return {part: counts.get(part, 0) for part in ("encoder_self", "decoder_self", "cross")}
