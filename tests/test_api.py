"""The public API of 0.2.0: what ``import attnmt`` gives, and the names of 0.1.0 that keep working
for one version, each with a warning (module paths, parameters, config keys, a scoring name).
Library errors name parameters; the command line writes them as its options."""

from __future__ import annotations

import importlib
import math
import sys
import warnings

import numpy as np
import pytest

import attnmt
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


# ---------------------------------------------------------------------------- old module paths


@pytest.mark.parametrize("old, new, name", [
    ("attnmt.translator", "attnmt.decoding.translator", "Translator"),
    ("attnmt.config", "attnmt.runs.run_config", "load_config"),
    ("attnmt.notebook", "attnmt.visual.notebook", "show"),
    ("attnmt.viewing", "attnmt.visual.examples", "view_examples"),
])
def test_an_old_module_path_gives_the_new_names_and_warns(old, new, name):
    sys.modules.pop(old, None)  # a module warns when it is first imported
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    assert set(module.__all__) == set(importlib.import_module(new).__all__)


# ---------------------------------------------------------------------------- old parameter names


def test_beam_search_takes_beam_size_with_a_warning():
    import torch

    src, mask = torch.tensor([[4, 3]]), torch.tensor([[True, True]])
    expected = beam_search(BigramToy(), src, mask, beam=2, alpha=0.0, max_len_a=0, max_len_b=3)[0][0]
    with pytest.warns(DeprecationWarning, match=r"beam_search\(beam_size=...\) is beam_search\(beam=...\)"):
        found = beam_search(BigramToy(), src, mask, beam_size=2, alpha=0.0, max_len_a=0, max_len_b=3)[0][0]
    assert (found.tokens, found.score) == (expected.tokens, expected.score)
    assert found.score == pytest.approx(math.log(0.4 * 0.9))
    with pytest.raises(TypeError, match="got both beam_size and beam"):
        beam_search(BigramToy(), src, mask, beam=2, beam_size=2)


def test_the_output_side_is_out_and_tgt_still_works_with_a_warning(tmp_path):
    weights = np.random.default_rng(0).dirichlet(np.ones(3), size=3)
    pieces, out = ["▁a", "b", "▁c"], ["▁x", "▁y", "z"]
    with pytest.warns(DeprecationWarning, match="tgt_pieces"):
        old = merge_subwords(weights, pieces, tgt_pieces=out)
    new = merge_subwords(weights, pieces, out_pieces=out)
    np.testing.assert_array_equal(old[0], new[0])
    assert old[1:] == new[1:]
    with pytest.warns(DeprecationWarning, match="tgt_spans"):
        np.testing.assert_array_equal(merge_spans(weights, [(0, 2), (2, 3)], tgt_spans=[(0, 1), (1, 3)]), new[0])
    with pytest.warns(DeprecationWarning, match=r"plot_attention\(tgt_tokens=...\)"):
        path = plot_attention(weights, ["a", "b", "c"], tgt_tokens=["x", "y", "z"], path=tmp_path / "old.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_translator_takes_search_with_a_warning(tmp_path):
    model = build_model(tiny_run_config(tmp_path)["model"], 40, 40)
    tokenizers = object()  # only stored
    with pytest.warns(DeprecationWarning, match=r"search=...\) is .*search_config=...\)"):
        translator = attnmt.Translator(model, tokenizers, search=SearchConfig(beam=3))
    assert translator.search_config.beam == 3
    with pytest.warns(DeprecationWarning, match="Translator.search is deprecated"):
        assert translator.search is translator.search_config


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


# ---------------------------------------------------------------------------- the vector scoring's old name


def test_the_scaled_dot_scoring_answers_to_seed_with_a_warning(tmp_path, capsys):
    with pytest.warns(DeprecationWarning, match="'seed' is called 'scaled_dot'"):
        assert VectorScoring.named("seed") == VectorScoring.scaled_dot()
    with pytest.warns(DeprecationWarning, match="VectorScoring.seed is deprecated"):
        assert VectorScoring.seed() == VectorScoring.scaled_dot()
    vectors = {"en": ["the 1 0", "cat 0 1"], "fr": ["le 1 0.1", "chat 0.1 1"]}
    for language, lines in vectors.items():
        (tmp_path / f"{language}.vec").write_text("2 2\n" + "\n".join(lines) + "\n", encoding="utf-8")
    outputs = {}
    for name in ("scaled_dot", "seed"):
        assert main(["align-words", "--src-vectors", str(tmp_path / "en.vec"), "--tgt-vectors",
                     str(tmp_path / "fr.vec"), "--src", "the cat", "--tgt", "le chat", "--scoring", name]) == 0
        outputs[name] = capsys.readouterr()
    assert outputs["seed"].out == outputs["scaled_dot"].out
    assert "warning: --scoring seed is called --scoring scaled_dot" in outputs["seed"].err


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
