"""Metrics (token losses, perplexity, BLEU, chrF), the table formatter, and the Translator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnmt.evaluation.scores import bleu, corpus_scores, perplexity, perplexity_from_sums
from attnmt.models.losses import token_losses
from attnmt.runs.run_config import SearchConfig
from attnmt.runtime.tables import format_table


def _random_batch(seed: int = 0, B: int = 3, T: int = 5, V: int = 7):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=generator)
    targets = torch.randint(0, V, (B, T), generator=generator)
    lengths = torch.tensor([5, 3, 1])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return logits, targets, mask


def test_token_losses_match_a_float64_reference():
    logits, targets, mask = _random_batch()
    loss_sum, nll_sum, count = token_losses(logits, targets, mask)
    assert count == 9
    log_probs = np.log(np.exp(logits.double().numpy()) / np.exp(logits.double().numpy()).sum(-1, keepdims=True))
    expected = -sum(log_probs[b, t, targets[b, t]] for b in range(3) for t in range(5) if mask[b, t])
    assert float(nll_sum) == pytest.approx(expected, rel=1e-6)
    assert float(loss_sum) == pytest.approx(expected, rel=1e-6)  # no smoothing: loss = NLL


def test_padding_positions_do_not_count():
    logits, targets, mask = _random_batch()
    garbage = logits.clone()
    garbage[~mask] = 1e4  # whatever sits in padding must not matter
    other_targets = targets.clone()
    other_targets[~mask] = 0
    assert torch.equal(token_losses(logits, targets, mask)[1], token_losses(garbage, other_targets, mask)[1])


def test_label_smoothing_matches_torch_cross_entropy():
    logits, targets, mask = _random_batch(seed=3)
    loss_sum, nll_sum, _ = token_losses(logits, targets, mask, label_smoothing=0.1)
    expected = F.cross_entropy(logits[mask], targets[mask], label_smoothing=0.1, reduction="sum")
    assert float(loss_sum) == pytest.approx(float(expected), rel=1e-6)
    assert float(loss_sum) != pytest.approx(float(nll_sum))


def test_token_losses_take_logits_of_the_real_tokens_only():
    logits, targets, mask = _random_batch(seed=4)
    full = token_losses(logits, targets, mask, label_smoothing=0.1)
    selected = token_losses(logits[mask], targets, mask, label_smoothing=0.1)
    assert selected[2] == full[2] == 9
    assert float(selected[0]) == pytest.approx(float(full[0]), rel=1e-7)
    assert float(selected[1]) == pytest.approx(float(full[1]), rel=1e-7)
    with pytest.raises(ValueError, match=r"\[N, V\] \(N = real tokens\)"):
        token_losses(logits[mask][:-1], targets, mask)  # one row short


def test_token_losses_rejects_bad_shapes():
    logits, targets, mask = _random_batch()
    with pytest.raises(ValueError, match="logits"):
        token_losses(logits[0], targets, mask)


def _tiny_model_and_tokenizers():
    from attnmt.data import train_tokenizers
    from attnmt.models import build_model

    src = ["ein hund läuft", "eine katze sitzt im garten", "der mann spielt ball", "ein kind"]
    tgt = ["a dog runs", "a cat sits in the garden", "the man plays ball", "a child"]
    tokenizers = train_tokenizers(src * 5, tgt * 5, vocab_size=40, joint=False)
    torch.manual_seed(0)
    model = build_model({"type": "rnn", "embed_dim": 8, "hidden_dim": 16, "dropout": 0.3},
                        tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    return model, tokenizers, src, tgt


def test_perplexity_does_not_depend_on_batching_and_ignores_dropout():
    from attnmt.data import batches_for_inference

    model, tokenizers, src, tgt = _tiny_model_and_tokenizers()
    src_ids, tgt_ids = tokenizers.src.encode_many(src), tokenizers.tgt.encode_many(tgt)
    model.train()  # perplexity must switch dropout off, and restore the mode
    together = perplexity(model, batches_for_inference(src_ids, batch_size=4, tgt_ids=tgt_ids))
    one_by_one = perplexity(model, batches_for_inference(src_ids, batch_size=1, tgt_ids=tgt_ids))
    assert model.training
    assert together.num_tokens == one_by_one.num_tokens == sum(len(ids) + 1 for ids in tgt_ids)
    assert together.loss == pytest.approx(one_by_one.loss, abs=1e-6)
    assert together.perplexity == pytest.approx(math.exp(together.loss))
    # An untrained model is close to uniform over the vocabulary.
    assert 0.5 * tokenizers.tgt.vocab_size < together.perplexity < 2 * tokenizers.tgt.vocab_size


def test_perplexity_from_sums():
    assert perplexity_from_sums(math.log(5) * 10, 10).perplexity == pytest.approx(5.0)
    empty = perplexity_from_sums(0.0, 0)
    assert math.isnan(empty.perplexity) and empty.num_tokens == 0


def test_bleu_and_chrf():
    refs = ["The cat sat on the mat.", "A man rides a bike down the street."]
    perfect = corpus_scores(refs, refs)
    assert perfect.bleu == pytest.approx(100.0) and perfect.chrf == pytest.approx(100.0)
    lowered = corpus_scores([r.lower() for r in refs], refs)
    assert lowered.bleu < 100.0 and lowered.bleu_lowercase == pytest.approx(100.0)
    assert "case:mixed" in lowered.bleu_signature and "tok:13a" in lowered.bleu_signature
    assert "case:lc" in lowered.bleu_lowercase_signature
    assert "nc:6" in lowered.chrf_signature
    assert lowered.num_sentences == 2 and "BP" in lowered.bleu_details
    score, signature = bleu(["A cat sat on a mat."], ["The cat sat on the mat."])
    assert 0 < score < 100 and signature == perfect.bleu_signature


def test_bleu_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_scores(["a", "b"], ["a"])
    with pytest.raises(TypeError):
        corpus_scores("a b", "a b")


def test_tables():
    table = format_table(["attention", "BLEU"], [["none", 20.123], ["scaled_dot", 35.5]])
    lines = table.splitlines()
    assert lines[0] == "| attention  |  BLEU |"
    assert lines[1] == "|------------|------:|"
    assert lines[3] == "| scaled_dot | 35.50 |"
    with pytest.raises(ValueError):
        format_table(["a"], [[1, 2]])


# ---- the translator ----------------------------------------------------------------------------


def test_translator_keeps_order_and_returns_attention():
    from attnmt.decoding.translator import Translator

    model, tokenizers, src, _ = _tiny_model_and_tokenizers()
    translator = Translator(model, tokenizers, SearchConfig(max_len_a=1.0, max_len_b=3))
    sentences = src + [""]
    batched = translator.translate(sentences, batch_size=3, return_attention=True)
    alone = [translator.translate([s], batch_size=1)[0] for s in sentences]
    assert [t.output for t in batched] == [t.output for t in alone]
    assert [t.source for t in batched] == sentences
    for translation in batched:
        assert translation.src_pieces[-1] == "</s>"
        assert translation.attention.shape == (len(translation.out_pieces), len(translation.src_pieces))
        np.testing.assert_allclose(translation.attention.sum(axis=1), 1.0, atol=1e-5)
        assert translation.score <= 0
    assert batched[-1].src_pieces == ["</s>"]  # an empty sentence is just its EOS
    assert alone[0].attention is None
    beam = translator.translate(sentences, beam=3)
    assert len(beam) == len(sentences)
    with pytest.raises(ValueError, match="beam"):
        translator.translate(src, beam=0)
    with pytest.raises(TypeError):
        translator.translate("ein hund")
