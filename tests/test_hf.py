"""Hugging Face translation models (``--hf``), offline, on tiny randomly initialised Marian and T5
models built here from a config and sentencepiece tokenizers trained on the made-up task."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch

from attnmt.cli import main as cli_main

from conftest import skip_or_fail_in_ci
from helpers import make_pairs

pytestmark = pytest.mark.slow  # builds and loads tiny Hugging Face models

if importlib.util.find_spec("transformers") is None:
    skip_or_fail_in_ci("needs transformers (pip install 'attnmt[hf]', also in attnmt[dev])")

SOURCES = ["Ein hund läuft.", "Der mann sitzt im park.", "Eine katze."]


def _train_spm(folder, name, lines, **options):
    (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(folder / f"{name}.txt"), model_prefix=str(folder / name),
                                   vocab_size=64, model_type="unigram", minloglevel=2, hard_vocab_limit=False,
                                   bos_id=-1, **options)
    return spm.SentencePieceProcessor(model_file=str(folder / f"{name}.model"))


def _marian(folder):
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    src, tgt = make_pairs(300, seed=1)
    pieces = []
    for name, lines in (("source", src), ("target", tgt)):
        processor = _train_spm(folder, name, lines, pad_id=-1, eos_id=1, unk_id=0)
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    model_dir = folder / "marian"
    model_dir.mkdir()
    (model_dir / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = MarianTokenizer(str(folder / "source.model"), str(folder / "target.model"),
                                str(model_dir / "vocab.json"))
    config = MarianConfig(vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=2,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                          decoder_ffn_dim=32, max_position_embeddings=128, pad_token_id=vocab["<pad>"],
                          eos_token_id=0, decoder_start_token_id=vocab["<pad>"], forced_eos_token_id=0)
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir


def _t5(folder):
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    src, tgt = make_pairs(300, seed=1)
    processor = _train_spm(folder, "t5", src + tgt, pad_id=0, eos_id=1, unk_id=2)
    vocab = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0)
    config = T5Config(vocab_size=len(vocab), d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2,
                      num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    model_dir = folder / "t5"
    T5ForConditionalGeneration(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir


@pytest.fixture(scope="module", params=["marian", "t5"])
def hf_model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"hf-{request.param}")
    return (_marian if request.param == "marian" else _t5)(folder)


@pytest.fixture(scope="module")
def translator(hf_model):
    from attnmt.decoding.hf import HFTranslator

    return HFTranslator.load(str(hf_model), device="cpu")


def test_translations_are_the_models_own_generation_with_its_attention(translator):
    translations = translator.translate(SOURCES, beam=2, return_attention=True)  # one padded batch
    tokenizer, model = translator.tokenizer, translator.model
    # An untrained model never ends a sentence: every output runs to the limit of the batch,
    # max_len_a · (longest source) + max_len_b + 1 new tokens.
    longest = max(len(tokenizer(sentence).input_ids) for sentence in SOURCES)
    limit = int(translator.search_config.max_len_a * longest + translator.search_config.max_len_b) + 1
    for sentence, translation in zip(SOURCES, translations):
        encoded = tokenizer([sentence], return_tensors="pt")
        generated = model.generate(**encoded, num_beams=2, max_new_tokens=limit)  # alone: no padding
        assert translation.output == tokenizer.decode(generated[0], skip_special_tokens=True).strip()
        assert translation.src_pieces == tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
        [heads] = translator.read_attention([translation])  # [L, h, T, S]
        assert heads.shape == (2, 2, len(translation.out_pieces), len(translation.src_pieces))
        np.testing.assert_allclose(heads.sum(axis=-1), 1.0, atol=1e-5)  # rows over the real source
        # The attention given with the batch (padded) is the last layer's mean over heads, alone.
        np.testing.assert_allclose(translation.attention, heads[-1].mean(axis=0), atol=1e-5)
        with torch.no_grad():
            logits = model(**encoded, decoder_input_ids=generated[:, :-1]).logits[0].log_softmax(-1)
        output_ids = tokenizer.convert_tokens_to_ids(translation.out_pieces)
        assert translation.score == pytest.approx(float(logits[torch.arange(len(output_ids)), output_ids].sum()),
                                                  abs=1e-4)


def test_the_aligner_merges_pieces_into_words_and_batches_change_nothing(translator):
    from attnmt.alignment import TranslatorAligner

    src = [s.split() for s in SOURCES]
    tgt = [t.split() for t in make_pairs(3, seed=9)[1]]
    aligner = TranslatorAligner(translator)  # every pair in one batch
    batched = aligner.weights_many(src, tgt)
    alone = [TranslatorAligner(translator, max_tokens=1).weights_many([s], [t])[0] for s, t in zip(src, tgt)]
    for words_src, words_tgt, many, one in zip(src, tgt, batched, alone):
        assert many.shape == (len(words_tgt), len(words_src))
        np.testing.assert_allclose(many, one, atol=1e-5)
        np.testing.assert_allclose(many.sum(axis=1), 1.0, atol=1e-5)  # EOS dropped, rows renormalised
    assert aligner.layer == 1 and "layer 1 of 2, mean of 2 heads" in aligner.describe()  # the penultimate


def test_translate_view_and_align_take_hf(hf_model, tmp_path, capsys):
    model = str(hf_model)
    assert cli_main(["translate", "--hf", model, *SOURCES[:2], "--beam", "2", "--attention-out",
                     str(tmp_path / "a.npz"), "--plot", str(tmp_path / "p.png")]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 and f"Hugging Face {'marian' if 'marian' in model else 't5'} model" \
        in captured.err
    assert (tmp_path / "p-1.png").is_file() and (tmp_path / "p-2.png").is_file()
    import attnmt
    records = attnmt.load_attention(tmp_path / "a.npz")
    assert [r.weights.shape[:2] for r in records] == [(2, 2), (2, 2)]

    src, tgt = make_pairs(6, seed=4)
    (tmp_path / "s.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    (tmp_path / "gold").write_text("".join(" ".join(f"{i}-{i}" for i in range(len(s.split()))) + "\n"
                                           for s in src), encoding="utf-8")
    assert cli_main(["view", "--hf", model, "--src", str(tmp_path / "s.de"), "--ref", str(tmp_path / "t.en"),
                     "-n", "3", "--out", str(tmp_path / "v.html"), "--no-progress"]) == 0
    assert "wrote" in capsys.readouterr().out
    page = (tmp_path / "v.html").read_text(encoding="utf-8")
    assert page.count('class="example"') == 3 and "layer 2 / head 2" in page
    assert cli_main(["align", "--hf", model, "--src", str(tmp_path / "s.de"), "--tgt", str(tmp_path / "t.en"),
                     "--out", str(tmp_path / "links.txt"), "--gold", str(tmp_path / "gold"), "--head", "1"]) == 0
    out = capsys.readouterr().out
    assert "AER" in out and len((tmp_path / "links.txt").read_text().splitlines()) == 6
    assert cli_main(["align", "--hf", model, "--src", str(tmp_path / "s.de"), "--tgt", str(tmp_path / "t.en"),
                     "--out", str(tmp_path / "saliency.txt"), "--attribution", "gradient"]) == 0
    assert "gradient × input, its positive part normalised per row" in capsys.readouterr().out
    assert len((tmp_path / "saliency.txt").read_text().splitlines()) == 6


def test_hf_mistakes_end_in_one_line(hf_model, tmp_path, capsys, monkeypatch):
    assert cli_main(["translate", "--hf", str(tmp_path / "nothing-here"), "Ein hund."]) == 2
    assert "--hf " + str(tmp_path / "nothing-here") + ": no such folder" in capsys.readouterr().err
    assert cli_main(["view", "--hf", str(hf_model), "--out", str(tmp_path / "v.html")]) == 2
    assert "--hf: give the sentences to show with --src FILE" in capsys.readouterr().err
    assert cli_main(["translate", "--hf", str(hf_model), "Ein hund.", "--precision", "bf16"]) == 2
    assert "--precision: only fp32 with --hf" in capsys.readouterr().err
    monkeypatch.setattr("attnmt.decoding.hf.importlib.util.find_spec", lambda name: None)
    assert cli_main(["translate", "--hf", str(hf_model), "Ein hund."]) == 2
    assert "a Hugging Face model needs the transformers package; pip install 'attnmt[hf]'" in capsys.readouterr().err


def test_saliency_of_a_hf_model_is_gradient_times_input_of_its_encoder_embeddings(translator):
    """Through the Hugging Face path (its own special ids, a token table the encoder and decoder
    may share, read by a hook) against autograd through the model's own ``inputs_embeds`` door, in
    float64. (Finite differences are no oracle here: T5's RMS norm takes its variance in float32.)"""
    import copy

    translator = copy.deepcopy(translator)
    model = translator.model.double().eval()
    translations = translator.translate(SOURCES, beam=1)
    found = translator.read_attributions(translations)
    encoder = model.get_encoder()
    assert getattr(encoder, "embed_scale", 1.0) == 1.0  # so inputs_embeds are the table's output
    for translation, scores in zip(translations, found):
        src = torch.tensor([translator.tokenizer.convert_tokens_to_ids(translation.src_pieces)])
        output = translator.tokenizer.convert_tokens_to_ids(translation.out_pieces)
        tgt_in = torch.tensor([[translator.specials.start, *output[:-1]]])
        embeddings = encoder.embed_tokens(src).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeddings, attention_mask=torch.ones_like(src), decoder_input_ids=tgt_in).logits
        log_probs = logits.log_softmax(-1)[0].gather(-1, torch.tensor(output)[:, None]).squeeze(-1)
        expected = np.stack([(torch.autograd.grad(log_probs[t], embeddings, retain_graph=True)[0] * embeddings)
                             .sum(-1)[0].detach().numpy() for t in range(len(output))])
        assert scores.shape == expected.shape == (len(output), src.shape[1])
        np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_serve_shows_a_hf_model_with_every_layer_and_head(hf_model):
    from attnmt.serve import RequestError, Views, load_models

    views = Views(load_models([], [str(hf_model)], say=lambda line: None))
    [view] = views.translate({"sentence": SOURCES[0]})["models"]
    assert view["output"] and len(view["layers"]) == 2 and len(view["layers"][0]) == 2
    assert views.models_page()["models"][0]["kind"] == "hf"
    with pytest.raises(RequestError, match="cannot decode from a prefix"):
        views.prefix({"sentence": SOURCES[0], "model": view["model"], "prefix": "a"})


