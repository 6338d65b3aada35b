"""The depthwise convolution in stripes of rows, alone or after a 1x1 convolution, against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kuiperinfer.kernels import depthwise_stripes
from kuiperinfer.kernels.depthwise import DepthwiseWeight
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.kernels.im2col import pack_weight
from kuiperinfer.kernels.layout import nchw, nhwc

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("kernel, stride, pads", [((3, 3), (1, 1), ((1, 1), (1, 1))), ((3, 3), (2, 2), ((1, 1), (1, 1))),
                                                  ((5, 5), (2, 2), ((2, 2), (2, 2))), ((3, 5), (1, 3), ((0, 1), (2, 1))),
                                                  ((4, 4), (2, 3), ((1, 2), (0, 3)))])
@pytest.mark.parametrize("stripe_bytes", [1 << 20, 3000])       # whole images, or stripes of a few rows
@pytest.mark.parametrize("pointwise", [False, True])
def test_depthwise_in_stripes_matches_pytorch(kernel, stride, pads, stripe_bytes, pointwise, monkeypatch):
    monkeypatch.setattr(depthwise_stripes, "STRIPE_BYTES", stripe_bytes)
    x = RNG.standard_normal((3, 5, 17, 14), dtype=np.float32)
    expand = RNG.standard_normal((8, 5, 1, 1), dtype=np.float32)
    expand_bias = RNG.standard_normal(8, dtype=np.float32)
    channels = 8 if pointwise else 5
    weight = RNG.standard_normal((channels, 1, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(channels, dtype=np.float32)
    (top, bottom), (left, right) = pads
    t = torch.from_numpy(x)
    if pointwise:
        t = F.relu6(F.conv2d(t, torch.from_numpy(expand), torch.from_numpy(expand_bias)))
    expected = F.hardswish(F.conv2d(F.pad(t, (left, right, top, bottom)), torch.from_numpy(weight),
                                    torch.from_numpy(bias), stride=stride, groups=channels)).numpy()
    product = dict(pointwise=pack_weight(expand, 1)[0],
                   pointwise_epilogue=Epilogue(expand_bias, InplaceActivation("clip", (0.0, 6.0))))
    ours = depthwise_stripes.depthwise_in_stripes(
        np.ascontiguousarray(nhwc(x)) if pointwise else nhwc(x), DepthwiseWeight(weight), stride, pads,
        expected.shape[2:], Epilogue(bias, InplaceActivation("hardswish")), **(product if pointwise else {}))
    np.testing.assert_allclose(nchw(ours), expected, atol=1e-4, rtol=1e-4)
