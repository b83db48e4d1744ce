"""The training loop: Adam steps over token-bucketed batches, validation, checkpoints, limits.

``Trainer(config, run_dir).run()`` builds its parts (``attnmt.training.builder``) and then runs::

    until a limit or early stopping:
        for each batch of the epoch (this rank's share):
            lr ← schedule(step);  backward on the batch;  clip;  Adam step;  [weight average]
            every log_every steps: a "train" record;  every checkpoint_every steps: last.pt
                (and with keep_checkpoints, the weights into RUN/checkpoints/step-<step>.pt)
        every eval_every epochs: validate (perplexity, greedy BLEU, the on_validation hooks);
            the plateau tracker decides best.pt, lr decay and early stopping
        last.pt

**Exact resume.** The batches of epoch e are a function of (seed, e) only, and ``last.pt`` holds
the model, Adam and schedule states, the random states of every rank, the position (epoch, batch
within it, step) and the running sums. A run killed at any moment (even with SIGKILL) and continued
with ``--resume`` restarts at the batch after the checkpoint with the same random state, and so
ends with the same numbers as a run never stopped. Run-folder files: ``attnmt.runs.folder``.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from attnmt.data import Batch, batch_indices, collate, shard
from attnmt.data.corpus import ParallelCorpus
from attnmt.decoding.translator import Translator
from attnmt.errors import TrainingDiverged
from attnmt.evaluation.scores import bleu, likelihood_sums, perplexity_from_sums
from attnmt.runs.checkpoint import make_checkpoint, save_checkpoint
from attnmt.runs.folder import BEST, LAST, append_metrics, writer_lock
from attnmt.runs.run_config import RunConfig
from attnmt.runs.snapshots import prune_snapshots, snapshot_path
from attnmt.runtime.allocator import allocated_bytes, keep_freed_memory, resident_bytes
from attnmt.runtime.kernel_cache import enlarge_kernel_cache
from attnmt.runtime.precision import effective_precision
from attnmt.training.builder import TrainingParts, build_training
from attnmt.training.distributed import DistributedContext, init_distributed
from attnmt.training.randomness import capture_rng_state
from attnmt.training.statistics import RunningStatistics, perplexity_of
from attnmt.training.step import GuideBatch, StepStats, backward_on_batch
from attnmt.training.tensorboard import TensorBoardLog

__all__ = ["TrainResult", "Trainer", "ValidationHook", "optimizer_update", "train", "train_step"]

#: called on the main rank after each validation, with the translator of the weights just validated,
#: the validation corpus, the epoch's number and the run folder. Presentation is wired in this way
#: (``attnmt.visual.heatmap.draw_validation_examples`` draws heatmaps, ``attnmt.workflows`` adds
#: it): training itself draws nothing.
ValidationHook = Callable[[Translator, ParallelCorpus, int, Path], None]

BAR_EVERY = 10  # steps between updates of the progress bar's loss and tokens/s


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
    best_seconds: float | None = None  # training time to the best checkpoint
    best_tokens: int | None = None  # training target tokens to the best checkpoint
    target_tokens: int = 0  # training target tokens in all

    def summary_line(self) -> str:
        bleu_text = f", val BLEU {self.best_val_bleu:.2f}" if self.best_val_bleu is not None else ""
        reached = (f" after {self.best_seconds / 60:.1f} min and {self.best_tokens / 1e6:.2f}M target tokens"
                   if self.best_seconds is not None and self.best_tokens is not None else "")
        best = (
            f"best val loss {self.best_val_loss:.4f} (ppl {self.best_val_ppl:.2f}{bleu_text}) at step "
            f"{self.best_step}{reached}"
            if math.isfinite(self.best_val_loss) else "no validation yet"
        )
        return (
            f"{self.run_dir}: {self.step} steps, {self.epoch} epochs completed, stopped: {self.stop_reason}; "
            f"{best}; {self.elapsed_seconds / 60:.1f} min"
        )


class Trainer:
    """Trains ``config`` into ``run_dir`` (see the module docstring). Call ``run()``."""

    def __init__(  # noqa: PLR0913 (the options of `attnmt train`, each a keyword)
        self,
        config: RunConfig,
        run_dir: str | Path,
        resume: bool = False,
        show_progress: bool = True,
        context: DistributedContext | None = None,
        verbose: bool = True,
        trust_run_code: bool = False,
        named_attention: str | None = None,
        on_validation: Sequence[ValidationHook] = (),
    ):
        self.config = config
        self.on_validation = tuple(on_validation)
        self.trust_run_code = trust_run_code
        self.named_attention = named_attention
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.show_progress = show_progress
        self.context = context or DistributedContext()
        self.verbose = verbose
        self.parts: TrainingParts | None = None
        self._last_saved: tuple | None = None
        self._last_saved_step: int | None = None  # the step last.pt holds
        self._tensorboard: TensorBoardLog | None = None  # with training.tensorboard, on rank 0
        self._minutes_spent: float | None = None  # share of max_minutes at the last reading of the clock

    @property
    def model(self):
        """The model being trained (after ``run`` has built it)."""
        return self._parts.model

    @property
    def _parts(self) -> TrainingParts:
        """What ``run`` built (``build_training``)."""
        if self.parts is None:
            raise RuntimeError("Trainer: run() builds the training's parts first")
        return self.parts

    # ---- the loop -----------------------------------------------------------------------------

    def run(self) -> TrainResult:
        """Train until a limit or early stopping; rank 0 holds the run folder's writer lock meanwhile."""
        with writer_lock(self.run_dir, "train") if self.context.is_main else nullcontext():
            return self._run()

    def _run(self) -> TrainResult:  # noqa: C901 (the training loop, kept whole so that it reads in one place)
        if self.config.training.tensorboard and self.context.is_main:
            TensorBoardLog.check_available()  # before minutes of preparation, not after
        allocator, kernels = keep_freed_memory(), enlarge_kernel_cache()  # before the model's first kernel
        parts = self.parts = build_training(self.config, self.run_dir, self.resume, self.context, self._say,
                                            self.trust_run_code, self.named_attention)
        if parts.threads is not None:
            parts.threads.on_change = lambda threads, reason: self._say(f"step {parts.progress.step}: now {reason}")
        self._say(allocator.describe())
        self._say(kernels.describe())
        if self.config.training.tensorboard and self.context.is_main:
            self._tensorboard = TensorBoardLog(self.run_dir)
        training, progress, plateau = self.config.training, parts.progress, parts.plateau
        if parts.resumed:
            self._last_saved, self._last_saved_step = progress.position(), progress.step
            if self.context.is_main:  # kept weights of steps after last.pt's are trained again
                prune_snapshots(self.run_dir, keep=None, after_step=progress.step)
        progress.stop_reason = None
        while progress.stop_reason is None:
            if training.early_stopping_patience is not None and plateau.stale >= training.early_stopping_patience:
                progress.stop_reason = (
                    f"early stopping: no better validation loss in {training.early_stopping_patience} evaluations"
                )
            elif progress.epoch >= training.max_epochs:
                progress.stop_reason = f"max_epochs={training.max_epochs} reached"
            elif self._train_epoch():  # False when a limit stopped it mid-epoch
                self._log_window()
                progress.epoch += 1
                progress.batch_in_epoch = 0
                if progress.epoch % training.eval_every == 0 or progress.epoch >= training.max_epochs:
                    self._validate_and_decide(at_epoch_end=True)
                parts.epoch_sums = RunningStatistics()
                self._save_last()
        if progress.last_eval_step != progress.step and progress.step > 0:
            self._log_window()
            self._validate_and_decide(at_epoch_end=False)
        if self._last_saved != progress.position():
            self._save_last()
        self.context.barrier()  # no rank leaves (and closes its connections) while another still talks to it
        if self._tensorboard is not None:
            self._tensorboard.close()
        return self._finish()

    def _train_epoch(self) -> bool:
        """This rank's batches of the current epoch from ``batch_in_epoch`` on; False when a step or
        time limit stopped it (``progress.stop_reason`` says which)."""
        parts, progress, training, context = self._parts, self._parts.progress, self.config.training, self.context
        if parts.segmentations is not None:  # subword sampling: this epoch's segmentation, a function of (seed, epoch)
            parts.train_src, parts.train_tgt = parts.segmentations.epoch(progress.epoch)
        all_batches = batch_indices(
            [len(ids) for ids in parts.train_src], [len(ids) for ids in parts.train_tgt],
            max_tokens=self.config.data.max_tokens, shuffle=True, seed=training.seed, epoch=progress.epoch,
            pad_multiple=self.config.data.pad_multiple, row_ladder=self.config.data.row_ladder,
        )
        epoch_batches = shard(all_batches, context.rank, context.world_size)
        # Every rank knows every rank's batches, so the global token count of each step (which
        # normalises the loss) needs no communication: len(target) + 1 (EOS) per pair.
        shares = [shard(all_batches, rank, context.world_size) for rank in range(context.world_size)]
        global_tokens = [sum(len(parts.train_tgt[k]) + 1 for share in shares for k in share[step])
                         for step in range(len(epoch_batches))]
        bar = None
        if self.context.is_main and self.show_progress:
            bar = tqdm(
                total=len(epoch_batches), initial=progress.batch_in_epoch, unit="batch", dynamic_ncols=True,
                desc=f"epoch {progress.epoch + 1}/{training.max_epochs}", file=sys.stderr, leave=False,
            )
        pin = parts.device.type == "cuda"
        try:
            while progress.batch_in_epoch < len(epoch_batches):
                batch = collate(parts.train_src, parts.train_tgt, epoch_batches[progress.batch_in_epoch],
                                self.config.data.pad_multiple, self.config.data.token_ladder)
                batch = (batch.pin_memory() if pin else batch).to(parts.device, non_blocking=pin)
                self._step(batch, global_tokens[progress.batch_in_epoch])
                if progress.stop_reason is not None:
                    return False
                if bar is not None:
                    bar.update(1)
                    if progress.step % BAR_EVERY == 0:  # reads the device's sums back: not every step
                        window = parts.window
                        bar.set_postfix(loss=f"{window.per_token(window.loss):.3f}",
                                        tok_s=f"{window.tokens_per_second:,.0f}", lr=f"{self._lr():.1e}", refresh=False)
                if progress.step % training.log_every == 0:
                    self._log_window()
                if progress.step % training.checkpoint_every == 0:
                    self._save_last()
                    self._keep_snapshot()
        finally:
            if bar is not None:
                bar.close()
        return True

    def _step(self, batch, global_tokens: int) -> None:
        """One optimizer step on this rank's ``batch`` (on the device; ``global_tokens`` target
        tokens in the batches of all ranks), or, when a limit is reached, none and
        ``progress.stop_reason`` set. The step's sums stay on the device: nothing here waits for it."""
        parts, progress, context = self._parts, self._parts.progress, self.context
        progress.stop_reason = self._limit_reached()
        if progress.stop_reason is not None:
            return
        if parts.threads is not None:
            parts.threads.before()
        started = time.perf_counter()
        parts.schedule.set_step(progress.step + 1, self._budget_spent())
        stats, grad_norm = train_step(parts, batch, global_tokens, self._guide_batch(batch))
        sums = context.all_reduce_tensor(torch.stack([
            stats.loss_sum.double(), stats.nll_sum.double(),
            torch.as_tensor(stats.guide_sum, dtype=torch.float64, device=parts.device),
        ]))
        seconds = time.perf_counter() - started
        progress.step += 1
        progress.batch_in_epoch += 1
        progress.elapsed_seconds += seconds
        progress.target_tokens += global_tokens
        for running in (parts.window, parts.epoch_sums):
            running.update(sums[0], sums[1], sums[2], global_tokens, seconds, grad_norm.double())

    def _guide_batch(self, batch) -> GuideBatch | None:
        parts = self._parts
        if parts.guide is None or parts.guide_position is None:
            return None
        layer, head = parts.guide_position
        target = parts.guide.target(batch.indices, batch.tgt_in.shape[1], batch.src.shape[1]).to(parts.device)
        return GuideBatch(target, self.config.training.guide_weight, layer, head)

    def _limit_reached(self) -> str | None:
        """The limit that stops training before the next step, if any. Every rank counts the same
        steps; the clock that counts is rank 0's, so with several processes it is put to a vote (one
        all-reduce), and only every ``log_every`` steps, so that ranks do not wait on each other's
        host at every step (a time limit can then stop up to log_every − 1 steps late)."""
        training, progress, context = self.config.training, self._parts.progress, self.context
        if training.max_steps is not None and progress.step >= training.max_steps:
            return f"max_steps={training.max_steps} reached"
        if training.max_minutes is None:
            return None
        if context.distributed and self._minutes_spent is not None and progress.step % training.log_every != 0:
            return None
        # Rank 0's clock: whether it is late, and the share of the time budget spent (cosine, warmdown).
        spent = progress.elapsed_seconds / (60 * training.max_minutes) if context.is_main else 0.0
        if context.distributed:
            spent = context.all_reduce_sum([spent])[0]
        self._minutes_spent = spent
        return f"max_minutes={training.max_minutes:g} reached" if spent >= 1.0 else None

    def _budget_spent(self) -> float:
        """The share of the training budget used so far (``lr_schedule: cosine`` or ``warmdown``): the
        larger of step / max_steps and the share of max_minutes at the last reading of the clock."""
        training, progress = self.config.training, self._parts.progress
        spent = progress.step / training.max_steps if training.max_steps is not None else 0.0
        return max(spent, self._minutes_spent or 0.0)

    def _lr(self) -> float:
        return float(self._parts.optimizer.param_groups[0]["lr"])

    # ---- validation ---------------------------------------------------------------------------

    def _validate_and_decide(self, at_epoch_end: bool) -> None:
        """Validate; the plateau tracker decides best.pt and, at epoch ends, lr decay and early stopping."""
        with self._validated_weights():
            self._validate_and_decide_with(at_epoch_end)

    def _validated_weights(self) -> AbstractContextManager[None]:
        """The weights validation and best.pt use: the average (training.ema_decay), else the model's own."""
        average = self._parts.average
        return average.applied() if average is not None else nullcontext()

    def _validate_and_decide_with(self, at_epoch_end: bool) -> None:
        parts, progress = self._parts, self._parts.progress
        started = time.perf_counter()
        epoch_label = progress.epoch if at_epoch_end else progress.epoch + 1
        record = self._validate(epoch_label)
        validation_seconds = time.perf_counter() - started
        progress.elapsed_seconds += validation_seconds
        progress.last_eval_step = progress.step
        val_loss = record["val_loss"]
        self._check_finite("the validation loss", val_loss)
        improved = parts.plateau.update(val_loss, progress.step, epoch_label, record["val_bleu"], at_epoch_end,
                                        progress.elapsed_seconds, progress.target_tokens)
        if at_epoch_end:
            parts.schedule.on_plateau(parts.plateau.stale)
        sums = parts.epoch_sums
        train_loss = sums.per_token(sums.loss)
        self._record({
            "type": "epoch" if at_epoch_end else "valid",
            "step": progress.step,
            "epoch": epoch_label,
            "loss": train_loss,
            "ppl": perplexity_of(sums.per_token(sums.nll)),
            **record,
            "lr": self._lr(),
            "tokens_per_s": sums.tokens_per_second,
            "elapsed": progress.elapsed_seconds,
            "val_seconds": round(validation_seconds, 3),  # inside the training budget, as max_minutes counts it
            "best": improved,
        })
        bleu_text = f", val BLEU {record['val_bleu']:.2f}" if record["val_bleu"] is not None else ""
        self._say(
            f"{'epoch' if at_epoch_end else 'step'} {epoch_label if at_epoch_end else progress.step}: "
            f"train loss {train_loss:.4f} | val loss {val_loss:.4f}, val ppl {record['val_ppl']:.2f}{bleu_text}"
            f" | lr {self._lr():.2e}{' | best so far' if improved else ''}"
        )
        if improved and self.context.is_main:
            self._check_finite("a weight")
            save_checkpoint(self._checkpoint(with_training_state=False), self.run_dir / BEST)

    def _validate(self, epoch_label: int) -> dict[str, Any]:
        """Validation loss/perplexity (all ranks), greedy BLEU and the ``on_validation`` hooks (rank 0)."""
        parts, context, training = self._parts, self.context, self.config.training
        nll_sum, tokens = likelihood_sums(parts.model, parts.valid_batches[context.rank :: context.world_size])
        nll_sum, total_tokens = context.all_reduce_sum([nll_sum, tokens])
        result = perplexity_from_sums(nll_sum, int(total_tokens))
        record: dict[str, Any] = {"val_loss": result.loss, "val_ppl": result.perplexity, "val_bleu": None}
        limit, corpus = training.bleu_max_sentences, parts.valid_corpus
        if context.is_main and (limit is None or limit > 0 or self.on_validation):
            translator = Translator(parts.model, parts.tokenizers, run_config=self.config)
            if limit is None or limit > 0:
                count = len(corpus) if limit is None else min(limit, len(corpus))
                outputs = translator.translate(corpus.src[:count], beam=1)
                record["val_bleu"], _ = bleu([t.output for t in outputs], corpus.tgt[:count])
                record["bleu_sentences"] = count
            for hook in self.on_validation:
                hook(translator, corpus, epoch_label, self.run_dir)
        record["val_bleu"] = context.broadcast_object(record["val_bleu"])
        return record

    # ---- records and checkpoints --------------------------------------------------------------

    def _say(self, message: str) -> None:
        if self.context.is_main and self.verbose:
            tqdm.write(message, file=sys.stderr)

    def _record(self, record: dict[str, Any]) -> None:
        """Append a metrics record to the history and, on rank 0, to metrics.jsonl."""
        self._parts.history.append(record)
        if self.context.is_main:
            append_metrics(self.run_dir, record)
        if self._tensorboard is not None:
            self._tensorboard.add(record)

    def _log_window(self) -> None:
        """A "train" record of the steps since the last one (none when there were none)."""
        parts, progress = self._parts, self._parts.progress
        window = parts.window
        if window.steps == 0:
            return
        nll = window.per_token(window.nll)
        self._check_finite("the training loss", window.per_token(window.loss))
        resident, allocated = resident_bytes(), allocated_bytes()
        record = {
            "type": "train",
            "step": progress.step,
            "epoch": progress.epoch + 1,
            "loss": window.per_token(window.loss),
            "nll": nll,
            "ppl": perplexity_of(nll),
            "lr": self._lr(),
            "grad_norm": float(window.grad_norm) / window.steps,
            "tokens_per_s": window.tokens_per_second,
            "elapsed": progress.elapsed_seconds,
            **({"guide": window.per_token(window.guide)} if parts.guide is not None else {}),
            "device": str(parts.device),
            "precision": effective_precision(self.config.training.precision, parts.device.type),  # what ran
            "tf32": parts.tf32,
            "threads": torch.get_num_threads(),
            **({"resident_gib": round(resident / 2**30, 3)} if resident is not None else {}),
            **({"allocated_gib": round(allocated / 2**30, 3)} if allocated is not None else {}),
        }
        self._record(record)
        parts.window = RunningStatistics()

    def _checkpoint(self, with_training_state: bool, rng_states: list | None = None) -> dict:
        parts = self._parts
        progress = {
            **parts.progress.state_dict(), "plateau": parts.plateau.state_dict(),
            "window": parts.window.state_dict(), "epoch_sums": parts.epoch_sums.state_dict(),
        }
        extra: dict[str, Any] = {"progress": progress, "history": list(parts.history)}
        if parts.attention_code is not None:
            extra["attention_code"] = parts.attention_code.to_dict()
        model_state = parts.model.state_dict()
        if with_training_state:
            extra.update(optimizer=parts.optimizer.state_dict(), scheduler=parts.schedule.state_dict(), rng=rng_states)
            if parts.scaler.is_enabled():
                extra["scaler"] = parts.scaler.state_dict()
            if parts.average is not None:  # readers get the average; --resume takes the trained weights back
                extra["weight_average"] = parts.average.training_state()
                with parts.average.applied():
                    model_state = {name: value.clone() for name, value in parts.model.state_dict().items()}
        return make_checkpoint(
            config=self.config.to_dict(), model_state=model_state,
            tokenizers=parts.tokenizers.state_dict(),
            **extra,
        )

    def _save_last(self) -> None:
        window = self._parts.window
        if window.steps:
            self._check_finite("the training loss", window.per_token(window.loss))
        self._check_finite("a weight")
        rng_states = self.context.all_gather_object(capture_rng_state())  # collective: every rank
        if self.context.is_main:
            save_checkpoint(self._checkpoint(with_training_state=True, rng_states=rng_states), self.run_dir / LAST)
        self._last_saved = self._parts.progress.position()
        self._last_saved_step = self._parts.progress.step

    def _keep_snapshot(self) -> None:
        """training.keep_checkpoints: the weights being trained (θ, not the moving average) into
        RUN/checkpoints/, and only the newest keep_checkpoints of them kept (attnmt.runs.snapshots)."""
        keep = self.config.training.keep_checkpoints
        if keep == 0 or not self.context.is_main:
            return
        path = snapshot_path(self.run_dir, self._parts.progress.step)
        save_checkpoint(self._checkpoint(with_training_state=False), path)
        prune_snapshots(self.run_dir, keep)

    def _check_finite(self, what: str, value: float | None = None) -> None:
        """TrainingDiverged (one line) when ``value`` (None: every weight) is not finite: nothing more
        is trained or written, and last.pt keeps the last step whose weights were finite. A step
        that fp16 skipped for an overflowing gradient changed no weight, so it passes."""
        if value is None:
            weights = [parameter.detach() for parameter in self._parts.model.parameters()]
            value = float(torch.stack(torch._foreach_norm(weights)).sum()) if weights else 0.0
        if math.isfinite(value):
            return
        last = self.run_dir / LAST
        kept = (f"{last} keeps step {self._last_saved_step}, the last checkpoint" if self._last_saved_step is not None
                else "no checkpoint was written")
        raise TrainingDiverged(
            f"step {self._parts.progress.step}: {what} is {value} (not finite), so training stopped; {kept}. "
            "A mechanism that gives NaN (attnmt check tells), or too high a training.lr"
        )

    def _finish(self) -> TrainResult:
        """The result, and the final "summary" record (in metrics.jsonl only: not in the history a
        checkpoint resumes from)."""
        progress, plateau = self._parts.progress, self._parts.plateau
        result = TrainResult(
            run_dir=self.run_dir, step=progress.step, epoch=progress.epoch,
            stop_reason=progress.stop_reason or "finished", best_val_loss=plateau.best_loss,
            best_val_ppl=perplexity_of(plateau.best_loss), best_val_bleu=plateau.best_bleu,
            best_step=plateau.best_step, best_epoch=plateau.best_epoch,
            elapsed_seconds=progress.elapsed_seconds, history=self._parts.history,
            best_seconds=plateau.best_seconds, best_tokens=plateau.best_tokens, target_tokens=progress.target_tokens,
        )
        if self.context.is_main:
            validated = math.isfinite(result.best_val_loss)
            append_metrics(self.run_dir, {
                "type": "summary", "step": progress.step, "epoch": progress.epoch, "stop_reason": result.stop_reason,
                "best_val_loss": result.best_val_loss if validated else None,
                "best_val_ppl": result.best_val_ppl if validated else None,
                "best_val_bleu": result.best_val_bleu, "best_step": result.best_step,
                "best_epoch": result.best_epoch, "elapsed": progress.elapsed_seconds,
                "best_elapsed": result.best_seconds, "best_target_tokens": result.best_tokens,
                "target_tokens": result.target_tokens,
            })
        return result


