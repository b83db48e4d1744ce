"""Distributed data parallel through ``torchrun``: rank, world size and the collectives training uses.

``torchrun --nproc_per_node P -m attnmt train ...`` starts P processes: NCCL with one GPU per rank
(``LOCAL_RANK``) when training runs on CUDA, gloo on CPUs. Several machines join the torchrun way
(``--nnodes``, ``--node_rank``, ``--rdzv_endpoint``). Every rank
builds the same batch list and takes batches r, r+P, r+2P, … of it (``attnmt.data.shard``); one
step = P batches, one per rank. Each rank's loss is normalised by the *global* number of target
tokens (summed with an all-reduce before the backward pass) and multiplied by P, because
DistributedDataParallel averages the gradients: the step then equals one process's step on the
union of the P batches. Only rank 0 writes files and draws the progress bar; every decision (lr,
early stopping, time limit) is taken from all-reduced numbers so all ranks agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from attnmt.runtime.device import local_rank, resolve_device
from attnmt.runtime.threads import thread_plan

__all__ = ["DistributedContext", "init_distributed", "training_threads"]


def training_threads(configured: int | None, world_size: int) -> int:
    """Torch threads per process to start with: the config's ``num_threads``, else
    ``OMP_NUM_THREADS`` when the user set it (so ``OMP_NUM_THREADS=1 attnmt train ...`` runs two
    trainings side by side on two cores without oversubscribing them), else the cores available
    shared out among the processes (``attnmt.runtime.threads.thread_plan``, which also says whether
    the count may follow the machine)."""
    return thread_plan(configured, "training.num_threads", world_size).threads


@dataclass
class DistributedContext:
    """Rank and world size of this process; every helper is a no-op for a single process."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # where collectives' tensors live

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
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def all_reduce_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Element-wise sums over the ranks of a tensor on ``device``, without a host round trip."""
        if self.distributed:
            dist.all_reduce(tensor)
        return tensor

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.distributed:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def broadcast_object(self, obj: Any) -> Any:
        """rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def init_distributed(device_name: str = "auto") -> DistributedContext:
    """Join the process group that ``torchrun`` describes (WORLD_SIZE, RANK, LOCAL_RANK,
    MASTER_ADDR/PORT env vars): NCCL when ``device_name`` means CUDA here (the rank takes GPU
    LOCAL_RANK), gloo otherwise. Without those variables (a plain ``attnmt train``) this is a
    single process on the device ``device_name`` means.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext(device=resolve_device(device_name))
    device = resolve_device(device_name, local_rank())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistributedContext(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device)
