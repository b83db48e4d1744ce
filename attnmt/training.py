"""The training loop: Adam, clipping, lr schedule and decay on plateau, early stopping, exact resume, DDP.

One optimizer step on a batch of pairs (x, y) with N real target tokens (EOS included) minimises
the label-smoothed cross-entropy per token::

    L = (1/N) Σ_t [(1 − ε) · (−log p(y_t | y_<t, x)) + ε · (1/V) Σ_v (−log p(v | y_<t, x))]

then clips the gradient norm to ``clip_norm`` and takes an Adam step. After every ``eval_every``
epochs the validation set is scored (teacher-forced perplexity without smoothing, greedy BLEU on
the first ``bleu_max_sentences`` sentences, attention heatmaps of ``examples`` fixed sentences);
the lr follows ``lr_schedule`` (constant or inverse square root, with warm-up) and is multiplied
by ``lr_decay`` when the validation loss stops improving (as ReduceLROnPlateau), training stops
after ``early_stopping_patience`` evaluations without a better validation loss, and the
checkpoint with the lowest validation loss is kept as ``best.pt``.

**Exact resume.** The batches of epoch e are a function of (seed, e) only (attnmt.data.batching),
and ``last.pt`` — written every ``checkpoint_every`` steps and after every epoch — holds the
model, Adam and scheduler states, the torch / NumPy / Python random states of every rank, the
position (epoch, batch within the epoch, step) and the running sums of the metrics. A run killed
at any moment (even with SIGKILL) and continued with ``--resume`` restarts at the batch after the
checkpoint with the same random state, and so ends with the same numbers as a run never stopped.

**Distributed data parallel** (``torchrun --nproc_per_node P -m attnmt train ...``; gloo on CPU).
Every rank builds the same batch list and takes batches r, r+P, r+2P, … of it
(``attnmt.data.shard``); one step = P batches, one per rank. Each rank's loss is normalised by the
*global* number of target tokens (summed over the ranks with an all-reduce before the backward
pass) and multiplied by P, because DistributedDataParallel averages the gradients: the step then
equals one process's step on the union of the P batches. Only rank 0 writes files and draws the
progress bar; every decision (lr, early stopping, time limit) is taken from all-reduced numbers
so all ranks agree.

Files of a run folder::

    config.yaml            the resolved run config
    spm.*.model, tokenizers.json   the tokenizers (also inside every checkpoint)
    last.pt, best.pt       checkpoints (attnmt.checkpoint); best.pt holds no optimizer state
    metrics.jsonl          one JSON record a line: "train" every log_every steps, "epoch" per
                           validation at an epoch end, "valid" for the validation when a step or
                           time limit stops training mid-epoch, and a final "summary"
    examples/epochNN-K.png attention heatmaps of validation sentence K after epoch NN
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnmt.config import RunConfig
from attnmt.errors import ConfigError
from attnmt.files import write_text_atomic

logger = logging.getLogger(__name__)

# ================================================================================================
# Distributed helpers
# ================================================================================================


def training_threads(configured: int | None, world_size: int) -> int:
    """Torch threads per process: the config's ``num_threads``, else ``OMP_NUM_THREADS`` when the
    user set it (so ``OMP_NUM_THREADS=1 attnmt train ...`` runs two trainings side by side on two
    cores without oversubscribing them), else the cores shared out among the processes."""
    if configured:
        return configured
    from_env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if from_env.isdigit() and int(from_env) > 0:
        return int(from_env)
    return max(1, (os.cpu_count() or 1) // world_size)


@dataclass
class DistributedContext:
    """Rank and world size of this process; every helper is a no-op for a single process."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sums over the ranks (float64)."""
        if not self.distributed:
            return [float(v) for v in values]
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def broadcast_object(self, obj: Any) -> Any:
        """rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        import torch.distributed as dist

        holder = [obj]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()


def init_distributed() -> DistributedContext:
    """Join the process group that ``torchrun`` describes (WORLD_SIZE, RANK, MASTER_ADDR/PORT env vars).

    Without those variables (a plain ``attnmt train``) this is a single process.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="gloo")
    return DistributedContext(rank=dist.get_rank(), world_size=dist.get_world_size())


# ================================================================================================
# One step
# ================================================================================================


@dataclass
class StepStats:
    """Sums over the real target tokens of one batch (of this rank)."""

    loss_sum: float  # label-smoothed training loss (without the guide term)
    nll_sum: float  # plain negative log-likelihood
    num_tokens: int
    guide_sum: float = 0.0  # Σ −A log a of the guided-alignment term (before its weight)


