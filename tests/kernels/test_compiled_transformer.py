"""The transformer's compiled kernels against their NumPy references: attention (scaling,
mask and softmax between two products), softmax rows, layer normalisation with and without
the residual before it, and GELU as a fused activation."""

import numpy as np
import pytest
from pools import intra_op
from product_kernels import needs_fma

from kuiperinfer.kernels.compiled import attention as compiled_attention
from kuiperinfer.kernels.compiled import epilogue
from kuiperinfer.kernels.compiled.normalization import layer_norm
from kuiperinfer.kernels.compiled.softmax import softmax_rows
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.layers.attention import attention, fast_attention
from kuiperinfer.layers.linear import FEW_ROWS, Linear
from kuiperinfer.layers.normalization import standardize
from kuiperinfer.layers.softmax import softmax

RNG = np.random.default_rng(0)


def packed(batch: int, heads: int, length: int, depth: int) -> tuple[np.ndarray, ...]:
    """q, k, v as strided views of one (N, L, 3, H, E) projection, as timm cuts them."""
    qkv = RNG.standard_normal((batch, length, 3, heads, depth), dtype=np.float32)
    return tuple(qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))


@pytest.mark.parametrize("batch,heads,length,depth", [(1, 1, 1, 4), (1, 3, 197, 64), (3, 2, 7, 5), (3, 12, 33, 32)])
@pytest.mark.parametrize("mask_shape", [None, (1, 1, 1, -1), (-2, 1, 1, -1), (1, 1, -3, -1), (-2, -4, -3, -1)])
@pytest.mark.parametrize("threads", [1, 2])
@needs_fma
def test_attention_matches_the_reference(batch, heads, length, depth, mask_shape, threads, monkeypatch):
    q, k, v = packed(batch, heads, length, depth)
    mask = None
    if mask_shape is not None:
        sizes = {-1: length, -2: batch, -3: length, -4: heads}
        mask = (RNG.random([sizes.get(d, d) for d in mask_shape]) > 0.3).astype(np.float32) * -10000
    with intra_op(threads, min_work=1):
        merged = np.empty((batch, length, heads, depth), np.float32)   # the heads side by side
        ours = fast_attention(q, k, v, mask, depth ** -0.5, safe=False, out=merged.transpose(0, 2, 1, 3))
    expected, _ = attention(q, k, v, mask, depth ** -0.5, safe=False)
    np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(merged.transpose(0, 2, 1, 3), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("safe", [True, False])
@needs_fma
def test_attention_with_every_key_masked_gives_zeros_when_safe_and_nan_otherwise(safe):
    q, k, v = packed(2, 2, 5, 3)
    mask = np.zeros((2, 1, 5, 5), np.float32)
    mask[1, 0, 2] = -np.inf
    ours = fast_attention(q, k, v, mask, 0.5, safe=safe)
    expected, _ = attention(q, k, v, mask, 0.5, safe=safe)
    np.testing.assert_allclose(ours, expected, atol=1e-5)   # NaN where the reference has NaN
    assert np.isnan(ours[1, :, 2]).all() != safe


@needs_fma
def test_attention_of_contiguous_operands_matches_the_reference():
    q, k, v = (np.ascontiguousarray(x) for x in packed(2, 3, 19, 16))
    mask = np.triu(np.full((19, 19), -np.inf, np.float32), 1)
    np.testing.assert_allclose(fast_attention(q, k, v, mask, 0.25, safe=True), attention(q, k, v, mask, 0.25, True)[0],
                               atol=1e-5, rtol=1e-4)


def test_attention_of_other_shapes_goes_to_the_reference():
    q, k, v = (RNG.standard_normal((5, 4), dtype=np.float32) for _ in range(3))
    np.testing.assert_allclose(fast_attention(q, k, v, None, 0.5, safe=True), attention(q, k, v, None, 0.5, True)[0])


def test_mask_strides_broadcast():
    mask = compiled_attention.Mask.of(np.zeros((3, 1, 1, 7), np.float32))
    assert (mask.batch, mask.head, mask.row, mask.column) == (7, 0, 0, 1)
    assert compiled_attention.Mask.of(np.zeros(7, np.float32))[1:] == (0, 0, 0, 1)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (591, 197), (4, 32)])
