"""Every head of a translator, named one way and switched off one way (attnmt.models.head_gates)."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import torch

from attnmt.errors import ConfigError
from attnmt.models import build_model
from attnmt.models.head_gates import (
    Head,
    attention_slots,
    gated_heads,
    head_count,
    head_means,
    masked_heads,
    parse_heads,
)

TRANSFORMER = {"type": "transformer", "d_model": 12, "num_heads": 3, "ffn_dim": 16, "encoder_layers": 2,
               "decoder_layers": 2, "dropout": 0.0}
RNN_MULTIHEAD = {"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "multihead",
                 "attention_options": {"num_heads": 3}, "dropout": 0.0}
RNN_ONE_HEAD = {"type": "rnn", "embed_dim": 8, "hidden_dim": 12, "attention": "additive", "dropout": 0.0,
                "flow": "luong"}
MODELS = {"transformer": TRANSFORMER, "rnn-multihead": RNN_MULTIHEAD, "rnn-additive-luong": RNN_ONE_HEAD}


def model_of(name: str, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(dict(MODELS[name]), 20, 20).double().eval()
    with torch.no_grad():  # biases away from zero, so that "only the bias is left" says something
        for parameter_name, parameter in model.named_parameters():
            if "bias" in parameter_name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    return model


def batch(seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 20, (3, 6), generator=generator)
    src[1, 4:] = 0
    src_mask = src != 0
    tgt_in = torch.randint(4, 20, (3, 5), generator=generator)
    tgt_in[:, 0] = 1
    tgt_in[2, 3:] = 0
    return src, src_mask, tgt_in


@pytest.mark.parametrize("name", MODELS)
def test_an_empty_mask_gives_outputs_bit_identical_to_no_mask(name):
    model = model_of(name)
    src, src_mask, tgt_in = batch()
    plain, _ = model(src, src_mask, tgt_in)
    with masked_heads(model, parse_heads("", model)):
        empty, _ = model(src, src_mask, tgt_in)
    with gated_heads(model, {(slot.part, slot.layer): torch.ones(slot.heads) for slot in attention_slots(model)}):
        ones, _ = model(src, src_mask, tgt_in)
    assert torch.equal(plain, empty) and torch.equal(plain, ones)
    masked = parse_heads("cross:1:1", model)
    with masked_heads(model, masked):
        changed, _ = model(src, src_mask, tgt_in)
    assert not torch.equal(plain, changed)
    after, _ = model(src, src_mask, tgt_in)
    assert torch.equal(plain, after)  # the hooks are gone after the block


@pytest.mark.parametrize(("name", "part"), [("transformer", "encoder_self"), ("transformer", "decoder_self"),
                                            ("transformer", "cross"), ("rnn-multihead", "cross")])
def test_masking_every_head_of_one_attention_leaves_exactly_its_output_projections_bias(name, part):
    model = model_of(name)
    slot = next(slot for slot in attention_slots(model) if slot.part == part and slot.layer == 0)
    seen = []
    handle = slot.projection.register_forward_hook(lambda module, inputs, output: seen.append(output))
    try:
        with masked_heads(model, parse_heads(f"{part}:1:*", model)):
            model(*batch())
    finally:
        handle.remove()
    assert seen and all(torch.equal(output, slot.projection.bias.expand_as(output)) for output in seen)


@contextmanager
def what_the_heads_hand_on(slot):
    """The list of what ``slot``'s heads hand on, call by call, within the block: the input of its
    output projection, or the context of a one-head RNN mechanism (as gated, when gated)."""
    seen = []
    if slot.projection is not None:
        handle = slot.projection.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0].detach()))
        try:
            yield seen
        finally:
            handle.remove()
        return
    attention = slot.attention
    inner, wrapped_before = attention.attend, "attend" in vars(attention)

    def recording(query, prepared, step=None):
        context, weights = inner(query, prepared, step)
        seen.append(context.detach())
        return context, weights

    attention.attend = recording
    try:
        yield seen
    finally:
        if wrapped_before:
            attention.attend = inner
        else:
            del attention.attend


def test_masking_the_one_head_of_an_rnn_mechanism_zeroes_its_context_at_every_step():
    model = model_of("rnn-additive-luong")
    [slot] = attention_slots(model)
    with masked_heads(model, [Head("cross", 0, 0)]), what_the_heads_hand_on(slot) as contexts:
        model(*batch())
    assert len(contexts) == 5 and all(torch.count_nonzero(context) == 0 for context in contexts)
    assert "attend" not in vars(model.attention)  # the mechanism is as it was


def test_the_parts_layers_and_heads_of_each_model_and_specs_that_name_them():
    transformer, rnn = model_of("transformer"), model_of("rnn-multihead")
    assert head_count(transformer) == {"encoder_self": (2, 3), "decoder_self": (2, 3), "cross": (2, 3)}
    assert head_count(rnn) == {"cross": (1, 3)} and head_count(model_of("rnn-additive-luong")) == {"cross": (1, 1)}
    assert parse_heads("cross:2:3, encoder_self:*:1", transformer) == [
        Head("encoder_self", 0, 0), Head("encoder_self", 1, 0), Head("cross", 1, 2)]
    assert len(parse_heads("decoder_self:*:*", transformer)) == 6 and parse_heads(" , ", transformer) == []
    assert Head("cross", 1, 2).label() == "cross:2:3"


@pytest.mark.parametrize(("spec", "message"), [
    ("cross:3:1", "--mask-heads: 'cross:3:1': layer '3' is out of range (1-2, or *); this model has encoder_self: "
                  "layers 1-2, heads 1-3; decoder_self: layers 1-2, heads 1-3; cross: layers 1-2, heads 1-3"),
    ("cross:1:0", "head '0' is out of range (1-3, or *)"),
    ("selfish:1:1", "unknown part 'selfish'"),
    ("cross:1", "'cross:1' is not PART:LAYER:HEAD"),
    ("cross:one:1", "layer 'one' is out of range"),
])
def test_a_spec_that_names_no_head_of_the_model_is_one_line_naming_the_ranges(spec, message):
    with pytest.raises(ConfigError) as caught:
        parse_heads(spec, model_of("transformer"))
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["transformer", "rnn-multihead", "rnn-additive-luong"])
def test_the_importance_gates_equal_a_finite_difference_derivative_in_float64(name):
    """∂L/∂ξ_i at ξ = 1, by autograd through the gates, against (L(ξ + h e_i) − L(ξ − h e_i)) / 2h."""
    model = model_of(name)
    src, src_mask, tgt_in = batch()
    targets = torch.roll(tgt_in, -1, dims=1).clamp_min(4)

    def loss(gates):
        with gated_heads(model, gates):
            logits, _ = model(src, src_mask, tgt_in)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    gates = {(slot.part, slot.layer): torch.ones(slot.heads, dtype=torch.float64, requires_grad=True)
             for slot in attention_slots(model)}
    loss(gates).backward()
    step = 1e-6
    for key, gate in gates.items():
        for head in range(gate.shape[0]):
            shifted = []
            for sign in (1, -1):
                moved = {k: g.detach().clone() for k, g in gates.items()}
                moved[key][head] += sign * step
                with torch.no_grad():
                    shifted.append(float(loss(moved)))
            expected = (shifted[0] - shifted[1]) / (2 * step)
            assert abs(float(gate.grad[head]) - expected) <= 1e-6 * max(1.0, abs(expected)), (key, head)


@pytest.mark.parametrize("name", MODELS)
def test_mean_ablation_puts_each_heads_mean_output_over_real_tokens_in_its_place(name):
    model = model_of(name)
    src, src_mask, tgt_in = batch()
    means = head_means(model, [(src, src_mask, tgt_in, tgt_in != 0)])
    slots = attention_slots(model)
    assert set(means) == {(slot.part, slot.layer) for slot in slots}
    slot = slots[-1]
    assert means[(slot.part, slot.layer)].shape == (slot.heads, slot.head_dim)
    heads = [Head(slot.part, slot.layer, k) for k in range(slot.heads)]
    with masked_heads(model, heads, ablation="mean", means=means), what_the_heads_hand_on(slot) as seen:
        model(src, src_mask, tgt_in)
    fill = means[(slot.part, slot.layer)].double().reshape(-1)
    rows = [x.reshape(-1, fill.shape[0]) for x in seen]
    assert rows and all(torch.allclose(row, fill.expand_as(row), rtol=0, atol=1e-12) for row in rows)
    with pytest.raises(ConfigError, match="mean ablation needs"):
        with masked_heads(model, heads, ablation="mean"):
            pass


def tiny_hugging_face(kind: str):
    """A tiny random Marian or T5 model in float64 (no tokenizer: ids are enough here)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "marian":
        config = transformers.MarianConfig(
            vocab_size=30, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
            pad_token_id=29, eos_token_id=0, decoder_start_token_id=29)
        model = transformers.MarianMTModel(config)
    else:
        config = transformers.T5Config(vocab_size=30, d_model=16, d_kv=4, d_ff=32, num_layers=2,
                                       num_decoder_layers=2, num_heads=4, decoder_start_token_id=0,
                                       pad_token_id=0, eos_token_id=1)
        model = transformers.T5ForConditionalGeneration(config)
    return model.double().eval()


