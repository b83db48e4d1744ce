"""attnmt.keras: the Keras 3 layers against attnmt's PyTorch layers (float64) and against
keras.layers.MultiHeadAttention with the same weights, on the PyTorch backend; the docs' example
runs; a missing Keras says in one line what to install.

Keras computes in float32 what it is given in float64 on every backend but TensorFlow (its type
promotion follows JAX's), so the layers run in float32 here and agree within TOLERANCE."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")

from attnmt.attention.functional import scaled_dot_product_attention  # noqa: E402
from attnmt.attention.multihead import MultiHeadAttention as TorchMultiHeadAttention  # noqa: E402
from attnmt.keras import (  # noqa: E402
    DotProductAttention,
    MultiHeadAttention,
    look_ahead_mask,
    padding_mask,
)

PROJECT = Path(__file__).resolve().parent.parent
# Keras's own convert_to_numpy on the PyTorch backend warns about NumPy 2's copy keyword
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # float32 against float64


def numpy(x) -> np.ndarray:
    return keras.ops.convert_to_numpy(x)


def masks(rng, batch: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths with a 0 (a row with nothing to attend to), and padding & look-ahead [B, L, L]."""
    lengths = np.array([length, 0, *rng.integers(1, length + 1, size=batch - 2)])
    allowed = numpy(padding_mask(lengths, length)) & numpy(look_ahead_mask(length))[None]
    return lengths, allowed


def test_dot_product_attention_is_attnmts_in_both_mask_conventions():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((4, 6, 8)) * 3, rng.standard_normal((4, 6, 8)) * 3
    v = rng.standard_normal((4, 6, 5))
    _, allowed = masks(rng, 4, 6)
    want, want_weights = scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)),
                                                      torch.from_numpy(allowed), need_weights=True)
    layer = DotProductAttention()
    output, weights = layer(q, k, v, 8, allowed, return_weights=True)
    np.testing.assert_allclose(numpy(output), want.numpy(), **TOLERANCE)
    np.testing.assert_allclose(numpy(weights), want_weights.numpy(), **TOLERANCE)
    hidden = DotProductAttention(mask_means="hide")(q, k, v, 8, (~allowed).astype("float64"))
    np.testing.assert_allclose(numpy(hidden), want.numpy(), **TOLERANCE)
    assert (numpy(weights)[1] == 0).all() and (numpy(output)[1] == 0).all()  # nothing to attend to
    assert (numpy(weights)[~allowed] == 0).all()  # exactly 0, not e^-1e9
    with pytest.raises(ValueError, match="mask_means='keep'"):
        DotProductAttention(mask_means="keep")


def test_multi_head_attention_equals_attnmts_torch_layer_with_the_same_weights():
    rng = np.random.default_rng(1)
    E, heads, L = 8, 2, 5
    torch.manual_seed(1)
    reference = TorchMultiHeadAttention(E, heads, kdim=6, vdim=7).double()
    with torch.no_grad():
        for parameter in reference.parameters():
            if parameter.dim() == 1:
                parameter.normal_()
    layer = MultiHeadAttention(heads, E)
    queries, keys, values = (rng.standard_normal((4, L, size)) for size in (E, 6, 7))
    layer(queries, keys, values)  # built
    b_q, b_k, b_v = reference.in_proj_bias.detach().split(E)
    for kernel, bias, (weight, torch_bias) in [
        (layer.query_kernel, layer.query_bias, (reference.q_proj_weight, b_q)),
        (layer.key_kernel, layer.key_bias, (reference.k_proj_weight, b_k)),
        (layer.value_kernel, layer.value_bias, (reference.v_proj_weight, b_v)),
        (layer.output_kernel, layer.output_bias, (reference.out_proj.weight, reference.out_proj.bias)),
    ]:
        kernel.assign(weight.detach().numpy().T)
        bias.assign(torch_bias.detach().numpy())
    lengths, allowed = masks(rng, 4, L)
    got, got_weights = layer(queries, keys, values, mask=allowed, return_weights=True)
    want, want_weights = reference(*(torch.from_numpy(x) for x in (queries, keys, values)),
                                   attn_mask=torch.from_numpy(allowed).unsqueeze(1), need_weights=True,
                                   average_weights=False)
    np.testing.assert_allclose(numpy(got), want.detach().numpy(), **TOLERANCE)
    np.testing.assert_allclose(numpy(got_weights), want_weights.detach().numpy(), **TOLERANCE)
    np.testing.assert_allclose(numpy(got)[1], np.broadcast_to(numpy(layer.output_bias), (L, E)), rtol=0, atol=0)
    causal = layer(queries, keys, values, mask=numpy(padding_mask(lengths, L)), use_causal_mask=True)
    np.testing.assert_allclose(numpy(causal), numpy(got), **TOLERANCE)


