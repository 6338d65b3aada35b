"""Winograd F(4x4, 3x3) against PyTorch: the kernel, its weight transform (in blocks of output
channels), its blocks of tile rows, when it pays, and convolutions of the sizes that take it."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import check_op

from kuiperinfer.kernels import winograd
from kuiperinfer.kernels.elementwise import Epilogue
from kuiperinfer.kernels.layout import nhwc
from kuiperinfer.kernels.winograd import BLOCK_BYTES as WINOGRAD_BLOCK_BYTES
from kuiperinfer.kernels.winograd import winograd_conv3x3, winograd_pays, winograd_weight
from kuiperinfer.layers.convolution import ConvGeometry, PackedWeight, conv2d

RNG = np.random.default_rng(0)


def torch_reference(x, weight, bias, padding):
    """F.conv2d of NCHW ``x`` zero-padded by ((top, bottom), (left, right)), as NHWC."""
    (top, bottom), (left, right) = padding
    padded = F.pad(torch.from_numpy(x), (left, right, top, bottom))
    out = F.conv2d(padded, torch.from_numpy(weight), None if bias is None else torch.from_numpy(bias))
    return nhwc(out.numpy())


@pytest.mark.parametrize("n, c, k, h, w", [(1, 8, 16, 16, 16), (2, 3, 5, 9, 13), (1, 16, 8, 30, 17),
                                           (3, 1, 1, 3, 3), (1, 32, 64, 28, 28)])
@pytest.mark.parametrize("padding", [((1, 1), (1, 1)), ((0, 0), (0, 0)), ((2, 1), (0, 3))])
def test_winograd_matches_pytorch(n, c, k, h, w, padding):
    x = RNG.standard_normal((n, c, h, w), dtype=np.float32)
    weight = RNG.standard_normal((k, c, 3, 3), dtype=np.float32) / np.float32(3 * np.sqrt(c))
    bias = RNG.standard_normal(k, dtype=np.float32)
    ours = winograd_conv3x3(x, winograd_weight(weight), padding, Epilogue(bias))
    expected = torch_reference(x, weight, bias, padding)
    assert ours.dtype == np.float32 and ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=2e-5 * np.abs(expected).max(), rtol=0)


def test_winograd_without_bias_leaves_the_input_alone():
    x = RNG.standard_normal((1, 4, 8, 8), dtype=np.float32)
    before = x.copy()
    weight = RNG.standard_normal((2, 4, 3, 3), dtype=np.float32)
    ours = winograd_conv3x3(x, winograd_weight(weight), ((1, 1), (1, 1)))
    np.testing.assert_array_equal(x, before)
    np.testing.assert_allclose(ours, torch_reference(x, weight, None, ((1, 1), (1, 1))), atol=1e-4)


def test_winograd_weight_made_in_blocks_of_output_channels_equals_the_whole(monkeypatch):
    weight = RNG.standard_normal((7, 5, 3, 3), dtype=np.float32)
    whole = winograd_weight(weight)
    monkeypatch.setattr(winograd, "TRANSFORM_BYTES", 36 * 5 * 8 * 3)    # 3 output channels at a time
    np.testing.assert_array_equal(winograd_weight(weight), whole)
    expected = np.einsum("ai,kcij,bj->abck", winograd._G, weight.astype(np.float64), winograd._G)
    np.testing.assert_allclose(whole, expected.reshape(36, 5, 7), rtol=1e-6, atol=1e-7)


def test_gemm_operand_is_made_on_first_use_when_winograd_computes_the_exported_shape():
    weight = RNG.standard_normal((6, 8, 3, 3), dtype=np.float32)
    bias = RNG.standard_normal(6, dtype=np.float32)
    geometry = ConvGeometry((3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), "zeros", 1)
    assert PackedWeight(weight, 1, winograd=True, geometry=geometry, recorded=(1, 8, 8))._gemm is not None
    packed = PackedWeight(weight, 1, winograd=True, geometry=geometry, recorded=(1, 16, 16))
    assert packed._gemm is None                                   # 16 tiles: Winograd
    for size in (16, 5):                                          # Winograd, then im2col (1 tile)
        x = RNG.standard_normal((1, 8, size, size), dtype=np.float32)
        ours = conv2d(x, packed, geometry, Epilogue(bias))
        np.testing.assert_allclose(ours, torch_reference(x, weight, bias, ((1, 1), (1, 1))), atol=1e-4)
    assert packed._gemm is not None


def test_winograd_pays_only_with_enough_tiles_and_channels():
    assert winograd_pays(1, 64, (56, 56))
    assert not winograd_pays(1, 512, (7, 7))      # 4 tiles: the transformed weight dominates
    assert winograd_pays(8, 512, (7, 7))
    assert not winograd_pays(1, 3, (224, 224))    # too few channels to share the transforms


@pytest.mark.parametrize("shape", [(1, 16, 30, 30), (2, 8, 17, 9)])
def test_winograd_sized_convolutions_match_pytorch(shape, tmp_path):
    for name, conv in (("pad1", nn.Conv2d(shape[1], 12, 3, padding=1)),
                       ("valid", nn.Conv2d(shape[1], 6, 3, bias=False))):
        (tmp_path / name).mkdir()
        check_op(conv, shape, directory=tmp_path / name, batch=3)


def test_winograd_in_blocks_of_tile_rows_matches_pytorch():
    x = RNG.standard_normal((2, 16, 150, 45), dtype=np.float32)
    weight = RNG.standard_normal((8, 16, 3, 3), dtype=np.float32) / np.float32(12)
    tile_row_bytes = 36 * 16 * 2 * 12 * 4
    assert 38 * tile_row_bytes > 2 * WINOGRAD_BLOCK_BYTES   # several blocks of tile rows
    padding = ((1, 1), (1, 1))
    expected = torch_reference(x, weight, None, padding)
    np.testing.assert_allclose(winograd_conv3x3(x, winograd_weight(weight), padding), expected,
                               atol=2e-5 * np.abs(expected).max(), rtol=0)
