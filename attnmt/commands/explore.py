"""Numeric demonstrations of what single-query scaled dot-product attention can compute
(Vaswani et al. 2017): copying one value, averaging two, how noisy keys break the single-head average,
and how two heads repair it. Each demo prints the question, a table of numbers and a conclusion
drawn from them; --plot DIR also writes DIR/copy.png, average.png, noisy.png and multihead.png
(one PNG per demo run)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnmt.commands.options import seed_value

DEMOS = ("copy", "average", "noisy", "multihead")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "demo",
        nargs="?",
        default="all",
        choices=(*DEMOS, "all"),
        help="which demonstration to run (default: all)",
    )
    parser.add_argument(
        "--plot",
        metavar="DIR",
        type=Path,
        help="also write one PNG per demo into DIR (created if missing; <demo>.png is replaced)",
    )
    parser.add_argument("--seed", type=seed_value, default=0,
                        help="seed of keys, values and noise, from 0 to 2**63 - 1 (default 0)")
    parser.add_argument(
        "--samples", type=int, default=1000, help="resamplings of the key noise per β (default 1000)"
    )
    parser.add_argument("--dim", type=int, default=64, help="dimension d of queries and keys (default 64)")
    parser.add_argument("--keys", type=int, default=8, help="number m of keys (default 8)")


def _check_options(args: argparse.Namespace, demos: tuple[str, ...]) -> None:
    from attnmt.errors import ConfigError
    from attnmt.runtime.memory import available_ram
    from attnmt.runtime.outputs import check_writable_folder

    if args.keys < 2:
        raise ConfigError(f"--keys must be at least 2 (two keys to choose between), got {args.keys}")
    if args.dim < 1:
        raise ConfigError(f"--dim must be at least 1, got {args.dim}")
    if args.dim < args.keys and set(demos) & {"average", "noisy", "multihead"}:
        raise ConfigError(
            f"--dim {args.dim} is smaller than --keys {args.keys}: the average, noisy and multihead "
            f"demos need {args.keys} orthogonal keys, so --dim must be at least {args.keys}"
        )
    if args.samples < 2:
        raise ConfigError(f"--samples must be at least 2 to measure a spread, got {args.samples}")
    # float64 keys, values and their projections (m × d each, a few copies) and the noise (N × m)
    needed = 8 * (8 * args.keys * args.dim + 4 * args.samples * args.keys)
    available = available_ram()
    if available is not None and needed > available // 2:
        raise ConfigError(f"--dim {args.dim} --keys {args.keys} --samples {args.samples} need about "
                          f"{needed / 2**30:.1f} GiB, more than half of the {available / 2**30:.1f} GiB free; "
                          "choose smaller sizes")
    if args.plot is not None and args.plot.exists() and not args.plot.is_dir():
        raise ConfigError(f"--plot {args.plot} exists and is not a directory")
    if args.plot is not None:
        check_writable_folder(args.plot, f"--plot {args.plot}")


def run(args: argparse.Namespace) -> int:
    from attnmt import explore

    demos = DEMOS if args.demo == "all" else (args.demo,)
    _check_options(args, demos)
    if args.plot is not None:
        args.plot.mkdir(parents=True, exist_ok=True)

    sizes = dict(num_keys=args.keys, dim=args.dim, seed=args.seed)
    noisy_sizes = dict(sizes, samples=args.samples)
    runners: dict[str, tuple[Callable[[], Any], Callable[[Any, Path], Any]]] = {
        "copy": (lambda: explore.copy_demo(**sizes), explore.plot_copy),
        "average": (lambda: explore.average_demo(**sizes), explore.plot_average),
        "noisy": (lambda: explore.noisy_demo(**noisy_sizes), explore.plot_noisy),
        "multihead": (lambda: explore.multihead_demo(**noisy_sizes), explore.plot_multihead),
    }
    written: list[str] = []
    for position, name in enumerate(demos):
        compute, plot = runners[name]
        result = compute()
        if position:
            print()
        print(result.report())
        if args.plot is not None:
            path = args.plot / f"{name}.png"
            replaced = path.exists()
            plot(result, path)
            written.append(f"{path}{' (replaced)' if replaced else ''}")
    if written:
        print()
        print("wrote " + ", ".join(written))
    return 0
