"""The depthwise convolution in channels-last memory against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kuiperinfer.kernels.depthwise import PIXELS_MIN_CHANNELS, DepthwiseWeight, depthwise_conv2d
from kuiperinfer.kernels.layout import nchw, nhwc

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("n, c, h, w, k, stride, dilation", [
    (1, 16, 7, 7, 5, 1, 1), (2, 8, 14, 9, 3, 2, 1), (1, 4, 40, 60, 3, 1, 1), (3, 5, 31, 29, 3, 2, 2),
    (1, 6, 11, 64, (3, 5), (1, 2), 1), (2, 3, 9, 9, 1, 1, 1), (2, 7, 12, 20, (5, 3), 2, 3),
    (1, 5, 9, 10, 3, 3, 1), (2, 4, 8, 13, (2, 4), (2, 3), 1), (1, 6, 9, 9, 3, (1, 1), (2, 3)),
    (1, PIXELS_MIN_CHANNELS, 9, 11, 3, 2, 1), (2, PIXELS_MIN_CHANNELS + 4, 6, 10, (3, 5), (1, 2), 1)])
def test_depthwise_matches_pytorch(n, c, h, w, k, stride, dilation):
    x = RNG.standard_normal((n, c, h, w), dtype=np.float32)
    kh, kw = (k, k) if isinstance(k, int) else k
    weight = RNG.standard_normal((c, 1, kh, kw), dtype=np.float32)
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)))
    expected = F.conv2d(torch.from_numpy(padded), torch.from_numpy(weight), stride=(sh, sw),
                        dilation=(dh, dw), groups=c).numpy()
    ours = depthwise_conv2d(np.ascontiguousarray(nhwc(padded)), DepthwiseWeight(weight), (sh, sw),
                            (dh, dw), expected.shape[2:])
    assert ours.dtype == np.float32 and ours.flags.c_contiguous
    np.testing.assert_allclose(nchw(ours), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_weight_serves_several_widths(stride):
    weight = RNG.standard_normal((4, 1, 3, 3), dtype=np.float32)
    prepared = DepthwiseWeight(weight)
    for width in (9, 12, 9):
        x = RNG.standard_normal((2, 4, 6, width), dtype=np.float32)
        expected = F.conv2d(torch.from_numpy(x), torch.from_numpy(weight), stride=stride, groups=4).numpy()
        ours = depthwise_conv2d(np.ascontiguousarray(nhwc(x)), prepared, (stride, stride), (1, 1),
                                expected.shape[2:])
        np.testing.assert_allclose(nchw(ours), expected, atol=1e-5, rtol=1e-5)
