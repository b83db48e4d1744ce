"""Train a translator from a YAML config into a run folder.

Trains tokenizers on the training split, then the model with Adam, gradient clipping, lr decay
on a validation-loss plateau, label smoothing and early stopping; writes best.pt (lowest
validation loss) and last.pt, metrics.jsonl and attention heatmaps of validation sentences per
epoch into the run folder. A run folder is never overwritten: continue a stopped or killed run
with --resume (it continues exactly where its last checkpoint left off, to the bit with a fixed
--threads).

--config takes a YAML file or the name of a recipe shipped with attnmt (attnmt recipes).

Examples:
  attnmt train --config multi30k_rnn_fast --out runs/fast --max-minutes 5
  attnmt train --config multi30k_rnn --attention additive --seed 2 --out runs/additive-2
  attnmt train --out runs/additive-2 --resume --max-epochs 30
  torchrun --nproc_per_node 2 -m attnmt train --config multi30k_rnn --out runs/ddp
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.commands.options import add_device_option, add_threads_option, add_trust_option, seed_value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE|RECIPE",
                        help="a YAML run config, or a recipe's name (attnmt recipes lists them); optional with "
                             "--resume, which uses the run's own")
    parser.add_argument("--attention", metavar="NAME",
                        help="attention mechanism (sets model.attention): a built-in name, or your own as "
                             "path/to/file.py:ClassName or package.module:ClassName (see docs/mechanisms.md)")
    parser.add_argument("--seed", type=seed_value, help="random seed, from 0 to 2**63 - 1 (sets training.seed)")
    parser.add_argument("--out", type=Path, metavar="RUN",
                        help="run folder (default: runs/<config name>-<attention>-seed<seed>)")
    parser.add_argument("--max-epochs", type=int, metavar="N", help="sets training.max_epochs")
    parser.add_argument("--max-steps", type=int, metavar="N", help="sets training.max_steps")
    parser.add_argument("--max-minutes", type=float, metavar="M", help="sets training.max_minutes")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override any config value, e.g. --set training.lr=5e-4 (repeatable)")
    add_device_option(parser, default_from="training.device")
    add_threads_option(parser)
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last.pt")
    add_trust_option(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _default_out(config, config_path: Path | None) -> Path:
    from attnmt.attention.registry import folder_label

    name = config_path.stem if config_path is not None else "run"
    attention = folder_label(config.attention) if config.attention else config.model.type
    return Path("runs") / f"{name}-{attention}-seed{config.training.seed}"


def _max_steps_given(args: argparse.Namespace, saved_path: Path, limit: int) -> str:
    """training.max_steps as the user gave it: the option, --set, or the line of a config file."""
    if args.max_steps is not None:
        return f"--max-steps {limit}"
    if any(item.replace(" ", "").startswith("training.max_steps=") for item in args.set):
        return f"--set training.max_steps={limit}"
    return f"{args.config or saved_path}: training.max_steps: {limit}"


def _check_consent_to_code(saved: dict, named: str | None, saved_path: Path) -> None:
    """A run folder without a checkpoint keeps no copy of its code: a user mechanism that its
    config.yaml names (``file.py:Class``, ``module:Class``) is imported only when the user names it
    now (``--attention SPEC``), as loading a run asks (docs/mechanisms.md, "Runs keep their code").
    Else ConfigError: nothing is imported, and nothing joins the list of code this user trusts."""
    from attnmt.errors import ConfigError

    model = saved.get("model")
    spec = model.get("attention") if isinstance(model, dict) else None
    if isinstance(spec, str) and ":" in spec and (named is None or named.strip() != spec.strip()):
        raise ConfigError(f"{saved_path}: names the attention {spec[:300]!r}, code the run folder does not keep "
                          "(it has no checkpoint); attnmt does not import code a run names. If it is your own, "
                          f"resume with --attention {spec[:300]}")


def _config_to_train(args: argparse.Namespace, requested, out: Path, overrides: dict):
    """The RunConfig to train: the one given, or on --resume the run's own (with consent to any code
    it names, when it has no checkpoint keeping that code)."""
    from attnmt.errors import ConfigError
    from attnmt.runs.folder import CONFIG_FILE, LAST, read_saved_config, resolve_resume_config
    from attnmt.runs.run_config import RunConfig, apply_overrides

    saved_path = out / CONFIG_FILE
    saved = read_saved_config(out) if args.resume else None
    if saved is None:
        if requested is None:
            raise ConfigError(f"{out}: no run to resume there ({saved_path} is missing); give --config to start one")
        return requested
    if requested is None and not (out / LAST).is_file():
        _check_consent_to_code(saved, args.attention, saved_path)
    if requested is None:
        try:
            requested = RunConfig.from_dict(apply_overrides(saved, overrides, args.set), base_dir=out)
        except ConfigError as error:
            raise ConfigError(f"{saved_path}: {error}") from None
    return resolve_resume_config(saved, requested, {}, out) if (out / LAST).is_file() else requested


def run(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from attnmt.errors import ConfigError
    from attnmt.runs.recipes import config_path
    from attnmt.runs.run_config import load_config
    from attnmt.training.builder import StepLimitReached
    from attnmt.workflows import train

    overrides = {
        "attention": args.attention,
        "seed": args.seed,
        "max_epochs": args.max_epochs,
        "max_steps": args.max_steps,
        "max_minutes": args.max_minutes,
        "device": args.device,
        "num_threads": args.threads,
    }
    if args.config is not None:
        args.config = config_path(args.config)
    requested = load_config(args.config, overrides, args.set) if args.config is not None else None
    if args.out is None:
        if requested is None:
            raise ConfigError("give --config (and --out), or --out RUN --resume to continue a run")
        if args.resume:
            raise ConfigError("--resume needs --out RUN: the run folder to continue")
    out = args.out or _default_out(requested, args.config)

    config = _config_to_train(args, requested, out, overrides)

    try:
        result = train(config, out, resume=args.resume, show_progress=not args.no_progress,
                       trust_run_code=args.trust_run_code, named_attention=args.attention)
        is_main = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    except StepLimitReached as error:
        raise ConfigError(f"{_max_steps_given(args, out / 'config.yaml', error.limit)}: the run in {out} is already at "
                          f"step {error.step}; give a limit of {error.step} or more") from None
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if is_main:
        print(f"attnmt train: {result.summary_line()}")
    return 0
