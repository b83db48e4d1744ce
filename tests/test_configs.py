"""The YAML recipes that ship with attnmt (attnmt/recipes/, configs/ in a clone) load and validate,
and the French→English Hansards config stays the exact mirror of the English→French one (so the
two translators combined by `attnmt align` differ only in direction)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnmt.runs.recipes import RECIPES_DIR
from attnmt.runs.run_config import load_config

CONFIGS = RECIPES_DIR


@pytest.fixture(autouse=True)
def data_folder(monkeypatch, tmp_path):
    """The Hansards recipes name their files under $ATTNMT_DATA_DIR, resolved when a config is written out."""
    monkeypatch.setenv("ATTNMT_DATA_DIR", str(tmp_path / "data"))


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda path: path.name)
def test_every_recipe_loads_and_validates(path):
    config = load_config(path)
    assert config.model.type in ("rnn", "transformer")
    assert config.training.max_minutes is None or config.training.max_minutes > 0


def test_every_option_is_in_the_config_reference():
    """The reference of the data and training options is their docstrings: each key is named there."""
    from dataclasses import fields

    import attnmt.data.data_config as data_config
    from attnmt.runs.run_config import TrainingConfig

    assert [f.name for f in fields(TrainingConfig) if f"\n    {f.name} " not in TrainingConfig.__doc__] == []
    doc = data_config.__doc__
    assert [key for key in data_config.DataConfig.keys() if f"``{key}``" not in doc and f" {key}: " not in doc] == []


def test_hansards_french_to_english_mirrors_english_to_french():
    forward = load_config(CONFIGS / "hansards_rnn.yaml").to_dict()
    reverse = load_config(CONFIGS / "hansards_rnn_fr_en.yaml").to_dict()
    assert (forward["data"]["src_lang"], forward["data"]["tgt_lang"]) == ("en", "fr")
    assert (reverse["data"]["src_lang"], reverse["data"]["tgt_lang"]) == ("fr", "en")
    for split in ("train", "valid"):
        assert list(reverse["data"][split]) == list(reversed(forward["data"][split]))
    assert {name: list(reversed(files)) for name, files in forward["data"]["test"].items()} == \
        {name: list(files) for name, files in reverse["data"]["test"].items()}
    swapped = ("src_lang", "tgt_lang", "train", "valid", "test")
    assert {k: v for k, v in forward["data"].items() if k not in swapped} == \
        {k: v for k, v in reverse["data"].items() if k not in swapped}
    for section in ("model", "training", "search"):
        assert forward[section] == reverse[section], section


def test_hansards_guided_recipe_is_the_plain_one_plus_the_guide():
    """The guided translator differs from configs/hansards_rnn.yaml only in its attention and the
    guide, so the two runs' AER compare what guidance adds."""
    plain = load_config(CONFIGS / "hansards_rnn.yaml").to_dict()
    guided = load_config(CONFIGS / "hansards_rnn_guided.yaml").to_dict()
    assert Path(guided["data"].pop("train_links")).name == "train.links"
    assert plain["data"].pop("train_links") is None
    assert guided["data"] == plain["data"]
    assert (guided["model"].pop("attention"), guided["model"].pop("attention_options")) == \
        ("multihead", {"num_heads": 4})
    assert {k: v for k, v in plain["model"].items() if k not in ("attention", "attention_options")} == guided["model"]
    guide_keys = ("guide_weight", "guide_head", "guide_shift")
    assert (guided["training"]["guide_head"], guided["training"]["guide_shift"]) == (1, True)
    assert {k: v for k, v in guided["training"].items() if k not in guide_keys} == \
        {k: v for k, v in plain["training"].items() if k not in guide_keys}
    assert guided["search"] == plain["search"]


def test_eflomal_guided_recipes_are_the_guided_one_with_the_teacher_and_mirror_each_other():
    """configs/hansards_align_*.yaml: configs/hansards_rnn_guided.yaml with eflomal's links, guide
    weight 1.0 and one thread for 120 minutes, in both directions, otherwise the same."""
    guided = load_config(CONFIGS / "hansards_rnn_guided.yaml").to_dict()
    forward = load_config(CONFIGS / "hansards_align_en_fr.yaml").to_dict()
    reverse = load_config(CONFIGS / "hansards_align_fr_en.yaml").to_dict()
    assert Path(forward["data"].pop("train_links")).name == "train.en-fr.links"
    assert Path(reverse["data"].pop("train_links")).name == "train.fr-en.links"
    guided["data"].pop("train_links")
    assert forward["data"] == guided["data"]
    changed = {"guide_weight": 1.0, "max_minutes": 120, "num_threads": 1}
    assert {k: forward["training"][k] for k in changed} == changed
    assert {k: v for k, v in forward["training"].items() if k not in changed} == \
        {k: v for k, v in guided["training"].items() if k not in changed}
    assert (forward["model"], forward["search"]) == (guided["model"], guided["search"])
    for split in ("train", "valid"):
        assert list(reverse["data"][split]) == list(reversed(forward["data"][split]))
    assert {name: list(reversed(files)) for name, files in forward["data"]["test"].items()} == \
        {name: list(files) for name, files in reverse["data"]["test"].items()}
    for section in ("model", "training", "search"):
        assert forward[section] == reverse[section], section


