"""Alignment from a translator's attention (attnmt.alignment.translator_attention and `attnmt align --model`),
on tiny runs trained here for a few steps on made-up data (test_training's helpers): word spans of
sentencepiece pieces, merging to words, EOS removal, layer/head choice, direction, batching, CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnmt.alignment import align_corpus, alignment_error_rate, read_pharaoh_alignments
from attnmt.alignment.translator_attention import (
    TranslatorAligner,
    merge_spans,
    piece_to_word_weights,
    saliency_weights,
    word_pieces,
)
from attnmt.cli import main as cli_main
from attnmt.data.pieces import merge_subwords, spans_of
from attnmt.data.tokenizer import BOS_ID, EOS_ID, UNK_ID
from attnmt.decoding.translator import Translator
from attnmt.errors import ConfigError

from helpers import make_pairs, run_trainer, tiny_run_config, tolerance

pytestmark = pytest.mark.slow  # tiny trained runs

MODELS = {
    # the mechanism and flow of configs/hansards_rnn.yaml
    "rnn": {"type": "rnn", "embed_dim": 16, "hidden_dim": 32, "dropout": 0.1, "attention": "general",
            "flow": "parallel"},
    # input feeding: the attention of step i depends on that of step i - 1
    "rnn-luong": {"type": "rnn", "embed_dim": 16, "hidden_dim": 32, "dropout": 0.1, "attention": "additive",
                  "flow": "luong"},
    "transformer": {"type": "transformer", "d_model": 16, "num_heads": 2, "ffn_dim": 32, "encoder_layers": 1,
                    "decoder_layers": 2, "dropout": 0.1},
}


@pytest.fixture(scope="module", params=list(MODELS))
def run_dir(request, tmp_path_factory) -> Path:
    """A de→en run of 3 steps: its attention is far from an alignment, but shapes and sums are real."""
    folder = tmp_path_factory.mktemp(f"align-{request.param}")
    config = tiny_run_config(folder, train_pairs=60, valid_pairs=5, max_steps=3, bleu_max_sentences=0, examples=0)
    config["model"] = MODELS[request.param]
    run_trainer(folder, config)
    return folder / "run"


@pytest.fixture(scope="module")
def translator(run_dir) -> Translator:
    """The run loaded. After 3 steps the RNN's additive attention is still almost uniform and the
    same in every row, which would hide a wrong row or column: its weights are scaled up 10x."""
    loaded = Translator.load(run_dir)
    if loaded.model.model_type == "rnn":
        with torch.no_grad():
            for parameter in loaded.model.attention.parameters():
                parameter.mul_(10)
    return loaded


def sentence_pairs(count: int = 6) -> tuple[list[list[str]], list[list[str]]]:
    """Made-up pairs split into words, of different lengths (so batches are padded)."""
    src, tgt = make_pairs(count, seed=11)
    return [line.split() for line in src], [line.split() for line in tgt]


def reference_weights(translator: Translator, src_words, tgt_words, layer: int, head: int | None,
                      shift: bool = False) -> np.ndarray:
    """One pair alone, without padding, merged by plotting.merge_subwords in float64.

    layer/head are 0-based here; head None = mean over heads.
    """
    src_tok, tgt_tok = translator.tokenizers.src, translator.tokenizers.tgt
    src_ids = src_tok.encode(" ".join(src_words)) + [EOS_ID]
    tgt_ids = tgt_tok.encode(" ".join(tgt_words))
    device = translator.device
    with torch.no_grad():
        _, weights = translator.model(torch.tensor([src_ids], device=device),
                                      torch.ones(1, len(src_ids), dtype=torch.bool, device=device),
                                      torch.tensor([[BOS_ID] + tgt_ids], device=device), return_attention="heads")
    weights = weights[0].double().cpu().numpy()
    if weights.ndim == 3:  # RNN: [h, T, S]
        weights = weights[None]
    per_head = weights[layer]
    matrix = per_head.mean(axis=0) if head is None else per_head[head]
    matrix = matrix[1:] if shift else matrix[:-1]  # rows of the target pieces
    matrix = matrix[:, :-1]  # no source EOS
    matrix = matrix / matrix.sum(axis=1, keepdims=True)
    merged, src_merged, tgt_merged = merge_subwords(matrix, src_tok.pieces(src_ids[:-1]), tgt_tok.pieces(tgt_ids))
    assert [len(src_merged), len(tgt_merged)] == [len(src_words), len(tgt_words)]  # "▁" grouping agrees here
    return merged


# ---- pieces and words ------------------------------------------------------------------------


def test_word_pieces_give_the_sentence_encoding_and_each_words_span(translator):
    tokenizer = translator.tokenizers.src
    words = ["Ein", "hund", "springt", "im", "garten."]
    ids, spans = word_pieces(tokenizer, words)
    assert ids == tokenizer.encode(" ".join(words))  # the ids the model saw in training
    assert [stop - start for start, stop in spans] == [len(tokenizer.encode(word)) for word in words]
    assert max(stop - start for start, stop in spans) > 1  # a 64-piece vocabulary splits "springt"
    assert spans[0][0] == 0 and spans[-1][1] == len(ids)
    assert all(spans[k][1] == spans[k + 1][0] for k in range(len(spans) - 1))

    # Words sentencepiece splits oddly: an unknown character inside, a no-break space inside, and a
    # zero-width space that the normaliser deletes. Each keeps exactly one span.
    odd = ["x\u2603y", "a\u00a0b", "\u200b", "hund"]
    ids, spans = word_pieces(tokenizer, odd)
    assert len(spans) == 4
    assert UNK_ID in ids[spans[0][0]:spans[0][1]]
    assert ids[spans[2][0]:spans[2][1]] == [UNK_ID]  # empty encoding -> one UNK piece
    assert ids[spans[3][0]:spans[3][1]] == tokenizer.encode("hund")
    assert word_pieces(tokenizer, []) == ([], [])
    with pytest.raises(TypeError, match="not one string"):
        word_pieces(tokenizer, "ein hund")


def test_merge_spans_sums_over_source_pieces_and_averages_over_target_pieces():
    weights = np.array([[0.1, 0.2, 0.3, 0.4],
                        [0.4, 0.4, 0.1, 0.1],
                        [0.0, 0.5, 0.5, 0.0]])
    # source words: pieces {0}, {1, 2}, {3}; target words: pieces {0, 1}, {2}
    merged = merge_spans(weights, [(0, 1), (1, 3), (3, 4)], [(0, 2), (2, 3)])
    np.testing.assert_allclose(merged, [[0.25, 0.5, 0.25], [0.0, 1.0, 0.0]])
    # the same as merge_subwords when the pieces carry "▁" where the words start
    expected, _, _ = merge_subwords(weights, ["▁a", "▁b", "c", "▁d"], ["▁x", "y", "▁z"])
    np.testing.assert_allclose(merged, expected)
    with pytest.raises(ValueError, match="tile"):
        merge_spans(weights, [(0, 1), (2, 4)], [(0, 3)])
    with pytest.raises(ValueError, match="cover 3 pieces"):
        merge_spans(weights, [(0, 3)], [(0, 3)])


def test_eos_column_is_dropped_and_rows_renormalised():
    pieces = np.array([[0.2, 0.2, 0.6],     # last column: the source EOS
                       [0.5, 0.3, 0.2],
                       [0.0, 0.0, 1.0]])    # a piece that looked only at EOS
    words = piece_to_word_weights(pieces, [(0, 1), (1, 2)], [(0, 1), (1, 2), (2, 3)])
    np.testing.assert_allclose(words, [[0.5, 0.5], [0.625, 0.375], [0.0, 0.0]])
    raw = piece_to_word_weights(pieces, [(0, 1), (1, 2)], [(0, 1), (1, 2), (2, 3)], renormalize=False)
    np.testing.assert_allclose(raw, pieces[:, :2])


# ---- the aligner ---------------------------------------------------------------------------


def test_weights_have_one_row_per_target_word_summing_to_one(translator):
    aligner = TranslatorAligner(translator)
    src, tgt = sentence_pairs()
    weights = aligner.weights_many(src, tgt)
    for src_words, tgt_words, matrix in zip(src, tgt, weights):
        assert matrix.shape == (len(tgt_words), len(src_words))
        assert (matrix >= 0).all()
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-6)


def test_batched_force_decoding_equals_each_pair_alone(translator):
    """Padding and batching change nothing (float64 reference: one pair, merge_subwords)."""
    src, tgt = sentence_pairs()
    layers = 2 if translator.model.model_type == "transformer" else 1
    aligner = TranslatorAligner(translator, max_tokens=40)  # several batches
    for src_words, tgt_words, matrix in zip(src, tgt, aligner.weights_many(src, tgt)):
        expected = reference_weights(translator, src_words, tgt_words, layer=max(0, layers - 2), head=None)
        np.testing.assert_allclose(matrix, expected, atol=tolerance(1e-5, translator.device))
    shifted = TranslatorAligner(translator, shift=True).weights_many(src[:2], tgt[:2])
    for src_words, tgt_words, matrix in zip(src, tgt, shifted):
        expected = reference_weights(translator, src_words, tgt_words, layer=max(0, layers - 2), head=None, shift=True)
        np.testing.assert_allclose(matrix, expected, atol=tolerance(1e-5, translator.device))


def test_transformer_layer_and_head_selection(translator):
    src, tgt = sentence_pairs(3)
    if translator.model.model_type != "transformer":
        assert TranslatorAligner(translator).layer == 1
        with pytest.raises(ConfigError, match="decoder layer 2 is out of range: the model has 1 decoder layer "):
            TranslatorAligner(translator, layer=2)
        with pytest.raises(ConfigError, match="head 2 is out of range: the model has 1 head "):
            TranslatorAligner(translator, head=2)
        return
    default = TranslatorAligner(translator)
    assert (default.layer, default.head) == (1, None)  # penultimate of 2 layers, mean of the heads
    assert "layer 1 of 2, mean of 2 heads" in default.describe()
    assert TranslatorAligner(translator, layer=-1).layer == 2
    chosen = TranslatorAligner(translator, layer=2, head=2)
    for src_words, tgt_words, matrix in zip(src, tgt, chosen.weights_many(src, tgt)):
        assert matrix.shape == (len(tgt_words), len(src_words))
        np.testing.assert_allclose(matrix, reference_weights(translator, src_words, tgt_words, layer=1, head=1),
                                   atol=tolerance(1e-5, translator.device))
    forced = default.forced_attention(src, tgt)
    assert forced[0].weights.shape[:2] == (2, 2)
    np.testing.assert_allclose(forced[0].word_weights(2, 2), chosen(src[0], tgt[0]),
                               atol=tolerance(1e-6, translator.device))
    for bad, message in ((3, "decoder layer 3 is out of range: the model has 2 decoder layers"),
                         (0, "decoder layer 0 is out of range"), (-3, "decoder layer -3 is out of range")):
        with pytest.raises(ConfigError, match=message):
            TranslatorAligner(translator, layer=bad)
    with pytest.raises(ConfigError, match="head 3 is out of range: the model has 2 heads"):
        TranslatorAligner(translator, head=3)
    with pytest.raises(TypeError, match="integer"):
        TranslatorAligner(translator, layer=1.5)


def test_reversed_direction_transposes_the_swapped_pair(translator):
    """Aligning en (the run's target) as source: force-decode de→en on the swapped pair, transpose."""
    de, en = sentence_pairs(3)
    forward = TranslatorAligner(translator)
    reverse = TranslatorAligner(translator, src_lang="en")
    assert reverse.reversed and reverse.languages == ("en", "de") and "reversed" in reverse.describe()
    for en_words, de_words, matrix in zip(en, de, reverse.weights_many(en, de)):
        assert matrix.shape == (len(de_words), len(en_words))
        np.testing.assert_allclose(matrix, forward(de_words, en_words).T,
                                   atol=tolerance(1e-6, translator.device))  # other batches: float noise
    with pytest.raises(ConfigError, match="neither of the run's languages: it translates de → en"):
        TranslatorAligner(translator, src_lang="fr")


def test_align_corpus_uses_the_precomputed_batch_and_matches_single_calls(translator):
    src, tgt = sentence_pairs()
    src.append([])  # an empty side: no links, no forward call
    tgt.append(["A"])
    aligner = TranslatorAligner(translator)
    links = aligner.align(src, tgt, "grow-diag")
    assert len(links) == len(src) and links[-1] == set()
    assert len(aligner._cache) == len(src)
    alone = TranslatorAligner(translator)  # no precompute: every call is a batch of one
    assert align_corpus(alone, src, tgt, "grow-diag") == links
    assert all(0 <= i < len(s) and 0 <= j < len(t) for pair, s, t in zip(links, src, tgt) for i, j in pair)


# ---- the command line ------------------------------------------------------------------------


def test_cli_align_with_a_model_writes_pharaoh_links_and_scores_them(run_dir, tmp_path, capsys):
    src, tgt = sentence_pairs(5)
    (tmp_path / "test.de").write_text("".join(" ".join(s) + "\n" for s in src), encoding="utf-8")
    (tmp_path / "test.en").write_text("".join(" ".join(t) + "\n" for t in tgt), encoding="utf-8")
    gold = tmp_path / "gold.txt"  # the made-up task is word for word: the diagonal
    gold.write_text("".join(" ".join(f"{k}-{k}" for k in range(len(s))) + "\n" for s in src), encoding="utf-8")
    out = tmp_path / "links.txt"
    code = cli_main(["align", "--model", str(run_dir), "--src", str(tmp_path / "test.de"), "--tgt",
                     str(tmp_path / "test.en"), "--method", "tgt2src", "--out", str(out), "--gold", str(gold)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "alignment source de = the translator's source" in captured.out
    predicted = read_pharaoh_alignments(out, src_lengths=[len(s) for s in src], tgt_lengths=[len(t) for t in tgt])
    assert [len(links) for links in predicted.sure] == [len(t) for t in tgt]  # tgt2src: one link per target word
    gold_links = read_pharaoh_alignments(gold)
    scores = alignment_error_rate(predicted.sure, gold_links.sure)
    assert f"AER {scores['aer']:.4f}  precision {scores['precision']:.4f}" in captured.out

    # The other direction is read from the file suffixes: en is the run's target language.
    reverse_out = tmp_path / "reverse.txt"
    assert cli_main(["align", "--model", str(run_dir), "--src", str(tmp_path / "test.en"), "--tgt",
                     str(tmp_path / "test.de"), "--method", "src2tgt", "--out", str(reverse_out)]) == 0
    assert "reversed: en is the alignment source" in capsys.readouterr().out
    reverse = read_pharaoh_alignments(reverse_out)
    assert [len(links) for links in reverse.sure] == [len(t) for t in tgt]  # src2tgt: one link per en word

    # Options of the other weight source are refused rather than ignored.
    assert cli_main(["align", "--model", str(run_dir), "--src", str(tmp_path / "test.de"), "--tgt",
                     str(tmp_path / "test.en"), "--out", str(tmp_path / "x.txt"), "--temperature", "0.1"]) == 2
    assert "--temperature: only with --vectors" in capsys.readouterr().err
    assert cli_main(["align", "--model", str(run_dir), "--src", str(tmp_path / "test.de"), "--tgt",
                     str(tmp_path / "test.en"), "--out", str(tmp_path / "x.txt"), "--layer", "7"]) == 2
    assert "decoder layer 7 is out of range" in capsys.readouterr().err
    assert cli_main(["align", "--vectors", str(tmp_path / "vectors"), "--src", str(tmp_path / "test.de"), "--tgt",
                     str(tmp_path / "test.en"), "--out", str(tmp_path / "x.txt"), "--layer", "1", "--shift"]) == 2
    assert "--layer, --shift: only with --model" in capsys.readouterr().err
    assert not (tmp_path / "x.txt").exists()


def test_cli_align_combines_translators_and_vectors_by_geometric_mean(run_dir, tmp_path, capsys):
    from attnmt.alignment import CombinedAligner, VectorAligner, WordVectors, load_vector_dir, save_vector_dir

    src, tgt = sentence_pairs(5)
    src_file, tgt_file = tmp_path / "test.de", tmp_path / "test.en"
    src_file.write_text("".join(" ".join(s) + "\n" for s in src), encoding="utf-8")
    tgt_file.write_text("".join(" ".join(t) + "\n" for t in tgt), encoding="utf-8")
    rng = np.random.default_rng(3)
    vocab = {side: sorted({w.lower() for sentence in sentences for w in sentence}) for side, sentences in
             (("de", src), ("en", tgt))}
    save_vector_dir(tmp_path / "vectors", WordVectors(vocab["de"], rng.standard_normal((len(vocab["de"]), 8))),
                    WordVectors(vocab["en"], rng.standard_normal((len(vocab["en"]), 8))), {"method": "random"},
                    src_lang="de", tgt_lang="en")

    def align(*extra, name):
        out = tmp_path / f"{name}.txt"
        code = cli_main(["align", "--src", str(src_file), "--tgt", str(tgt_file), "--method", "intersect",
                         "--out", str(out), *extra])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        return read_pharaoh_alignments(out).sure, captured.out

    alone, _ = align("--model", str(run_dir), name="alone")
    twice, out = align("--model", str(run_dir), "--model", str(run_dir), name="twice")
    assert "combined: geometric mean of" in out and "(0.5)" in out
    assert twice == alone  # the geometric mean of a source with itself is that source

    mixed, out = align("--model", str(run_dir), "--vectors", str(tmp_path / "vectors"), "--vector-weight", "0.4",
                       name="mixed")
    assert "(0.6), vectors" in out and "(0.4)" in out
    src_vectors, tgt_vectors, _ = load_vector_dir(tmp_path / "vectors")
    expected = align_corpus(
        CombinedAligner([TranslatorAligner(Translator.load(run_dir)), VectorAligner(src_vectors, tgt_vectors,
                                                                                    lowercase=True)], [0.6, 0.4]),
        src, tgt, "intersect")
    assert [set(links) for links in mixed] == expected
    vectors_only, _ = align("--vectors", str(tmp_path / "vectors"), name="vectors")
    all_vector, _ = align("--model", str(run_dir), "--vectors", str(tmp_path / "vectors"), "--vector-weight", "1",
                          name="all-vector")
    assert all_vector == vectors_only  # cased words reach the lower-case vectors

    for extra, message in ((["--vectors", str(tmp_path / "vectors"), "--vector-weight", "0.5"],
                            "--vector-weight: only with both --vectors and --model"),
                           (["--model", str(run_dir), "--vectors", str(tmp_path / "vectors"), "--vector-weight",
                             "1.5"], "--vector-weight must be in [0, 1], got 1.5"),
                           ([], "give the weights to align with")):
        assert cli_main(["align", "--src", str(src_file), "--tgt", str(tgt_file), "--out",
                         str(tmp_path / "refused.txt"), *extra]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "refused.txt").exists()


def test_cli_refuses_to_combine_a_translator_and_vectors_of_other_languages(run_dir, tmp_path, capsys):
    src, tgt = sentence_pairs(2)
    (tmp_path / "test.de").write_text("".join(" ".join(s) + "\n" for s in src), encoding="utf-8")
    (tmp_path / "test.en").write_text("".join(" ".join(t) + "\n" for t in tgt), encoding="utf-8")
    vectors = tmp_path / "vectors"  # en.vec and fr.vec: English-French, not the run's German-English
    vectors.mkdir()
    words = sorted({w.lower() for s in src + tgt for w in s})
    for name in ("en.vec", "fr.vec"):
        (vectors / name).write_text(f"{len(words)} 2\n" + "".join(f"{w} 1 {k}\n" for k, w in enumerate(words)))
    assert cli_main(["align", "--model", str(run_dir), "--vectors", str(vectors), "--src", str(tmp_path / "test.de"),
                     "--tgt", str(tmp_path / "test.en"), "--out", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err
    assert "aligns de → en, but --vectors" in err and "holds en → fr" in err
    assert not (tmp_path / "x.txt").exists()


def test_saliency_weights_are_the_positive_part_of_each_row_normalised():
    scores = np.array([[2.0, -1.0, 2.0], [-1.0, -2.0, -0.5], [0.0, 3.0, 1.0]])
    np.testing.assert_allclose(saliency_weights(scores), [[0.5, 0, 0.5], [0, 0, 0], [0, 0.75, 0.25]])


def test_saliency_aligner_reads_the_saliency_of_each_pair_through_the_same_pipeline(translator):
    """Word weights from saliency = the positive part of gradient × input per target piece,
    normalised, EOS dropped, renormalised and merged into words: as the attention's, from the
    translator's own ``read_attributions`` of the pair; the reversed direction transposes."""
    src, tgt = sentence_pairs(4)
    aligner = TranslatorAligner(translator, saliency="gradient")
    assert "gradient × input, its positive part normalised per row, output reading" in aligner.describe()
    for words_src, words_tgt, weights in zip(src, tgt, aligner.weights_many(src, tgt)):
        sources, src_spans = spans_of(translator.encode_words(words_src, "source"), UNK_ID)
        outputs, tgt_spans = spans_of(translator.encode_words(words_tgt, "target"), UNK_ID)
        [(_, scores)] = list(translator.attribute([sources + [EOS_ID]], [outputs + [EOS_ID]]))
        expected = piece_to_word_weights(saliency_weights(scores)[:-1], src_spans, tgt_spans)
        np.testing.assert_allclose(weights, expected, atol=tolerance(1e-6, translator.device))
        assert weights.shape == (len(words_tgt), len(words_src))
    backwards = TranslatorAligner(translator, saliency="gradient", src_lang="en").weights_many(tgt, src)
    for forward, backward in zip(aligner.weights_many(src, tgt), backwards):
        np.testing.assert_allclose(backward, forward.T, atol=1e-6)
    with pytest.raises(ConfigError, match="saliency has neither"):
        TranslatorAligner(translator, saliency="gradient", layer=1)


def test_cli_align_with_saliency_writes_links_and_refuses_layers(run_dir, tmp_path, capsys):
    src, tgt = sentence_pairs(4)
    (tmp_path / "test.de").write_text("".join(" ".join(s) + "\n" for s in src), encoding="utf-8")
    (tmp_path / "test.en").write_text("".join(" ".join(t) + "\n" for t in tgt), encoding="utf-8")
    files = ["--src", str(tmp_path / "test.de"), "--tgt", str(tmp_path / "test.en")]
    out = tmp_path / "links.txt"
    assert cli_main(["align", "--model", str(run_dir), *files, "--method", "tgt2src", "--out", str(out),
                     "--attribution", "integrated", "--attribution-steps", "4"]) == 0
    assert "integrated gradients (4 steps), its positive part normalised per row" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 4
    assert cli_main(["align", "--model", str(run_dir), *files, "--out", str(tmp_path / "x.txt"), "--attribution",
                     "gradient", "--layer", "1"]) == 2
    assert "--layer and --head choose an attention; --attribution has neither" in capsys.readouterr().err
    assert cli_main(["align", "--vectors", str(tmp_path), *files, "--out", str(tmp_path / "x.txt"), "--attribution",
                     "gradient"]) == 2
    assert "--attribution: only with --model or --hf" in capsys.readouterr().err
    assert not (tmp_path / "x.txt").exists()


def test_a_files_language_is_its_last_suffix_when_the_translator_has_that_language():
    from attnmt.alignment.translator_attention import file_language

    assert file_language("data/test.en-fr.en", ("en", "fr")) == "en"
    assert file_language("valid.fr.gz", ("en", "fr")) == "fr"
    assert file_language("test.de", ("en", "fr")) is None and file_language("README", ("en", "fr")) is None
