"""Options several commands share, declared once: where to run and in what precision."""

from __future__ import annotations

import argparse
import sys

from attnmt.names import DEVICES_HELP, PRECISIONS


def add_device_option(parser: argparse.ArgumentParser, default_from: str = "the run's search.device") -> None:
    parser.add_argument("--device", default=None, metavar="DEVICE",
                        help=f"where to run: {DEVICES_HELP}; default: {default_from}, else auto")


def add_precision_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="bf16 or fp16: the search's matrix products in 16 bits (bf16 is faster on CPUs "
                             "with AVX512-BF16, both on GPUs; outputs can differ from fp32); default: the "
                             "run's search.precision, else fp32")


def say(command: str, line: str) -> None:
    """A status line on stderr (stdout stays the command's output)."""
    print(f"attnmt {command}: {line}", file=sys.stderr, flush=True)
