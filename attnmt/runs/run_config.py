"""The configuration of a training run: ``data``, ``model``, ``training`` and ``search`` sections.

A run is described by one YAML file::

    data:      # attnmt.data.DataConfig: corpus, tokenizer, batching
      dataset: multi30k
      src_lang: de
      tgt_lang: en
    model:     # attnmt.models.RNNConfig or TransformerConfig, chosen by type
      type: rnn
      attention: scaled_dot
    training:  # TrainingConfig below
      lr: 0.001
      max_epochs: 20
    search:    # SearchConfig below: defaults of greedy/beam decoding for this run
      max_len_a: 1.5

Every section may be left out (its defaults apply; ``model`` defaults to ``{type: rnn}``). An
unknown key or an invalid value raises ConfigError naming the key, the value and the file.
``apply_overrides`` applies the command-line options (``--attention``, ``--seed``,
``--max-epochs``, ``--max-steps``, ``--max-minutes`` and generic ``--set section.key=value``).
A run folder keeps the resolved config as ``config.yaml``, and every checkpoint stores it as a
plain dict (``RunConfig.to_dict()``), so a run can be re-created from either.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from attnmt.data.data_config import DataConfig
from attnmt.errors import ConfigError
from attnmt.models import RENAMED_MODEL_KEYS, ModelConfig, model_config
from attnmt.runs.recipes import config_path, is_recipe
from attnmt.runtime.checks import (
    BOOLEAN,
    MAX_THREADS,
    Rule,
    check_rules,
    dataclass_from_dict,
    integer,
    is_int,
    number,
    one_of,
    optional,
)
from attnmt.runtime.choices import GUIDE_UNALIGNED
from attnmt.runtime.device import check_device_name
from attnmt.runtime.precision import check_precision
from attnmt.runtime.reading import MAX_DEPTH, MAX_INT_DIGITS, DataTooLarge, check_plain_data, read_text_bounded

__all__ = ["MAX_LEN_A", "MAX_LEN_B", "SAVED_BEFORE_OPTIONS", "RunConfig", "SearchConfig", "TrainingConfig",
           "apply_overrides", "load_config", "with_old_defaults", "yaml_load"]

SECTIONS = ("data", "model", "training", "search")
MAX_KEPT_CHECKPOINTS = 100  # training.keep_checkpoints: files in RUN/checkpoints
LR_SCHEDULES = ("constant", "inverse_sqrt", "cosine", "warmdown")
#: how Adam updates the weights (``training.adam``); "pytorch" is what runs saved before the option used
ADAM_FORMS = ("fused", "foreach", "for_loop", "pytorch")


#: what each value of the ``training:`` section must be, checked in this order (``TrainingConfig.validate``)
TRAINING_RULES = {
    "seed": integer(0, 2**63 - 1),  # what every generator seeded from it takes
    "lr": number(above=0),
    "max_epochs": integer(1),
    "log_every": integer(1),
    "eval_every": integer(1),
    "checkpoint_every": integer(1),
    "keep_checkpoints": integer(0, MAX_KEPT_CHECKPOINTS),
    "max_steps": optional(integer(1)),
    "num_threads": optional(integer(1, MAX_THREADS)),
    "max_minutes": optional(number(above=0)),
    "clip_norm": optional(number(above=0)),
    "lr_schedule": one_of(LR_SCHEDULES),
    "adam": one_of(ADAM_FORMS),
    "warmup_steps": integer(0),
    "warmdown_share": number(above=0, at_most=1),
    "label_smoothing": number(at_least=0, below=1),
    "weight_decay": number(at_least=0, below=1),
    "rdrop_weight": number(at_least=0, at_most=100),
    "ema_decay": optional(number(above=0, below=1)),
    "lr_decay": number(above=0, at_most=1),
    "lr_patience": integer(0),
    "min_lr": number(at_least=0),
    "early_stopping_patience": optional(integer(1)),
    "bleu_max_sentences": optional(integer(0)),
    "examples": integer(0),
    "guide_weight": number(above=0),
    "guide_layer": optional(Rule(lambda value: is_int(value) and value != 0,
                                 "a non-zero integer (from 1, or negative from the end)")),
    "guide_head": optional(Rule(lambda value: is_int(value) and value != 0,
                                "a non-zero integer (from 1, or negative from the end)")),
    "guide_shift": BOOLEAN,
    "tensorboard": BOOLEAN,
    "guide_unaligned": Rule(lambda value: value in GUIDE_UNALIGNED, " or ".join(f'"{c}"' for c in GUIDE_UNALIGNED)),
}


@dataclass
class TrainingConfig:
    """How a model is trained (the ``training:`` section).

    seed                     fixes initialisation, dropout and data order (the order of epoch e is a
                             function of (seed, e) only, which makes an exact resume possible)
    lr                       Adam learning rate
    adam                     how Adam's update runs (the same equations, rounded apart by ~1e-7):
                             "fused", one kernel over every weight (the default, several times faster
                             than "for_loop" on a CPU: docs/experiments.md, "A training step's speed"); "foreach",
                             one operation over a list of weights; "for_loop", one weight at a time;
                             "pytorch", PyTorch's own choice (foreach on CUDA, else for_loop), which
                             a run saved before this option resumes with
    max_epochs               stop after this many passes over the training data
    max_steps                stop after this many optimizer steps (null = no limit)
    max_minutes              stop after this much training time, summed over resumes (null = no limit)
    clip_norm                clip the global gradient norm to this (null = no clipping)
    lr_schedule              "constant": lr after a linear warm-up over warmup_steps (if any);
                             "inverse_sqrt": lr · min(step / warmup_steps, sqrt(warmup_steps / step))
                             (Vaswani et al. 2017; needs warmup_steps >= 1); "cosine": warm-up,
                             then from lr down to min_lr over the budget (max_steps and/or
                             max_minutes; attnmt.training.schedule); "warmdown": warm-up, then lr,
                             then a linear fall to min_lr over the last warmdown_share of the budget
    warmup_steps             steps of warm-up (0 = none)
    warmdown_share           the share of the budget over which "warmdown" lets the lr fall
    label_smoothing          ε of the training loss; perplexity is always computed without it
    weight_decay             λ of AdamW's decoupled weight decay (Loshchilov & Hutter 2019;
                             attnmt.training.optimizer): each step every weight matrix and embedding
                             table shrinks by lr · λ · θ; biases and LayerNorm gains do not (0 = plain Adam)
    rdrop_weight             R-Drop's α (Liang et al., 2021; attnmt.training.step): each batch passes
                             twice, with two dropout masks, and the loss adds α/2 times the symmetric
                             KL divergence of the two predictions (0 = off; a step costs about twice
                             as much; it needs dropout to do anything)
    ema_decay                keep an exponential moving average of the weights with this decay
                             (e.g. 0.998; attnmt.training.averaging): validation, best.pt and every
                             command that reads the run use the average (null = none)
    lr_decay                 decay on plateau (as ReduceLROnPlateau): the lr is multiplied by lr_decay
                             when the validation loss did not improve for more than lr_patience
                             epoch-end evaluations (1.0 = never decay); on top of lr_schedule
    lr_patience              evaluations without improvement before the lr decays
    min_lr                   the lr never decays below this
    early_stopping_patience  stop after this many evaluations without a better validation loss
                             (null = never stop early)
    log_every                write a ``train`` record to metrics.jsonl every this many steps
    eval_every               validate every this many epochs (and always after the last one)
    checkpoint_every         save the last checkpoint every this many steps (and after every epoch)
    keep_checkpoints         also keep the weights being trained every checkpoint_every steps, the
                             newest this many, in RUN/checkpoints/ (0 = none); ``attnmt average``
                             averages them into RUN/averaged.pt (attnmt.runs.snapshots)
    num_threads              torch threads per process (null = $OMP_NUM_THREADS if set, else
                             cpu_count // world_size)
    bleu_max_sentences       greedy validation BLEU on the first this many validation sentences
                             (null = all; 0 = no BLEU during training)
    examples                 attention heatmaps of this many fixed validation sentences per epoch
    device                   where to train: auto (CUDA, else MPS, else the CPU), cpu, cuda, cuda:N
                             or mps (attnmt.runtime.device); under torchrun each rank takes its LOCAL_RANK GPU
    precision                "fp32", "bf16" or "fp16": the forward pass under autocast on the device
                             (matrix products in 16 bits; weights, gradients, optimizer state, the
                             loss and all validation stay float32); fp16 scales the loss with a
                             GradScaler saved in the checkpoint (attnmt.runtime.precision). bf16 trains
                             faster on CPUs with AVX512-BF16 or AMX (docs/experiments.md, "A training step's speed"),
                             possibly slower on others
    guide_weight             λ of the guided-alignment loss, used when ``data.train_links`` is set
                             (attnmt.models.losses): loss = CE + λ · Σ −A log a / target tokens
    guide_layer              the decoder layer whose attention is guided, from 1 (−1 = last; null =
                             the penultimate one, the only one for an RNN), as ``attnmt align --layer``
    guide_head               the head guided (from 1), null = the mean over the heads
    guide_shift              guide the step whose decoder *input* is the target word (read it with
                             ``attnmt align --shift``) instead of the step that predicts it
    guide_unaligned          "ignore": target words without a link are not guided; "eos": a target
                             word with no link at all (sure or possible) is guided to the source EOS,
                             so the attention can say "unaligned"; such runs are read without
                             renormalising (attnmt.alignment.translator_attention). Possible links (``ipj``,
                             ``attnmt align --eflomal --possible union``) mark a word as aligned
                             without guiding it
    tensorboard              also write the metrics as TensorBoard event files into RUN/tensorboard
                             (needs ``pip install attnmt[tensorboard]``; ``attnmt curves`` needs
                             nothing more than metrics.jsonl)
    """

    seed: int = 1
    lr: float = 1e-3
    max_epochs: int = 20
    max_steps: int | None = None
    max_minutes: float | None = None
    clip_norm: float | None = 1.0
    lr_schedule: str = "constant"
    adam: str = "fused"
    warmup_steps: int = 0
    warmdown_share: float = 0.2
    label_smoothing: float = 0.1
    weight_decay: float = 0.0
    rdrop_weight: float = 0.0
    ema_decay: float | None = None
    lr_decay: float = 0.5
    lr_patience: int = 0
    min_lr: float = 1e-5
    early_stopping_patience: int | None = 3
    log_every: int = 50
    eval_every: int = 1
    checkpoint_every: int = 200
    keep_checkpoints: int = 0
    num_threads: int | None = None
    bleu_max_sentences: int | None = None
    examples: int = 3
    device: str = "auto"
    precision: str = "fp32"
    guide_weight: float = 1.0
    guide_layer: int | None = None
    guide_head: int | None = None
    guide_shift: bool = False
    guide_unaligned: str = "ignore"
    tensorboard: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid value (``TRAINING_RULES``, then the rules
        that tie two values together)."""
        check_rules(self, TRAINING_RULES, "training")
        if self.lr_schedule == "inverse_sqrt" and self.warmup_steps < 1:
            raise ConfigError(f"training.warmup_steps: must be an integer >= 1 with lr_schedule: inverse_sqrt, "
                              f"got {self.warmup_steps!r}")
        if self.lr_schedule in ("cosine", "warmdown") and self.max_steps is None and self.max_minutes is None:
            raise ConfigError(f"training.lr_schedule: must be {self.lr_schedule} only with a budget to fall over: "
                              f"max_steps or max_minutes, got {self.lr_schedule!r}")
        check_device_name(self.device, "training.device")
        check_precision(self.precision, "training.precision")
        # Integers are fine where floats are meant (YAML reads "1" as an int).
        for key in ("lr", "label_smoothing", "lr_decay", "min_lr", "guide_weight", "warmdown_share", "rdrop_weight"):
            setattr(self, key, float(getattr(self, key)))
        for key in ("max_minutes", "clip_norm", "ema_decay"):
            if getattr(self, key) is not None:
                setattr(self, key, float(getattr(self, key)))

    @classmethod
    def from_dict(cls, values: dict | None) -> TrainingConfig:
        return dataclass_from_dict(cls, values, "training")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The largest max_len_a and max_len_b a search takes: an output 10 times its source's length plus
#: 1,000 tokens is already no translation, and an untrained model that never ends a sentence
#: decodes every step of the limit.
MAX_LEN_A = 10
MAX_LEN_B = 1000

#: what each value of the ``search:`` section must be (``SearchConfig``)
SEARCH_RULES = {"beam": integer(1), "batch_size": integer(1), "max_len_b": integer(0, MAX_LEN_B),
                "alpha": number(at_least=0), "max_len_a": number(at_least=0)}


@dataclass
class SearchConfig:
    """Defaults of decoding (the ``search:`` section of a run config; the only place they are written):
    the ``Translator`` takes one, and ``attnmt.decoding.search`` takes its defaults from it.

    beam        1 = greedy search
    alpha       GNMT length penalty of beam search ((5 + |y|) / 6) ** alpha; 0 = none
    max_len_a, max_len_b   an output has at most max_len_a · |x| + max_len_b tokens (at most
                MAX_LEN_A and MAX_LEN_B: beyond them an untrained model would decode for hours)
    batch_size  sentences decoded at once
    precision   "fp32", "bf16" or "fp16": the search's matrix products under autocast
                (log-probabilities and scores stay float32 / float64); faster on CPUs with
                AVX512-BF16 or AMX and on GPUs, and its outputs can differ from fp32 ones
    device      where to search: auto (CUDA, else MPS, else the CPU), cpu, cuda, cuda:N or mps
    """

    beam: int = 1
    alpha: float = 0.6
    max_len_a: float = 1.5
    max_len_b: int = 10
    batch_size: int = 64
    precision: str = "fp32"
    device: str = "auto"

    def __post_init__(self) -> None:
        check_rules(self, SEARCH_RULES, "search")
        self.alpha, self.max_len_a = float(self.alpha), float(self.max_len_a)
        if self.max_len_a > MAX_LEN_A:
            raise ConfigError(f"search.max_len_a: at most {MAX_LEN_A} (an output {MAX_LEN_A} times as long as "
                              f"its source), got {self.max_len_a!r}")
        check_precision(self.precision, "search.precision")
        check_device_name(self.device, "search.device")

    @classmethod
    def from_dict(cls, values: dict | None) -> SearchConfig:
        return dataclass_from_dict(cls, values, "search")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunConfig:
    """Everything that defines a run: one typed section each."""

    data: DataConfig
    model: ModelConfig = field(default_factory=lambda: model_config(None))
    training: TrainingConfig = field(default_factory=TrainingConfig)
    search: SearchConfig = field(default_factory=SearchConfig)

    @classmethod
    def from_dict(cls, values: dict | None, base_dir: str | Path | None = None) -> RunConfig:
        """Build and validate from a plain dict; relative data paths resolve against ``base_dir``.

        Every section checks its own keys and values (ConfigError names the first bad one).
        """
        values = {} if values is None else values
        if not isinstance(values, dict):
            raise ConfigError(f"the config must be a mapping with sections {', '.join(SECTIONS)}, got {values!r}")
        unknown = sorted(set(values) - set(SECTIONS))
        if unknown:
            raise ConfigError(
                f"unknown section(s) {', '.join(map(repr, unknown))}; valid sections: {', '.join(SECTIONS)}"
            )
        return cls(
            data=DataConfig.from_dict(values.get("data"), base_dir=base_dir),
            model=model_config(copy.deepcopy(values.get("model"))),
            training=TrainingConfig.from_dict(values.get("training")),
            search=SearchConfig.from_dict(values.get("search")),
        )

    def to_dict(self, resolve_paths: bool = True) -> dict[str, Any]:
        """Plain data (YAML- and checkpoint-ready); data paths made absolute by default."""
        return {
            "data": self.data.to_dict(resolve_paths=resolve_paths),
            "model": self.model.to_dict(),
            "training": self.training.to_dict(),
            "search": self.search.to_dict(),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    @property
    def attention(self) -> str | None:
        """The attention mechanism of an RNN model (None for a Transformer)."""
        return getattr(self.model, "attention", None)


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names the same key twice: YAML would silently keep the last value."""

    def __init__(self, key: Any, first_line: int, second_line: int):
        super().__init__(f"{key!r} appears twice in one mapping (lines {first_line} and {second_line}); keep one")
        self.line = second_line


class YAMLTooLarge(yaml.YAMLError):
    """YAML beyond the bounds of ``attnmt.runtime.reading``: aliases that stand for too many values,
    nesting too deep, a number too long."""


def _yaml_loader():
    """PyYAML's SafeLoader, but reading ``1e-3`` as the float 0.001 (YAML 1.1 wants ``1.0e-3``),
    refusing a key given twice in one mapping, and an integer too long to be a setting."""

    class Loader(yaml.SafeLoader):
        def construct_yaml_int(self, node):
            digits = sum(character.isdigit() for character in str(node.value))
            if digits > MAX_INT_DIGITS:
                raise YAMLTooLarge(f"line {node.start_mark.line + 1}: a number of {digits:,} digits; a setting has "
                                   f"at most {MAX_INT_DIGITS}")
            return super().construct_yaml_int(node)


        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    if isinstance(key, (str, int, float, bool)) and key in seen:
                        raise DuplicateKeyError(key, seen[key], line)
                    if isinstance(key, (str, int, float, bool)):
                        seen[key] = line
            return super().construct_mapping(node, deep=deep)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return Loader


def yaml_load(text: str) -> Any:
    """Parse YAML text safely (no code), with ``1e-3`` read as a number; YAMLTooLarge (a
    yaml.YAMLError) for what ``attnmt.runtime.reading.check_plain_data`` refuses: an alias bomb,
    nesting too deep, an integer of hundreds of digits."""
    try:
        values = yaml.load(text, Loader=_yaml_loader())
    except RecursionError:
        raise YAMLTooLarge(f"nested more than {MAX_DEPTH} deep") from None
    try:
        check_plain_data(values, "the YAML")
    except DataTooLarge as error:
        raise YAMLTooLarge(str(error)) from None
    return values


def load_config(
    path: str | Path, overrides: dict[str, Any] | None = None, set_options: list[str] | None = None,
) -> RunConfig:
    """Read a YAML run config, or the recipe of that name (``attnmt.runs.recipes``); ConfigError
    (naming the file) when it is missing or invalid.

    overrides: the named command-line options (see ``apply_overrides``).
    set_options: ``["section.key=value", ...]`` with YAML values, e.g. ``training.lr=5e-4``.
    """
    path = config_path(path)
    try:
        text = read_text_bounded(path)
    except FileNotFoundError:  # removed since config_path looked
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the config ({error})") from None
    except DataTooLarge as error:
        raise ConfigError(f"{path}: cannot be a config: it {error}") from None
    try:
        values = yaml_load(text)
    except DuplicateKeyError as error:
        raise ConfigError(f"{path}:{error.line}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: {yaml_error_line(error)}") from None
    values = {} if values is None else values
    _warn_of_old_names(values, path)
    try:
        values = apply_overrides(values, overrides or {}, set_options or [])
        # a recipe's folder is inside the installed package: its relative paths start here
        base_dir = Path.cwd() if is_recipe(path) else path.resolve().parent
        return RunConfig.from_dict(values, base_dir=base_dir)
    except ConfigError as error:
        if str(error).startswith("set_options="):  # a malformed --set names itself; the file is not to blame
            raise
        raise ConfigError(f"{_source_of(str(error), overrides or {}, set_options or [], path)}: {error}") from None


def yaml_error_line(error: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line: ``line L, column C: problem``."""
    if isinstance(error, YAMLTooLarge):
        return f"too large to be a setting: {error}"
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"not valid YAML: {where}{' '.join(str(problem).split())}"


def _source_of(message: str, overrides: dict[str, Any], set_options: Sequence[str], path: Path) -> str:
    """Where the value an error names came from: the option (``max_steps=0``, which the command line
    shows as ``--max-steps 0``), the ``set_options`` entry, else the config file."""
    for name, value in overrides.items():
        if value is not None and name in OVERRIDE_KEYS and ".".join(OVERRIDE_KEYS[name]) in message:
            return f"{name}={value}"
    for option in reversed(set_options):  # the last one given wins, as when they are applied
        target = option.partition("=")[0].strip()
        section, _, key = target.partition(".")
        if target and (target in message or (message.startswith(f"{section}: unknown key") and f"'{key}'" in message)):
            return f"set_options={option}"
    return str(path)


def _warn_of_old_names(values: Any, path: Path) -> None:
    """A FutureWarning for each model option the config file gives by its name before 0.2.0."""
    model = values.get("model") if isinstance(values, dict) else None
    if not isinstance(model, dict):
        return
    model_type = model.get("type", "rnn")
    if not isinstance(model_type, str):  # a wrong type is reported by the validation that follows
        return
    for old, new in RENAMED_MODEL_KEYS.get(model_type, {}).items():
        if old in model:
            warnings.warn(f"{path}: model.{old} is called model.{new} since attnmt 0.2.0; it is read as "
                          f"model.{new}", FutureWarning, stacklevel=3)


#: training options added after runs were saved without them: the value such a run trained with,
#: where it is not the option's default
SAVED_BEFORE_OPTIONS = {"adam": "pytorch"}
#: mechanism options added after runs were saved without them (RNN ``model.attention_options``):
#: local-m weighed its window by a Gaussian before it followed Luong et al. (2015) to the letter
SAVED_BEFORE_ATTENTION_OPTIONS: dict[str, dict[str, Any]] = {"local-m": {"gaussian": True}}


def with_old_defaults(saved_config: Any) -> Any:
    """A saved run config (a checkpoint's or ``config.yaml``) as the run was trained: the values of
    ``SAVED_BEFORE_OPTIONS`` and ``SAVED_BEFORE_ATTENTION_OPTIONS`` filled in where it lacks them.
    Anything that is not a run config is returned as it is (``RunConfig.from_dict`` reports it)."""
    if not isinstance(saved_config, dict):
        return saved_config
    upgraded = dict(saved_config)
    training = saved_config.get("training")
    if isinstance(training, dict):
        missing = {key: value for key, value in SAVED_BEFORE_OPTIONS.items() if key not in training}
        upgraded["training"] = {**training, **missing}
    model = saved_config.get("model")
    if isinstance(model, dict) and model.get("type", "rnn") == "rnn" and isinstance(model.get("attention"), str):
        options = model.get("attention_options", {})
        saved_before = SAVED_BEFORE_ATTENTION_OPTIONS.get(model["attention"].strip().lower(), {})
        if isinstance(options, dict):
            absent = {key: value for key, value in saved_before.items() if key not in options}
            upgraded["model"] = {**model, "attention_options": {**options, **absent}} if absent else model
    return upgraded


# command-line option name -> (section, key)
OVERRIDE_KEYS = {
    "attention": ("model", "attention"),
    "seed": ("training", "seed"),
    "max_epochs": ("training", "max_epochs"),
    "max_steps": ("training", "max_steps"),
    "max_minutes": ("training", "max_minutes"),
    "device": ("training", "device"),
    "num_threads": ("training", "num_threads"),
}


def apply_overrides(values: dict, overrides: dict[str, Any], set_options: list[str] | tuple[str, ...] = ()) -> dict:
    """A copy of the config dict with command-line overrides applied (None values are skipped).

    overrides: ``{"attention": "dot", "seed": 3, "max_epochs": 1, "max_steps": None, ...}``
    set_options: ``"section.key=value"`` strings; the value is read as YAML (``1e-3``, ``null``, ``[a, b]``).
    """
    if not isinstance(values, dict):
        raise ConfigError(f"the config must be a mapping with sections {', '.join(SECTIONS)}, got {values!r}")
    values = copy.deepcopy(values)
    for name, value in overrides.items():
        if name not in OVERRIDE_KEYS:
            raise ValueError(f"apply_overrides: unknown override {name!r}; known: {', '.join(OVERRIDE_KEYS)}")
        if value is None:
            continue
        section, key = OVERRIDE_KEYS[name]
        _section(values, section)[key] = value
    for option in set_options:
        target, sep, raw = option.partition("=")
        section, dot, key = target.strip().partition(".")
        if not sep or not dot or not key or section not in SECTIONS:
            raise ConfigError(
                f"set_options={option!r}: expected SECTION.KEY=VALUE with SECTION one of {', '.join(SECTIONS)}"
            )
        try:
            parsed = yaml_load(raw) if raw.strip() else None
        except yaml.YAMLError as error:
            raise ConfigError(f"{target.strip()}: the value {raw.strip()!r:.60} is {yaml_error_line(error)}") from None
        _section(values, section)[key] = parsed
    return values


def _section(values: dict, section: str) -> dict:
    current = values.get(section)
    if current is None:
        current = values[section] = {} if section != "model" else {"type": "rnn"}
    if not isinstance(current, dict):
        raise ConfigError(f"{section}: must be a mapping, got {current!r}")
    return current
