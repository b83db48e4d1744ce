"""The public API: what ``import attnmt`` gives; the names of 0.1.0 are gone in 0.3.0 (module paths,
parameters, a scoring name), while config files that use 0.1.0's keys still load, with a warning.
Library errors name parameters; the command line writes them as its options."""

from __future__ import annotations

import importlib
import sys
import warnings

import numpy as np
import pytest

import attnmt
import attnmt.alignment
from attnmt.alignment.vector_weights import VectorScoring
from attnmt.cli import build_parser, in_command_words, main
from attnmt.data.pieces import merge_spans, merge_subwords
from attnmt.decoding.search import beam_search
from attnmt.errors import ConfigError
from attnmt.models import build_model
from attnmt.runs.run_config import SearchConfig, load_config
from attnmt.visual.heatmap import plot_attention

from helpers import BigramToy, save_yaml, tiny_run_config, tiny_transformer_config

# ---------------------------------------------------------------------------- import attnmt


def test_every_public_name_is_the_object_its_module_defines():
    for name, home in attnmt._HOMES.items():
        assert getattr(attnmt, name) is getattr(importlib.import_module(home), name), name


def test_the_names_the_readme_promises_are_public():
    for name in ("Translator", "train", "load_config", "build_attention", "load_attention", "save_attention",
                 "attention_records", "AttentionRecord", "show", "SearchConfig", "ConfigError"):
        assert name in attnmt.__all__ and name in dir(attnmt)


def test_an_unknown_name_is_an_attribute_error_that_names_it():
    with pytest.raises(AttributeError, match="has no attribute 'Translater'"):
        _ = attnmt.Translater


# ---------------------------------------------------------------------------- names removed in 0.3.0


@pytest.mark.parametrize("old", ["attnmt.translator", "attnmt.config", "attnmt.notebook", "attnmt.viewing"])
def test_the_module_paths_of_0_1_are_gone(old):
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError, match=old):
        importlib.import_module(old)


def test_the_parameter_names_of_0_1_are_gone(tmp_path):
    import torch

    src, mask = torch.tensor([[4, 3]]), torch.tensor([[True, True]])
    with pytest.raises(TypeError, match="beam_size"):
        beam_search(BigramToy(), src, mask, beam_size=2)
    weights = np.random.default_rng(0).dirichlet(np.ones(3), size=3)
    with pytest.raises(TypeError, match="tgt_pieces"):
        merge_subwords(weights, ["▁a", "b", "▁c"], tgt_pieces=["▁x", "▁y", "z"])
    with pytest.raises(TypeError, match="tgt_spans"):
        merge_spans(weights, [(0, 2), (2, 3)], tgt_spans=[(0, 1), (1, 3)])
    with pytest.raises(TypeError, match="tgt_tokens"):
        plot_attention(weights, ["a", "b", "c"], tgt_tokens=["x", "y", "z"], path=tmp_path / "old.png")
    model = build_model(tiny_run_config(tmp_path)["model"], 40, 40)
    with pytest.raises(TypeError, match="search"):
        attnmt.Translator(model, object(), search=SearchConfig(beam=3))
    translator = attnmt.Translator(model, object(), search_config=SearchConfig(beam=3))
    for old in ("search", "layer_head_attention"):
        assert not hasattr(translator, old)
    assert not hasattr(VectorScoring, "seed") and not hasattr(attnmt.alignment, "load_seed_vectors")
    with pytest.raises(ValueError, match="seed"):
        VectorScoring.named("seed")


def test_the_scoring_seed_of_0_1_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["align-words", "--src-vectors", "en.vec", "--tgt-vectors", "fr.vec", "--src", "a", "--tgt", "b",
              "--scoring", "seed"])
    assert stopped.value.code == 2
    assert "invalid choice: 'seed'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- old config keys


def test_a_config_with_old_model_keys_loads_with_a_warning_that_names_the_file(tmp_path):
    config = tiny_run_config(tmp_path)
    config["model"]["tie_embeddings"] = True
    path = save_yaml(tmp_path, config, "old.yaml")
    with pytest.warns(FutureWarning, match=r"old\.yaml.*tie_embeddings.*tie_output"):
        loaded = load_config(path)
    assert loaded.model.tie_output is True
    config["model"]["tie_output"] = False
    with pytest.raises(ConfigError, match="tie_embeddings and tie_output are one option"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            load_config(save_yaml(tmp_path, config, "both.yaml"))


def test_a_transformer_section_with_heads_reads_as_num_heads(tmp_path):
    config = tiny_run_config(tmp_path)
    values = {"type": "transformer", **tiny_transformer_config().__dict__}
    values["heads"] = values.pop("num_heads")
    config["model"] = values
    with pytest.warns(FutureWarning, match="heads.*num_heads"):
        loaded = load_config(save_yaml(tmp_path, config))
    assert loaded.model.num_heads == 4


# ---------------------------------------------------------------------------- errors in the command's words


def _command_parser(name: str):
    parser = build_parser()
    subparsers = next(action for action in parser._actions if action.choices and name in action.choices)
    return subparsers.choices[name]


def test_library_errors_are_written_as_the_command_s_options():
    translate = _command_parser("translate")
    assert in_command_words("batch_size=0: must be an integer >= 1", translate) == \
        "--batch-size 0: must be an integer >= 1"
    assert in_command_words("out.txt exists; give overwrite=True", translate) == "out.txt exists; give --overwrite"
    assert in_command_words("num_threads=0: must be an integer >= 1", _command_parser("align")) == \
        "--threads 0: must be an integer >= 1"
    # a parameter the command has no option for, or part of another word, stays as it is
    assert in_command_words("max_len_a=-1: must be >= 0", translate) == "max_len_a=-1: must be >= 0"
    assert in_command_words("search.batch_size=0", translate) == "search.batch_size=0"
