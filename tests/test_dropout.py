"""The byte dropout mask (attnmt.models.dropout) and ``model.dropout_mask`` of the RNN and the Transformer."""

from __future__ import annotations

import pytest
import torch

from attnmt.errors import ConfigError
from attnmt.models import dropout as dropout_module
from attnmt.models.dropout import Dropout, byte_dropout, dropout
from attnmt.models.rnn import RNNConfig, RNNSeq2Seq
from attnmt.models.transformer import Transformer, TransformerConfig
from attnmt.runs.run_config import load_config


def test_bytes_keep_each_element_with_probability_one_minus_k_over_256_and_scale_by_its_inverse():
    torch.manual_seed(0)
    x = torch.ones(1000, 1000, dtype=torch.float64)
    y = byte_dropout(x, 0.2)
    dropped = round(0.2 * 256)  # 51
    keep_rate = 1 - dropped / 256
    assert set(torch.unique(y).tolist()) == {0.0, 256 / (256 - dropped)}
    kept = y != 0
    # 1e6 draws: the standard error of the rate is 4e-4; 5 of them
    assert abs(kept.double().mean().item() - keep_rate) < 2e-3
    assert abs(y.mean().item() - 1.0) < 3e-3  # unbiased: E[y] = x
    # every byte of a 64-bit draw is uniform, the sign byte included (eight to a word, in order)
    by_position = kept.flatten().view(-1, 8).double().mean(dim=0)
    assert torch.all((by_position - keep_rate).abs() < 5e-3), by_position


def test_bytes_keep_the_shape_dtype_and_a_masks_gradient_for_odd_sizes_and_strided_input():
    torch.manual_seed(1)
    for shape in [(1,), (3, 5), (2, 7, 3)]:
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            x = torch.randn(shape, dtype=dtype, requires_grad=True)
            y = byte_dropout(x, 0.3)
            assert y.shape == x.shape and y.dtype == dtype
            y.sum().backward()
            # the gradient is the mask scaled, exactly where y kept x
            scale = 256 / (256 - round(0.3 * 256))
            expected = (y != 0).to(dtype) * scale
            assert torch.equal(x.grad, expected.to(dtype))
    strided = torch.randn(6, 4).t()
    assert not strided.is_contiguous()
    y = byte_dropout(strided, 0.5)
    kept = y != 0
    assert torch.allclose(y[kept], (strided * 2)[kept])


def test_bytes_follow_the_seed_and_do_nothing_outside_training_or_at_zero():
    x = torch.randn(40, 30)
    torch.manual_seed(3)
    first = byte_dropout(x, 0.25)
    torch.manual_seed(3)
    assert torch.equal(byte_dropout(x, 0.25), first)
    assert byte_dropout(x, 0.25, training=False) is x
    assert byte_dropout(x, 0.0) is x
    assert byte_dropout(x, 0.001) is x  # round(0.256) = 0: no byte is below it
    # p near 1 drops 255 of 256 values, never all
    assert torch.all(byte_dropout(torch.ones(100_000), 0.9999).max() == 256.0)


def test_dropout_dispatches_on_the_mask_and_the_module_follows_train_and_eval():
    x = torch.randn(20, 10)
    torch.manual_seed(5)
    expected = torch.nn.functional.dropout(x, 0.2, True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.2, True, "bernoulli"), expected)
    torch.manual_seed(5)
    expected = byte_dropout(x, 0.2)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.2, True, "bytes"), expected)
    module = Dropout(0.2, "bytes")
    assert "mask=bytes" in repr(module)
    module.eval()
    assert module(x) is x
    with pytest.raises(ValueError, match="mask must be one of bernoulli, bytes"):
        Dropout(0.2, "gaussian")


