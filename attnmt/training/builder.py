"""Assemble everything a training needs: data, tokenizers, batches, model, optimizer, schedule,
and, when continuing a run, their saved states. ``Trainer`` (``attnmt.training.trainer``) runs them.

The order of the steps is fixed, because random numbers are drawn in it: the model is
initialised right after ``seed_everything(training.seed)``, so the same seed gives the same
weights whatever else changes.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from attnmt.attention.provenance import CodeRecord, code_record
from attnmt.attention.trusted_code import remember as remember_code
from attnmt.attention.user_code import bound_classes, load_user_class
from attnmt.data import (
    Batch,
    ParallelCorpus,
    Tokenizers,
    load_split,
    make_batches,
    train_tokenizers,
)
from attnmt.data.link_files import AlignmentGuide, check_links_file
from attnmt.data.subword_sampling import SegmentationSampler
from attnmt.errors import CheckpointError, ConfigError
from attnmt.models import build_model, check_model_fits, count_parameters
from attnmt.models.common import default_layer, resolve_position
from attnmt.runs.checkpoint import checkpoint_code, load_checkpoint, load_model_state
from attnmt.runs.folder import (
    CONFIG_FILE,
    LAST,
    LOCK,
    METRICS,
    RESUMABLE_CHANGES,
    check_run_dir,
    config_differences,
    write_code_copy,
    write_metrics,
)
from attnmt.runs.run_config import RunConfig
from attnmt.runtime.atomic_files import remove_stale_temporaries, write_text_atomic
from attnmt.runtime.checks import is_int
from attnmt.runtime.device import available_memory, describe, enable_tf32, memory_size, resolve_device
from attnmt.runtime.precision import grad_scaler
from attnmt.runtime.threads import ThreadChooser, thread_plan
from attnmt.training.averaging import WeightAverage
from attnmt.training.distributed import DistributedContext
from attnmt.training.optimizer import build_adam, load_adam_state
from attnmt.training.randomness import restore_rng_state, seed_everything
from attnmt.training.schedule import LearningRateSchedule, PlateauTracker
from attnmt.training.statistics import Progress, RunningStatistics

__all__ = ["StepLimitReached", "TrainingParts", "build_training"]


@dataclass
class TrainingParts:
    """What ``build_training`` assembles for a ``Trainer``."""

    config: RunConfig
    run_dir: Path
    context: DistributedContext
    tokenizers: Tokenizers
    train_src: list[list[int]]
    train_tgt: list[list[int]]
    valid_corpus: ParallelCorpus
    valid_batches: list[Batch]
    device: torch.device
    tf32: bool  # TF32 matrix products allowed (CUDA devices that have them)
    model: torch.nn.Module
    ddp_model: torch.nn.Module  # the model, wrapped in DistributedDataParallel when there are ranks
    optimizer: torch.optim.Optimizer
    schedule: LearningRateSchedule
    scaler: torch.amp.GradScaler  # enabled for fp16 only
    guide: AlignmentGuide | None = None
    guide_position: tuple[int, int | None] | None = None  # 0-based (layer, head) the guide pulls
    attention_code: CodeRecord | None = None  # a user mechanism's code, kept in every checkpoint
    average: WeightAverage | None = None  # training.ema_decay: the average the run is validated with
    segmentations: SegmentationSampler | None = None  # data.sampling_alpha: each epoch's train_src/train_tgt
    progress: Progress = field(default_factory=Progress)
    plateau: PlateauTracker = field(default_factory=PlateauTracker)
    window: RunningStatistics = field(default_factory=RunningStatistics)
    epoch_sums: RunningStatistics = field(default_factory=RunningStatistics)
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed: bool = False
    threads: ThreadChooser | None = None  # the thread count follows the machine (attnmt.runtime.threads)


def build_training(
    config: RunConfig, run_dir: str | Path, resume: bool, context: DistributedContext, say: Callable[[str], None],
    trust_run_code: bool = False, named_attention: str | None = None,
) -> TrainingParts:
    """Prepare ``run_dir`` and every part of the training (``say`` prints rank 0's messages).

    A resumed run builds its user mechanism from the code its ``last.pt`` keeps, with the user's
    consent (``attnmt.runs.checkpoint.checkpoint_code``): ``trust_run_code``, code this user trained
    with here, or ``named_attention``, the spec the user names now. Its config may not name other
    code or another model than its checkpoint holds.

    A run that starts without a ``last.pt`` writes its config and tokenizers before its last checks
    (the model's and a batch's memory, which need the vocabulary). When a check or anything else
    stops the start, rank 0 removes the files the start wrote: the folder is as it was, and the same
    command, corrected, can run into it again."""
    run_dir = Path(run_dir)
    starting = not (run_dir / LAST).is_file()
    before = set(run_dir.iterdir()) if run_dir.is_dir() else set()
    try:
        return _build_training(config, run_dir, resume, context, say, trust_run_code, named_attention)
    except BaseException:
        if starting and context.is_main and run_dir.is_dir():
            for path in set(run_dir.iterdir()) - before:
                if path.is_file() and path.name != LOCK:
                    path.unlink(missing_ok=True)
        raise


def _build_training(  # noqa: C901 (the builder assembles the parts in the order they depend on each other, read top to bottom)
    config: RunConfig, run_dir: Path, resume: bool, context: DistributedContext, say: Callable[[str], None],
    trust_run_code: bool, named_attention: str | None,
) -> TrainingParts:
    data, training = config.data, config.training
    checkpoint = load_checkpoint(run_dir / LAST, require_training_state=True) \
        if check_run_dir(run_dir, resume) else None
    if checkpoint is not None:
        _check_resumable(config, checkpoint, run_dir / LAST)
    attention_code, attention_classes = _attention_code(config, run_dir, checkpoint, trust_run_code,
                                                        named_attention)
    if context.is_main and run_dir.is_dir():
        remove_stale_temporaries(run_dir)  # what a killed write left (rank 0 holds the folder's lock)
    context.barrier()  # every rank has looked at the folder before rank 0 writes into it
    plan = thread_plan(training.num_threads, "training.num_threads", context.world_size)
    torch.set_num_threads(plan.threads)
    device = context.device if context.distributed else resolve_device(training.device)
    tf32 = enable_tf32(device)

    if data.train_links is not None:  # before minutes of tokenizer training, not after
        check_links_file(data.resolve(data.train_links))
    train_corpus = load_split(data, "train")
    valid_corpus = load_split(data, "valid")
    if context.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if checkpoint is None:
            write_text_atomic(run_dir / CONFIG_FILE, config.to_yaml())
            if attention_code is not None:
                write_code_copy(run_dir, attention_code)
    tokenizers = _tokenizers(config, run_dir, train_corpus, checkpoint, context, say)

    train_ids = tokenizers.encode_corpus(train_corpus, max_length=data.max_length)
    if len(train_ids) == 0:
        raise ConfigError(f"data.max_length={data.max_length} drops every training pair")
    segmentations = None
    if data.sampling_alpha is not None:
        started = time.perf_counter()
        segmentations = SegmentationSampler.for_pairs(
            tokenizers.src, tokenizers.tgt, [train_corpus.src[k] for k in train_ids.indices],
            [train_corpus.tgt[k] for k in train_ids.indices], nbest=data.sampling_nbest,
            alpha=data.sampling_alpha, seed=training.seed, max_length=data.max_length)
        say(f"subword sampling (α = {data.sampling_alpha:g}): the {data.sampling_nbest} best segmentations of "
            f"{len(train_ids):,} training pairs found in {time.perf_counter() - started:.1f} s")
    valid_ids = tokenizers.encode_corpus(valid_corpus)
    valid_batches = [batch.to(device) for batch in
                     make_batches(valid_ids.src_ids, valid_ids.tgt_ids, max_tokens=data.max_tokens, shuffle=False,
                                  pad_multiple=data.pad_multiple, row_ladder=data.row_ladder)]
    guide = None
    if data.train_links is not None:
        guide, report = AlignmentGuide.from_links(
            data.resolve(data.train_links), train_corpus, train_ids, tokenizers, training.guide_shift,
            unaligned=training.guide_unaligned,
        )
        say(report.summary())

    only_recorded = checkpoint is not None  # a resumed run builds the code its checkpoint keeps, nothing else
    with bound_classes(attention_classes, only_recorded):  # before the seed: nothing here may draw from its stream
        check_model_fits(config.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size,
                         [(torch.device("cpu"), 4), (device, 16)] if device.type != "cpu" else [(device, 16)])
    seed_everything(training.seed)
    # Initialised on the CPU, then moved: the same seed gives the same weights on every device.
    try:
        with bound_classes(attention_classes, only_recorded):
            model = build_model(config.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size).to(device)
    except (RuntimeError, MemoryError) as error:  # the allocator's own words for a model too large
        if "alloc" not in str(error).lower() and not isinstance(error, MemoryError):
            raise
        raise ConfigError(f"model: the model this config describes does not fit in the memory of {device} "
                          f"({str(error).splitlines()[0][:160]}); make it smaller") from None
    _check_batch_memory(data.max_tokens, train_ids.src_ids, train_ids.tgt_ids, tokenizers.tgt.vocab_size, device)
    optimizer = build_adam(model, training.lr, training.adam, training.weight_decay)
    parts = TrainingParts(
        config=config, run_dir=run_dir, context=context, tokenizers=tokenizers,
        train_src=train_ids.src_ids, train_tgt=train_ids.tgt_ids, valid_corpus=valid_corpus,
        valid_batches=valid_batches, device=device, tf32=tf32, model=model, ddp_model=model, optimizer=optimizer,
        schedule=LearningRateSchedule(optimizer, training), scaler=grad_scaler(training.precision, device.type),
        guide=guide, attention_code=attention_code,
        guide_position=_guide_position(config, model) if guide is not None else None,
        progress=Progress(world_size=context.world_size),
        average=WeightAverage(model, training.ema_decay) if training.ema_decay is not None else None,
        segmentations=segmentations,
    )
    if context.rank > 0:
        seed_everything(training.seed + 7919 * context.rank)  # other dropout masks on other ranks
    if checkpoint is not None:
        _restore(parts, checkpoint, say)
    elif context.is_main:
        (run_dir / METRICS).unlink(missing_ok=True)
    if context.distributed:
        parts.ddp_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    say(
        f"{len(parts.train_src)} training pairs ({train_ids.dropped_long} longer than {data.max_length} "
        f"pieces dropped), {len(valid_corpus)} validation pairs; vocabularies "
        f"{tokenizers.src.vocab_size}/{tokenizers.tgt.vocab_size}; {count_parameters(model):,} parameters"
        + (f"; {context.world_size} processes" if context.distributed else "")
    )
    parts.threads = ThreadChooser(plan.threads) if plan.adaptive and device.type == "cpu" else None
    say(describe(device, training.precision, tf32, threads=plan.reason))
    return parts


def _attention_code(
    config: RunConfig, run_dir: Path, checkpoint: dict | None, trust_run_code: bool, named_attention: str | None,
) -> tuple[CodeRecord | None, dict[str, type]]:
    """The record of the run's user mechanism (None for a built-in) and ``{name: class}`` to build it.

    A new run imports the code its config names (its user asked for it) and lists it as trusted on
    this machine; a resumed run only the code its checkpoint keeps, with consent
    (``attnmt.runs.checkpoint.checkpoint_code``)."""
    if checkpoint is not None:
        classes = checkpoint_code(checkpoint, run_dir / LAST, trust_run_code, named_attention)
        record = checkpoint.get("attention_code")
        return (CodeRecord.from_dict(record, str(run_dir / LAST)) if record else None), classes
    record = code_record(config.model.attention)
    if record is None:
        return None, {}
    problem = remember_code(record.sha256, record.spec)
    if problem is not None:
        warnings.warn(f"{problem}; the run will load only with --trust-run-code", stacklevel=2)
    return record, {record.spec: load_user_class(record.spec)}


def _check_resumable(config: RunConfig, checkpoint: dict, path: Path) -> None:
    """ConfigError when the config to resume with describes another model or training than ``path``
    holds, the keys a resumed run may change aside (``RESUMABLE_CHANGES``): a hand-edited
    ``config.yaml`` cannot name new code, change the model or change the training half-way. And
    StepLimitReached when its step limit lies below the step the run has reached."""
    try:
        trained = RunConfig.from_dict(checkpoint["config"])  # load_checkpoint filled in options added since
    except ConfigError as error:
        raise CheckpointError(f"{path}: its config cannot be read: {error}") from None
    old, new = trained.to_dict(), config.to_dict()
    old["training"] = {k: v for k, v in old["training"].items() if k not in RESUMABLE_CHANGES}
    new["training"] = {k: v for k, v in new["training"].items() if k not in RESUMABLE_CHANGES}
    differences = [difference for section in ("model", "training")
                   for difference in config_differences(old[section], new[section], prefix=f"{section}.")]
    if differences:
        raise ConfigError(
            f"{path.parent / CONFIG_FILE}: describes another run than {path} holds: "
            + "; ".join(differences).replace(" in the run, ", f" in {path.name}, ").replace(" now)", " in the config)")
            + "; a run's model and training cannot change half-way, start a new run instead"
        )
    step = checkpoint["progress"].get("step") if isinstance(checkpoint["progress"], dict) else None
    limit = config.training.max_steps
    if isinstance(step, int) and limit is not None and limit < step:
        raise StepLimitReached(limit, step, path.parent)


class StepLimitReached(ConfigError):
    """A resumed run's ``training.max_steps`` lies below the step it has reached."""

    def __init__(self, limit: int, step: int, run_dir: Path):
        super().__init__(f"training.max_steps={limit}: the run in {run_dir} is already at step {step}; "
                         f"give a limit of {step} or more")
        self.limit, self.step = limit, step


def _check_batch_memory(max_tokens: int, src_ids, tgt_ids, vocabulary: int, device: torch.device) -> None:
    """ConfigError, before the first step, when the largest training batch cannot fit: its logits,
    their log-probabilities and their gradient are 3 float32 tensors of N × V, N its padded target
    positions. N is at most max(max_tokens, W) and at most P · W (W the widest pair, P pairs:
    a budget beyond the corpus makes one batch of all of it)."""
    widest = max(max(len(s), len(t)) + 1 for s, t in zip(src_ids, tgt_ids))
    positions = min(max(max_tokens, widest), len(tgt_ids) * widest)
    needed = 3 * positions * vocabulary * 4
    available = available_memory(device)
    if available is not None and needed > available // 2:
        fits = available // 2 // (3 * vocabulary * 4)
        advice = (f"use data.max_tokens {fits} or less" if fits >= widest
                  else "use a smaller data.vocab_size or data.max_length")
        raise ConfigError(
            f"data.max_tokens={max_tokens}: a training batch of up to {positions:,} target positions needs about "
            f"{memory_size(needed)} for its logits over {vocabulary:,} words alone, more than half of the "
            f"{memory_size(available)} free on {device}; {advice}"
        )


def _tokenizers(config, run_dir, train_corpus, checkpoint, context, say) -> Tokenizers:
    """The run's tokenizers: from the checkpoint, else trained by rank 0 and read by the others."""
    if checkpoint is not None:
        return Tokenizers.from_state_dict(checkpoint["tokenizers"])
    data = config.data
    tokenizers = None
    if context.is_main:
        say(f"training tokenizers on {len(train_corpus)} sentence pairs ...")
        tokenizers = train_tokenizers(
            train_corpus.src, train_corpus.tgt, vocab_size=data.vocab_size, joint=data.joint_vocab,
            model_type=data.tokenizer_type, character_coverage=data.character_coverage,
            seed=0, src_lang=data.src_lang, tgt_lang=data.tgt_lang,
        )
        tokenizers.save(run_dir, overwrite=True)
    context.barrier()
    return tokenizers if tokenizers is not None else Tokenizers.load(run_dir)


def _guide_position(config: RunConfig, model) -> tuple[int, int | None]:
    """The 0-based (layer, head) that ``training.guide_layer`` / ``guide_head`` name in ``model``."""
    training = config.training
    if config.attention == "none" or not model.attention_heads:
        raise ConfigError("data.train_links: guided alignment needs a model with attention over the source, "
                          "not attention: none")
    layers = model.cross_attention_layers
    layer = resolve_position(default_layer(layers) if training.guide_layer is None else training.guide_layer,
                             layers, "decoder layer")
    head = None if training.guide_head is None else resolve_position(training.guide_head, model.attention_heads, "head")
    return layer, head


def _restore(parts: TrainingParts, checkpoint: dict, say: Callable[[str], None]) -> None:
    """Continue from ``last.pt``: weights, optimizer, schedule, position, sums, history, random
    states. A state that does not fit (a checkpoint edited by hand) is a CheckpointError naming it."""
    path = parts.run_dir / LAST
    try:
        _restore_states(parts, checkpoint, say)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as error:
        text = " ".join(str(error).split())[:160]
        raise CheckpointError(f"{path}: its training state is damaged ({type(error).__name__}: {text})") from None


def _state_of(cls: Any, state: Any, what: str, path: Path) -> Any:
    """``cls.from_state_dict(state)`` once every value is of its field's kind: an integer from -1 for
    an ``int`` field, a number that is not NaN for a ``float`` one, text or null where the field allows
    them; else CheckpointError naming ``what`` and the value."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: its {what} is damaged (a {type(state).__name__}, not a mapping)")
    kinds = {field.name: str(field.type) for field in fields(cls)}
    for key, value in state.items():
        kind = kinds.get(key)
        if kind is None:
            raise CheckpointError(f"{path}: its {what} has an unknown entry {key!r}")
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN
        fits = ((value is None and "None" in kind) or (isinstance(value, str) and "str" in kind)
                or (kind.startswith("int") and is_int(value) and value >= -1)
                or (kind.startswith(("float", "Sum")) and number))
        if not fits:
            raise CheckpointError(f"{path}: its {what} is damaged: {key} is {value!r:.40}")
    return cls.from_state_dict(state)


def _restore_states(parts: TrainingParts, checkpoint: dict, say: Callable[[str], None]) -> None:
    context, path = parts.context, parts.run_dir / LAST
    load_model_state(parts.model, checkpoint, path)
    if parts.average is not None:  # the model now holds the average; the trained weights come back
        if "weight_average" not in checkpoint:
            raise CheckpointError(f"{path}: training.ema_decay is set, but the checkpoint holds no weight_average "
                                  f"(saved by another config)")
        parts.average.restore(checkpoint["weight_average"], str(path))
    load_adam_state(parts.optimizer, checkpoint["optimizer"], parts.config.training.adam)
    parts.schedule.load_state_dict(checkpoint["scheduler"])
    if parts.scaler.is_enabled() and checkpoint.get("scaler"):
        parts.scaler.load_state_dict(checkpoint["scaler"])
    saved = checkpoint["progress"]
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path}: its progress is damaged (a {type(saved).__name__}, not a mapping)")
    position = {key: value for key, value in saved.items() if key not in ("plateau", "window", "epoch_sums")}
    parts.progress = _state_of(Progress, position, "progress", path)
    parts.plateau = _state_of(PlateauTracker, saved["plateau"], "progress.plateau", path)
    parts.window = _state_of(RunningStatistics, saved["window"], "progress.window", path)
    parts.epoch_sums = _state_of(RunningStatistics, saved["epoch_sums"], "progress.epoch_sums", path)
    if not isinstance(checkpoint["history"], list) or not all(isinstance(r, dict) for r in checkpoint["history"]):
        raise CheckpointError(f"{path}: its history is damaged (not a list of metric records)")
    parts.history = list(checkpoint["history"])
    parts.resumed = True
    if parts.progress.world_size != context.world_size:
        say(
            f"warning: the run was trained with {parts.progress.world_size} processes, now {context.world_size}: "
            f"it continues correctly but not bit-for-bit as it would have"
        )
        parts.progress.world_size = context.world_size
    rng_states = checkpoint["rng"]
    restore_rng_state(rng_states[context.rank % len(rng_states)])
    if context.is_main:  # metrics.jsonl as of the checkpoint: drop lines written after it
        write_metrics(parts.run_dir, parts.history)
    say(
        f"resuming {parts.run_dir} at step {parts.progress.step} "
        f"(epoch {parts.progress.epoch + 1}, batch {parts.progress.batch_in_epoch})"
    )
