"""Pin, replace and watch one head of a Transformer's decoder (attnmt.decoding.head_interventions
through attnmt.decoding.interventions), in float64 against the layer's own equations."""

from __future__ import annotations

import pytest
import torch

from attnmt.decoding.interventions import can_intervene, pinned_attention, replaced_attention, watched_step
from attnmt.errors import ConfigError
from attnmt.evaluation.counterfactual import counterfactual_attention
from attnmt.models import build_model
from attnmt.models.head_gates import Head
from attnmt.models.readout import ATTNMT_SPECIALS

TRANSFORMER = {"type": "transformer", "d_model": 16, "num_heads": 4, "ffn_dim": 24, "encoder_layers": 2,
               "decoder_layers": 2, "dropout": 0.0, "attention_dropout": 0.0}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def transformer(seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(dict(TRANSFORMER), 20, 20).double().eval()
    with torch.no_grad():  # sharper weights than the initialisation's nearly uniform ones
        for name, parameter in model.named_parameters():
            if "in_proj_weight" in name or "proj_weight" in name:
                parameter.mul_(3.0)
    return model


def pair(seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 20, (1, 6), generator=generator)
    tgt_in = torch.randint(4, 20, (1, 5), generator=generator)
    tgt_in[0, 0] = ATTNMT_SPECIALS.start
    return src, src != 0, tgt_in


def out_proj_outputs(model, head: Head, src, src_mask, tgt_in):
    """The output [T, d] of the attention that holds ``head`` (teacher forcing), and every layer's
    cross-attention weights per head [N_dec, h, T, S]."""
    layer = model.decoder_layers[head.layer]
    attention = layer.cross_attention if head.part == "cross" else layer.self_attention
    seen = []
    wrapped = "attend" in vars(attention)  # an intervention's wrapper, to keep
    current = attention.attend

    def recording(*arguments, **options):
        output, weights = current(*arguments, **options)
        seen.append(output[0])
        return output, weights

    attention.attend = recording
    try:
        with torch.no_grad():
            _, weights = model(src, src_mask, tgt_in, return_attention="heads")
    finally:
        if wrapped:
            attention.attend = current
        else:
            del attention.attend
    return seen[0], weights[0]


def step_log_probs(model, src, src_mask, tgt_in):
    """log P at each step of step-by-step decoding of ``tgt_in``: [T, V]."""
    with torch.no_grad():
        encoded = model.encode(src, src_mask)
        state = model.init_decoder_state(encoded)
        rows = []
        for step in range(tgt_in.shape[1]):
            log_p, _, state = model.decode_step(tgt_in[:, step], state, encoded, step)
            rows.append(log_p[0])
    return torch.stack(rows)


def test_a_transformer_can_be_intervened_on_but_only_in_a_named_decoder_head():
    model = transformer()
    assert can_intervene(model)
    weights = torch.full((6,), 1 / 6, dtype=torch.float64)
    with pytest.raises(ConfigError, match="name the one"), pinned_attention(model, 0, weights):
        pass
    with pytest.raises(ConfigError, match="target positions"), pinned_attention(model, 0, weights,
                                                                                 Head("encoder_self", 0, 0)):
        pass
    with pytest.raises(ConfigError, match=r"no such head.*cross:1:1-4"), pinned_attention(model, 0, weights,
                                                                                            Head("cross", 0, 4)):
        pass


@pytest.mark.parametrize("head", [Head("cross", 0, 2), Head("cross", 1, 0)])
def test_a_pin_changes_the_heads_output_at_its_step_by_its_share_of_w_o_and_nothing_before(head):
    model = transformer()
    src, src_mask, tgt_in = pair()
    step, source = 2, 4
    own_output, cross = out_proj_outputs(model, head, src, src_mask, tgt_in)
    weights = torch.zeros(6, dtype=torch.float64)
    weights[source] = 1.0
    with pinned_attention(model, step, weights, head):
        pinned_output, pinned_cross = out_proj_outputs(model, head, src, src_mask, tgt_in)
    attention = model.decoder_layers[head.layer].cross_attention
    with torch.no_grad():
        _, values = attention.project_key_value(model.encode(src, src_mask).states, model.encode(src, src_mask).states)
    v = values[0, head.head]  # [S, d_head]
    d = attention.head_dim
    share = attention.out_proj.weight[:, head.head * d:(head.head + 1) * d]  # W^O_i [E, d_head]
    alpha = cross[head.layer, head.head, step]
    expected = share @ (v[source] - alpha @ v)
    torch.testing.assert_close(pinned_output[step] - own_output[step], expected.detach(), atol=1e-12, rtol=0)
    torch.testing.assert_close(pinned_output[:step], own_output[:step], atol=1e-12, rtol=0)
    assert pinned_cross[head.layer, head.head, step].tolist() == weights.tolist()  # what the page draws
    other = [h for h in range(4) if h != head.head]
    torch.testing.assert_close(pinned_cross[head.layer, other], cross[head.layer, other], atol=1e-12, rtol=0)


def test_pinning_a_heads_own_weights_changes_no_log_probability_and_search_sees_the_pin_at_its_step():
    model = transformer()
    src, src_mask, tgt_in = pair()
    head, step = Head("cross", 1, 1), 3
    own = step_log_probs(model, src, src_mask, tgt_in)
    _, cross = out_proj_outputs(model, head, src, src_mask, tgt_in)
    with pinned_attention(model, step, cross[head.layer, head.head, step], head):
        same = step_log_probs(model, src, src_mask, tgt_in)
    torch.testing.assert_close(same, own, atol=1e-10, rtol=0)
    weights = torch.zeros(6, dtype=torch.float64)
    weights[0] = 1.0
    with pinned_attention(model, step, weights, head):
        pinned = step_log_probs(model, src, src_mask, tgt_in)
    torch.testing.assert_close(pinned[:step], own[:step], atol=1e-10, rtol=0)
    assert (pinned[step] - own[step]).abs().max() > 1e-3  # the pinned step changes


def test_a_decoder_self_attention_head_is_pinned_over_the_target_so_far():
    model = transformer()
    src, src_mask, tgt_in = pair()
    head, step = Head("decoder_self", 0, 3), 2
    own = step_log_probs(model, src, src_mask, tgt_in)
    weights = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)  # positions 0 … step: all on BOS
    with pinned_attention(model, step, weights, head):
        pinned = step_log_probs(model, src, src_mask, tgt_in)
    torch.testing.assert_close(pinned[:step], own[:step], atol=1e-10, rtol=0)
    assert (pinned[step] - own[step]).abs().max() > 1e-4
    with pytest.raises(ConfigError, match="6 pinned weights for 3 positions"), \
            pinned_attention(model, step, torch.full((6,), 1 / 6, dtype=torch.float64), head):
        step_log_probs(model, src, src_mask, tgt_in)


