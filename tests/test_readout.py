"""``attnmt.models.readout``: force-decoding a given output reads the attention and the
log-probabilities the search saw, the same in a batch as alone, whatever the padding."""

from __future__ import annotations

import numpy as np
import pytest

import attnmt
from attnmt.models.readout import ATTNMT_SPECIALS, SpecialIds, force_decode

from helpers import tolerance

pytestmark = pytest.mark.slow  # trains the tiny runs (once per session)

SENTENCES = ["Ein Hund läuft im Park.", "Die Katze.", "Ein kleiner Mann spielt mit einem roten Ball im Garten.",
             "Kind."]


def _ids(translator, translations):
    src_tok, tgt_tok = translator.tokenizers.src, translator.tokenizers.tgt
    sources = [[src_tok.piece_to_id(piece) for piece in t.src_pieces] for t in translations]
    outputs = [[tgt_tok.piece_to_id(piece) for piece in t.out_pieces] for t in translations]
    return sources, outputs


@pytest.mark.parametrize("beam", [1, 3])
def test_the_readout_of_a_search_output_is_what_the_search_saw(tiny_run, beam):
    """Search decodes one token at a time (cached states); force-decoding reads the whole output at
    once. The log-probabilities sum to the search's score and the last layer's mean over heads is
    the attention the search returned."""
    _, run = tiny_run
    translator = attnmt.Translator.load(run)
    translations = translator.translate(SENTENCES, beam=beam, return_attention=True)
    sources, outputs = _ids(translator, translations)
    readings = dict(force_decode(translator.model, sources, outputs, log_probs=True))
    assert sorted(readings) == list(range(len(SENTENCES)))
    noise = tolerance(1e-5, translator.device)
    for index, translation in enumerate(translations):
        reading = readings[index]
        layers, heads, rows, columns = reading.weights.shape
        assert (rows, columns) == (len(translation.out_pieces), len(translation.src_pieces))
        assert reading.log_probs is not None and reading.log_probs.shape == (rows,)
        assert float(reading.log_probs.sum()) == pytest.approx(translation.score, abs=max(10 * noise, 1e-4))
        np.testing.assert_allclose(reading.weights[-1].mean(axis=0), translation.attention, atol=noise)
        np.testing.assert_allclose(reading.weights.sum(axis=-1), 1.0, atol=1e-5)


def test_a_pair_reads_the_same_in_any_batch_and_with_any_padding_id(tiny_run):
    _, run = tiny_run
    translator = attnmt.Translator.load(run)
    sources, outputs = _ids(translator, translator.translate(SENTENCES))
    together = dict(force_decode(translator.model, sources, outputs, log_probs=True))
    other_pad = SpecialIds(pad=ATTNMT_SPECIALS.start, start=ATTNMT_SPECIALS.start)  # padding no one may read
    padded_otherwise = dict(force_decode(translator.model, sources, outputs, log_probs=True, specials=other_pad))
    for index, (source, output) in enumerate(zip(sources, outputs)):
        [(k, alone)] = list(force_decode(translator.model, [source], [output], log_probs=True))
        assert k == 0
        for reading in (together[index], padded_otherwise[index]):
            np.testing.assert_allclose(reading.weights, alone.weights, atol=1e-5)
            np.testing.assert_allclose(reading.log_probs, alone.log_probs, atol=1e-4)


def test_the_readout_gives_the_model_its_mode_back_and_names_bad_input(tiny_run):
    _, run = tiny_run
    model = attnmt.Translator.load(run).model
    model.train()
    list(force_decode(model, [[5, 6, 3]], [[7, 3]]))
    assert model.training
    with pytest.raises(ValueError, match="2 sources but 1 outputs"):
        list(force_decode(model, [[5, 3], [6, 3]], [[7, 3]]))
    with pytest.raises(ValueError, match="every output needs at least one token"):
        list(force_decode(model, [[5, 3]], [[]]))