def hf_logits(model, src, src_mask, tgt_in):
    return model(input_ids=src, attention_mask=src_mask.long(), decoder_input_ids=tgt_in).logits


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["marian", "t5"])
def test_masking_a_hugging_face_model_through_hooks_equals_zeroing_its_heads_columns_of_w_o(kind):
    """The hooks on a Hugging Face model's output projections do what removing a head does by hand:
    the d_head columns of W^O that multiply it set to zero, in a copy of the model."""
    import copy

    model = tiny_hugging_face(kind)
    assert head_count(model) == {"encoder_self": (2, 4), "decoder_self": (2, 2 if kind == "marian" else 4),
                                 "cross": (2, 2 if kind == "marian" else 4)}
    src, src_mask, tgt_in = batch()
    spec = "encoder_self:1:3,decoder_self:2:*,cross:1:2"
    heads = parse_heads(spec, model)
    by_hand = copy.deepcopy(model)
    slots = {(slot.part, slot.layer): slot for slot in attention_slots(by_hand)}
    with torch.no_grad():
        for head in heads:
            slot = slots[(head.part, head.layer)]
            slot.projection.weight[:, head.head * slot.head_dim:(head.head + 1) * slot.head_dim] = 0
    with torch.no_grad(), masked_heads(model, heads):
        hooked = hf_logits(model, src, src_mask, tgt_in)
    with torch.no_grad():
        expected = hf_logits(by_hand, src, src_mask, tgt_in)
        plain = hf_logits(model, src, src_mask, tgt_in)
    torch.testing.assert_close(hooked, expected, rtol=0, atol=1e-12)
    assert not torch.allclose(plain, expected)


