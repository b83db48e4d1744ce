"""Guided alignment (attnmt.data.link_files targets, attnmt.models.losses loss): the piece targets,
the batch tensor, the loss against
a float64 reference, bad links files, config checks, and a trainer run whose attention learns links
it would never find by itself (a reversed word order on a word-for-word task)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnmt.alignment.translator_attention import word_pieces
from attnmt.data import DataConfig
from attnmt.data.corpus import read_parallel
from attnmt.data.link_files import AlignmentGuide, piece_targets
from attnmt.data.tokenizer import train_tokenizers
from attnmt.errors import ConfigError, DataError
from attnmt.models.losses import guided_alignment_loss, select_attention
from attnmt.runs.run_config import TrainingConfig

from helpers import make_pairs, run_trainer, tiny_run_config

pytestmark = pytest.mark.slow  # guided training of tiny runs


def dense(entry, rows: int, cols: int) -> np.ndarray:
    matrix = np.zeros((rows, cols))
    for r, c, v in zip(*entry):
        matrix[r, c] += v
    return matrix


# ---- targets -------------------------------------------------------------------------------------


def test_piece_targets_spread_each_target_word_over_its_linked_source_pieces():
    # source words: w0 = pieces 0-1, w1 = piece 2, w2 = pieces 3-5; target words: v0 = piece 0, v1 = pieces 1-2
    src_spans, tgt_spans = [(0, 2), (2, 3), (3, 6)], [(0, 1), (1, 3)]
    entry = piece_targets({(0, 0), (2, 1), (1, 1)}, src_spans, tgt_spans)
    expected = np.array([
        [0.5, 0.5, 0, 0, 0, 0],
        [0, 0, 0.25, 0.25, 0.25, 0.25],
        [0, 0, 0.25, 0.25, 0.25, 0.25],
    ])
    np.testing.assert_allclose(dense(entry, 3, 6), expected)


def test_piece_targets_leave_unlinked_target_words_empty_and_refuse_links_outside():
    entry = piece_targets({(1, 1)}, [(0, 1), (1, 2)], [(0, 1), (1, 2), (2, 4)])
    np.testing.assert_allclose(dense(entry, 4, 2), [[0, 0], [0, 1], [0, 0], [0, 0]])
    assert all(len(part) == 0 for part in piece_targets(set(), [(0, 1)], [(0, 1)]))
    with pytest.raises(ValueError, match="link 2-0 is outside a pair of 2 x 1 words"):
        piece_targets({(2, 0)}, [(0, 1), (1, 2)], [(0, 1)])


def test_piece_targets_send_unaligned_target_words_to_the_source_eos():
    # source: w0 = pieces 0-1, w1 = piece 2, EOS = column 3; target: v0 = piece 0, v1 = pieces 1-2, v2 = piece 3
    entry = piece_targets({(1, 0)}, [(0, 2), (2, 3)], [(0, 1), (1, 3), (3, 4)], unaligned_words=[1])
    np.testing.assert_allclose(dense(entry, 4, 4), [[0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0]])
    entry = piece_targets(set(), [], [(0, 1)], unaligned_words=[0])  # an empty source: EOS is column 0
    np.testing.assert_allclose(dense(entry, 1, 1), [[1]])
    with pytest.raises(ValueError, match="target word 0 cannot go to EOS"):
        piece_targets({(1, 0)}, [(0, 2), (2, 3)], [(0, 1)], unaligned_words=[0])
    with pytest.raises(ValueError, match="target word 5 cannot go to EOS"):
        piece_targets(set(), [(0, 2)], [(0, 1)], unaligned_words=[5])


def test_batch_target_pads_skips_unguided_pairs_and_shifts_rows():
    first = piece_targets({(0, 1), (1, 0)}, [(0, 1), (1, 2)], [(0, 1), (1, 2)])
    guide = AlignmentGuide([first, None])
    target = guide.target([1, 0], tgt_width=4, src_width=3)
    assert target.shape == (2, 4, 3) and target.dtype == torch.float32
    assert torch.count_nonzero(target[0]) == 0
    np.testing.assert_allclose(target[1].numpy(), [[0, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]])
    shifted = AlignmentGuide([first, None], shift=True).target([0], tgt_width=4, src_width=3)
    np.testing.assert_allclose(shifted[0].numpy(), [[0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0]])


# ---- loss ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_guided_loss_matches_a_float64_reference(seed):
    rng = np.random.default_rng(seed)
    B, T, S = 3, rng.integers(1, 6), rng.integers(1, 7)
    logits = rng.normal(scale=5.0, size=(B, T, S))
    mask = rng.random((B, 1, S)) < 0.7
    mask[..., 0] = True
    logits = np.where(mask, logits, -np.inf)
    attention = np.exp(logits - logits.max(-1, keepdims=True))
    attention /= attention.sum(-1, keepdims=True)
    target = rng.random((B, T, S)) * mask * (rng.random((B, T, 1)) < 0.6)
    target /= np.maximum(target.sum(-1, keepdims=True), 1e-12)
    with np.errstate(divide="ignore"):
        expected = -np.sum(np.where(target > 0, target * np.log(np.maximum(attention, 1e-9)), 0.0))
    got = guided_alignment_loss(torch.tensor(attention, dtype=torch.float32), torch.tensor(target, dtype=torch.float32))
    assert got.dtype == torch.float32
    np.testing.assert_allclose(float(got), expected, rtol=1e-5, atol=1e-5)


def test_guided_loss_is_finite_on_zero_weights_and_its_gradient_is_right():
    attention = torch.tensor([[[1.0, 0.0], [0.25, 0.75]]], requires_grad=True)
    target = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]])
    loss = guided_alignment_loss(attention, target)
    assert float(loss.detach()) == pytest.approx(-np.log(1e-9) - 0.5 * np.log(0.25) - 0.5 * np.log(0.75), rel=1e-6)
    loss.backward()
    np.testing.assert_allclose(attention.grad[0, 1].numpy(), [-0.5 / 0.25, -0.5 / 0.75], rtol=1e-6)


def test_select_attention_picks_layer_and_head():
    weights = torch.rand(2, 2, 3, 4, 5)  # [B, L, h, T, S]
    torch.testing.assert_close(select_attention(weights, 1, 0), weights[:, 1, 0])
    torch.testing.assert_close(select_attention(weights, 0, None), weights[:, 0].mean(1))
    torch.testing.assert_close(select_attention(weights, 0, 2), weights[:, 0, 2])


# ---- reading a links file --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """Six pairs on lines 1-7 (line 3 has an empty side and is dropped) and their tokenizers."""
    folder = tmp_path_factory.mktemp("guide")
    src, tgt = make_pairs(6, seed=5)
    src.insert(2, "")
    tgt.insert(2, "Something.")
    (folder / "train.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (folder / "train.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    corpus = read_parallel(folder / "train.de", folder / "train.en")
    big_src, big_tgt = make_pairs(200, seed=1)
    tokenizers = train_tokenizers(big_src, big_tgt, vocab_size=64, joint=True, seed=0)
    return folder, corpus, tokenizers.encode_corpus(corpus), tokenizers


def diagonal_links(corpus, line: int) -> str:
    words = corpus.src[corpus.line_numbers.index(line)].split()
    return " ".join(f"{i}-{i}" for i in range(len(words)))


def test_links_follow_the_file_lines_past_dropped_pairs(small_corpus):
    folder, corpus, encoded, tokenizers = small_corpus
    assert corpus.line_numbers == [1, 2, 4, 5, 6, 7]
    lines = [diagonal_links(corpus, n) if n != 3 else "0-0" for n in range(1, 8)]
    lines[4] = ""  # line 5 has no links
    (folder / "links.txt").write_text("\n".join(lines) + "\n")
    guide, report = AlignmentGuide.from_links(folder / "links.txt", corpus, encoded, tokenizers)
    assert (report.guided_pairs, report.without_links, report.piece_mismatch) == (5, 1, 0)
    assert report.links == sum(len(corpus.src[k].split()) for k in range(6)) - len(corpus.src[3].split())
    assert guide.entries[3] is None  # the pair of line 5
    k = 2  # the pair of line 4
    src_ids, tgt_ids = encoded.src_ids[k], encoded.tgt_ids[k]
    matrix = dense(guide.entries[k], len(tgt_ids), len(src_ids))
    np.testing.assert_allclose(matrix.sum(1), 1.0)  # every target piece has links here
    _, src_spans = word_pieces(tokenizers.src, corpus.src[k].split())
    _, tgt_spans = word_pieces(tokenizers.tgt, corpus.tgt[k].split())
    for j, (start, stop) in enumerate(tgt_spans):  # target word j's pieces put all mass on source word j
        np.testing.assert_allclose(matrix[start:stop, slice(*src_spans[j])].sum(1), 1.0)
    assert "5 training pairs guided" in report.summary()


def test_possible_links_are_not_guided_and_only_words_without_any_link_go_to_eos(small_corpus, tmp_path):
    folder, corpus, encoded, tokenizers = small_corpus
    k = 2  # the pair of line 4
    src_words, tgt_words = corpus.src[k].split(), corpus.tgt[k].split()
    assert len(src_words) >= 2 and len(tgt_words) >= 3
    lines = ["0-0"] * 7
    lines[3] = "0-0 1p1"  # target word 0: sure; 1: possible only; 2 and on: no link
    (tmp_path / "links.txt").write_text("\n".join(lines) + "\n")
    _, src_spans = word_pieces(tokenizers.src, src_words)
    _, tgt_spans = word_pieces(tokenizers.tgt, tgt_words)
    eos = len(encoded.src_ids[k])
    for unaligned in ("ignore", "eos"):
        guide, report = AlignmentGuide.from_links(tmp_path / "links.txt", corpus, encoded, tokenizers,
                                                  unaligned=unaligned)
        matrix = dense(guide.entries[k], len(encoded.tgt_ids[k]), eos + 1)
        expected = np.zeros_like(matrix)
        expected[slice(*tgt_spans[0]), slice(*src_spans[0])] = 1 / (src_spans[0][1] - src_spans[0][0])
        if unaligned == "eos":
            expected[tgt_spans[2][0]:, eos] = 1.0
        np.testing.assert_allclose(matrix, expected)
        assert report.links == 6  # the sure links only
    # every other pair has one link "0-0": all its target words but the first go to EOS
    to_eos = len(tgt_words) - 2 + sum(len(corpus.tgt[n].split()) - 1 for n in range(6) if n != k)
    assert report.unaligned_words == to_eos
    assert f"{to_eos} unaligned target words to the source EOS" in report.summary()
    with pytest.raises(ValueError, match=r"unaligned must be one of \('ignore', 'eos'\), got 'null'"):
        AlignmentGuide.from_links(tmp_path / "links.txt", corpus, encoded, tokenizers, unaligned="null")


def test_links_file_errors_name_the_file_and_line(small_corpus, tmp_path):
    folder, corpus, encoded, tokenizers = small_corpus
    short = tmp_path / "short.txt"
    short.write_text("0-0\n0-0\n")
    with pytest.raises(DataError, match=r"short\.txt has 2 lines but the training files have a pair on line 7"):
        AlignmentGuide.from_links(short, corpus, encoded, tokenizers)
    outside = tmp_path / "outside.txt"
    outside.write_text("0-0\n0-0\n\n0-9\n0-0\n0-0\n0-0\n")
    with pytest.raises(DataError, match=r"outside\.txt:4: link 0-9 is outside the pair of \d+ source and \d+ target"):
        AlignmentGuide.from_links(outside, corpus, encoded, tokenizers)
    garbled = tmp_path / "garbled.txt"
    garbled.write_text("0-0\nzero-one\n")
    with pytest.raises(DataError, match=r"garbled\.txt:2: 'zero-one' is not a link"):
        AlignmentGuide.from_links(garbled, corpus, encoded, tokenizers)
    with pytest.raises(DataError, match="is not a file"):
        AlignmentGuide.from_links(tmp_path / "missing.txt", corpus, encoded, tokenizers)


# ---- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize("key,value,message", [
    ("guide_weight", 0, "training.guide_weight: must be a number > 0"),
    ("guide_layer", 0, "training.guide_layer: must be a non-zero integer"),
    ("guide_head", "1", "training.guide_head: must be a non-zero integer"),
    ("guide_shift", "yes", "training.guide_shift: must be true or false"),
    ("guide_unaligned", "null", 'training.guide_unaligned: must be "ignore" or "eos"'),
])
def test_invalid_guide_values(key, value, message):
    with pytest.raises(ConfigError, match=message):
        TrainingConfig.from_dict({key: value})


def test_train_links_path_resolves_against_the_config_folder(tmp_path):
    cfg = DataConfig.from_dict({"train": ["a.de", "a.en"], "train_links": "links/a.txt"}, base_dir=tmp_path)
    assert cfg.resolve(cfg.train_links) == tmp_path / "links" / "a.txt"
    assert cfg.to_dict(resolve_paths=True)["train_links"] == str(tmp_path / "links" / "a.txt")
    with pytest.raises(ConfigError, match="data.train_links: must be a file path or null"):
        DataConfig.from_dict({"train": ["a.de", "a.en"], "train_links": 3})


# ---- training ------------------------------------------------------------------------------------


def reversed_links(folder, name: str, pairs) -> None:
    """Target word j linked to source word n − 1 − j: never what the word-for-word task suggests."""
    lines = [" ".join(f"{len(s.split()) - 1 - j}-{j}" for j in range(len(s.split()))) for s in pairs[0]]
    (folder / name).write_text("\n".join(lines) + "\n")


@pytest.mark.outcome
@pytest.mark.parametrize("attention,head,shift", [("general", None, False), ("multihead", 1, True)])
def test_training_makes_the_attention_follow_the_links(tmp_path, attention, head, shift, training_seed,
                                                       record_property):
    from attnmt.alignment.translator_attention import TranslatorAligner

    config = tiny_run_config(tmp_path, train_pairs=200, max_epochs=25, eval_every=100, examples=0,
                         bleu_max_sentences=0, checkpoint_every=1000, label_smoothing=0.0, lr=0.02,
                         guide_weight=2.0, guide_head=head, guide_shift=shift, seed=training_seed)
    config["model"].update(attention=attention, embed_dim=32, hidden_dim=64, dropout=0.0)
    if attention == "multihead":
        config["model"]["attention_options"] = {"num_heads": 2}
    reversed_links(tmp_path, "train.links", make_pairs(200, seed=1))
    config["data"]["train_links"] = "train.links"
    result = run_trainer(tmp_path, config)
    guides = [r["guide"] for r in result.history if r["type"] == "train"]
    assert guides[-1] < 0.6 * guides[0], guides  # (its floor is the targets' entropy, not 0)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "guide" in metrics[0]

    src, tgt = make_pairs(30, seed=3)  # pairs the run has not seen
    aligner = TranslatorAligner(tmp_path / "run", "last")  # the run's guided reading by default
    assert (aligner.head, aligner.shift, aligner.guided) == (head, shift, True)
    assert "guided-alignment defaults" in aligner.describe()
    overridden = TranslatorAligner(aligner.translator, head="mean", shift=not shift)
    assert (overridden.head, overridden.shift) == (None, not shift)
    predicted = aligner.align([s.split() for s in src], [t.split() for t in tgt], method="src2tgt")
    wanted = [{(len(s.split()) - 1 - j, j) for j in range(len(s.split()))} for s in src]
    hits = sum(len(p & w) for p, w in zip(predicted, wanted)) / sum(len(w) for w in wanted)
    record_property("guide_ratio", guides[-1] / guides[0])
    record_property("hits", hits)
    assert hits >= 0.8, hits


@pytest.mark.outcome
def test_training_with_unaligned_words_on_eos_teaches_the_attention_to_say_unaligned(tmp_path, training_seed,
                                                                                     record_property):
    from attnmt.alignment.translator_attention import TranslatorAligner

    config = tiny_run_config(tmp_path, train_pairs=200, max_epochs=25, eval_every=100, examples=0,
                         bleu_max_sentences=0, checkpoint_every=1000, label_smoothing=0.0, lr=0.02,
                         guide_weight=2.0, guide_head=1, guide_shift=True, guide_unaligned="eos",
                         seed=training_seed)
    config["model"].update(attention="multihead", embed_dim=32, hidden_dim=64, dropout=0.0,
                           attention_options={"num_heads": 2})
    # target words at even positions are linked (reversed order), those at odd positions have no link
    lines = [" ".join(f"{len(s.split()) - 1 - j}-{j}" for j in range(0, len(s.split()), 2))
             for s in make_pairs(200, seed=1)[0]]
    (tmp_path / "train.links").write_text("\n".join(lines) + "\n")
    config["data"]["train_links"] = "train.links"
    run_trainer(tmp_path, config)

    src, tgt = make_pairs(30, seed=3)  # pairs the run has not seen
    aligner = TranslatorAligner(tmp_path / "run", "last")
    assert aligner.renormalize is False and "'unaligned'" in aligner.describe()
    weights = aligner.weights_many([s.split() for s in src], [t.split() for t in tgt])
    on_words = {parity: np.mean([w[parity::2].sum(1).mean() for w in weights if len(w) > parity])
                for parity in (0, 1)}
    record_property("on_linked", float(on_words[0]))
    record_property("on_unlinked", float(on_words[1]))
    assert on_words[0] > 0.8 and on_words[1] < 0.2, on_words  # the rest of each row is on EOS
    renormalized = TranslatorAligner(aligner.translator, renormalize=True)
    assert renormalized.weights_many([src[0].split()], [tgt[0].split()])[0].sum(1) == pytest.approx(1.0)


def test_guide_needs_attention_and_a_head_the_model_has(tmp_path):
    reversed_links(tmp_path, "train.links", make_pairs(40, seed=1))
    config = tiny_run_config(tmp_path, train_pairs=40, max_steps=1)
    config["data"]["train_links"] = "train.links"
    config["model"]["attention"] = "none"
    with pytest.raises(ConfigError, match="guided alignment needs a model with attention"):
        run_trainer(tmp_path, config, out="none")
    config = tiny_run_config(tmp_path, train_pairs=40, max_steps=1, guide_head=3)
    config["data"]["train_links"] = "train.links"
    with pytest.raises(ConfigError, match="head 3 is out of range: the model has 1 head"):
        run_trainer(tmp_path, config, out="head")


@pytest.mark.parametrize("layer,head", [(0, 2), (1, None)])
def test_guided_step_gives_the_gradient_of_the_summed_loss_on_a_transformer(layer, head):
    from attnmt.data import make_batches
    from attnmt.models import build_model
    from attnmt.models.losses import token_losses
    from attnmt.runs.run_config import RunConfig
    from attnmt.training import GuideBatch, backward_on_batch

    model_config = RunConfig.from_dict({"data": {"train": ["a", "b"]}, "model": {
        "type": "transformer", "dropout": 0.0, "attention_dropout": 0.0, "d_model": 16, "num_heads": 4, "ffn_dim": 32,
        "encoder_layers": 1, "decoder_layers": 2}}).model
    torch.manual_seed(0)
    model = build_model(model_config, 30, 30)
    rng = np.random.default_rng(0)
    src = [list(rng.integers(4, 30, size=n)) for n in (3, 5, 1)]
    tgt = [list(rng.integers(4, 30, size=n)) for n in (4, 2, 1)]
    [batch] = make_batches(src, tgt, max_tokens=1000, shuffle=False)
    raw = torch.rand(batch.tgt_in.shape[0], batch.tgt_in.shape[1], batch.src.shape[1]) * batch.src_mask[:, None, :]
    target = raw / raw.sum(-1, keepdim=True) * (torch.rand(raw.shape[:2]) < 0.7)[..., None]

    stats = backward_on_batch(model, batch, 0.1, global_tokens=batch.num_tgt_tokens,
                              guide=GuideBatch(target, 0.7, layer, head))
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    logits, attention = model(batch.src, batch.src_mask, batch.tgt_in, return_attention="heads")
    chosen = attention[:, layer].mean(1) if head is None else attention[:, layer, head]
    guide_sum = -(target * chosen.clamp_min(1e-9).log()).sum()
    loss_sum, _, _ = token_losses(logits, batch.tgt_out, batch.tgt_mask, 0.1)
    ((loss_sum + 0.7 * guide_sum) / batch.num_tgt_tokens).backward()
    assert float(stats.guide_sum) == pytest.approx(float(guide_sum.detach()), rel=1e-5)
    assert float(stats.loss_sum) == pytest.approx(float(loss_sum.detach()), rel=1e-5)
    for mine, expected in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(mine, expected, rtol=1e-4, atol=1e-6)


def test_guided_reading_comes_from_the_run_config():
    from attnmt.alignment.translator_attention import guided_reading
    from attnmt.runs.run_config import RunConfig

    def run_config(train_links, **training):
        return RunConfig.from_dict({"data": {"train": ["a", "b"], "train_links": train_links}, "training": training})

    assert guided_reading(run_config(None, guide_head=2)) is None
    assert guided_reading(None) is None
    config = run_config("a.links", guide_layer=-1, guide_head=2, guide_shift=True)
    assert guided_reading(config) == {"layer": -1, "head": 2, "shift": True, "renormalize": True}
    assert guided_reading(run_config("a.links")) == {"layer": None, "head": "mean", "shift": False,
                                                     "renormalize": True}
    assert guided_reading(run_config("a.links", guide_unaligned="eos"))["renormalize"] is False
