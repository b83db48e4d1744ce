"""The data: section of a config: validation with clear messages, and reading the splits it names."""

from __future__ import annotations

import pytest

from attnmt.data import DataConfig, load_split
from attnmt.errors import ConfigError

from conftest import shared_data_path


def test_defaults_are_multi30k_de_en():
    cfg = DataConfig.from_dict({})
    assert (cfg.dataset, cfg.src_lang, cfg.tgt_lang) == ("multi30k", "de", "en")
    assert (cfg.vocab_size, cfg.joint_vocab, cfg.tokenizer_type) == (8000, True, "unigram")
    assert (cfg.max_length, cfg.max_tokens) == (100, 4096)
    assert cfg.test_names() == [
        "test_2016_flickr",
        "test_2017_flickr",
        "test_2017_mscoco",
        "test_2018_flickr",
    ]
    assert DataConfig.from_dict({"src_lang": "cs", "tgt_lang": "en"}).test_names() == [
        "test_2016_flickr",
        "test_2018_flickr",
    ]


@pytest.mark.parametrize(
    "section, message",
    [
        ({"vocab_sise": 8000}, "unknown key(s) 'vocab_sise'"),
        ({"dataset": "wmt14"}, "unknown dataset 'wmt14'"),
        ({"src_lang": "es"}, "Multi30k has no language 'es'"),
        ({"vocab_size": "8000"}, "data.vocab_size"),
        ({"max_tokens": 0}, "data.max_tokens"),
        ({"pad_multiple": 0}, "data.pad_multiple: must be an integer >= 1, got 0"),
        ({"pad_multiple": 200, "max_length": 100}, "data.pad_multiple: must be from 1 to 101 (max_length + 1"),
        ({"token_ladder": -1}, "data.token_ladder: must be an integer >= 0, got -1"),
        ({"token_ladder": 2000}, "data.token_ladder: must be from 0 (off) to 1024 sizes per doubling, got 2000"),
        ({"row_ladder": 2.5}, "data.row_ladder: must be an integer >= 0, got 2.5"),
        ({"row_ladder": 4096}, "data.row_ladder: must be from 0 (off) to 1024 sizes per doubling, got 4096"),
        ({"max_length": True}, "data.max_length"),
        ({"joint_vocab": "yes"}, "data.joint_vocab"),
        ({"tokenizer_type": "wordpiece"}, "unknown type 'wordpiece'"),
        ({"character_coverage": 1.5}, "data.character_coverage"),
        ({"dataset": "multi30k", "train": ["a", "b"]}, "remove train"),
        ({"dataset": None}, "give either dataset"),
        ({"train": ["only-one-file"]}, "data.train: must be a pair"),
        ({"train": ["a", "b"], "test": 5}, "data.test"),
    ],
)
def test_invalid_sections_name_the_problem(section, message):
    with pytest.raises(ConfigError) as error:
        DataConfig.from_dict(section)
    assert message in str(error.value)


def test_explicit_files_resolve_against_the_config_folder(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, text in {"tr.de": "a\nb\n", "tr.en": "x\ny\n", "dev.de": "c\n", "dev.en": "z\n"}.items():
        (folder / name).write_text(text, encoding="utf-8")
    section = {
        "train": ["corpus/tr.de", "corpus/tr.en"],
        "valid": ["corpus/dev.de", "corpus/dev.en"],
        "test": {"dev-again": ["corpus/dev.de", str(folder / "dev.en")]},
        "src_lang": "de",
        "tgt_lang": "en",
        "max_length": None,
    }
    cfg = DataConfig.from_dict(section, base_dir=tmp_path)
    assert cfg.dataset is None
    assert load_split(cfg, "train").src == ["a", "b"]
    assert load_split(cfg, "valid").tgt == ["z"]
    assert load_split(cfg, "dev-again").src_path == folder / "dev.de"
    assert load_split(cfg, "test").tgt == ["z"]  # "test" = the first test set
    assert cfg.split_names() == ["train", "valid", "dev-again"]
    with pytest.raises(ConfigError, match="no split 'news'.*available: train, valid, dev-again"):
        load_split(cfg, "news")
    # to_dict gives back a section that from_dict accepts
    assert DataConfig.from_dict(cfg.to_dict(), base_dir=tmp_path) == cfg
    assert cfg.to_dict(resolve_paths=True)["train"] == [str(folder / "tr.de"), str(folder / "tr.en")]


def test_relative_paths_default_to_the_working_folder(tmp_path, monkeypatch):
    (tmp_path / "s.txt").write_text("a\n", encoding="utf-8")
    (tmp_path / "t.txt").write_text("b\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    cfg = DataConfig.from_dict({"train": ["s.txt", "t.txt"]})
    assert load_split(cfg, "train").src == ["a"]


def test_a_single_unnamed_test_pair():
    cfg = DataConfig.from_dict({"train": ["a", "b"], "test": ["c", "d"]})
    assert cfg.test == {"test": ("c", "d")}


def test_multi30k_split_names(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNMT_CACHE_DIR", str(tmp_path / "cache"))
    cfg = DataConfig.from_dict({"src_lang": "de", "tgt_lang": "cs", "data_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="no split 'test_2017_flickr' for Multi30k de-cs"):
        load_split(cfg, "test_2017_flickr")


@pytest.mark.shared_data
def test_multi30k_splits_from_shared_data():
    shared = shared_data_path("multi30k", "val.de.gz").parents[1]
    cfg = DataConfig.from_dict({"dataset": "multi30k", "data_dir": str(shared)})
    assert len(load_split(cfg, "valid")) == 1014
    assert len(load_split(cfg, "test")) == 1000
