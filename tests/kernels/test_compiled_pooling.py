"""The compiled pooling of channels-last arrays against its NumPy reference and PyTorch: max
pooling over windows of every shape, padding, dilation and ceil_mode, NaN and -inf, uint8,
bands of rows on threads; global average pooling over few and many pixels; the layers
choosing them."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pools import intra_op

from kuiperinfer.kernels.compiled import pooling as compiled_pooling
from kuiperinfer.kernels.compiled.pooling import global_avg_pool2d_channels_last, max_pool2d_channels_last
from kuiperinfer.kernels.layout import is_channels_last, nchw
from kuiperinfer.kernels.pooling import global_avg_pool2d, max_pool2d, pool_output_hw
from kuiperinfer.layers.pooling import AdaptiveAvgPooling, MaxPooling
from kuiperinfer.layers.pooling3d import Window

RNG = np.random.default_rng(0)


def channels_last(n, c, h, w, dtype=np.float32):
    values = RNG.standard_normal((n, h, w, c), dtype=np.float32) * 50 + 100
    return nchw(values.astype(dtype) if dtype != np.uint8 else np.clip(values, 0, 255).astype(np.uint8))


def pooled(x, kernel, stride, padding, dilation, ceil_mode):
    out_hw = pool_output_hw(x, kernel, stride, padding, dilation, ceil_mode)
    return max_pool2d_channels_last(x, out_hw, kernel, stride, padding, dilation)


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, ceil_mode", [
    ((2, 64, 30, 28), (3, 3), (2, 2), (1, 1), (1, 1), False),   # ResNet's pooling
    ((1, 5, 13, 11), (3, 2), (2, 1), (1, 0), (1, 1), False),
    ((2, 3, 13, 11), (2, 3), (1, 3), (0, 1), (1, 1), True),     # ceil_mode: a window past the padding
    ((1, 7, 9, 12), (3, 3), (2, 2), (1, 1), (2, 3), True),      # dilated
    ((2, 17, 20, 20), (5, 5), (1, 1), (2, 2), (1, 1), False),   # YOLOv5's SPPF
    ((1, 1, 4, 4), (2, 2), (2, 2), (0, 0), (1, 1), False)])
def test_compiled_max_pooling_is_the_reference_and_pytorch(shape, kernel, stride, padding, dilation, ceil_mode):
    x = channels_last(*shape)
    x[0, 0, 1, 1], x[-1, -1, 2, 3], x[0, -1, 0, 0] = np.nan, -np.inf, np.inf
    ours = pooled(x, kernel, stride, padding, dilation, ceil_mode)
    assert is_channels_last(ours) and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, max_pool2d(x, kernel, stride, padding, dilation, ceil_mode))
    expected = F.max_pool2d(torch.from_numpy(np.ascontiguousarray(x)), kernel, stride, padding, dilation,
                            ceil_mode=ceil_mode)
    np.testing.assert_array_equal(ours, expected.numpy())


def test_a_window_of_nan_and_minus_infinity_is_nan_wherever_the_nan_lies():
    x = nchw(np.full((1, 3, 3, 2), -np.inf, np.float32))
    x[0, 0, 0, 0] = x[0, 1, 2, 2] = np.nan
    ours = pooled(x, (3, 3), (1, 1), (0, 0), (1, 1), False)
    np.testing.assert_array_equal(ours[0, :, 0, 0], [np.nan, np.nan])


def test_uint8_pools_as_the_reference_does():
    x = channels_last(2, 24, 15, 17, np.uint8)
    ours = pooled(x, (3, 3), (2, 2), (1, 1), (1, 1), True)
    assert ours.dtype == np.uint8
    np.testing.assert_array_equal(ours, max_pool2d(x.astype(np.float32), (3, 3), (2, 2), (1, 1), (1, 1), True))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_bands_of_rows_on_threads_give_the_same_numbers(threads, monkeypatch):
    x = channels_last(3, 32, 41, 37)
    alone = pooled(x, (3, 3), (2, 2), (1, 1), (1, 1), False)
    monkeypatch.setattr(compiled_pooling, "BAND_VALUES", 600)
    monkeypatch.setattr(compiled_pooling, "TAP_WORK", 1 << 20)
    with intra_op(threads):
        np.testing.assert_array_equal(pooled(x, (3, 3), (2, 2), (1, 1), (1, 1), False), alone)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_layer_pools_either_layout_and_keeps_it(compiled):
    layer = MaxPooling("pool", Window((3, 3), (2, 2), (1, 1), (1, 1), False), 2, compiled=compiled)
    x = channels_last(2, 16, 19, 23)
    expected = F.max_pool2d(torch.from_numpy(np.ascontiguousarray(x)), 3, 2, 1).numpy()
    for given in (x, np.ascontiguousarray(x)):
        out = layer.forward([given])[0]
        np.testing.assert_array_equal(out, expected)
        assert is_channels_last(out) == is_channels_last(given)


@pytest.mark.parametrize("shape", [(2, 576, 7, 7), (1, 16, 112, 112), (3, 5, 13, 9), (2, 40, 1, 1), (1, 3, 65, 1)])
def test_compiled_global_average_pooling_is_pytorchs_to_float32_rounding(shape):
    """Blocks of pixels, the last one partial, summed apart: over 12,544 pixels of values
    around 100 the mean stays within 1e-6 of the exact one (BLAS's reference strays 1.4e-6)."""
    x = channels_last(*shape)
    ours = global_avg_pool2d_channels_last(x)
    assert ours.shape == shape[:2] and ours.dtype == np.float32
    np.testing.assert_allclose(ours, x.astype(np.float64).mean(axis=(2, 3)), rtol=1e-6, atol=0)
    torch_mean = F.adaptive_avg_pool2d(torch.from_numpy(np.ascontiguousarray(x)), 1).numpy()[:, :, 0, 0]
    np.testing.assert_allclose(ours, torch_mean, rtol=1e-6, atol=0)
    np.testing.assert_allclose(ours, global_avg_pool2d(x), rtol=3e-6, atol=0)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_adaptive_average_layer_pools_either_layout(compiled):
    x = channels_last(2, 24, 9, 11)
    expected = F.adaptive_avg_pool2d(torch.from_numpy(np.ascontiguousarray(x)), 1).numpy()
    for size in ((1, 1), (3, 1)):
        layer = AdaptiveAvgPooling("pool", size, 2, compiled=compiled)
        expected = F.adaptive_avg_pool2d(torch.from_numpy(np.ascontiguousarray(x)), size).numpy()
        for given in (x, np.ascontiguousarray(x)):
            out = layer.forward([given])[0]
            assert out.shape == expected.shape
            np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-5)