@dataclass
class GuideBatch:
    """The guided-alignment term of one batch (``attnmt.alignment.guide``).

    target [B, T, S] (A), weight λ, and the 0-based layer and head (None = mean) it guides.
    """

    target: Any
    weight: float
    layer: int
    head: int | None


def backward_on_batch(
    model, batch, label_smoothing: float, global_tokens: float, world_size: int = 1, precision: str = "fp32",
    guide: GuideBatch | None = None,
) -> StepStats:
    """Forward ``batch`` through ``model`` (plain or DDP-wrapped) and backpropagate its share of the
    global loss ``loss_sum · world_size / global_tokens``; with ``guide`` the loss summed is
    ``loss_sum + λ · Σ −A log a`` (guided alignment, ``attnmt.alignment.guide``).

    ``precision="bf16"`` runs the forward pass under CPU bfloat16 autocast; the loss is computed
    from float32 logits and the gradients arrive in the float32 parameters.

    With DDP (which averages gradients over the ``world_size`` ranks) the resulting gradients
    equal those of ``Σ_ranks loss_sum / global_tokens``: the per-token loss of the whole global batch.
    """
    import torch

    from attnmt.evaluation import token_losses

    if global_tokens <= 0:
        raise ValueError(f"backward_on_batch: global_tokens must be > 0, got {global_tokens}")
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        logits, attention = model(batch.src, batch.src_mask, batch.tgt_in, return_attention="heads" if guide else False,
                                  tgt_mask=batch.tgt_mask)  # logits of the real tokens only: [N, V]
    loss_sum, nll_sum, count = token_losses(logits.float(), batch.tgt_out, batch.tgt_mask, label_smoothing)
    total = loss_sum
    guide_sum = 0.0
    if guide is not None:
        from attnmt.alignment.guide import guide_attention, guided_alignment_loss

        guide_term = guided_alignment_loss(guide_attention(attention, guide.layer, guide.head), guide.target)
        total = loss_sum + guide.weight * guide_term
        guide_sum = float(guide_term.detach())
    (total * (world_size / global_tokens)).backward()
    return StepStats(float(loss_sum.detach()), float(nll_sum), count, guide_sum)


# ================================================================================================
# Learning rate
# ================================================================================================