def test_softmax_rows_match_the_reference(shape):
    x = (RNG.standard_normal(shape) * 20).astype(np.float32)
    x[0, 0] = -np.inf
    out = np.empty_like(x)
    softmax_rows(x, out)
    np.testing.assert_allclose(out, softmax(x, -1), atol=1e-6, rtol=1e-5)
    softmax_rows(x, x)   # in place
    np.testing.assert_allclose(x, out)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (197, 192), (3, 384)])
@pytest.mark.parametrize("add", [False, True])
def test_layer_norm_rows_match_the_reference(shape, add, threads):
    x = (RNG.standard_normal(shape) * 3 + 50).astype(np.float32)   # a large mean beside the spread
    residual = RNG.standard_normal(shape).astype(np.float32)
    weight, bias = RNG.random(shape[1]).astype(np.float32) + 0.5, RNG.standard_normal(shape[1]).astype(np.float32)
    total, out = np.empty_like(x), np.empty_like(x)
    with intra_op(threads, min_work=1):
        layer_norm(x, residual, total, out, weight, bias, np.float32(1e-6), int(add))
    y = x + residual if add else x
    expected = standardize(y.astype(np.float64), -1, 1e-6) * weight + bias
    np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-4)
    if add:
        np.testing.assert_array_equal(total, y)


@pytest.mark.parametrize("act", [InplaceActivation("gelu"), InplaceActivation("gelu_tanh")], ids=lambda a: a.name)
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (3, 33, 96)])
def test_gelu_fused_into_the_epilogue_matches_the_reference(act, shape):
    block = (RNG.standard_normal(shape) * 4).astype(np.float32)
    block.flat[:4] = [-1e4, -20.0, 20.0, 1e4][:block.size]
    bias = RNG.standard_normal(shape[-1]).astype(np.float32)
    ours, reference = block.copy(), block.copy()
    epilogue.CompiledEpilogue(bias, shape[-1], act)(ours)
    Epilogue(bias, act)(reference)
    # the rational tanh and erf err by up to 1e-6, times the value where they saturate
    np.testing.assert_allclose(ours, reference, atol=5e-6, rtol=1e-5)


def test_finish_transposed_finishes_only_its_columns():
    block = RNG.standard_normal((5, 40)).astype(np.float32)
    bias = RNG.standard_normal(40).astype(np.float32)
    ours = np.full((5, 40), 7.0, np.float32)
    reference = ours.copy()
    reference[:, 16:32] = block[:, 16:32]
    epilogue.finish_transposed(np.ascontiguousarray(block.T), ours, bias, 16, 32,
                               *epilogue.ActivationCode.of(InplaceActivation("gelu")))
    Epilogue(bias[16:32], InplaceActivation("gelu"))(reference[:, 16:32])
    np.testing.assert_allclose(ours, reference, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("rows", [0, 1, 5, FEW_ROWS, FEW_ROWS + 1, 197])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("activation", [None, "gelu", "relu"])
def test_compiled_linear_matches_the_reference(rows, threads, activation, monkeypatch):
    """Few rows go transposed, in blocks of output features; more rows in blocks of rows."""
    weight = RNG.standard_normal((70, 48), dtype=np.float32)
    bias = RNG.standard_normal(70, dtype=np.float32)
    act = None if activation is None else InplaceActivation(activation)
    x = RNG.standard_normal((rows, 2, 48), dtype=np.float32)[:, 1]      # rows one apart in memory
    with intra_op(threads, min_work=1):
        ours = Linear("fc", weight, bias, act, compiled=True).forward([x])[0]
    expected = Linear("fc", weight, bias, act, compiled=False).forward([x])[0]
    assert ours.shape == expected.shape == (rows, 70)
    np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=1e-5)