def test_null_guided_recipes_are_the_eflomal_ones_with_unaligned_words_on_eos():
    """configs/hansards_align_null_*.yaml: the eflomal-guided recipes with a guide file that also
    has possible links and guide_unaligned: eos, nothing else changed."""
    for direction in ("en_fr", "fr_en"):
        plain = load_config(CONFIGS / f"hansards_align_{direction}.yaml").to_dict()
        null = load_config(CONFIGS / f"hansards_align_null_{direction}.yaml").to_dict()
        pair = direction.replace("_", "-")
        assert Path(null["data"].pop("train_links")).name == f"train.{pair}.null.links"
        plain["data"].pop("train_links")
        assert (plain["training"].pop("guide_unaligned"), null["training"].pop("guide_unaligned")) == ("ignore", "eos")
        assert plain == null


def test_prefix6_recipes_are_the_null_ones_with_the_prefix6_teacher():
    """configs/hansards_align_prefix6_*.yaml: configs/hansards_align_null_*.yaml guided by the file
    that `attnmt align --eflomal --eflomal-prefix 6` writes, nothing else changed."""
    for direction in ("en_fr", "fr_en"):
        null = load_config(CONFIGS / f"hansards_align_null_{direction}.yaml").to_dict()
        prefix6 = load_config(CONFIGS / f"hansards_align_prefix6_{direction}.yaml").to_dict()
        pair = direction.replace("_", "-")
        assert Path(prefix6["data"].pop("train_links")).name == f"train.{pair}.prefix6.links"
        null["data"].pop("train_links")
        assert prefix6 == null


def test_plustest_recipes_are_the_prefix6_ones_reading_the_trial_and_test_text():
    """configs/hansards_align_plustest_*.yaml: configs/hansards_align_prefix6_*.yaml trained on the
    training pairs followed by the trial and test pairs, with the prefix-6 guide extended by empty
    lines (those pairs train the translation only); nothing else changed."""
    for direction in ("en_fr", "fr_en"):
        prefix6 = load_config(CONFIGS / f"hansards_align_prefix6_{direction}.yaml").to_dict()
        plustest = load_config(CONFIGS / f"hansards_align_plustest_{direction}.yaml").to_dict()
        src, tgt = direction.split("_")
        assert [Path(path).name for path in plustest["data"].pop("train")] == [f"train+eval.{src}.gz",
                                                                               f"train+eval.{tgt}.gz"]
        assert Path(plustest["data"].pop("train_links")).name == f"train+eval.{src}-{tgt}.prefix6.links"
        for key in ("train", "train_links"):
            prefix6["data"].pop(key)
        assert plustest == prefix6


def test_eflomal_guided_transformers_share_the_rnn_recipes_data_and_mirror_each_other():
    rnn = load_config(CONFIGS / "hansards_align_en_fr.yaml").to_dict()
    forward = load_config(CONFIGS / "hansards_align_transformer_en_fr.yaml").to_dict()
    reverse = load_config(CONFIGS / "hansards_align_transformer_fr_en.yaml").to_dict()
    assert forward["data"] == rnn["data"]
    assert reverse["data"] == load_config(CONFIGS / "hansards_align_fr_en.yaml").to_dict()["data"]
    assert forward["model"]["type"] == "transformer"
    assert (forward["training"]["guide_layer"], forward["training"]["guide_head"]) == (2, 1)
    for section in ("model", "training", "search"):
        assert forward[section] == reverse[section], section


def test_multi30k_bf16_recipe_is_the_fp32_one_in_bfloat16():
    fp32 = load_config(CONFIGS / "multi30k_rnn.yaml").to_dict()
    bf16 = load_config(CONFIGS / "multi30k_rnn_bf16.yaml").to_dict()
    assert (fp32["training"].pop("precision"), bf16["training"].pop("precision")) == ("fp32", "bf16")
    assert fp32 == bf16
