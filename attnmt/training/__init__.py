"""Training a translator: ``train(config, run_dir)`` or ``Trainer(config, run_dir).run()``.

Read in this order:

    builder.py       assembles data, tokenizers, batches, model, optimizer, schedule (and a resumed state)
    trainer.py       the loop: steps, validation, checkpoints, limits
    step.py          one step's forward and backward pass (the loss: attnmt.models.losses)
    schedule.py      the plateau tracker, and the learning rate it decays
    statistics.py    the position of a run and its running sums
    averaging.py     a moving average of the weights (training.ema_decay)
    randomness.py    seeding, and random states saved with a checkpoint
    distributed.py   torchrun: ranks and collectives
    tensorboard.py   metrics as TensorBoard event files (training.tensorboard)

and on top of one run, ``comparison.py``: mechanisms compared over seeds (``attnmt compare``),
each run trained and evaluated, and summarised.
"""

from attnmt.evaluation.summary import Comparison
from attnmt.training.averaging import WeightAverage
from attnmt.training.builder import TrainingParts, build_training
from attnmt.training.comparison import compare_mechanisms
from attnmt.training.distributed import (
    DistributedContext,
    init_distributed,
    training_threads,
)
from attnmt.training.schedule import LearningRateSchedule, PlateauTracker
from attnmt.training.step import GuideBatch, StepStats, backward_on_batch
from attnmt.training.trainer import Trainer, TrainResult, train

__all__ = [
    "Comparison", "compare_mechanisms", "DistributedContext", "GuideBatch", "LearningRateSchedule", "PlateauTracker",
    "StepStats", "TrainResult",
    "Trainer", "TrainingParts", "backward_on_batch", "build_training", "init_distributed", "train",
    "training_threads", "WeightAverage",
]