def test_a_damaged_weights_file_is_one_line(hf_model, tmp_path, capsys):
    """Issue 63, item 8: a truncated weights file ended in a traceback from safetensors."""
    import shutil

    from attnmt.cli import main as cli_main

    copy = Path(shutil.copytree(hf_model, tmp_path / "damaged"))
    weights = next(p for p in copy.iterdir() if p.suffix in (".safetensors", ".bin"))
    weights.write_bytes(weights.read_bytes()[:100])
    assert cli_main(["translate", "--hf", str(copy), "Ein Hund."]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("attnmt translate: error: --hf ") and "could not load" in error


def test_heads_of_a_hf_model_are_ranked_and_switched_off_from_the_command_line(hf_model, tmp_path, capsys):
    """attnmt heads --hf with --src/--ref, and translate --hf --mask-heads: the heads of a Hugging
    Face model through hooks on its output projections."""
    from attnmt.decoding.hf import HFTranslator
    from attnmt.models.head_gates import head_count, masked_heads, parse_heads

    model = str(hf_model)
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    sources, references = make_pairs(4, seed=5)
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    ref.write_text("\n".join(references) + "\n", encoding="utf-8")
    assert cli_main(["heads", "--hf", model, "--src", str(src), "--ref", str(ref), "--sentences", "4", "--json",
                     "--beam", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    translator = HFTranslator.load(model, device="cpu")
    counts = head_count(translator.attributed_model)
    assert len(report["heads"]) == sum(layers * heads for layers, heads in counts.values())
    assert {row["part"] for row in report["heads"]} == {"encoder_self", "decoder_self", "cross"}
    assert all(0 <= row["confidence"] <= 1 for row in report["heads"])
    assert cli_main(["translate", "--hf", model, SOURCES[0], "--mask-heads", "cross:*:1", "--beam", "1"]) == 0
    printed = capsys.readouterr().out.strip()
    with masked_heads(translator.model, parse_heads("cross:*:1", translator.attributed_model)):
        assert printed == translator.translate([SOURCES[0]], beam=1)[0].output
    assert cli_main(["translate", "--hf", model, SOURCES[0], "--mask-heads", "cross:1:1", "--ablation", "mean"]) == 2
    assert "--ablation mean needs a run's validation pairs" in capsys.readouterr().err
