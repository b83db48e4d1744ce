"""Check that attention mechanisms, your own or built-in, have the properties every mechanism must
have: the shapes, weights that are a distribution over the allowed positions, zero weights on a row
with none, finite numbers for huge inputs, independence of the batch and of padding, float64
gradients equal to finite differences, the all-steps form, bf16, repeatability, and the speed
against the built-in scaled_dot. A class in the course handout's form (enc_hid_dim, dec_hid_dim;
forward(hidden, encoder_outputs)) is also checked by the handout's equations: each failure names
the one it breaks. Exit status 0 when all pass, 1 when any fails, 2 when a mechanism
cannot be loaded.

  attnmt check examples/my_attention.py:MyAttention
  attnmt check my_scores.py:Cosine --model transformer --json check.json
  attnmt check scaled_dot additive local-p
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.commands.options import say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", metavar="SPEC",
                        help="path/to/file.py:ClassName, package.module:ClassName, a registered name or a "
                             "built-in name")
    parser.add_argument("--model", choices=("rnn", "transformer"), default="rnn",
                        help="rnn (default): the single-query contract, forward(query, keys, values, mask); "
                             "transformer: a score(q, k) class used in every attention layer")
    parser.add_argument("--dims", type=int, nargs=3, default=(32, 32, 24), metavar=("Q", "K", "V"),
                        help="query_dim, key_dim and value_dim it is built with (default 32 32 24); for "
                             "--model transformer the first is the size of a head")
    parser.add_argument("--heads", type=int, default=4, help="heads of the Transformer layer (default 4)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a constructor option of the mechanism, e.g. --option attention_dim=64 (repeatable)")
    parser.add_argument("--expect", choices=("scaled_dot",),
                        help="for a class in the course handout's form: check the 1/√d of scaled dot-product "
                             "attention (Eq. 1) whatever the class is called; a class whose name says ScaledDot is "
                             "checked for it anyway")
    parser.add_argument("--no-speed", action="store_true", help="skip the timing against scaled_dot")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="SECONDS",
                        help="seconds building the mechanism and each property may take; a forward that runs past "
                             "it fails, and the properties after it are not run (default 60)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --json file")


def _options(pairs: list[str]) -> dict:
    import yaml

    from attnmt.errors import ConfigError

    options = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals or not key.strip().isidentifier():
            raise ConfigError(f"--option {pair!r}: write KEY=VALUE, e.g. --option attention_dim=64")
        try:
            options[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"--option {pair!r}: {text!r} is not a value") from None
    return options


def spec_file(spec: str) -> Path | None:
    """The file a ``path/to/file.py:Class`` spec names (an input of the command), else None."""
    target, colon, _ = spec.strip().rpartition(":")
    return Path(target).expanduser() if colon and (target.endswith(".py") or "/" in target) else None


def run(args: argparse.Namespace) -> int:
    import json

    from attnmt.attention.conformance import MAX_DIM, MAX_HEADS, check_mechanism
    from attnmt.errors import ConfigError, OutputError
    from attnmt.runtime.atomic_files import write_text_atomic
    from attnmt.runtime.outputs import check_output
    from attnmt.runtime.tables import format_table

    if not all(1 <= size <= MAX_DIM for size in args.dims) or not 1 <= args.heads <= MAX_HEADS:
        raise ConfigError(f"--dims {' '.join(map(str, args.dims))} --heads {args.heads}: each size must be from 1 "
                          f"to {MAX_DIM}, the heads from 1 to {MAX_HEADS}")
    if not 0.1 <= args.time_limit <= 3600:  # NaN fails too
        raise ConfigError(f"--time-limit must be from 0.1 to 3600 seconds, got {args.time_limit}")
    if not all(spec.strip() for spec in args.specs):
        raise ConfigError("SPEC: an empty name; give path/to/file.py:ClassName or a mechanism's name")
    if args.json is not None:
        check_output(args.json, "--json", args.overwrite, [spec_file(spec) for spec in args.specs])
    options = _options(args.option)
    reports = []
    for spec in args.specs:
        say("check", f"checking {spec} ...")
        report = check_mechanism(spec, model=args.model, dims=tuple(args.dims), heads=args.heads, options=options,
                                 speed=not args.no_speed, seconds=args.time_limit, expect=args.expect)
        reports.append(report)
        rows = [[result.name, result.status, result.detail] for result in report.results]
        print(f"{report.spec} ({report.model}, {report.form} form): "
              f"{'all properties hold' if report.passed else 'FAILS'} ({report.seconds:.1f} s)")
        print(format_table(["property", "result", "counterexample / measured"], rows))
        if report.form == "handout":
            print(report.handout_verdict())
        print()
    if args.json is not None:
        try:
            write_text_atomic(args.json, json.dumps([r.to_dict() for r in reports], indent=2) + "\n")
        except OSError as error:
            raise OutputError(f"--json {args.json}: {error.strerror or error}") from None
        print(f"wrote {args.json}")
    return 0 if all(report.passed for report in reports) else 1
