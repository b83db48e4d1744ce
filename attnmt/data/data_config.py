"""The ``data:`` section of a training config, and reading the splits it names.

Two forms. A known dataset::

    data:
      dataset: multi30k        # the only one built in
      src_lang: de
      tgt_lang: en
      data_dir: null           # else $ATTNMT_DATA_DIR, else the cache / download (see multi30k.py)

or explicit files (``dataset`` left out or null)::

    data:
      train: [corpus/train.de, corpus/train.en]
      valid: [corpus/dev.de, corpus/dev.en]
      test: {news2014: [corpus/test14.de, corpus/test14.en]}
      src_lang: de
      tgt_lang: en

Both take the tokenizer and batching knobs: ``vocab_size`` (8000), ``joint_vocab`` (true),
``tokenizer_type`` ("unigram" or "bpe"), ``character_coverage`` (1.0), ``max_length`` (100
subword tokens a side; training pairs that are longer are dropped, validation and test sets are
never cut; null keeps all), ``max_tokens`` (4096; a batch holds at most B · max(S, T) padded
tokens, see ``batching``) and ``pad_multiple`` (1; S and T of a batch rounded up to a multiple of
it, so that batches take a few shapes: ``batching``, "Fewer shapes"), ``token_ladder`` (0; k > 0
runs the output layer on the real target tokens and a little padding, their count rounded up to
one of k sizes per doubling, so that its products take a few shapes: ``batching``, "The output
layer's rows") and ``row_ladder`` (0; k > 0 cuts each batch's row count down to one of k sizes
per doubling, the rest going on to the next batch: ``batching``, "The rows of a batch").
``train_links`` (null) names
a file of word links for the training pairs (Pharaoh ``i-j``, 0-based, source first, one line per
line of the ``train`` files; e.g. written by ``attnmt align``): with it, training guides the
attention towards them
(``attnmt.data.link_files``; weight and reading in the ``training:`` section).

**Subword regularisation** (Kudo, 2018; ``attnmt.data.subword_sampling``): ``sampling_alpha``
(null = off: every epoch trains on the best segmentation) draws, in every epoch, each training
sentence's segmentation from its ``sampling_nbest`` (16) best with probability ∝ P(x)^α; 0 draws
them uniformly, larger values stay closer to the best. Validation, test sets and translation
always use the best segmentation. Needs ``tokenizer_type: unigram``.

**Relative paths** (files and ``data_dir``) are resolved against ``base_dir``: the folder of the
config file when the caller passes it to ``from_dict`` (the trainer does), else the current
working directory at the time the split is read. A path that starts with ``$ATTNMT_DATA_DIR/``
starts at that folder instead (the Hansards recipes name the shared data so).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from attnmt.data.corpus import ParallelCorpus, read_parallel
from attnmt.data.multi30k import DATA_DIR_ENV, load_multi30k, splits_of
from attnmt.data.multi30k import LANGUAGES as MULTI30K_LANGUAGES
from attnmt.data.tokenizer import MODEL_TYPES
from attnmt.errors import ConfigError
from attnmt.runtime.checks import check_plain_name

DATASETS = ("multi30k",)
#: the most segmentations of a sentence subword sampling keeps (memory: about 4 bytes a piece each)
MAX_SAMPLING_NBEST = 256
#: the most sizes per doubling ``token_ladder`` and ``row_ladder`` take (more would be about every count again)
MAX_LADDER = 1024
MULTI30K_SPLIT_ALIASES = {"valid": "val", "test": "test_2016_flickr"}


@dataclass
class DataConfig:
    """Where the parallel text comes from, and how it becomes subword batches."""

    dataset: str | None = "multi30k"
    src_lang: str = "de"
    tgt_lang: str = "en"
    data_dir: str | None = None
    train: tuple[str, str] | None = None
    valid: tuple[str, str] | None = None
    test: dict[str, tuple[str, str]] = field(default_factory=dict)
    train_links: str | None = None
    vocab_size: int = 8000
    joint_vocab: bool = True
    tokenizer_type: str = "unigram"
    character_coverage: float = 1.0
    max_length: int | None = 100
    max_tokens: int = 4096
    pad_multiple: int = 1
    token_ladder: int = 0
    row_ladder: int = 0
    sampling_alpha: float | None = None
    sampling_nbest: int = 16
    base_dir: str | None = field(default=None, compare=False)  # not a config key; see module docstring

    def __post_init__(self) -> None:
        self.validate()

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def keys(cls) -> list[str]:
        """The keys a ``data:`` section may have."""
        return [f.name for f in fields(cls) if f.name != "base_dir"]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, base_dir: str | Path | None = None) -> DataConfig:
        """Build from the ``data:`` mapping of a YAML config; ConfigError names any bad key or value.

        base_dir: the folder relative paths are resolved against (the config file's folder).
        """
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError(f"data: must be a mapping of keys to values, got {data!r:.80}")
        data = dict(data or {})
        unknown = sorted(set(data) - set(cls.keys()))
        if unknown:
            raise ConfigError(
                f"data: unknown key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(cls.keys())}"
            )
        if "dataset" not in data and any(data.get(key) for key in ("train", "valid", "test")):
            data["dataset"] = None  # files given: no built-in dataset
        if "train" in data and data["train"] is not None:
            data["train"] = _file_pair("train", data["train"])
        if "valid" in data and data["valid"] is not None:
            data["valid"] = _file_pair("valid", data["valid"])
        if "test" in data:
            data["test"] = _test_pairs(data["test"])
        return cls(**data, base_dir=None if base_dir is None else str(base_dir))

    def to_dict(self, resolve_paths: bool = False) -> dict[str, Any]:
        """The ``data:`` mapping (YAML-ready). ``resolve_paths`` makes file paths absolute."""
        result = asdict(self)
        del result["base_dir"]
        resolve = (lambda p: str(self.resolve(p))) if resolve_paths else str
        for key in ("train", "valid"):
            if result[key] is not None:
                result[key] = [resolve(p) for p in result[key]]
        result["test"] = {name: [resolve(p) for p in pair] for name, pair in result["test"].items()}
        for key in ("data_dir", "train_links"):
            if resolve_paths and result[key] is not None:
                result[key] = resolve(result[key])
        return result

    # ---- checks ------------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid value."""
        self._check_source()
        if self.data_dir is not None and not isinstance(self.data_dir, (str, Path)):
            raise ConfigError(f"data.data_dir: must be a folder path or null, got {self.data_dir!r}")
        if self.train_links is not None:
            if not isinstance(self.train_links, (str, Path)) or not str(self.train_links).strip():
                raise ConfigError(f"data.train_links: must be a file path or null, got {self.train_links!r}")
            self.train_links = str(self.train_links)
        self._check_tokenizer_and_batches()

    def _check_source(self) -> None:
        """The dataset or the files, and the two languages."""
        if self.dataset is not None and self.dataset not in DATASETS:
            raise ConfigError(
                f"data.dataset: unknown dataset {self.dataset!r}; valid: {', '.join(DATASETS)}, "
                f"or null with train/valid/test files"
            )
        for key in ("src_lang", "tgt_lang"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"data.{key}: must be a language code such as 'de', got {value!r}")
            check_plain_name(value, f"data.{key}")
        if self.dataset == "multi30k":
            for key in ("src_lang", "tgt_lang"):
                if getattr(self, key) not in MULTI30K_LANGUAGES:
                    raise ConfigError(
                        f"data.{key}: Multi30k has no language {getattr(self, key)!r}; "
                        f"valid: {', '.join(MULTI30K_LANGUAGES)}"
                    )
            given = [key for key in ("train", "valid") if getattr(self, key) is not None]
            given += ["test"] if self.test else []
            if given:
                raise ConfigError(
                    f"data: dataset 'multi30k' takes its files from the dataset; remove {', '.join(given)} "
                    f"or set dataset: null to use your own files"
                )
        if self.dataset is None and self.train is None:
            raise ConfigError("data: give either dataset: multi30k or train: [src_file, tgt_file]")

    def _check_tokenizer_and_batches(self) -> None:
        """The sentencepiece settings and the batch sizes."""
        _check_int("vocab_size", self.vocab_size, minimum=5)
        if self.vocab_size > 1_000_000:
            raise ConfigError(f"data.vocab_size: must be at most 1000000 subword pieces, got {self.vocab_size!r}")
        _check_int("max_tokens", self.max_tokens, minimum=1)
        if self.max_length is not None:
            _check_int("max_length", self.max_length, minimum=1)
        _check_int("pad_multiple", self.pad_multiple, minimum=1)
        longest = (self.max_length or 1000) + 1  # a side's widest row: its pieces and EOS
        if self.pad_multiple > longest:
            raise ConfigError(f"data.pad_multiple: must be from 1 to {longest} (max_length + 1, the widest row), "
                              f"got {self.pad_multiple}")
        for name in ("token_ladder", "row_ladder"):
            value = getattr(self, name)
            _check_int(name, value, minimum=0)
            if value > MAX_LADDER:
                raise ConfigError(f"data.{name}: must be from 0 (off) to {MAX_LADDER} sizes per doubling, got {value}")
        if not isinstance(self.joint_vocab, bool):
            raise ConfigError(f"data.joint_vocab: must be true or false, got {self.joint_vocab!r}")
        if self.tokenizer_type not in MODEL_TYPES:
            raise ConfigError(
                f"data.tokenizer_type: unknown type {self.tokenizer_type!r}; valid: {', '.join(MODEL_TYPES)}"
            )
        coverage = self.character_coverage
        if isinstance(coverage, bool) or not isinstance(coverage, (int, float)) or not 0.98 <= coverage <= 1:
            raise ConfigError(f"data.character_coverage: must be a number from 0.98 to 1 (what sentencepiece "
                              f"accepts), got {coverage!r}")
        self._check_sampling()

    def _check_sampling(self) -> None:
        """Subword regularisation: α, the n best, and what it cannot be combined with."""
        alpha = self.sampling_alpha
        if alpha is not None:
            if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 100:
                raise ConfigError(f"data.sampling_alpha: must be a number from 0 to 100, or null for no sampling, "
                                  f"got {alpha!r}")
            self.sampling_alpha = float(alpha)
        nbest = self.sampling_nbest
        if isinstance(nbest, bool) or not isinstance(nbest, int) or not 2 <= nbest <= MAX_SAMPLING_NBEST:
            raise ConfigError(f"data.sampling_nbest: must be an integer from 2 to {MAX_SAMPLING_NBEST}, got {nbest!r}")
        if alpha is not None and self.tokenizer_type != "unigram":
            raise ConfigError(f"data.sampling_alpha: samples segmentations of a unigram tokenizer; set "
                              f"tokenizer_type: unigram or sampling_alpha: null (tokenizer_type is "
                              f"{self.tokenizer_type!r})")
        if alpha is not None and self.train_links is not None:
            raise ConfigError("data.sampling_alpha: cannot be combined with train_links, whose links name the pieces "
                              "of the best segmentation; set one of them to null")

    # ---- splits ------------------------------------------------------------------------------

    def resolve(self, path: str | Path) -> Path:
        """``path`` made absolute against ``base_dir`` (else the current folder), or against
        ``$ATTNMT_DATA_DIR`` when it starts with that variable."""
        text = str(path)
        for prefix in (f"${DATA_DIR_ENV}/", f"${{{DATA_DIR_ENV}}}/"):
            if text.startswith(prefix):
                root = os.environ.get(DATA_DIR_ENV)
                if not root:
                    raise ConfigError(f"{text}: ${DATA_DIR_ENV} is not set; point it at the folder that holds "
                                      f"the data (export {DATA_DIR_ENV}=...)")
                return Path(root).expanduser() / text[len(prefix):]
        path = Path(path).expanduser()
        if path.is_absolute():
            return path
        return Path(self.base_dir or Path.cwd()) / path

    def canonical_split(self, split_name: str) -> str:
        """The name a split is known by: for Multi30k "valid" is val and "test" test_2016_flickr;
        with named test sets, "test" is the first of them. Other names are returned as they are."""
        if self.dataset == "multi30k":
            return MULTI30K_SPLIT_ALIASES.get(split_name, split_name)
        if split_name == "test" and self.test and "test" not in self.test:
            return next(iter(self.test))
        return split_name

    def split_names(self) -> list[str]:
        """Names ``load_split`` accepts: "train", "valid", then the test sets."""
        return ["train", "valid"] + self.test_names()

    def test_names(self) -> list[str]:
        """The test sets: Multi30k's for this language pair, or the keys of ``test``."""
        if self.dataset == "multi30k":
            return [s for s in splits_of(self.src_lang, self.tgt_lang) if s.startswith("test_")]
        return list(self.test)


def load_split(cfg: DataConfig, split_name: str, download: bool = True) -> ParallelCorpus:
    """Read one split of ``cfg``: "train", "valid" or a test name ("test" = the first test set).

    Never cuts long pairs (``cfg.max_length`` counts subword tokens; apply it after encoding with
    ``Tokenizers.encode_corpus``). Raises ConfigError for a split the config does not have.
    """
    split = cfg.canonical_split(split_name)
    if cfg.dataset == "multi30k":
        if split != "train" and split != "val" and split not in cfg.test_names():
            raise ConfigError(
                f"data: no split {split_name!r} for Multi30k {cfg.src_lang}-{cfg.tgt_lang}; "
                f"valid: {', '.join(['train', 'valid', 'test'] + cfg.test_names())}"
            )
        data_dir = cfg.resolve(cfg.data_dir) if cfg.data_dir is not None else None
        return load_multi30k(split, cfg.src_lang, cfg.tgt_lang, data_dir=data_dir, download=download)

    if split == "train":
        pair = cfg.train
    elif split == "valid":
        pair = cfg.valid
    else:
        pair = cfg.test.get(split)
    if pair is None:
        available = ["train"] + (["valid"] if cfg.valid else []) + list(cfg.test)
        raise ConfigError(f"data: no split {split_name!r} in the config; available: {', '.join(available)}")
    return read_parallel(cfg.resolve(pair[0]), cfg.resolve(pair[1]))


def _check_int(key: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"data.{key}: must be an integer >= {minimum}, got {value!r}")


def _file_pair(key: str, value: Any) -> tuple[str, str]:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(p, (str, Path)) and str(p).strip() for p in value)
    ):
        raise ConfigError(f"data.{key}: must be a pair of file paths [src_file, tgt_file], got {value!r}")
    return str(value[0]), str(value[1])


def _test_pairs(value: Any) -> dict[str, tuple[str, str]]:
    if value is None:
        return {}
    if isinstance(value, (list, tuple)):  # one unnamed test set
        return {"test": _file_pair("test", value)}
    if not isinstance(value, Mapping):
        raise ConfigError(f"data.test: must map test names to [src_file, tgt_file], got {value!r}")
    pairs = {}
    for name, pair in value.items():
        if not isinstance(name, str) or name in ("train", "valid"):
            raise ConfigError(f"data.test: invalid test name {name!r}")
        check_plain_name(name, "data.test: a test set's name")
        pairs[name] = _file_pair(f"test.{name}", pair)
    return pairs
