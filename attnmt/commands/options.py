"""Options several commands share, declared once: where to run and in what precision."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any, Protocol

from attnmt.attribution.methods import NAMES as ATTRIBUTION_NAMES
from attnmt.attribution.methods import NOISE, SAMPLES, STEPS
from attnmt.runtime.choices import DEVICES_HELP, HEAD_ABLATIONS, PRECISIONS

#: the attribution options' names before 0.3 -> their names now (the old ones still work and warn)
OLD_ATTRIBUTION_OPTIONS = {"--saliency": "--attribution", "--saliency-samples": "--attribution-samples",
                           "--saliency-noise": "--attribution-noise", "--saliency-steps": "--attribution-steps"}


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


def add_attribution_options(parser: Options, what: str) -> None:
    """--attribution METHOD and its settings (and their names before 0.3, hidden); ``what`` says
    what the attribution is for."""
    parser.add_argument("--attribution", choices=ATTRIBUTION_NAMES, default=None, metavar="METHOD",
                        help=f"{what}: an attribution of each output word to each source word, read by "
                             f"force-decoding the output; METHOD: {', '.join(ATTRIBUTION_NAMES)} (attnmt.attribution)")
    parser.add_argument("--attribution-samples", type=int, default=SAMPLES, metavar="N",
                        help=f"SmoothGrad's noisy copies (default {SAMPLES})")
    parser.add_argument("--attribution-noise", type=float, default=NOISE, metavar="SIGMA",
                        help="SmoothGrad's noise σ, a share of the range of each sentence's source "
                             f"embeddings (default {NOISE}: 15%%)")
    parser.add_argument("--attribution-steps", type=int, default=STEPS, metavar="M",
                        help=f"integrated gradients' steps from the zero embedding (default {STEPS})")
    types: dict[str, Any] = {"--saliency": None, "--saliency-samples": int, "--saliency-noise": float,
                             "--saliency-steps": int}
    for old, kind in types.items():
        parser.add_argument(old, dest="old_" + old[2:].replace("-", "_"), default=None, help=argparse.SUPPRESS,
                            **({"choices": ATTRIBUTION_NAMES} if kind is None else {"type": kind}))


def attribution_options(args: argparse.Namespace):
    """The AttributionOptions of --attribution and its settings, or None without --attribution
    (ConfigError, in the options' words, for a setting out of range). An option's name before 0.3
    (--saliency ...) is taken for the new one, with a warning."""
    from attnmt.attribution.methods import AttributionOptions

    for old, new in OLD_ATTRIBUTION_OPTIONS.items():
        value = getattr(args, "old_" + old[2:].replace("-", "_"), None)
        if value is not None:
            warnings.warn(f"{old} is deprecated; use {new} (the old name goes in 0.4)", FutureWarning, stacklevel=2)
            setattr(args, new[2:].replace("-", "_"), value)
    if getattr(args, "attribution", None) is None:
        return None
    return AttributionOptions(args.attribution, samples=args.attribution_samples, noise=args.attribution_noise,
                              steps=args.attribution_steps, seed=getattr(args, "seed", None) or 0)


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


def add_head_mask_options(parser: Options) -> None:
    parser.add_argument("--mask-heads", default="", metavar="SPEC",
                        help="switch these attention heads off: a comma list of PART:LAYER:HEAD, PART one of "
                             "encoder_self, decoder_self, cross (an RNN's heads are cross:1:H), LAYER and HEAD from "
                             "1 or * for all, e.g. cross:2:*,encoder_self:1:3 (attnmt heads ranks them)")
    parser.add_argument("--ablation", choices=HEAD_ABLATIONS, default="zero",
                        help="what takes a switched-off head's place: zero (its bias stays; default), or its "
                             "mean output over the run's first 200 validation pairs")


def heads_off(args: argparse.Namespace, translator: Any, command: str) -> Any:
    """The block within which ``--mask-heads`` are switched off in ``translator``'s model (a block
    that changes nothing without it); the SPEC is checked now, and the heads named on stderr."""
    from pathlib import Path

    from attnmt.errors import ConfigError
    from attnmt.evaluation.heads import heads_switched_off
    from attnmt.models.head_gates import parse_heads

    spec = getattr(args, "mask_heads", "") or ""
    run = None if getattr(args, "hf", None) else getattr(args, "run_dir", None)
    run_dir = None if run is None else Path(run) if Path(run).is_dir() else Path(run).parent
    heads = parse_heads(spec, translator.attributed_model)
    if heads and args.ablation == "mean" and run_dir is None:
        raise ConfigError("--ablation mean needs a run's validation pairs; a Hugging Face model has none: use zero")
    if heads:
        say(command, f"{len(heads)} heads switched off ({args.ablation}): {', '.join(h.label() for h in heads)}")
    return heads_switched_off(translator, spec, args.ablation, run_dir)


def say(command: str, line: str) -> None:
    """A status line on stderr (stdout stays the command's output)."""
    print(f"attnmt {command}: {line}", file=sys.stderr, flush=True)
