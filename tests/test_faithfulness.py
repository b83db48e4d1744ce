"""Faithfulness (attnmt.evaluation.faithfulness), counterfactual attention
(attnmt.evaluation.counterfactual) and ``attnmt explain``.

A planted model proves the measures: its output token t depends on source token t alone, through
a one-hot attention. Every method that can be faithful ranks that word first, and
comprehensiveness separates a faithful method from a random ranking."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from attnmt.attribution.reader import attribute as saliency
from attnmt.data.pieces import group_pieces
from attnmt.evaluation.counterfactual import counterfactual_attention, divergences
from attnmt.evaluation.faithfulness import RANDOM, bin_sizes, faithfulness, source_words, word_scores
from attnmt.models import build_model
from attnmt.models.readout import ATTNMT_SPECIALS, force_decode
from attnmt.visual.export import load_attention

VOCAB = 12


class PlantedModel(nn.Module):
    """Output token t = π(source token t): the attention of step t is one-hot on source position
    t, the context that token's embedding (3 · one-hot, <unk> embeds as 0), the logits the
    context permuted by π. So log p(y_t) depends on source token t and on nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.source_token_embedding = nn.Embedding(VOCAB, VOCAB)
        with torch.no_grad():
            self.source_token_embedding.weight.copy_(3.0 * torch.eye(VOCAB))
            self.source_token_embedding.weight[ATTNMT_SPECIALS.unk].zero_()
        self.permutation = torch.roll(torch.arange(VOCAB), 1)

    def forward(self, src, src_mask, tgt_in, return_attention="heads"):
        embedded = self.source_token_embedding(src)  # [B, S, V]
        steps, positions = tgt_in.shape[1], src.shape[1]
        weights = (torch.arange(steps)[:, None] == torch.arange(positions)[None, :]).to(embedded.dtype)
        weights = weights.expand(src.shape[0], -1, -1) * src_mask[:, None, :]
        context = weights @ embedded  # [B, T, V]
        return context[..., self.permutation], weights[:, None, None]


def planted_translator(model):
    return SimpleNamespace(unk_id=ATTNMT_SPECIALS.unk,
                           force_decode=lambda sources, outputs, log_probs: force_decode(model, sources, outputs,
                                                                                         log_probs=log_probs))


SOURCE = [4, 5, 6, 7, 8, 9, 10, 3]  # seven words and EOS
PIECES = ["▁a", "▁b", "▁c", "▁d", "▁e", "▁f", "▁g", "</s>"]


def test_bins_take_words_and_shares_of_the_source():
    assert bin_sizes(7) == {"1": 1, "2": 2, "3": 3, "10%": 1, "20%": 2, "30%": 3, "50%": 4}
    assert bin_sizes(2) == {"1": 1, "2": 2, "3": 2, "10%": 1, "20%": 1, "30%": 1, "50%": 1}
    words = source_words(["▁Ein", "▁Hund", "e", "</s>"], group_pieces(["▁Ein", "▁Hund", "e", "</s>"]))
    assert words == [(0, 1), (1, 3)]  # "</s>" is never a candidate
    assert word_scores(np.array([[1.0, 2.0, 3.0, 9.0]]), words).tolist() == [[1.0, 5.0]]


def test_every_faithful_method_ranks_the_planted_word_first_and_beats_random():
    model = PlantedModel().double().eval()
    with torch.no_grad():
        logits, _ = model(torch.tensor([SOURCE]), torch.ones(1, len(SOURCE), dtype=torch.bool),
                          torch.zeros(1, len(SOURCE), dtype=torch.long))
    output = logits[0].argmax(-1).tolist()  # the model's own output: π of each source token, EOS last
    attributions = {"attention": np.eye(len(output), len(SOURCE))}
    for method in ("gradient", "smoothgrad", "integrated", "erasure"):
        attributions[method] = dict(saliency(model, [SOURCE], [output], method=method))[0].astype(np.float64)
    words = source_words(PIECES, group_pieces(PIECES))
    for method, scores in attributions.items():
        per_word = word_scores(scores, words)
        assert [int(np.argmax(per_word[t])) for t in range(len(words))] == list(range(len(words))), method

    figures = faithfulness(planted_translator(model), SOURCE, output, words, attributions, random_orders=5)
    random = figures[RANDOM]
    for method in attributions:
        comprehensiveness, sufficiency = figures[method].comprehensiveness_aopc, figures[method].sufficiency_aopc
        assert comprehensiveness["words"] > random.comprehensiveness_aopc["words"] + 1.0, method
        assert sufficiency["words"] < random.sufficiency_aopc["words"] - 1.0, method
        assert abs(sufficiency["words"]) < 1e-9, method  # the planted word alone is enough
    # removing the planted word costs log p(y_t | x) − log (1/V) on every word's row, EOS's row nothing
    drop = float(torch.log_softmax(logits[0, 0], -1).max()) + np.log(VOCAB)
    assert figures["erasure"].comprehensiveness["1"] == pytest.approx(drop * len(words) / len(output))


def test_the_measures_refuse_scores_that_are_not_finite():
    model = PlantedModel().double().eval()
    bad = np.full((2, len(SOURCE)), np.nan)
    with pytest.raises(ValueError, match="not finite"):
        faithfulness(planted_translator(model), SOURCE, [5, 3], source_words(PIECES, group_pieces(PIECES)),
                     {"gradient": bad})


# ---- counterfactual attention ------------------------------------------------------------------------


