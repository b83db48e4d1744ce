"""Subword regularisation (data.sampling_alpha): every drawn segmentation spells its sentence, the
draw follows P(x)^α, differs between epochs, is the same for the same (seed, epoch) (so a resumed
run trains exactly as an unbroken one), and is never used for validation or translation."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

import attnmt.training.trainer as trainer_module
from attnmt.data import DataConfig, Tokenizer, train_tokenizer
from attnmt.data.subword_sampling import NBestSegmentations, SegmentationSampler
from attnmt.data.toy import make_pairs
from attnmt.decoding.translator import Translator
from attnmt.errors import ConfigError

from helpers import resumed_inside_an_epoch, run_trainer, tiny_run_config

SRC, TGT = make_pairs(200, seed=1)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SRC + TGT, vocab_size=100, name="spm.joint")


def test_every_candidate_spells_its_sentence_best_first(tokenizer):
    segmentations = NBestSegmentations(tokenizer, SRC[:30], nbest=8)
    for index, text in enumerate(SRC[:30]):
        candidates = segmentations.candidates(index)
        assert candidates[0] == tokenizer.encode(text)  # the best is what evaluation uses
        assert len({tuple(c) for c in candidates}) == len(candidates) > 1
        assert all(tokenizer.decode(c) == text for c in candidates)
        scores = segmentations.scores[segmentations.first[index]:segmentations.first[index + 1]]
        assert np.all(np.diff(scores) <= 1e-9)


def test_max_length_leaves_out_longer_candidates_but_never_the_best(tokenizer):
    best_lengths = [len(tokenizer.encode(text)) for text in SRC[:30]]
    limit = max(best_lengths)
    segmentations = NBestSegmentations(tokenizer, SRC[:30], nbest=16, max_length=limit)
    for index in range(30):
        candidates = segmentations.candidates(index)
        assert all(len(c) <= limit for c in candidates)
    tight = NBestSegmentations(tokenizer, SRC[:30], nbest=16, max_length=1)
    assert [tight.candidates(i) for i in range(30)] == [[tokenizer.encode(t)] for t in SRC[:30]]


def test_draws_follow_p_to_the_alpha(tokenizer):
    """Frequencies of 4,000 draws of one sentence against exp(α·log P) normalised over its n best."""
    segmentations = NBestSegmentations(tokenizer, [SRC[0]] * 4000, nbest=4)
    scores = segmentations.scores[:4]
    for alpha in (0.0, 0.5):
        expected = np.exp(alpha * (scores - scores.max()))
        expected /= expected.sum()
        drawn = segmentations.draw(alpha, np.random.default_rng(7))
        counts = Counter(tuple(ids) for ids in drawn)
        observed = np.array([counts[tuple(c)] for c in segmentations.candidates(0)]) / 4000
        assert np.all(np.abs(observed - expected) < 4 * np.sqrt(expected * (1 - expected) / 4000) + 1e-3), (
            alpha, observed, expected)
    greedy = segmentations.draw(1e6, np.random.default_rng(7))  # a huge α: always the best
    assert all(ids == segmentations.candidates(0)[0] for ids in greedy)


def test_epochs_differ_and_the_same_epoch_is_drawn_again(tokenizer):
    sampler = SegmentationSampler.for_pairs(tokenizer, tokenizer, SRC, TGT, nbest=8, alpha=0.2, seed=3)
    first, second = sampler.epoch(0), sampler.epoch(1)
    assert first != second
    assert sampler.epoch(0) == first
    other_seed = SegmentationSampler(sampler.src, sampler.tgt, 0.2, seed=4)
    assert other_seed.epoch(0) != first
    assert sum(a != tokenizer.encode(s) for a, s in zip(first[0], SRC)) > len(SRC) // 4
    assert [tokenizer.decode(ids) for ids in second[1]] == TGT


@pytest.mark.parametrize("key,value,message", [
    ("sampling_alpha", -0.1, "data.sampling_alpha: must be a number from 0 to 100"),
    ("sampling_alpha", "high", "data.sampling_alpha: must be a number"),
    ("sampling_alpha", True, "data.sampling_alpha: must be a number"),
    ("sampling_nbest", 1, "data.sampling_nbest: must be an integer from 2 to 256"),
    ("sampling_nbest", 1000, "data.sampling_nbest: must be an integer from 2 to 256"),
    ("sampling_nbest", 4.5, "data.sampling_nbest: must be an integer"),
])
def test_out_of_range_values_are_refused_in_one_line(key, value, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")) as raised:
        DataConfig.from_dict({"dataset": "multi30k", key: value})
    assert "\n" not in str(raised.value)


def test_sampling_needs_a_unigram_model_and_no_links():
    with pytest.raises(ConfigError, match="tokenizer_type: unigram"):
        DataConfig.from_dict({"dataset": "multi30k", "sampling_alpha": 0.1, "tokenizer_type": "bpe"})
    with pytest.raises(ConfigError, match="train_links"):
        DataConfig.from_dict({"train": ["a.de", "a.en"], "train_links": "links.txt", "sampling_alpha": 0.1})
    assert DataConfig.from_dict({"dataset": "multi30k", "sampling_alpha": 0}).sampling_alpha == 0.0


@pytest.mark.slow
def test_training_samples_each_epoch_and_evaluation_uses_the_best(tmp_path, monkeypatch):
    config = tiny_run_config(tmp_path, train_pairs=120, max_epochs=2, bleu_max_sentences=0, examples=0)
    config["data"].update(sampling_alpha=0.1, sampling_nbest=8)
    trained: list[list[tuple[int, ...]]] = []
    collate = trainer_module.collate

    def recording_collate(src_ids, tgt_ids, indices, *rest):
        if len(trained) <= trainer_module_epoch[0]:
            trained.append([])
        trained[-1].extend(tuple(src_ids[k]) for k in indices)
        return collate(src_ids, tgt_ids, indices, *rest)

    trainer_module_epoch = [0]
    epoch_of_sampler = SegmentationSampler.epoch

    def recording_epoch(self, epoch):
        trainer_module_epoch[0] = epoch
        return epoch_of_sampler(self, epoch)

    sampled_texts: list[str] = []
    nbest_with_scores = Tokenizer.nbest_with_scores

    def recording_nbest(self, text, nbest):
        sampled_texts.append(text)
        return nbest_with_scores(self, text, nbest)

    monkeypatch.setattr(trainer_module, "collate", recording_collate)
    monkeypatch.setattr(SegmentationSampler, "epoch", recording_epoch)
    monkeypatch.setattr(Tokenizer, "nbest_with_scores", recording_nbest)
    run_trainer(tmp_path, config)
    translator = Translator.load(tmp_path / "run", "last")
    train_src, train_tgt = make_pairs(120, seed=1)
    best = Counter(tuple(translator.tokenizers.src.encode(s)) for s in train_src)
    assert len(trained) == 2
    first, second = Counter(trained[0]), Counter(trained[1])
    assert first != second and first != best and second != best

    # Only the training sentences were segmented more than one way: validation kept the best.
    assert sorted(sampled_texts) == sorted(train_src + train_tgt)
    # Translation feeds the model the best segmentation of its source.
    valid_src = make_pairs(20, seed=2)[0]
    translations = translator.translate(valid_src[:5])
    assert [t.src_pieces for t in translations] == [
        translator.tokenizers.src.encode_pieces(s) + ["</s>"] for s in valid_src[:5]]


@pytest.mark.slow
def test_a_resumed_sampling_run_equals_an_unbroken_one(tmp_path):
    config = tiny_run_config(tmp_path, train_pairs=150, max_epochs=3, bleu_max_sentences=0, examples=0,
                             checkpoint_every=1000)
    config["data"].update(sampling_alpha=0.2, sampling_nbest=8)
    unbroken = run_trainer(tmp_path, config, out="unbroken")
    _, b = resumed_inside_an_epoch(tmp_path, config, unbroken.step, epochs=3)
    assert math.isfinite(b["history"][-1]["val_loss"])
