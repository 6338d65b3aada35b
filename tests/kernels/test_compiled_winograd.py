"""Winograd on the float32 tiles (:class:`TiledWinograd`) against PyTorch and against the NumPy
Winograd: edge shapes (channels off the vectors and strips, images off the tiles, every
padding), every activation and a residual with its own, the same numbers on 1, 2 and 4
threads, and the parts the calls are cut into."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pools import intra_op

from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.matrix.products import FMA256, FMA512, REFERENCE, fp32_kernel
from kuiperinfer.kernels.matrix.winograd import TiledWinograd, winograd_parts
from kuiperinfer.kernels.winograd import winograd_conv3x3, winograd_weight

RNG = np.random.default_rng(0)
KERNEL = fp32_kernel()
pytestmark = pytest.mark.skipif(KERNEL is REFERENCE, reason="this CPU (or Numba's target) has no FMA")
TORCH_ACTIVATIONS = {None: lambda t: t, "relu": F.relu, "clip": lambda t: t.clamp(-1, 2), "silu": F.silu,
                     "hardswish": F.hardswish, "sigmoid": torch.sigmoid}


def activation(name):
    if name is None:
        return None
    return InplaceActivation("clip", (-1.0, 2.0)) if name == "clip" else InplaceActivation(name)


def expected(x, weight, bias, padding, act=None, residual=None, residual_act=None):
    (top, bottom), (left, right) = padding
    out = F.conv2d(F.pad(torch.from_numpy(x), (left, right, top, bottom)), torch.from_numpy(weight),
                   torch.from_numpy(bias))
    out = TORCH_ACTIVATIONS[act](out)
    if residual is not None:
        out = TORCH_ACTIVATIONS[residual_act](out + torch.from_numpy(residual))
    return nhwc(out.numpy())


def convolution(c, k, padding, act=None, residual_act=None):
    weight = RNG.standard_normal((k, c, 3, 3), dtype=np.float32) / np.float32(3 * np.sqrt(c))
    bias = RNG.standard_normal(k, dtype=np.float32)

    def few_tiles():
        raise AssertionError("a call with enough tiles went to the columns")
    tiled = TiledWinograd(weight, bias, activation(act), activation(residual_act), padding, KERNEL, few_tiles,
                          winograd_weight(weight))
    return weight, bias, tiled


def channels_last(x):
    return nchw(np.ascontiguousarray(nhwc(x)))


@pytest.mark.parametrize("n, c, k, h, w", [(1, 8, 16, 16, 16), (3, 24, 40, 13, 9), (1, 17, 33, 30, 17),
                                           (4, 64, 64, 7, 7), (2, 256, 96, 14, 14)])
@pytest.mark.parametrize("padding", [((1, 1), (1, 1)), ((0, 0), (0, 0)), ((2, 1), (0, 3))])
def test_tiled_winograd_matches_pytorch_and_the_numpy_winograd(n, c, k, h, w, padding):
    weight, bias, tiled = convolution(c, k, padding)
    x = RNG.standard_normal((n, c, h, w), dtype=np.float32)
    for given in (x, channels_last(x)):
        ours = tiled(given)
        reference = expected(x, weight, bias, padding)
        assert ours.shape == reference.shape and ours.dtype == np.float32
        np.testing.assert_allclose(ours, reference, atol=2e-5 * np.abs(reference).max(), rtol=0)
    numpy_winograd = winograd_conv3x3(x, winograd_weight(weight), padding) + bias
    np.testing.assert_allclose(tiled(x), numpy_winograd, atol=1e-5 * np.abs(numpy_winograd).max(), rtol=0)


@pytest.mark.parametrize("act", [None, "relu", "clip", "silu", "hardswish", "sigmoid"])
@pytest.mark.parametrize("residual_act", [None, "relu", "silu"])
def test_tiled_winograd_applies_activations_and_the_residual(act, residual_act):
    padding = ((1, 1), (1, 1))
    weight, bias, tiled = convolution(20, 40, padding, act, residual_act)
    x = RNG.standard_normal((2, 20, 11, 10), dtype=np.float32)
    residual = RNG.standard_normal((2, 40, 11, 10), dtype=np.float32)
    reference = expected(x, weight, bias, padding, act)
    np.testing.assert_allclose(tiled(x), reference, atol=1e-4, rtol=0)
    before = residual.copy()
    reference = expected(x, weight, bias, padding, act, residual, residual_act)
    np.testing.assert_allclose(tiled(x, channels_last(residual)), reference, atol=1e-4, rtol=0)
    np.testing.assert_allclose(tiled(x, residual), reference, atol=1e-4, rtol=0)
    np.testing.assert_array_equal(residual, before)


@pytest.mark.parametrize("n, c, k, h", [(1, 64, 64, 56), (1, 256, 256, 14), (4, 32, 48, 20), (1, 16, 512, 16)])
def test_tiled_winograd_gives_the_same_numbers_on_any_number_of_threads(n, c, k, h):
    padding = ((1, 1), (1, 1))
    _, _, tiled = convolution(c, k, padding, "relu", "relu")
    x = RNG.standard_normal((n, c, h, h), dtype=np.float32)
    residual = RNG.standard_normal((n, k, h, h), dtype=np.float32)
    alone = tiled(x, residual)
    for threads in (2, 4):
        with intra_op(threads):
            np.testing.assert_array_equal(tiled(x, residual), alone)


def test_calls_of_too_few_tiles_go_to_the_columns():
    """Calls of too few tiles go to the columns (their convolution made on first need); the
    transformed weight is packed on the first call that takes Winograd, as if packed at build."""
    weight = RNG.standard_normal((8, 16, 3, 3), dtype=np.float32)
    made = []

    def few_tiles():
        made.append(True)
        return lambda x, residual, scale, zero_point: "columns"
    tiled = TiledWinograd(weight, None, None, None, ((1, 1), (1, 1)), KERNEL, few_tiles)
    assert tiled.made_few_tiles is None and tiled.nbytes == 0    # packed on the first call that takes Winograd
    assert tiled(RNG.standard_normal((1, 16, 7, 7), dtype=np.float32)) == "columns"    # 4 tiles
    tiled(RNG.standard_normal((1, 16, 7, 7), dtype=np.float32))
    assert made == [True] and tiled.made_few_tiles is not None
    x = RNG.standard_normal((1, 16, 20, 20), dtype=np.float32)      # 25 tiles
    eager = TiledWinograd(weight, None, None, None, ((1, 1), (1, 1)), KERNEL, few_tiles, winograd_weight(weight))
    np.testing.assert_array_equal(nchw(tiled(x)), nchw(eager(x)))
    assert tiled.packed.nbytes == eager.packed.nbytes


@pytest.mark.parametrize("kernel", [FMA512, FMA256])
def test_parts_cover_every_tile_and_channel_once(kernel):
    rows, strips, lanes = {FMA512: (12, 2, 16), FMA256: (6, 2, 8)}[kernel]
    for tiles, c, k in [(196, 64, 64), (16, 256, 256), (16, 256, 40), (49, 128, 128), (5, 8, 8), (2048, 512, 512),
                        (30, 8, 8)]:
        table = winograd_parts(tiles, c, k, kernel)
        covered = np.zeros((tiles, k), int)
        for t0, t1, column0, column1, strip0, strip1 in table:
            assert column0 == strip0 * lanes and column1 == min(k, strip1 * lanes) and strip0 % strips == 0
            covered[t0:t1, column0:column1] += 1
        assert (covered == 1).all(), (tiles, c, k)
        assert len(table) % 2 == 0 or tiles < 2 * rows                   # two threads share them evenly
        if 4 * tiles <= k:                                                 # few tiles: they share the channels
            assert len(table) == 2 and (table[:, 1] - table[:, 0] == tiles).all()
