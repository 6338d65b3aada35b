"""im2col convolution in blocks, and the planar columns for few input channels, against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kuiperinfer.kernels import im2col
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.kernels.im2col import BLOCK_BYTES as IM2COL_BLOCK_BYTES
from kuiperinfer.kernels.im2col import im2col_conv2d, pack_weight
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.layers.convolution import ConvGeometry, PackedWeight, conv2d

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("groups, kernel, stride", [(1, (5, 3), (2, 2)), (2, (5, 3), (2, 2)), (1, (1, 1), (1, 1))])
def test_im2col_in_blocks_with_epilogue_matches_pytorch(groups, kernel, stride):
    x = RNG.standard_normal((2, 16, 301, 97), dtype=np.float32)
    weight = RNG.standard_normal((6, 16 // groups, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(6, dtype=np.float32)
    out_hw = ((301 - kernel[0]) // stride[0] + 1, (97 - kernel[1]) // stride[1] + 1)
    columns_or_output_bytes = 2 * out_hw[0] * out_hw[1] * max(6, kernel[0] * kernel[1] * 16) * 4
    assert columns_or_output_bytes > IM2COL_BLOCK_BYTES   # several blocks
    ours = nchw(im2col_conv2d(np.ascontiguousarray(nhwc(x)), pack_weight(weight, groups), kernel, stride,
                              (1, 1), out_hw, Epilogue(bias, InplaceActivation("relu"))))
    expected = F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(bias),
                               stride=stride, groups=groups)).numpy()
    np.testing.assert_allclose(ours, expected, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("channels, kernel, stride, dilation, pads, mode",
                         [(3, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), "zeros"),
                          (1, (2, 5), (1, 3), (2, 1), ((0, 1), (2, 0)), "zeros"),
                          (4, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), "reflect")])
def test_planar_columns_for_few_channels_match_pytorch(channels, kernel, stride, dilation, pads, mode,
                                                       monkeypatch):
    monkeypatch.setattr(im2col, "BLOCK_BYTES", 4096)      # several stripes of rows per image
    x = RNG.standard_normal((2, channels, 50, 31), dtype=np.float32)
    weight = RNG.standard_normal((5, channels, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(5, dtype=np.float32)
    packed = PackedWeight(weight, 1)
    assert packed.planar is not None
    (top, bottom), (left, right) = pads
    padded = F.pad(torch.from_numpy(x), (left, right, top, bottom), mode="constant" if mode == "zeros" else mode)
    expected = F.relu(F.conv2d(padded, torch.from_numpy(weight), torch.from_numpy(bias), stride=stride,
                               dilation=dilation)).numpy()
    geometry = ConvGeometry(kernel, stride, dilation, pads, mode, 1)
    for source in (x, nchw(np.ascontiguousarray(nhwc(x)))):    # planar columns, or NHWC im2col
        ours = conv2d(source, packed, geometry, Epilogue(bias, InplaceActivation("relu")))
        np.testing.assert_allclose(nchw(ours), expected, atol=1e-4, rtol=1e-4)