def test_replaced_attention_puts_uniform_or_permuted_weights_in_one_head_at_every_step():
    model = transformer()
    src, src_mask, tgt_in = pair()
    head = Head("cross", 1, 1)
    _, cross = out_proj_outputs(model, head, src, src_mask, tgt_in)
    with replaced_attention(model, "uniform", head=head):
        _, uniform = out_proj_outputs(model, head, src, src_mask, tgt_in)
    torch.testing.assert_close(uniform[1, 1], torch.full((5, 6), 1 / 6, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(uniform[0], cross[0], atol=1e-12, rtol=0)  # the layer before it is its own
    other = [0, 2, 3]
    torch.testing.assert_close(uniform[1, other], cross[1, other], atol=1e-12, rtol=0)  # and so are the other heads
    with replaced_attention(model, "permuted", seed=3, head=head):
        _, permuted = out_proj_outputs(model, head, src, src_mask, tgt_in)
    for row, own in zip(permuted[1, 1], cross[1, 1]):  # each row is its own weights, reordered
        assert sorted(row.tolist()) == pytest.approx(sorted(own.tolist()), abs=1e-12)
    assert not torch.allclose(permuted[1, 1], cross[1, 1])


def test_a_watched_step_of_a_head_shows_its_scores_weights_and_context_as_the_layer_computes_them():
    model = transformer()
    src, src_mask, tgt_in = pair()
    head, step = Head("cross", 1, 2), 1
    _, cross = out_proj_outputs(model, head, src, src_mask, tgt_in)
    with watched_step(model, step, head) as seen:
        step_log_probs(model, src, src_mask, tgt_in)
    record = seen[0]
    torch.testing.assert_close(record.weights, cross[1, 2, step], atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.softmax(record.scores, -1), record.weights, atol=1e-12, rtol=0)
    attention = model.decoder_layers[1].cross_attention
    with torch.no_grad():
        states = model.encode(src, src_mask).states
        _, values = attention.project_key_value(states, states)
    torch.testing.assert_close(record.context, record.weights @ values[0, 2], atol=1e-12, rtol=0)


def test_counterfactual_attention_of_a_transformer_head_and_uniform_heads_that_are_already_uniform():
    model = transformer()
    source, output = [5, 6, 7, 8, 3], [9, 10, 11, 3]
    figures = counterfactual_attention(model, source, output, start=ATTNMT_SPECIALS.start, head=Head("cross", 1, 0))
    assert set(figures) == {"permuted", "uniform", "other step"} and figures["uniform"].tokens == 4
    assert 0.0 < figures["uniform"].total_variation <= 1.0
    with torch.no_grad():  # a head whose queries are zero attends uniformly: its uniform counterfactual is itself
        attention = model.decoder_layers[1].cross_attention
        attention.in_proj_weight[0:4].zero_()
        attention.in_proj_bias[0:4].zero_()
    figures = counterfactual_attention(model, source, output, start=ATTNMT_SPECIALS.start, head=Head("cross", 1, 0))
    assert figures["uniform"].total_variation < 1e-12 and figures["uniform"].changed == 0.0
    with pytest.raises(ConfigError, match="cross-attention head"):
        counterfactual_attention(model, source, output, start=ATTNMT_SPECIALS.start, head=Head("decoder_self", 0, 0))
