"""Options several commands share, declared once: where to run and in what precision."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Protocol

from attnmt.runtime.choices import (
    DEVICES_HELP,
    PRECISIONS,
    SALIENCY_METHODS,
    SALIENCY_NOISE,
    SALIENCY_SAMPLES,
    SALIENCY_STEPS,
)


class Options(Protocol):
    """A parser, or a group of its options: what takes ``add_argument``."""

    def add_argument(self, *names: str, **options: Any) -> Any: ...


#: every --seed: what numpy's and torch's generators both take
MAX_SEED = 2**63 - 1


def seed_value(text: str) -> int:
    """An argparse ``type`` for a seed option: an integer from 0 to 2**63 - 1, else one line."""
    digits = text.strip().removeprefix("-").removeprefix("+")
    if len(digits) > 19:  # longer than 2**63 - 1 (and never echoed whole)
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2**63 - 1, got {len(text)} characters")
    value = int(text) if digits.isascii() and digits.isdigit() else None
    if value is None:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2**63 - 1, got {text!r}")
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2**63 - 1, got {value}")
    return value


def add_checkpoint_option(parser: Options) -> None:
    parser.add_argument("--checkpoint", default="best", choices=["best", "last", "averaged"],
                        help="which checkpoint: best (the default), last, or averaged (written by attnmt average)")


def add_device_option(parser: Options, default_from: str = "the run's search.device") -> None:
    parser.add_argument("--device", default=None, metavar="DEVICE",
                        help=f"where to run: {DEVICES_HELP}; default: {default_from}, else auto")


def add_precision_option(parser: Options) -> None:
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="bf16 or fp16: the search's matrix products in 16 bits (bf16 is faster on CPUs "
                             "with AVX512-BF16, both on GPUs; outputs can differ from fp32); default: the "
                             "run's search.precision, else fp32")


def add_hf_option(parser: Options, action: str = "store") -> None:
    parser.add_argument("--hf", metavar="MODEL", default=None, action=action,
                        help="a Hugging Face encoder-decoder translation model instead of a run: a local folder, "
                             "or a hub name such as Helsinki-NLP/opus-mt-en-fr (needs pip install 'attnmt[hf]')"
                             + ("; give it twice for both directions" if action == "append" else ""))


def add_threads_option(parser: Options) -> None:
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch threads on a CPU, fixed (default: the cores other running processes leave "
                             "free, read again before each step or batch; $OMP_NUM_THREADS fixes it too)")


def add_trust_option(parser: Options) -> None:
    parser.add_argument("--trust-run-code", action="store_true",
                        help="for a run trained with your own attention (file.py:Class): when that file has "
                             "changed or is not on this machine, run the copy the run keeps. Only for runs "
                             "you trust: the copy is Python code")


def add_saliency_options(parser: Options, what: str) -> None:
    """--saliency METHOD and its settings; ``what`` says what the saliency is for."""
    parser.add_argument("--saliency", choices=SALIENCY_METHODS, default=None, metavar="METHOD",
                        help=f"{what}: gradient saliency of each output word on each source word, read by "
                             f"force-decoding the output; METHOD: {', '.join(SALIENCY_METHODS)} (gradient × "
                             "input, SmoothGrad, integrated gradients)")
    parser.add_argument("--saliency-samples", type=int, default=SALIENCY_SAMPLES, metavar="N",
                        help=f"SmoothGrad's noisy copies (default {SALIENCY_SAMPLES})")
    parser.add_argument("--saliency-noise", type=float, default=SALIENCY_NOISE, metavar="SIGMA",
                        help="SmoothGrad's noise σ, a share of the range of each sentence's source "
                             f"embeddings (default {SALIENCY_NOISE}: 15%%)")
    parser.add_argument("--saliency-steps", type=int, default=SALIENCY_STEPS, metavar="M",
                        help=f"integrated gradients' steps from the zero embedding (default {SALIENCY_STEPS})")


def saliency_options(args: argparse.Namespace):
    """The SaliencyOptions of --saliency and its settings, or None without --saliency (ConfigError,
    in the options' words, for a setting out of range)."""
    from attnmt.models.saliency import SaliencyOptions

    if getattr(args, "saliency", None) is None:
        return None
    return SaliencyOptions(args.saliency, samples=args.saliency_samples, noise=args.saliency_noise,
                           steps=args.saliency_steps, seed=getattr(args, "seed", None) or 0)


def load_translator(args: argparse.Namespace):
    """The translator a command reads: the run ``args.run_dir`` (its ``--checkpoint``, ``--precision``),
    or the Hugging Face model ``args.hf``, on ``--device``; ConfigError when neither or both are given."""
    from attnmt.errors import ConfigError

    hf = getattr(args, "hf", None)
    if hf is None and args.run_dir is None:
        raise ConfigError("give a RUN folder, or a Hugging Face model with --hf MODEL")
    if hf is None:
        from attnmt.decoding.translator import Translator

        return Translator.load(args.run_dir, getattr(args, "checkpoint", "best"),
                               precision=getattr(args, "precision", None), device=args.device,
                               trust_run_code=getattr(args, "trust_run_code", False),
                               num_threads=getattr(args, "threads", None))
    if getattr(args, "precision", None) not in (None, "fp32"):
        raise ConfigError("--precision: only fp32 with --hf")
    from attnmt.decoding.hf import HFTranslator

    return HFTranslator.load(hf, device=args.device or "auto")


def say(command: str, line: str) -> None:
    """A status line on stderr (stdout stays the command's output)."""
    print(f"attnmt {command}: {line}", file=sys.stderr, flush=True)