def train_step(parts: TrainingParts, batch: Batch, global_tokens: int,
               guide: GuideBatch | None = None) -> tuple[StepStats, torch.Tensor]:
    """One optimizer step as the trainer takes it, at the learning rate ``parts.schedule`` has set:
    the gradients of the batch's loss (``backward_on_batch``; ``global_tokens`` target tokens in the
    batches of all ranks), unscaled (fp16), clipped to ``training.clip_norm``, Adam's update through
    the scaler (fp16 skips a step whose gradients overflowed), then the moving average of the
    weights. Returns the step's sums and the gradient norm before clipping. The benchmarks that
    time a training step call this too."""
    training = parts.config.training
    parts.optimizer.zero_grad(set_to_none=True)
    stats = backward_on_batch(parts.ddp_model, batch, training.label_smoothing, global_tokens,
                              parts.context.world_size, training.precision, guide, parts.scaler,
                              training.rdrop_weight)
    return stats, optimizer_update(parts)


def optimizer_update(parts: TrainingParts) -> torch.Tensor:
    """The update after the backward pass: unscale (fp16), clip to ``training.clip_norm``, Adam
    through the scaler, the moving average. Returns the gradient norm before clipping."""
    clip_norm = parts.config.training.clip_norm
    parts.scaler.unscale_(parts.optimizer)  # fp16: true gradients before clipping (else a no-op)
    grad_norm = (torch.nn.utils.clip_grad_norm_(parts.model.parameters(), clip_norm)
                 if clip_norm is not None else _grad_norm(parts.model))
    parts.scaler.step(parts.optimizer)  # optimizer.step(), which fp16 skips when a gradient overflowed
    parts.scaler.update()
    if parts.average is not None:
        parts.average.update()
    return grad_norm


def _grad_norm(model) -> torch.Tensor:
    """The global gradient norm (what clipping would measure), as a tensor on the model's device."""
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    if not norms:
        return torch.zeros((), device=next(model.parameters()).device)
    return torch.linalg.vector_norm(torch.stack(norms))


def train(
    config: RunConfig,
    run_dir: str | Path,
    resume: bool = False,
    show_progress: bool = True,
    verbose: bool = True,
    trust_run_code: bool = False,
    named_attention: str | None = None,
    on_validation: Sequence[ValidationHook] = (),
) -> TrainResult:
    """Train ``config`` into ``run_dir`` in this process (joining a torchrun group when there is one).

    Resuming a run trained with a user's attention runs the code it keeps with consent:
    ``trust_run_code``, code this user trained with on this machine, or ``named_attention`` (the
    spec the user names now, whose file must hold that code). ``on_validation``: see
    ``ValidationHook`` (``attnmt.train`` adds the example heatmaps of ``training.examples``)."""
    context = init_distributed(config.training.device)
    return Trainer(config, run_dir, resume=resume, show_progress=show_progress, context=context, verbose=verbose,
                   trust_run_code=trust_run_code, named_attention=named_attention, on_validation=on_validation).run()