class LearningRateSchedule:
    """The lr of every step: a per-step schedule times a decay on validation plateaus::

        lr(step) = lr · schedule(step) · plateau_scale
        schedule(step) = min(1, step / warmup_steps)                       "constant" (1 without warm-up)
                       = min(step / warmup_steps, sqrt(warmup_steps / step))  "inverse_sqrt"

    ``plateau_scale`` starts at 1 and is multiplied by ``lr_decay`` whenever the epoch-end
    validation loss has not improved (by more than a relative 1e-4, as ReduceLROnPlateau) for more
    than ``lr_patience`` evaluations; it never takes lr · plateau_scale below ``min_lr``.
    Steps count from 1. ``state_dict`` / ``load_state_dict`` make it part of a checkpoint.
    """

    THRESHOLD = 1e-4

    def __init__(self, optimizer, training) -> None:
        self.optimizer = optimizer
        self.base_lr = training.lr
        self.schedule = training.lr_schedule
        self.warmup_steps = training.warmup_steps
        self.decay = training.lr_decay
        self.patience = training.lr_patience
        self.min_lr = training.min_lr
        self.plateau_scale = 1.0
        self.best = math.inf
        self.bad_evaluations = 0

    def factor(self, step: int) -> float:
        step = max(step, 1)
        if self.schedule == "inverse_sqrt":
            return min(step / self.warmup_steps, math.sqrt(self.warmup_steps / step))
        return min(1.0, step / self.warmup_steps) if self.warmup_steps > 0 else 1.0

    def lr(self, step: int) -> float:
        return self.base_lr * self.factor(step) * self.plateau_scale

    def set_step(self, step: int) -> float:
        """Set the optimizer's lr for optimizer step ``step`` (1-based) and return it."""
        lr = self.lr(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def on_validation(self, val_loss: float) -> bool:
        """Account for an epoch-end validation loss; True when the lr was decayed."""
        if val_loss < self.best * (1.0 - self.THRESHOLD):
            self.best = val_loss
            self.bad_evaluations = 0
            return False
        self.bad_evaluations += 1
        if self.bad_evaluations <= self.patience or self.decay >= 1.0:
            return False
        floor = self.min_lr / self.base_lr
        new_scale = max(self.plateau_scale * self.decay, floor)
        self.bad_evaluations = 0
        decayed = new_scale < self.plateau_scale
        self.plateau_scale = new_scale
        return decayed

    def state_dict(self) -> dict[str, Any]:
        return {"plateau_scale": self.plateau_scale, "best": self.best, "bad_evaluations": self.bad_evaluations}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.plateau_scale = float(state["plateau_scale"])
        self.best = float(state["best"])
        self.bad_evaluations = int(state["bad_evaluations"])


# ================================================================================================
# Random states
# ================================================================================================


def capture_rng_state() -> dict[str, Any]:
    """torch, NumPy and Python random states as plain data (loadable with weights_only=True)."""
    import torch

    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python": random.getstate(),
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    numpy_state = state["numpy"]
    np.random.set_state((
        numpy_state["kind"],
        numpy_state["keys"].numpy().astype(np.uint32),
        numpy_state["position"],
        numpy_state["has_gauss"],
        numpy_state["cached_gaussian"],
    ))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ================================================================================================
# Progress of a run
# ================================================================================================


@dataclass
class TrainState:
    """Where a run stands; stored in every checkpoint as ``progress``.

    epoch counts *completed* epochs; batch_in_epoch counts this rank's batches done in the
    current one. The running sums (window_* since the last ``train`` record, epoch_* since the
    epoch began) are global over the ranks.
    """

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    elapsed_seconds: float = 0.0
    best_val_loss: float = math.inf
    best_step: int = -1
    best_epoch: float = -1
    best_val_bleu: float | None = None
    plateau_best: float = math.inf
    evals_without_improvement: int = 0
    last_eval_step: int = -1
    stop_reason: str | None = None
    window_loss: float = 0.0
    window_nll: float = 0.0
    window_tokens: float = 0.0
    window_steps: int = 0
    window_seconds: float = 0.0
    window_grad_norm: float = 0.0
    window_guide: float = 0.0
    epoch_loss: float = 0.0
    epoch_nll: float = 0.0
    epoch_tokens: float = 0.0
    epoch_seconds: float = 0.0
    world_size: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainState":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in known})


def _ppl(loss: float) -> float:
    return math.exp(min(loss, 700.0)) if math.isfinite(loss) else float("nan")


@dataclass
class TrainResult:
    """What ``train`` returns: where the run ended and its best validation numbers."""

    run_dir: Path
    step: int
    epoch: int
    stop_reason: str
    best_val_loss: float
    best_val_ppl: float
    best_val_bleu: float | None
    best_step: int
    best_epoch: float
    elapsed_seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)

    def summary_line(self) -> str:
        bleu = f", val BLEU {self.best_val_bleu:.2f}" if self.best_val_bleu is not None else ""
        best = (
            f"best val loss {self.best_val_loss:.4f} (ppl {self.best_val_ppl:.2f}{bleu}) at step {self.best_step}"
            if math.isfinite(self.best_val_loss) else "no validation yet"
        )
        return (
            f"{self.run_dir}: {self.step} steps, {self.epoch} epochs completed, stopped: {self.stop_reason}; "
            f"{best}; {self.elapsed_seconds / 60:.1f} min"
        )


# ================================================================================================
# Run folder
# ================================================================================================

LAST, BEST = "last.pt", "best.pt"
METRICS = "metrics.jsonl"
CONFIG_FILE = "config.yaml"