# ---- attnmt heads, and --mask-heads on the commands ------------------------------------------------


def test_attnmt_heads_switches_each_head_off_and_its_delta_loss_is_the_masked_loss_minus_the_plain(
        tiny_run, tmp_path, capsys):
    from attnmt.cli import main as cli_main
    from attnmt.decoding.translator import Translator
    from attnmt.evaluation.heads import mean_nll, probe_of_run

    name, run = tiny_run
    plot = tmp_path / "heads.png"
    assert cli_main(["heads", str(run), "--sentences", "5", "--json", "--threads", "1", "--plot", str(plot)]) == 0
    report = json.loads(capsys.readouterr().out)
    translator = Translator.load(run, num_threads=1)
    model = translator.attributed_model
    assert len(report["heads"]) == sum(layers * heads for layers, heads in head_count(model).values())
    assert report["sentences"] == 5 and plot.stat().st_size > 5_000
    probe = probe_of_run(translator, run, "valid", 5)
    plain = mean_nll(translator, probe)
    assert report["loss"] == pytest.approx(plain, abs=1e-9)
    first = report["heads"][0]
    with masked_heads(model, [Head(first["part"], first["layer"] - 1, first["head"] - 1)]):
        assert first["delta_loss"] == pytest.approx(mean_nll(translator, probe) - plain, abs=1e-9)
    for row in report["heads"]:
        assert 0 <= row["confidence"] <= 1 and 0 <= row["sink"] <= 1 and row["importance"] >= 0
        assert (row["position"] is None) == (row["part"] == "cross")
        assert (row["rare"] is None) == (row["part"] != "encoder_self")


