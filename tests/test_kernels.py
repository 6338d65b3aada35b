"""The fast kernels against PyTorch: Winograd, im2col and depthwise convolution in
channels-last memory, pooling, the in-place activations, and Winograd-sized convolutions."""

import threading
import time
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import check_op

from kuiperinfer.kernels import blockwise_transposed, depthwise_stripes, im2col, layout, parallel, pooling, winograd
from kuiperinfer.kernels.depthwise import PIXELS_MIN_CHANNELS, DepthwiseWeight, depthwise_conv2d
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.kernels.im2col import BLOCK_BYTES as IM2COL_BLOCK_BYTES
from kuiperinfer.kernels.im2col import im2col_conv2d, pack_weight
from kuiperinfer.kernels.interpolate import interpolate, nearest_table, repeat_factor
from kuiperinfer.kernels.layout import is_channels_last, nchw, nhwc, pad_nhwc
from kuiperinfer.kernels.pooling import BLOCK_BYTES, avg_pool2d, global_avg_pool2d, max_pool2d
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


@pytest.mark.parametrize("shape, groups", [((1, 6, 1, 1), 1), ((4, 1, 3, 3), 4), ((1, 3, 3, 3), 1)])
def test_weights_packed_from_an_unaligned_read_only_view_are_aligned(shape, groups):
    values = RNG.standard_normal(shape, dtype=np.float32)
    stored = np.frombuffer(b"\0" + values.tobytes(), dtype=np.float32, offset=1).reshape(shape)
    stored.flags.writeable = False
    assert not stored.flags.aligned
    packed = PackedWeight(stored, groups)
    operands = [packed.depthwise.taps] if packed.depthwise else [packed.gemm] + [packed.planar] * (shape[1] <= 4)
    assert all(a.flags.aligned and a.flags.c_contiguous for a in operands)
    x = RNG.standard_normal((2, shape[1] * groups, 9, 9), dtype=np.float32)
    geometry = ConvGeometry(shape[2:], (1, 1), (1, 1), ((1, 1), (1, 1)), "zeros", groups)
    expected = F.conv2d(torch.from_numpy(x), torch.from_numpy(values), padding=1, groups=groups).numpy()
    np.testing.assert_allclose(nchw(conv2d(x, packed, geometry)), expected, atol=1e-5)


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


ACTIVATIONS = [
    (InplaceActivation("relu"), F.relu),
    (InplaceActivation("clip", (-0.5, 2.0)), lambda t: F.hardtanh(t, -0.5, 2.0)),
    (InplaceActivation("clip", (0.0, 6.0)), F.relu6),
    (InplaceActivation("leaky_relu", (0.2,)), lambda t: F.leaky_relu(t, 0.2)),
    (InplaceActivation("leaky_relu", (-1.5,)), lambda t: F.leaky_relu(t, -1.5)),
    (InplaceActivation("sigmoid"), torch.sigmoid),
    (InplaceActivation("silu"), F.silu),
    (InplaceActivation("hardsigmoid"), F.hardsigmoid),
    (InplaceActivation("hardswish"), F.hardswish),
]


@pytest.mark.parametrize("activation, reference", ACTIVATIONS, ids=lambda a: getattr(a, "name", ""))
def test_inplace_activations_match_pytorch_and_work_in_place(activation, reference):
    x = np.concatenate([RNG.standard_normal(1000, dtype=np.float32) * 5,
                        np.array([0, -0.0, 3, -3, 6, -6, 1e30, -1e30, np.nan], np.float32)])
    y = x.copy()
    assert activation(y) is y
    np.testing.assert_allclose(y, reference(torch.from_numpy(x)).numpy(), atol=1e-6, rtol=1e-6)
    assert y.dtype == np.float32