def check_run_dir(run_dir: str | Path, resume: bool) -> bool:
    """Decide whether ``run_dir`` starts a new run or continues one; True = continue from last.pt.

    A folder with files in it is only used with ``resume``; without a ``last.pt`` there, ``resume``
    starts the run afresh (it was stopped before its first checkpoint). Raises ConfigError otherwise.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: exists and is not a folder; choose another --out")
    has_files = run_dir.is_dir() and any(run_dir.iterdir())
    if not resume:
        if has_files:
            raise ConfigError(
                f"{run_dir}: run folder already exists and is not empty; pass --resume to continue "
                f"that run, or choose another --out (nothing was overwritten)"
            )
        return False
    return (run_dir / LAST).is_file()


def config_differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    differences = []
    for key in sorted(set(old) | set(new), key=str):
        name = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            differences += config_differences(a, b, prefix=f"{name}.")
        elif a != b and not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and list(a) == list(b)):
            differences.append(f"{name} ({a!r} in the run, {b!r} now)")
    return differences


# Training keys a resumed run may change: the limits, and how often it reports.
RESUMABLE_CHANGES = {
    "max_epochs", "max_steps", "max_minutes", "log_every", "checkpoint_every", "num_threads",
    "bleu_max_sentences", "examples",
}


def resolve_resume_config(checkpoint_config: dict, requested: RunConfig | None, limits: dict[str, Any]) -> RunConfig:
    """The config a resumed run continues with: the run's own, with new limits.

    requested: the config given again on the command line (if any); it must equal the run's,
        except for the keys in RESUMABLE_CHANGES, or ConfigError lists the differences.
    limits: overrides of max_epochs / max_steps / max_minutes (None = keep).
    """
    saved = RunConfig.from_dict(checkpoint_config)
    if requested is not None:
        old, new = saved.to_dict(), requested.to_dict()
        for section in (old, new):
            for key in RESUMABLE_CHANGES:
                section["training"].pop(key, None)
        differences = config_differences(old, new)
        if differences:
            raise ConfigError(
                "--resume: the config differs from the one the run was started with: "
                + "; ".join(differences)
                + ". Resume without --config (the run's own config is used) or start a new run."
            )
        for key in RESUMABLE_CHANGES:
            setattr(saved.training, key, getattr(requested.training, key))
    for key, value in limits.items():
        if value is not None:
            setattr(saved.training, key, value)
    saved.training.validate()
    return saved


# ================================================================================================
# The trainer
# ================================================================================================


class Trainer:
    """Trains ``config`` into ``run_dir`` (see the module docstring). Call ``run()``."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: str | Path,
        resume: bool = False,
        show_progress: bool = True,
        context: DistributedContext | None = None,
        verbose: bool = True,
    ):
        self.config = config
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.show_progress = show_progress
        self.context = context or DistributedContext()
        self.verbose = verbose

    # ---- output (rank 0 only) -----------------------------------------------------------------

    def _say(self, message: str) -> None:
        if self.context.is_main and self.verbose:
            from tqdm.auto import tqdm

            tqdm.write(message, file=sys.stderr)

    def _record(self, record: dict[str, Any]) -> None:
        """Append a metrics record to the history and, on rank 0, to metrics.jsonl."""
        self.history.append(record)
        if self.context.is_main:
            with open(self.run_dir / METRICS, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    # ---- setup --------------------------------------------------------------------------------

    def _setup(self) -> None:
        import torch

        from attnmt.checkpoint import load_checkpoint, load_model_state
        from attnmt.data import Tokenizers, load_split, train_tokenizers
        from attnmt.models import build_model, count_parameters

        ctx = self.context
        continuing = check_run_dir(self.run_dir, self.resume)
        checkpoint = None
        if continuing:
            checkpoint = load_checkpoint(self.run_dir / LAST, require_training_state=True)
        ctx.barrier()  # every rank has looked at the folder before rank 0 writes into it
        cfg = self.config
        training = cfg.training
        torch.set_num_threads(training_threads(training.num_threads, ctx.world_size))

        data_cfg = cfg.data
        if data_cfg.train_links is not None:  # before minutes of tokenizer training, not after
            from attnmt.alignment.guide import check_links_file

            check_links_file(data_cfg.resolve(data_cfg.train_links))
        self.train_corpus = load_split(data_cfg, "train")
        self.valid_corpus = load_split(data_cfg, "valid")

        if ctx.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if checkpoint is None:
                write_text_atomic(self.run_dir / CONFIG_FILE, cfg.to_yaml())
        if checkpoint is not None:
            tokenizers = Tokenizers.from_state_dict(checkpoint["tokenizers"])
        elif ctx.is_main:
            self._say(f"training tokenizers on {len(self.train_corpus)} sentence pairs ...")
            tokenizers = train_tokenizers(
                self.train_corpus.src, self.train_corpus.tgt,
                vocab_size=data_cfg.vocab_size, joint=data_cfg.joint_vocab,
                model_type=data_cfg.tokenizer_type, character_coverage=data_cfg.character_coverage,
                seed=0, src_lang=data_cfg.src_lang, tgt_lang=data_cfg.tgt_lang,
            )
            tokenizers.save(self.run_dir, overwrite=True)
        ctx.barrier()
        if checkpoint is None and not ctx.is_main:
            tokenizers = Tokenizers.load(self.run_dir)
        self.tokenizers = tokenizers

        train_ids = tokenizers.encode_corpus(self.train_corpus, max_length=data_cfg.max_length)
        if len(train_ids) == 0:
            raise ConfigError(f"data.max_length={data_cfg.max_length} drops every training pair")
        self.train_src, self.train_tgt = train_ids.src_ids, train_ids.tgt_ids
        valid_ids = tokenizers.encode_corpus(self.valid_corpus)
        from attnmt.data import make_batches

        self.valid_batches = make_batches(valid_ids.src_ids, valid_ids.tgt_ids, max_tokens=data_cfg.max_tokens, shuffle=False)
        self.guide = None
        if data_cfg.train_links is not None:
            from attnmt.alignment.guide import AlignmentGuide

            self.guide, report = AlignmentGuide.from_links(
                data_cfg.resolve(data_cfg.train_links), self.train_corpus, train_ids, tokenizers, training.guide_shift
            )
            self._say(report.summary())

        seed_everything(training.seed)
        self.model = build_model(dict(cfg.model), tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
        self.guide_position = self._guide_position() if self.guide is not None else None
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=training.lr)
        self.scheduler = LearningRateSchedule(self.optimizer, training)
        self.state = TrainState(world_size=ctx.world_size)
        self.history: list[dict[str, Any]] = []
        self._last_saved: tuple | None = None
        if ctx.rank > 0:
            seed_everything(training.seed + 7919 * ctx.rank)  # other dropout masks on other ranks

        if checkpoint is not None:
            load_model_state(self.model, checkpoint, self.run_dir / LAST)
            self.optimizer.load_state_dict(checkpoint["optimizer"])
            self.scheduler.load_state_dict(checkpoint["scheduler"])
            self.state = TrainState.from_dict(checkpoint["progress"])
            self.history = list(checkpoint["history"])
            rng_states = checkpoint["rng"]
            if self.state.world_size != ctx.world_size:
                self._say(
                    f"warning: the run was trained with {self.state.world_size} processes, now {ctx.world_size}: "
                    f"it continues correctly but not bit-for-bit as it would have"
                )
                self.state.world_size = ctx.world_size
            restore_rng_state(rng_states[ctx.rank % len(rng_states)])
            self._last_saved = self._position()
            if ctx.is_main:  # metrics.jsonl as of the checkpoint: drop lines written after it
                write_text_atomic(self.run_dir / METRICS, "".join(json.dumps(r) + "\n" for r in self.history))
            self._say(
                f"resuming {self.run_dir} at step {self.state.step} "
                f"(epoch {self.state.epoch + 1}, batch {self.state.batch_in_epoch})"
            )
        elif ctx.is_main:
            (self.run_dir / METRICS).unlink(missing_ok=True)

        self.ddp_model = self.model
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            self.ddp_model = DistributedDataParallel(self.model)
        self._say(
            f"{len(self.train_src)} training pairs ({train_ids.dropped_long} longer than {data_cfg.max_length} "
            f"pieces dropped), {len(self.valid_corpus)} validation pairs; vocabularies "
            f"{tokenizers.src.vocab_size}/{tokenizers.tgt.vocab_size}; {count_parameters(self.model):,} parameters"
            + (f"; {ctx.world_size} processes" if ctx.distributed else "")
        )

    def _guide_position(self) -> tuple[int, int | None]:
        """The 0-based (layer, head) ``training.guide_layer`` / ``guide_head`` name in this model."""
        from attnmt.alignment.translator import cross_attention_layers, default_layer, resolve_position

        training = self.config.training
        if self.config.model.get("attention") == "none" or not getattr(self.model, "attention_heads", 0):
            raise ConfigError("data.train_links: guided alignment needs a model with attention over the source, "
                              "not attention: none")
        layers = cross_attention_layers(self.model)
        layer = resolve_position(default_layer(layers) if training.guide_layer is None else training.guide_layer,
                                 layers, "decoder layer")
        head = None if training.guide_head is None else resolve_position(
            training.guide_head, int(self.model.attention_heads), "head")
        return layer, head

    # ---- checkpoints --------------------------------------------------------------------------

    def _checkpoint(self, with_training_state: bool) -> dict:
        from attnmt.checkpoint import make_checkpoint

        extra: dict[str, Any] = {"progress": self.state.to_dict(), "history": list(self.history)}
        if with_training_state:
            extra.update(
                optimizer=self.optimizer.state_dict(),
                scheduler=self.scheduler.state_dict(),
                rng=self._rng_states,
            )
        return make_checkpoint(
            config=self.config.to_dict(),
            model_state=self.model.state_dict(),
            tokenizers=self.tokenizers.state_dict(),
            **extra,
        )

    def _save_last(self) -> None:
        from attnmt.checkpoint import save_checkpoint

        self._rng_states = self.context.all_gather_object(capture_rng_state())  # collective: every rank
        if self.context.is_main:
            save_checkpoint(self._checkpoint(with_training_state=True), self.run_dir / LAST)
        self._last_saved = self._position()

    def _position(self) -> tuple[int, int, int, int]:
        return (self.state.step, self.state.epoch, self.state.batch_in_epoch, self.state.last_eval_step)

    def _save_best(self) -> None:
        from attnmt.checkpoint import save_checkpoint

        if self.context.is_main:
            save_checkpoint(self._checkpoint(with_training_state=False), self.run_dir / BEST)

    # ---- validation ---------------------------------------------------------------------------

    def _validate(self, epoch_label: int) -> dict[str, Any]:
        """Validation loss/perplexity (all ranks), greedy BLEU and heatmaps (rank 0)."""
        import torch

        from attnmt.evaluation import bleu, perplexity_from_sums, token_losses

        ctx = self.context
        model = self.model
        model.eval()
        nll_sum = tokens = 0.0
        with torch.no_grad():
            for batch in self.valid_batches[ctx.rank :: ctx.world_size]:
                logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, tgt_mask=batch.tgt_mask)
                _, nll, count = token_losses(logits, batch.tgt_out, batch.tgt_mask)
                nll_sum += float(nll)
                tokens += count
        model.train()
        nll_sum, tokens = self.context.all_reduce_sum([nll_sum, tokens])
        result = perplexity_from_sums(nll_sum, int(tokens))
        record: dict[str, Any] = {"val_loss": result.loss, "val_ppl": result.perplexity, "val_bleu": None}

        training = self.config.training
        limit = training.bleu_max_sentences
        if ctx.is_main and (limit is None or limit > 0 or training.examples > 0):
            from attnmt.translator import Translator

            translator = Translator(model, self.tokenizers, config=self.config.to_dict())
            if limit is None or limit > 0:
                count = len(self.valid_corpus) if limit is None else min(limit, len(self.valid_corpus))
                outputs = translator.translate(self.valid_corpus.src[:count], beam=1)
                record["val_bleu"], _ = bleu([t.output for t in outputs], self.valid_corpus.tgt[:count])
                record["bleu_sentences"] = count
            if training.examples > 0:
                self._plot_examples(translator, epoch_label)
        record["val_bleu"] = ctx.broadcast_object(record["val_bleu"])
        return record

    def _plot_examples(self, translator, epoch_label: int) -> None:
        from attnmt.plotting import plot_attention

        count = min(self.config.training.examples, len(self.valid_corpus))
        sources = self.valid_corpus.src[:count]
        folder = self.run_dir / "examples"
        for k, translation in enumerate(translator.translate(sources, beam=1, return_attention=True), start=1):
            if translation.attention is None or translation.attention.size == 0:
                continue
            try:
                plot_attention(
                    translation.attention, translation.src_pieces, translation.out_pieces,
                    folder / f"epoch{epoch_label:02d}-{k}.png",
                    title=f"epoch {epoch_label}: {translation.output}", merge_pieces=True,
                )
            except ValueError as error:  # a degenerate matrix must not stop training
                logger.warning("could not plot example %d: %s", k, error)

    # ---- the loop -----------------------------------------------------------------------------

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        from attnmt.data import batch_indices

        return batch_indices(
            [len(ids) for ids in self.train_src], [len(ids) for ids in self.train_tgt],
            max_tokens=self.config.data.max_tokens, shuffle=True, seed=self.config.training.seed,
            epoch=epoch, rank=self.context.rank, world_size=self.context.world_size,
        )

    def _lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _limit_reached(self) -> str | None:
        training, state = self.config.training, self.state
        if training.max_steps is not None and state.step >= training.max_steps:
            return f"max_steps={training.max_steps} reached"
        if training.max_minutes is not None and state.elapsed_seconds >= 60 * training.max_minutes:
            return f"max_minutes={training.max_minutes:g} reached"
        return None

    def _log_window(self) -> None:
        state = self.state
        if state.window_steps == 0:
            return
        loss = state.window_loss / max(state.window_tokens, 1)
        nll = state.window_nll / max(state.window_tokens, 1)
        self._record({
            "type": "train",
            "step": state.step,
            "epoch": state.epoch + 1,
            "loss": loss,
            "nll": nll,
            "ppl": _ppl(nll),
            "lr": self._lr(),
            "grad_norm": state.window_grad_norm / state.window_steps,
            "tokens_per_s": state.window_tokens / max(state.window_seconds, 1e-9),
            "elapsed": state.elapsed_seconds,
            **({"guide": state.window_guide / max(state.window_tokens, 1)} if self.guide is not None else {}),
        })
        state.window_loss = state.window_nll = state.window_tokens = state.window_guide = 0.0
        state.window_steps = 0
        state.window_seconds = state.window_grad_norm = 0.0

    def _evaluate(self, at_epoch_end: bool) -> None:
        """Validate; update best.pt; at epoch ends also the lr schedule and early stopping."""
        state = self.state
        started = time.perf_counter()
        epoch_label = state.epoch if at_epoch_end else state.epoch + 1
        record = self._validate(epoch_label)
        state.elapsed_seconds += time.perf_counter() - started
        state.last_eval_step = state.step
        val_loss = record["val_loss"]
        improved = val_loss < state.best_val_loss
        train_loss = state.epoch_loss / max(state.epoch_tokens, 1)
        train_nll = state.epoch_nll / max(state.epoch_tokens, 1)
        full = {
            "type": "epoch" if at_epoch_end else "valid",
            "step": state.step,
            "epoch": epoch_label,
            "loss": train_loss,
            "ppl": _ppl(train_nll),
            **record,
            "lr": self._lr(),
            "tokens_per_s": state.epoch_tokens / max(state.epoch_seconds, 1e-9),
            "elapsed": state.elapsed_seconds,
            "best": improved,
        }
        if improved:
            state.best_val_loss = val_loss
            state.best_step = state.step
            state.best_epoch = epoch_label
            state.best_val_bleu = record["val_bleu"]
        if at_epoch_end:
            # Only epoch-end validations drive the schedule, so a run stopped by a step or time
            # limit and resumed later continues exactly as if it had never been stopped.
            if val_loss < state.plateau_best:
                state.plateau_best = val_loss
                state.evals_without_improvement = 0
            else:
                state.evals_without_improvement += 1
            self.scheduler.on_validation(val_loss)
        self._record(full)
        bleu = f", val BLEU {record['val_bleu']:.2f}" if record["val_bleu"] is not None else ""
        self._say(
            f"{'epoch' if at_epoch_end else 'step'} {epoch_label if at_epoch_end else state.step}: "
            f"train loss {train_loss:.4f} | val loss {val_loss:.4f}, val ppl {record['val_ppl']:.2f}{bleu}"
            f" | lr {self._lr():.2e}{' | best so far' if improved else ''}"
        )
        if improved:
            self._save_best()

    def run(self) -> TrainResult:
        import torch

        self._setup()
        ctx, training, state = self.context, self.config.training, self.state
        state.stop_reason = None
        bar = None
        try:
            while state.stop_reason is None:
                if training.early_stopping_patience is not None and \
                        state.evals_without_improvement >= training.early_stopping_patience:
                    state.stop_reason = (
                        f"early stopping: no better validation loss in {training.early_stopping_patience} evaluations"
                    )
                    break
                if state.epoch >= training.max_epochs:
                    state.stop_reason = f"max_epochs={training.max_epochs} reached"
                    break
                epoch_batches = self._epoch_batches(state.epoch)
                if ctx.is_main and self.show_progress:
                    from tqdm.auto import tqdm

                    bar = tqdm(
                        total=len(epoch_batches), initial=state.batch_in_epoch, unit="batch", dynamic_ncols=True,
                        desc=f"epoch {state.epoch + 1}/{training.max_epochs}", file=sys.stderr, leave=False,
                    )
                while state.batch_in_epoch < len(epoch_batches):
                    # Rank 0 decides about the limits (its clock is the one that counts); the
                    # others learn the decision with the token count, so all ranks stop together.
                    reason = self._limit_reached() if ctx.is_main else None
                    batch = self._collate(epoch_batches[state.batch_in_epoch])
                    started = time.perf_counter()
                    global_tokens, stop_votes = ctx.all_reduce_sum(
                        [batch.num_tgt_tokens, 1.0 if reason is not None else 0.0]
                    )
                    if stop_votes > 0:
                        state.stop_reason = ctx.broadcast_object(reason)
                        break
                    self.optimizer.zero_grad(set_to_none=True)
                    self.scheduler.set_step(state.step + 1)
                    stats = backward_on_batch(
                        self.ddp_model, batch, training.label_smoothing, global_tokens, ctx.world_size, training.precision,
                        self._guide_batch(batch),
                    )
                    grad_norm = (
                        float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), training.clip_norm))
                        if training.clip_norm is not None else _grad_norm(self.model)
                    )
                    self.optimizer.step()
                    loss_sum, nll_sum, guide_sum = ctx.all_reduce_sum([stats.loss_sum, stats.nll_sum, stats.guide_sum])
                    seconds = time.perf_counter() - started

                    state.step += 1
                    state.batch_in_epoch += 1
                    state.elapsed_seconds += seconds
                    state.window_loss += loss_sum
                    state.window_nll += nll_sum
                    state.window_tokens += global_tokens
                    state.window_steps += 1
                    state.window_seconds += seconds
                    state.window_grad_norm += grad_norm
                    state.window_guide += guide_sum
                    state.epoch_loss += loss_sum
                    state.epoch_nll += nll_sum
                    state.epoch_tokens += global_tokens
                    state.epoch_seconds += seconds
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(
                            loss=f"{loss_sum / global_tokens:.3f}",
                            tok_s=f"{state.epoch_tokens / max(state.epoch_seconds, 1e-9):,.0f}",
                            lr=f"{self._lr():.1e}",
                            refresh=False,
                        )
                    if state.step % training.log_every == 0:
                        self._log_window()
                    if state.step % training.checkpoint_every == 0:
                        self._save_last()
                if bar is not None:
                    bar.close()
                    bar = None
                if state.stop_reason is not None:
                    break
                # ---- end of epoch
                self._log_window()
                state.epoch += 1
                state.batch_in_epoch = 0
                if state.epoch % training.eval_every == 0 or state.epoch >= training.max_epochs:
                    self._evaluate(at_epoch_end=True)
                state.epoch_loss = state.epoch_nll = state.epoch_tokens = state.epoch_seconds = 0.0
                self._save_last()
        finally:
            if bar is not None:
                bar.close()

        if state.last_eval_step != state.step and state.step > 0:
            self._log_window()
            self._evaluate(at_epoch_end=False)
        result = TrainResult(
            run_dir=self.run_dir,
            step=state.step,
            epoch=state.epoch,
            stop_reason=state.stop_reason or "finished",
            best_val_loss=state.best_val_loss,
            best_val_ppl=_ppl(state.best_val_loss),
            best_val_bleu=state.best_val_bleu,
            best_step=state.best_step,
            best_epoch=state.best_epoch,
            elapsed_seconds=state.elapsed_seconds,
            history=self.history,
        )
        if self._last_saved != self._position():
            self._save_last()
        if ctx.is_main:
            summary = {
                "type": "summary",
                "step": state.step,
                "epoch": state.epoch,
                "stop_reason": result.stop_reason,
                "best_val_loss": result.best_val_loss if math.isfinite(result.best_val_loss) else None,
                "best_val_ppl": result.best_val_ppl if math.isfinite(result.best_val_loss) else None,
                "best_val_bleu": result.best_val_bleu,
                "best_step": result.best_step,
                "best_epoch": result.best_epoch,
                "elapsed": state.elapsed_seconds,
            }
            # The summary goes to the file only, not into the history a checkpoint resumes from.
            with open(self.run_dir / METRICS, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(summary) + "\n")
        return result

    def _guide_batch(self, batch) -> GuideBatch | None:
        if self.guide is None:
            return None
        layer, head = self.guide_position
        target = self.guide.target(batch.indices, batch.tgt_in.shape[1], batch.src.shape[1])
        return GuideBatch(target, self.config.training.guide_weight, layer, head)

    def _collate(self, indices: list[int]):
        from attnmt.data import collate

        return collate(self.train_src, self.train_tgt, indices)


def _grad_norm(model) -> float:
    import torch

    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def train(
    config: RunConfig,
    run_dir: str | Path,
    resume: bool = False,
    show_progress: bool = True,
    verbose: bool = True,
) -> TrainResult:
    """Train ``config`` into ``run_dir`` in this process (joining a torchrun group when there is one)."""
    context = init_distributed()
    trainer = Trainer(config, run_dir, resume=resume, show_progress=show_progress, context=context, verbose=verbose)
    return trainer.run()