def test_multi_head_attention_equals_keras_own_layer_with_the_same_weights():
    rng = np.random.default_rng(2)
    E, heads, L = 12, 3, 6
    ours = MultiHeadAttention(heads, E)
    theirs = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=E // heads)
    queries, values = rng.standard_normal((3, L, E)), rng.standard_normal((3, L, E))
    ours(queries, values, values)
    theirs(queries, values, values)
    d = E // heads
    for name, dense in (("query", theirs._query_dense), ("key", theirs._key_dense), ("value", theirs._value_dense)):
        dense.kernel.assign(rng.standard_normal((E, heads, d)))
        dense.bias.assign(rng.standard_normal((heads, d)))
        getattr(ours, f"{name}_kernel").assign(numpy(dense.kernel).reshape(E, heads * d))
        getattr(ours, f"{name}_bias").assign(numpy(dense.bias).reshape(heads * d))
    theirs._output_dense.kernel.assign(rng.standard_normal((heads, d, E)))
    theirs._output_dense.bias.assign(rng.standard_normal(E))
    ours.output_kernel.assign(numpy(theirs._output_dense.kernel).reshape(heads * d, E))
    ours.output_bias.assign(numpy(theirs._output_dense.bias))
    lengths = np.array([L, 2, 4])  # every row keeps a key: Keras adds −1e9 where attnmt puts exactly 0
    allowed = np.broadcast_to(numpy(padding_mask(lengths, L)), (3, L, L))
    got = ours(queries, values, values, mask=allowed, use_causal_mask=True)
    want = theirs(queries, values, values, attention_mask=allowed, use_causal_mask=True)
    np.testing.assert_allclose(numpy(got), numpy(want), **TOLERANCE)


def test_the_layers_train_and_their_gradients_are_finite_with_an_empty_row():
    rng = np.random.default_rng(3)
    layer = MultiHeadAttention(2, 8)
    x = torch.tensor(rng.standard_normal((2, 4, 8)), dtype=torch.float32, requires_grad=True)
    allowed = np.array([[True] * 4, [False] * 4])[:, None, :]
    layer(x, x, x, mask=allowed).sum().backward()
    assert torch.isfinite(x.grad).all()
    gradients = [weight.value.grad for weight in layer.trainable_weights]
    assert len(gradients) == 8 and all(g is not None and torch.isfinite(g).all() for g in gradients)


def test_the_docs_keras_example_runs():
    text = (PROJECT / "docs" / "mechanisms.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- the test suite runs this block \(tests/test_keras.py\) -->\n```python\n(.*?)```", text,
                      re.S)
    assert block is not None, "docs/mechanisms.md lost its Keras example"
    result = subprocess.run([sys.executable, "-c", block.group(1)], capture_output=True, text=True, timeout=300,
                            cwd=PROJECT, env={k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("(2, 5, 8)")


def test_a_missing_keras_is_one_line_saying_what_to_install():
    code = "import sys; sys.modules['keras'] = None; import attnmt.keras"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=PROJECT)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == \
        "ImportError: attnmt.keras needs Keras 3: pip install 'attnmt[keras]'"