def test_an_rnn_with_byte_masks_trains_and_its_config_round_trips():
    config = RNNConfig(embed_dim=8, hidden_dim=12, encoder_layers=2, decoder_layers=2, dropout=0.3,
                       dropout_mask="Bytes")
    assert config.dropout_mask == "bytes"
    assert RNNConfig.from_dict(config.to_dict()) == config
    torch.manual_seed(0)
    model = RNNSeq2Seq(config, 30, 30)
    src = torch.randint(4, 30, (3, 6))
    tgt = torch.randint(4, 30, (3, 5))
    mask = torch.ones(3, 6, dtype=torch.bool)
    model.train()
    first, second = model(src, mask, tgt)[0], model(src, mask, tgt)[0]
    assert not torch.equal(first, second)  # dropout acts, between layers too
    first.float().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    model.eval()
    assert torch.equal(model(src, mask, tgt)[0], model(src, mask, tgt)[0])


def test_an_unknown_dropout_mask_is_a_config_error_naming_the_option():
    with pytest.raises(ConfigError, match=r"model.dropout_mask must be one of bernoulli, bytes, got 'uniform'"):
        RNNConfig(dropout_mask="uniform")
    assert RNNConfig().dropout_mask == "bernoulli"  # what every run before the option used


def _small_transformer(mask: str) -> Transformer:
    config = TransformerConfig(d_model=16, num_heads=2, ffn_dim=32, encoder_layers=2, decoder_layers=2,
                               dropout=0.3, attention_dropout=0.0, dropout_mask=mask)
    torch.manual_seed(0)
    return Transformer(config, 30, 30)


def test_a_transformer_draws_every_dropout_mask_from_bytes_and_none_at_evaluation(monkeypatch):
    bernoulli, with_bytes = _small_transformer("bernoulli"), _small_transformer(" Bytes")
    assert with_bytes.config.dropout_mask == "bytes"
    assert TransformerConfig.from_dict(with_bytes.config.to_dict()) == with_bytes.config
    masks = [module.mask for module in with_bytes.modules() if isinstance(module, Dropout)]
    # 2 embeddings, 2 encoder layers × (2 residual blocks + the feed-forward block's), 2 decoder layers × (3 + 1)
    assert masks == ["bytes"] * (2 + 2 * 3 + 2 * 4)
    src = torch.randint(4, 30, (3, 6))
    tgt = torch.randint(4, 30, (3, 5))
    mask = torch.ones(3, 6, dtype=torch.bool)
    with_bytes.eval(), bernoulli.eval()
    assert torch.equal(with_bytes(src, mask, tgt)[0], bernoulli(src, mask, tgt)[0])  # same weights, no dropout

    def no_float_masks(*args, **kwargs):
        raise AssertionError("F.dropout called under dropout_mask: bytes")

    monkeypatch.setattr(dropout_module.F, "dropout", no_float_masks)
    with_bytes.train()
    first, second = with_bytes(src, mask, tgt)[0], with_bytes(src, mask, tgt)[0]
    assert not torch.equal(first, second)  # the byte masks act, and only they
    first.float().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in with_bytes.parameters())
    bernoulli.train()
    with pytest.raises(AssertionError, match="F.dropout called"):
        bernoulli(src, mask, tgt)


def test_a_transformer_keeps_torch_s_dropout_by_default_and_names_an_unknown_mask():
    assert TransformerConfig().dropout_mask == "bernoulli"  # what every run before the option used
    assert TransformerConfig.from_dict({"d_model": 16, "num_heads": 2}).dropout_mask == "bernoulli"
    with pytest.raises(ConfigError, match=r"model.dropout_mask must be one of bernoulli, bytes, got 'uniform'"):
        TransformerConfig(dropout_mask="uniform")


def test_a_transformer_option_set_on_the_command_line_is_blamed_on_the_set_not_the_recipe():
    with pytest.raises(ConfigError) as caught:
        load_config("multi30k_transformer_fast", set_options=["model.dropout_mask=gaussian"])
    assert str(caught.value).startswith("set_options=model.dropout_mask=gaussian: "
                                        "model.dropout_mask must be one of bernoulli, bytes"), str(caught.value)
    with pytest.raises(ConfigError, match=r"^set_options=model.dropout=2: "):
        load_config("multi30k_transformer_fast", set_options=["model.dropout=2"])