@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
@pytest.mark.parametrize("kind", ["im2col", "winograd", "depthwise", "planar"])
def test_halved_weights_give_the_activation_exactly_the_same_values(activation, kind):
    """Weights and bias halved (exact in floating point) and the activation's halving pass
    skipped: the same bits as the whole product followed by the whole activation."""
    c, groups = {"depthwise": (8, 8), "planar": (3, 1)}.get(kind, (8, 1))
    x = RNG.standard_normal((1, c, 12, 12), dtype=np.float32)
    weight = RNG.standard_normal((8, c // groups, 3, 3), dtype=np.float32)
    bias = RNG.standard_normal(8, dtype=np.float32)
    geometry = ConvGeometry((3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), "zeros", groups)
    fn = InplaceActivation(activation)
    assert fn.takes_halves and not InplaceActivation("relu").takes_halves
    whole = PackedWeight(weight, groups, winograd=kind == "winograd")
    halved = PackedWeight(weight, groups, winograd=kind == "winograd", scale=0.5)
    expected = conv2d(x, whole, geometry, Epilogue(bias, fn))
    ours = conv2d(x, halved, geometry, Epilogue(bias * np.float32(0.5), fn, halved=True))
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("channels", [3, 16, 100, 1024, 1500])
@pytest.mark.parametrize("pixels", [1, 7, 200])
def test_epilogue_adds_the_bias_along_the_channels_of_any_block(channels, pixels):
    """Whole blocks go over rows of the repeated bias with a remainder of single pixels;
    a block of some channels, or in strided memory, gets just those channels' biases."""
    bias = RNG.standard_normal(channels, dtype=np.float32)
    block = RNG.standard_normal((pixels, channels), dtype=np.float32)
    expected = np.maximum(block + bias, 0)
    whole = block.copy()
    Epilogue(bias, InplaceActivation("relu"))(whole)
    np.testing.assert_array_equal(whole, expected)
    part = slice(channels // 3, channels)
    columns = block.copy()
    Epilogue(bias)(columns[:, part], part)
    np.testing.assert_array_equal(columns[:, part], block[:, part] + bias[part])
    np.testing.assert_array_equal(columns[:, :part.start], block[:, :part.start])
    strided = block[::-1].copy()[::-1]
    Epilogue(bias)(strided)
    np.testing.assert_array_equal(strided, block + bias)


def test_unknown_inplace_activation_is_refused():
    with pytest.raises(ValueError, match="unknown in-place activation"):
        InplaceActivation("swoosh")


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


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_pad_nhwc_matches_pytorch_from_either_layout(mode, channels_last):
    x = RNG.standard_normal((2, 3, 5, 6), dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    assert is_channels_last(source) == channels_last
    ours = pad_nhwc(source, ((1, 2), (3, 0)), mode)
    expected = F.pad(torch.from_numpy(x), (3, 0, 1, 2), mode="constant" if mode == "zeros" else mode)
    assert ours.flags.c_contiguous
    np.testing.assert_array_equal(nchw(ours), expected.numpy())


def test_large_copies_go_in_bands_of_rows_shared_among_intra_op_threads(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_WORK", 0)
    threads, copyto = set(), np.copyto

    def recording(*args, **kwargs):
        time.sleep(0.02)   # long enough for the helper to wake and take a part too
        threads.add(threading.get_ident())
        copyto(*args, **kwargs)

    monkeypatch.setattr(layout.np, "copyto", recording)
    parts = [RNG.standard_normal((2, c, 7, 5), dtype=np.float32) for c in (3, 1, 4)]
    sources = [nchw(np.ascontiguousarray(nhwc(p))) for p in parts]
    token = parallel.INTRA_OP_THREADS.set(2)
    try:
        joined = layout.concatenate_channels(sources)
        padded = pad_nhwc(parts[0], ((2, 0), (1, 3)))
    finally:
        parallel.INTRA_OP_THREADS.reset(token)
    assert is_channels_last(joined) and len(threads) == 2
    np.testing.assert_array_equal(joined, np.concatenate(parts, axis=1))
    np.testing.assert_array_equal(nchw(padded), F.pad(torch.from_numpy(parts[0]), (1, 3, 2, 0)).numpy())


def test_concatenating_channels_last_images_keeps_them_channels_last(tmp_path):
    class ConvCat(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 5, 1)

        def forward(self, x):
            return torch.cat((self.a(x), self.b(x), self.a(x)), dim=1)

    torch.manual_seed(0)
    check_op(ConvCat(), (1, 3, 9, 8), directory=tmp_path, batch=2)


@pytest.mark.parametrize("size, mode", [((10, 21), "nearest"), ((9, 13), "nearest"), ((10, 14), "bilinear"),
                                        ((10, 14), "nearest-exact"), ((5, 14), "nearest")])
@pytest.mark.parametrize("channels_last", [False, True])
def test_interpolate_keeps_the_layout_and_matches_pytorch(size, mode, channels_last):
    x = RNG.standard_normal((2, 3, 5, 7), dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    ours = interpolate(source, size, "linear" if mode == "bilinear" else mode, False, (None, None))
    expected = F.interpolate(torch.from_numpy(x), size=size, mode=mode).numpy()
    assert is_channels_last(ours) == channels_last and ours.flags.c_contiguous != channels_last
    np.testing.assert_allclose(ours, expected, atol=1e-6, rtol=0)


def test_repeat_factor_recognises_whole_repetitions_only():
    assert repeat_factor(nearest_table(5, 15, 3.0, False, False), 5) == 3
    assert repeat_factor(nearest_table(5, 5, None, False, False), 5) == 1
    assert repeat_factor(nearest_table(5, 9, None, False, False), 5) is None    # not a whole multiple
    assert repeat_factor(nearest_table(6, 3, None, False, False), 6) is None    # skips samples
    assert repeat_factor(nearest_table(5, 1, None, False, False), 5) is None    # one sample of five
    assert repeat_factor(nearest_table(5, 10, None, True, False), 5) == 2       # nearest-exact doubles too


@pytest.mark.parametrize("groups, kernel, stride", [(1, (3, 3), (2, 2)), (1, (1, 1), (1, 1)), (4, (3, 1), (1, 2)),
                                                    (8, (3, 3), (1, 1))])
def test_conv2d_takes_either_layout_and_returns_nhwc(groups, kernel, stride):
    x = RNG.standard_normal((2, 8, 11, 10), dtype=np.float32)
    weight = RNG.standard_normal((8, 8 // groups, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(8, dtype=np.float32)
    geometry = ConvGeometry(kernel, stride, (1, 1), ((1, 0), (2, 1)), "zeros", groups)
    expected = F.conv2d(F.pad(torch.from_numpy(x), (2, 1, 1, 0)), torch.from_numpy(weight),
                        torch.from_numpy(bias), stride=stride, groups=groups).numpy()
    for source in (x, nchw(np.ascontiguousarray(nhwc(x)))):
        ours = conv2d(source, PackedWeight(weight, groups), geometry, Epilogue(bias))
        np.testing.assert_allclose(nchw(ours), expected, atol=1e-5, rtol=1e-5)


def test_pooling_in_channel_blocks_matches_pytorch():
    x = RNG.standard_normal((2, 40, 120, 118), dtype=np.float32)  # several blocks of channels
    assert BLOCK_BYTES < x.nbytes // 4
    t = torch.from_numpy(x)
    np.testing.assert_array_equal(max_pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1), True),
                                  F.max_pool2d(t, 3, 2, 1, ceil_mode=True).numpy())
    np.testing.assert_allclose(avg_pool2d(x, (2, 3), (2, 1), (1, 1), False, False, None),
                               F.avg_pool2d(t, (2, 3), (2, 1), 1, count_include_pad=False).numpy(),
                               atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode", [
    ((3, 2), (2, 1), (1, 0), (1, 1), False),    # two taps cover every output along the width only
    ((2, 3), (1, 3), (0, 1), (1, 1), True),
    ((3, 3), (2, 2), (1, 1), (2, 1), True),     # dilated rows: no tap covers every output row
    ((1, 4), (3, 2), (0, 2), (1, 2), False)])
def test_max_pooling_of_rectangular_windows_in_either_layout_matches_pytorch(
        kernel, stride, padding, dilation, ceil_mode, channels_last):
    x = RNG.standard_normal((2, 5, 13, 11), dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    expected = F.max_pool2d(torch.from_numpy(x), kernel, stride, padding, dilation, ceil_mode).numpy()
    np.testing.assert_array_equal(max_pool2d(source, kernel, stride, padding, dilation, ceil_mode), expected)

@pytest.mark.parametrize("channels_last", [False, True])
def test_global_average_pooling_in_either_layout_matches_pytorch(channels_last):
    x = RNG.standard_normal((3, 40, 13, 9), dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    expected = F.adaptive_avg_pool2d(torch.from_numpy(x), 1).numpy()[:, :, 0, 0]
    np.testing.assert_allclose(global_avg_pool2d(source), expected, atol=1e-6, rtol=1e-5)


def test_winograd_in_blocks_of_tile_rows_matches_pytorch():
    x = RNG.standard_normal((2, 16, 150, 45), dtype=np.float32)
    weight = RNG.standard_normal((8, 16, 3, 3), dtype=np.float32) / np.float32(12)
    tile_row_bytes = 36 * 16 * 2 * 12 * 4
    assert 38 * tile_row_bytes > 2 * WINOGRAD_BLOCK_BYTES   # several blocks of tile rows
    padding = ((1, 1), (1, 1))
    expected = torch_reference(x, weight, None, padding)
    np.testing.assert_allclose(winograd_conv3x3(x, winograd_weight(weight), padding), expected,
                               atol=2e-5 * np.abs(expected).max(), rtol=0)


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


class ThreadRecorder:
    """An epilogue that records which threads ran it on which channels (and applies nothing)."""

    def __init__(self):
        self.threads = set()
        self.channels = set()
        self.lock = threading.Lock()

    def __call__(self, block, channels=slice(None)):
        time.sleep(0.02)   # long enough for the helper to wake and take a part too
        with self.lock:
            self.threads.add(threading.get_ident())
            self.channels.add((channels.start, channels.stop))


@pytest.mark.parametrize("kind", ["im2col", "pointwise", "winograd", "winograd few tiles", "depthwise",
                                  "depthwise strided", "depthwise dilated rows", "depthwise dilated pixels",
                                  "few pixels"])
def test_kernels_share_their_blocks_among_intra_op_threads(kind, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_WORK", 0)
    c, stride = (PIXELS_MIN_CHANNELS, 2) if kind in ("depthwise strided", "depthwise dilated pixels") else (16, 1)
    c = 64 if kind == "winograd few tiles" else c   # 16 tiles, 64 output channels
    dilation = 2 if "dilated" in kind else 1    # dilated: depthwise_conv2d, else stripes
    kernel = (1, 1) if kind == "pointwise" else (3, 3)   # "few pixels", "few tiles": output channels shared
    groups = c if kind.startswith("depthwise") else 1
    size = (7, 7) if kind == "few pixels" else (16, 16) if kind == "winograd few tiles" else (40, 36)
    x = RNG.standard_normal((1, c, *size), dtype=np.float32)
    weight = RNG.standard_normal((c, c // groups, *kernel), dtype=np.float32) / np.float32(4 * c)
    padding = dilation if kernel == (3, 3) else 0
    geometry = ConvGeometry(kernel, (stride, stride), (dilation, dilation), ((padding, padding), (padding, padding)),
                            "zeros", groups)
    recorder = ThreadRecorder()
    token = parallel.INTRA_OP_THREADS.set(2)
    try:
        ours = conv2d(x, PackedWeight(weight, groups, winograd=kind.startswith("winograd")), geometry, recorder)
    finally:
        parallel.INTRA_OP_THREADS.reset(token)
    expected = F.conv2d(torch.from_numpy(x), torch.from_numpy(weight), stride=stride, padding=padding,
                        dilation=dilation, groups=groups).numpy()
    np.testing.assert_allclose(nchw(ours), expected, atol=1e-5, rtol=1e-4)
    assert len(recorder.threads) == 2
    if kind in ("few pixels", "winograd few tiles"):
        assert recorder.channels == {(0, c // 2), (c // 2, c)}


@pytest.mark.parametrize("kind, kernel, stride, padding, ceil_mode", [
    ("max", 3, 2, 1, False), ("max", 3, 2, 1, True), ("max", 5, 1, 2, False), ("avg", 3, 2, 1, True)])
def test_pooling_of_one_channels_last_image_shares_bands_of_rows_among_intra_op_threads(
        kind, kernel, stride, padding, ceil_mode, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_WORK", 0)
    threads, reduce_axis = set(), pooling._reduce_axis

    def recording(*args):
        time.sleep(0.02)   # long enough for the helper to wake and take a part too
        threads.add(threading.get_ident())
        reduce_axis(*args)

    monkeypatch.setattr(pooling, "_reduce_axis", recording)
    x = nchw(RNG.standard_normal((1, 14, 11, 8), dtype=np.float32))
    token = parallel.INTRA_OP_THREADS.set(2)
    try:
        if kind == "max":
            ours = max_pool2d(x, (kernel,) * 2, (stride,) * 2, (padding,) * 2, (1, 1), ceil_mode)
        else:
            ours = avg_pool2d(x, (kernel,) * 2, (stride,) * 2, (padding,) * 2, ceil_mode, False, None)
    finally:
        parallel.INTRA_OP_THREADS.reset(token)
    pool = F.max_pool2d if kind == "max" else partial(F.avg_pool2d, count_include_pad=False)
    expected = pool(torch.from_numpy(np.ascontiguousarray(x)), kernel, stride, padding, ceil_mode=ceil_mode)
    np.testing.assert_allclose(ours, expected.numpy(), atol=1e-6, rtol=1e-5)
    assert len(threads) == 2 and is_channels_last(ours)


@pytest.mark.parametrize("channels_last", [False, True])
def test_blockwise_transposed_convolution_matches_pytorch_in_blocks_shared_among_threads(channels_last,
                                                                                        monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_WORK", 0)
    monkeypatch.setattr(blockwise_transposed, "BLOCK_BYTES", 4096)     # a few input rows per block
    x = RNG.standard_normal((2, 6, 9, 7), dtype=np.float32)
    weight = RNG.standard_normal((6, 5, 2, 3), dtype=np.float32)
    bias = RNG.standard_normal(5, dtype=np.float32)
    source = nchw(np.ascontiguousarray(nhwc(x))) if channels_last else x
    threads, matmul = set(), np.matmul

    def recording(*args, **kwargs):
        time.sleep(0.02)   # long enough for the helper to wake and take a part too
        threads.add(threading.get_ident())
        return matmul(*args, **kwargs)

    monkeypatch.setattr(blockwise_transposed.np, "matmul", recording)
    token = parallel.INTRA_OP_THREADS.set(2)
    try:
        ours = blockwise_transposed.blockwise_conv_transpose2d(
            source, blockwise_transposed.pack_blockwise_weight(weight), (2, 3), bias)
    finally:
        parallel.INTRA_OP_THREADS.reset(token)
    expected = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(bias),
                                  stride=(2, 3)).numpy()
    assert ours.shape == (2, 18, 21, 5) and ours.flags.c_contiguous
    np.testing.assert_allclose(nchw(ours), expected, atol=1e-5, rtol=1e-5)
    assert len(threads) == 2


def test_small_kernels_stay_in_the_calling_thread():
    recorder = ThreadRecorder()
    token = parallel.INTRA_OP_THREADS.set(2)
    try:
        x = RNG.standard_normal((1, 8, 10, 10), dtype=np.float32)
        weight = RNG.standard_normal((8, 8, 3, 3), dtype=np.float32)
        conv2d(x, PackedWeight(weight, 1), ConvGeometry((3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), "zeros", 1),
               recorder)
    finally:
        parallel.INTRA_OP_THREADS.reset(token)
    assert recorder.threads == {threading.get_ident()}