def test_divergences_are_total_variation_jensen_shannon_and_a_changed_word():
    p = torch.tensor([0.5, 0.5, 0.0]).log()
    q = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0], [0.25, 0.75, 0.0]]).log()
    tv, js, changed = divergences(p, q)
    assert tv.tolist() == pytest.approx([0.0, 1.0, 0.25])
    assert js.tolist()[:2] == pytest.approx([0.0, 1.0])  # identical, disjoint (in bits)
    assert changed.tolist() == [0.0, 1.0, 1.0]


@pytest.mark.parametrize("flow", ["parallel", "luong", "bahdanau"])
def test_uniform_attention_changes_nothing_for_the_mean_mechanism(flow):
    """``mean`` attends uniformly already: its uniform counterfactual is the model itself."""
    torch.manual_seed(0)
    model = build_model({"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "mean", "flow": flow},
                        20, 20).double()
    figures = counterfactual_attention(model, [5, 6, 7, 3], [9, 10, 11, 3], start=ATTNMT_SPECIALS.start)
    assert figures["uniform"].total_variation < 1e-12 and figures["uniform"].changed == 0.0
    assert set(figures) == {"permuted", "uniform", "other step"} and figures["permuted"].tokens == 4


def test_several_heads_are_refused_in_one_line():
    model = build_model({"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "multihead",
                         "attention_options": {"num_heads": 2}}, 20, 20)
    from attnmt.errors import ConfigError

    with pytest.raises(ConfigError, match="one head"):
        counterfactual_attention(model, [5, 3], [9, 3], start=ATTNMT_SPECIALS.start)


# ---- attnmt explain ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_explain_prints_every_method_that_applies_and_keeps_them(tiny_run, attnmt_cli, tmp_path):
    name, run = tiny_run
    out = tmp_path / "explained.jsonl"
    result = attnmt_cli("explain", run, "ein hund läuft", "zwei katzen", "--out", out, "--random-orders", "2")
    assert result.returncode == 0, result.stderr
    expected = ["attention", "gradient", "integrated", "erasure", "random"]
    expected += ["value_norm"] + (["alti", "rollout"] if name == "transformer" else [])
    for method in expected:
        assert f"  {method} " in result.stdout, (method, result.stdout)
    assert ("counterfactual attention (mean" in result.stdout) == (name == "sdp")
    per_head = "counterfactual attention per cross-attention head" in result.stdout
    assert per_head == (name == "transformer")  # one row per cross head, the others as they are
    if per_head:
        assert "    cross:1:1 " in result.stdout and "    cross:1:2 " in result.stdout
    records = load_attention(out)
    assert len(records) == 2 and records[0].attributions is not None
    assert set(records[0].attributions) == set(expected) - {"attention", "random"}
    assert records[0].explanation["methods"]["gradient"]["comprehensiveness_aopc"]["words"] is not None


def test_explain_json_and_bad_methods(tiny_run, attnmt_cli):
    name, run = tiny_run
    result = attnmt_cli("explain", run, "ein hund", "--methods", "attention,erasure", "--json", "--random-orders", "1")
    assert result.returncode == 0, result.stderr
    line = json.loads(result.stdout.splitlines()[0])
    assert set(line["methods"]) == {"attention", "erasure"} and "random" in line
    if name == "transformer":  # counterfactual attention per cross head, each with its three kinds
        heads = set(line["head_counterfactuals"])
        assert {"cross:1:1", "cross:1:2"} <= heads and all(head.startswith("cross:") for head in heads)
        assert line["counterfactual"] is None
        assert set(line["head_counterfactuals"]["cross:1:1"]) == {"permuted", "uniform", "other step"}
    refused = attnmt_cli("explain", run, "ein hund", "--methods", "rollout" if name != "transformer" else "frob")
    assert refused.returncode == 2 and refused.stdout == ""
    error = refused.stderr.strip().splitlines()[-1]  # after the line that says where the model runs
    assert error.startswith("attnmt explain: error: --methods") and "use one of: attention, gradient" in error


@pytest.mark.parametrize("flow", ["parallel", "luong"])
def test_replacing_attention_by_uniform_changes_nothing_for_the_mean_mechanism(flow):
    """``replaced_attention``: the ``mean`` mechanism's weights are uniform already, so greedy
    decoding with every step's weights made uniform writes the same tokens with the same scores;
    permuted, a ``dot`` mechanism keeps distributions over the real positions only."""
    from attnmt.decoding.interventions import replaced_attention
    from attnmt.decoding.search import greedy_search

    torch.manual_seed(0)
    source = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]])
    mask = source != 0
    model = build_model({"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "mean", "flow": flow},
                        20, 20).double().eval()
    with torch.no_grad():
        own = greedy_search(model, source, mask, max_len_a=0.0, max_len_b=6)
        with replaced_attention(model, "uniform"):
            replaced = greedy_search(model, source, mask, max_len_a=0.0, max_len_b=6)
    assert [h.tokens for h in own] == [h.tokens for h in replaced]
    assert [h.score for h in own] == pytest.approx([h.score for h in replaced], abs=1e-12)
    dot = build_model({"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "dot", "flow": flow},
                      20, 20).double().eval()
    with torch.no_grad(), replaced_attention(dot, "permuted"):
        _, weights = dot(source, mask, torch.tensor([[2, 9, 10], [2, 11, 0]]), return_attention=True)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    assert (weights[1, :, 2:] == 0).all()  # padding gets nothing
