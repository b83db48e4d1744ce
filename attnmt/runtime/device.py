"""Where a model runs: one device name for every command, resolved once, and said out loud.

Device names (``training.device``, ``search.device``, ``--device``)::

    auto      CUDA if there is a GPU, else Apple's MPS, else the CPU
    cpu       the CPU
    cuda      the current CUDA GPU (under torchrun: the rank's LOCAL_RANK GPU)
    cuda:N    GPU number N
    mps       Apple silicon's GPU

Asking for a device the machine lacks is a ConfigError (one line, exit status 2), never a silent
fall-back to the CPU. Checkpoints hold no device: they load on the CPU (``map_location``) and the
model then moves to the device, so a run moves freely between a GPU and a CPU.

TF32 (tensor-float-32 matrix products on Ampere and newer GPUs) is allowed on CUDA devices that
have it; ``describe`` says whether it is on, and training records it.
"""

from __future__ import annotations

import os
import re

import torch

from attnmt.errors import ConfigError
from attnmt.runtime.memory import available_ram
from attnmt.runtime.precision import effective_precision

__all__ = ["DEVICE_NAMES", "available_memory", "check_device_name", "describe", "enable_tf32", "local_rank",
           "memory_size",
           "resolve_device"]

DEVICE_NAMES = ("auto", "cpu", "cuda", "cuda:N", "mps")
_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check_device_name(name, key: str = "device") -> str:
    """``name`` when it is a device name (see the module doc), else ConfigError naming ``key``."""
    if not isinstance(name, str) or not _PATTERN.match(name):
        raise ConfigError(f"{key}: must be one of auto, cpu, cuda, cuda:N, mps; got {name!r}")
    return name


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def resolve_device(name: str = "auto", local_rank: int | None = None) -> torch.device:
    """The ``torch.device`` that ``name`` means on this machine.

    local_rank: under torchrun, the process's LOCAL_RANK; ``cuda`` and ``auto`` then mean that
    GPU. ConfigError when the machine lacks the device asked for.
    """
    name = check_device_name(name)
    if name == "cpu":
        return torch.device("cpu")
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif _mps_available():
            return torch.device("mps")
        else:
            return torch.device("cpu")
    if name == "mps":
        if not _mps_available():
            raise ConfigError("device mps: Apple's MPS is not available on this machine; use device=cpu or auto")
        return torch.device("mps")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device {name}: CUDA is not available on this machine (this PyTorch {torch.__version__} "
            f"{'has no CUDA support' if torch.version.cuda is None else 'finds no GPU'}); use device=cpu or auto"
        )
    count = torch.cuda.device_count()
    if name == "cuda":
        index = local_rank if local_rank is not None else torch.cuda.current_device()
    else:
        index = int(name.split(":")[1])
    if index >= count:
        raise ConfigError(f"device cuda:{index}: this machine has {count} CUDA device(s), numbered from 0")
    return torch.device("cuda", index)


def local_rank() -> int | None:
    """torchrun's LOCAL_RANK, or None outside torchrun."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.isdigit() else None


def enable_tf32(device: torch.device) -> bool:
    """Allow TF32 matrix products on a CUDA device that has them (compute capability >= 8.0);
    returns whether they are on."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 8:
        return False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return True


def available_memory(device: torch.device) -> int | None:
    """Bytes free for new tensors on ``device``: the GPU's free memory, or the CPU's available RAM
    (``MemAvailable`` of /proc/meminfo); None where it cannot be known."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    return available_ram()


def memory_size(count: int) -> str:
    """A byte count as people read it: ``64 KiB``, ``627 MiB``, ``3.5 GiB``."""
    if count >= 2**30:
        return f"{count / 2**30:.1f} GiB"
    return f"{count / 2**20:.0f} MiB" if count >= 2**20 else f"{count / 2**10:.0f} KiB"


def describe(device: torch.device, precision: str, tf32: bool = False, threads: str | None = None) -> str:
    """One line for stderr: ``device cuda:0 (NVIDIA H100), precision bf16, TF32 on``; on a CPU the
    thread count, and with ``threads`` why (``attnmt.runtime.threads.ThreadPlan.reason``)."""
    name = str(device)
    if device.type == "cuda":
        name += f" ({torch.cuda.get_device_name(device)})"
    elif device.type == "cpu":
        count = torch.get_num_threads()
        name += f" ({count} thread{'s' if count != 1 else ''}{', ' + threads if threads else ''})"
    used = effective_precision(precision, device.type)
    shown = precision if used == precision else f"fp32 (not {precision}: this CPU has no {precision} arithmetic)"
    return f"device {name}, precision {shown}" + (", TF32 on" if tf32 else "")