def test_translate_with_mask_heads_decodes_as_the_masked_model_and_a_bad_spec_is_one_line(tiny_run, capsys):
    from attnmt.cli import main as cli_main
    from attnmt.decoding.translator import Translator

    name, run = tiny_run
    spec = "cross:1:*"
    assert cli_main(["translate", str(run), "Ein Hund läuft .", "--mask-heads", spec, "--threads", "1"]) == 0
    printed = capsys.readouterr()
    translator = Translator.load(run, num_threads=1)
    with masked_heads(translator.model, parse_heads(spec, translator.model)):
        expected = translator.translate(["Ein Hund läuft ."])[0].output
    assert printed.out == expected + "\n" and "heads switched off (zero): cross:1:1" in printed.err
    assert cli_main(["translate", str(run), "Ein Hund.", "--mask-heads", "cross:9:1", "--threads", "1"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("attnmt translate: error: --mask-heads: 'cross:9:1': layer '9' is out of range")


@pytest.mark.parametrize("tiny_run", ["transformer"], indirect=True)
def test_on_a_planted_model_where_one_head_alone_carries_the_source_that_head_ranks_first(tiny_run):
    """Every head's share of W^O is zero but cross:1:1's (made larger): only it can carry anything, so
    it must rank first by ablation and by importance, and every other head must change nothing."""
    from attnmt.decoding.translator import Translator
    from attnmt.evaluation.heads import HeadProbe, head_report, probe_of_run

    name, run = tiny_run
    translator = Translator.load(run, num_threads=1)
    model = translator.model
    with torch.no_grad():
        for slot in attention_slots(model):
            for head in range(slot.heads):
                columns = slice(head * slot.head_dim, (head + 1) * slot.head_dim)
                if (slot.part, slot.layer, head) == ("cross", 0, 0):
                    slot.projection.weight[:, columns] *= 8
                else:
                    slot.projection.weight[:, columns] = 0
    probe = probe_of_run(translator, run, "valid", 5)
    own = [t.output for t in translator.translate(probe.sources)]  # the outputs this model is sure of
    probe = HeadProbe(probe.sources, own, probe.src_ids,
                      [ids + [translator.eos_id] for ids in translator.tokenizers.tgt.encode_many(own)],
                      probe.specials, probe.src_sink, probe.tgt_sink, probe.src_counts)
    report = head_report(translator, probe, bleu=False)
    by_ablation = sorted(report.rows, key=lambda row: -row.delta_loss)
    by_importance = sorted(report.rows, key=lambda row: -row.importance)
    for ranking in (by_ablation, by_importance):
        assert (ranking[0].part, ranking[0].layer, ranking[0].head) == ("cross", 1, 1)
    assert by_ablation[0].delta_loss > 0.01
    assert all(abs(row.delta_loss) < 1e-9 and row.importance == 0 for row in report.rows[1:]
               if (row.part, row.layer, row.head) != ("cross", 1, 1))


# ---- pruning ---------------------------------------------------------------------------------------


def test_a_pruned_transformer_equals_the_masked_original_in_float64_and_prunes_again(tmp_path):
    """pruned_model_state removes the heads' weights; the pruned model's logits and every layer's
    cross-attention equal the original's with those heads masked (zero ablation) within 1e-10, with a
    layer left without heads too; pruning the pruned model records the heads in the first numbering."""
    from attnmt.models.pruning import pruned_model_state

    model = model_of("transformer")
    src, src_mask, tgt_in = batch()
    spec = "encoder_self:1:*,decoder_self:2:2,cross:1:1,cross:1:3"
    heads = parse_heads(spec, model)
    labels, state = pruned_model_state(model, heads)
    assert labels == ["encoder_self:1:1", "encoder_self:1:2", "encoder_self:1:3", "decoder_self:2:2", "cross:1:1",
                      "cross:1:3"]
    pruned = build_model({**TRANSFORMER, "pruned_heads": labels}, 20, 20).double().eval()
    pruned.load_state_dict(state)
    assert [layer.self_attention.num_heads for layer in pruned.encoder_layers] == [0, 3]
    assert [layer.cross_attention.num_heads for layer in pruned.decoder_layers] == [1, 3]
    with masked_heads(model, heads):
        expected, expected_weights = model(src, src_mask, tgt_in, return_attention="heads")
    found, found_weights = pruned(src, src_mask, tgt_in, return_attention="heads")
    torch.testing.assert_close(found, expected, rtol=0, atol=1e-10)
    kept = [1]  # cross:1's kept head, then all of layer 2
    torch.testing.assert_close(found_weights[:, 0, kept], expected_weights[:, 0, kept], rtol=0, atol=1e-10)
    torch.testing.assert_close(found_weights[:, 1], expected_weights[:, 1], rtol=0, atol=1e-10)
    assert torch.count_nonzero(found_weights[:, 0, [0, 2]]) == 0  # removed heads read as zeros
    # again: the pruned model's cross:2:1 is the original's cross:2:1; its encoder_self:2:3 the original's too
    again, _ = pruned_model_state(pruned, parse_heads("cross:1:1,encoder_self:2:3", pruned))
    assert again == ["encoder_self:1:1", "encoder_self:1:2", "encoder_self:1:3", "encoder_self:2:3", "decoder_self:2:2",
                     "cross:1:1", "cross:1:2", "cross:1:3"]


def test_attnmt_prune_writes_a_run_that_translates_as_the_masked_original_and_never_over_a_run(tiny_run, tmp_path,
                                                                                                 capsys):
    from attnmt.cli import main as cli_main
    from attnmt.decoding.translator import Translator

    name, run = tiny_run
    out = tmp_path / "pruned"
    if name != "transformer":
        assert cli_main(["prune", str(run), "--heads", "cross:1:1", "--out", str(out)]) == 2
        assert "prune removes heads of attnmt's Transformer" in capsys.readouterr().err and not out.exists()
        return
    spec = "decoder_self:1:2,cross:2:*"
    assert cli_main(["prune", str(run), "--heads", spec, "--out", str(out)]) == 0
    assert sorted(path.name for path in out.iterdir()) == ["best.pt", "config.yaml", "pruned.json"]
    original, pruned = Translator.load(run, num_threads=1), Translator.load(out, num_threads=1)
    sentences = ["Ein Hund läuft .", "Zwei Männer ."]
    with masked_heads(original.model, parse_heads(spec, original.model)):
        expected = [t.output for t in original.translate(sentences, beam=2)]
    assert [t.output for t in pruned.translate(sentences, beam=2)] == expected
    assert cli_main(["prune", str(run), "--heads", "cross:1:1", "--out", str(out)]) == 2
    assert "exists; prune writes a new run folder and never over one" in capsys.readouterr().err
    assert cli_main(["prune", str(run), "--heads", "", "--out", str(tmp_path / "none")]) == 2
    assert "--heads names no head" in capsys.readouterr().err
    assert not (tmp_path / "none").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
