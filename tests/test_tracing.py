"""Causal tracing (attnmt.evaluation.tracing, attnmt trace): restoring states of a corrupted run."""

from __future__ import annotations

import json

import pytest
import torch

from attnmt.cli import main as cli_main
from attnmt.decoding.translator import Translator
from attnmt.evaluation.tracing import WordTracer, trace_word

SENTENCE = "Ein Hund läuft über die Wiese ."


def float64_translator(run) -> Translator:
    translator = Translator.load(run, num_threads=1)
    translator.model.double()
    return translator


def test_restoring_every_state_gives_the_clean_probability_and_restoring_none_the_corrupted(tiny_run):
    """Every state restored (and for a Transformer, every state of its last encoder layer alone):
    the word's probability is the clean one exactly (float64); none restored: the corrupted one;
    noise near 0: the corrupted run is the clean one."""
    name, run = tiny_run
    translator = float64_translator(run)
    tracer = WordTracer(translator, SENTENCE, 1, samples=4, noise=3.0, seed=1)
    with tracer.running():
        every = [(stack, layer, position) for stack, layers, length in (
            ("encoder", len(tracer.stacks.encoder), tracer.source_length),
            ("decoder", len(tracer.stacks.decoder), tracer.prefix_length))
            for layer in range(layers) for position in range(length)]
        assert tracer.restored(every) == pytest.approx(tracer.clean, rel=1e-12)
        if name == "transformer":  # the decoder reads the encoder only through its last layer
            last = len(tracer.stacks.encoder) - 1
            assert tracer.restored([("encoder", last, s) for s in range(tracer.source_length)]) == pytest.approx(
                tracer.clean, rel=1e-12)
        assert tracer.restored([]) == tracer.corrupt
    assert abs(tracer.corrupt - tracer.clean) > 1e-3 * tracer.clean  # the noise does something
    quiet = WordTracer(translator, SENTENCE, 1, samples=2, noise=1e-9, seed=1)
    assert quiet.corrupt == pytest.approx(quiet.clean, rel=1e-6)


def test_a_trace_has_a_grid_per_stack_and_the_state_that_predicts_a_one_piece_word_restores_it(tiny_run):
    from attnmt.data.pieces import group_pieces

    name, run = tiny_run
    translator = float64_translator(run)
    words = group_pieces(translator.translate([SENTENCE])[0].out_pieces)
    one_piece = next(n for n, (_, start, stop) in enumerate(words, start=1) if stop - start == 1)  # </s> at least
    trace = trace_word(translator, SENTENCE, one_piece, samples=3, seed=2)
    layers = len(translator.model.encoder_layers) + 1 if name == "transformer" else 1
    assert len(trace.encoder) == layers and all(len(row) == len(trace.src_pieces) for row in trace.encoder)
    assert len(trace.decoder[0]) == trace.word_pieces[-1]  # <s> and the pieces before the word's last
    if name == "transformer":  # a one-piece word is read at one position of the last decoder layer
        assert len(trace.word_pieces) == 1
        assert trace.decoder[-1][-1] + trace.corrupt == pytest.approx(trace.clean, rel=1e-9)
    assert trace.corrupted and trace.seconds < 30


def test_attnmt_trace_prints_the_grids_and_names_a_bad_word_or_corrupt_list_in_one_line(tiny_run, tmp_path, capsys):
    name, run = tiny_run
    plot = tmp_path / "trace.png"
    assert cli_main(["trace", str(run), SENTENCE, "--word", "1", "--json", "--samples", "2", "--threads", "1",
                     "--plot", str(plot)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["word"] == 1 and printed["samples"] == 2 and plot.stat().st_size > 5_000
    assert cli_main(["trace", str(run), SENTENCE, "--word", "99", "--threads", "1"]) == 2
    assert "--word 99: the translation" in capsys.readouterr().err
    assert cli_main(["trace", str(run), SENTENCE, "--word", "1", "--corrupt", "Katze", "--threads", "1"]) == 2
    assert "--corrupt 'Katze' names no source word; the source words are Ein Hund" in capsys.readouterr().err


def test_tracing_an_rnn_that_decodes_step_by_step_is_one_line(tiny_run, tmp_path, capsys):
    """The Bahdanau and Luong flows call their LSTM one step at a time; tracing says so."""
    from attnmt.errors import ConfigError

    name, run = tiny_run
    if name == "transformer":
        return
    translator = Translator.load(run, num_threads=1)
    translator.model.config.flow = "luong"
    with pytest.raises(ConfigError, match="parallel flow"):
        WordTracer(translator, SENTENCE, 1)
    torch.manual_seed(0)
