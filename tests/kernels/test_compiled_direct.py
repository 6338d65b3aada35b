"""The compiled direct convolution of few input channels against PyTorch, on edge shapes, and
chosen by the convolution layer where it applies; its int8 form against the int8 product of
the columns."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pools import intra_op

from kuiperinfer.kernels.compiled import direct
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.im2col import pack_weight
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.matrix.convolution import DirectInt8Convolution, ProductConvolution
from kuiperinfer.kernels.matrix.precision import Int8
from kuiperinfer.kernels.matrix.products import AVX2, REFERENCE, VNNI, ProductEpilogue, Requantize
from kuiperinfer.layers.convolution import Conv2dKernel, ConvGeometry, PackedWeight, product_convolution

RNG = np.random.default_rng(0)
TORCH_ACTIVATIONS = {None: lambda t: t, "relu": F.relu, "clip": lambda t: t.clamp(0, 6), "hardswish": F.hardswish,
                     "silu": F.silu, "sigmoid": torch.sigmoid}
ACTIVATIONS = [None, InplaceActivation("relu"), InplaceActivation("clip", (0.0, 6.0)), InplaceActivation("hardswish"),
               InplaceActivation("silu"), InplaceActivation("sigmoid")]


def expected(x, weight, bias, act, stride, dilation, pads):
    (top, bottom), (left, right) = pads
    padded = F.pad(torch.from_numpy(x), (left, right, top, bottom))
    out = F.conv2d(padded, torch.from_numpy(weight), torch.from_numpy(bias), stride=stride, dilation=dilation)
    return TORCH_ACTIVATIONS[None if act is None else act.name](out).numpy()


def out_hw(x_hw, kernel, stride, dilation, pads):
    return tuple((size + before + after - d * (k - 1) - 1) // s + 1
                 for size, k, s, d, (before, after) in zip(x_hw, kernel, stride, dilation, pads))


SHAPES = [  # channels in and out (a vector, vectors and a tail), image, kernel, stride, dilation, padding
    (3, 16, (23, 30), (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1))),          # MobileNetV3's stem
    (3, 40, (19, 21), (7, 7), (2, 2), (1, 1), ((3, 3), (3, 3))),          # ResNet's, 40 outputs: a tail
    (3, 32, (26, 26), (6, 6), (2, 2), (1, 1), ((2, 2), (2, 2))),          # YOLOv5's
    (4, 24, (9, 17), (3, 5), (1, 3), (2, 1), ((0, 3), (2, 1))),           # dilation, asymmetric padding
    (1, 16, (3, 2), (5, 5), (1, 1), (1, 1), ((2, 2), (2, 2))),            # every pixel on a border
    (2, 17, (8, 40), (3, 3), (1, 1), (1, 1), ((4, 0), (0, 5))),           # rows and columns wholly in padding
]


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: "none" if a is None else a.name)
@pytest.mark.parametrize("cin, cout, hw, kernel, stride, dilation, pads", SHAPES)
def test_direct_matches_pytorch(cin, cout, hw, kernel, stride, dilation, pads, act):
    x = RNG.standard_normal((2, cin, *hw), dtype=np.float32)
    weight = RNG.standard_normal((cout, cin, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(cout, dtype=np.float32)
    ours = direct.CompiledDirect(weight, CompiledEpilogue(bias, cout, act))(
        x, out_hw(hw, kernel, stride, dilation, pads), stride, dilation, pads)
    assert ours.flags.c_contiguous and ours.ctypes.data % 64 == 0
    np.testing.assert_allclose(nchw(ours), expected(x, weight, bias, act, stride, dilation, pads), atol=1e-4,
                               rtol=1e-4)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_bands_of_rows_on_threads_give_the_same_numbers(threads, monkeypatch):
    """Bands of a few rows, shared among threads, from an NHWC input (any layout): the
    numbers of one thread, to the bit."""
    monkeypatch.setattr(direct, "PART_WORK", 5000)
    x = RNG.standard_normal((2, 3, 37, 45), dtype=np.float32)
    weight = RNG.standard_normal((32, 3, 3, 3), dtype=np.float32)
    compiled = direct.CompiledDirect(weight, CompiledEpilogue(None, 32, InplaceActivation("hardswish")))
    pads = ((1, 1), (1, 1))
    alone = compiled(x, (19, 23), (2, 2), (1, 1), pads)
    with intra_op(threads):
        shared = compiled(nchw(np.ascontiguousarray(nhwc(x))), (19, 23), (2, 2), (1, 1), pads)
    np.testing.assert_array_equal(shared, alone)


@pytest.mark.parametrize("cin, cout, kernel, padding_mode, applies", [
    (3, 16, (3, 3), "zeros", True), (3, 64, (7, 7), "zeros", True), (4, 64, (5, 5), "zeros", True),
    (5, 16, (3, 3), "zeros", False),
    (3, direct.LANES - 1, (3, 3), "zeros", False), (3, 16, (1, 1), "zeros", False), (3, 16, (3, 3), "reflect", False),
    (3, 192, (16, 16), "zeros", False)])   # a vision transformer's patches: through their columns
def test_the_layer_computes_directly_where_it_applies(cin, cout, kernel, padding_mode, applies):
    weight = RNG.standard_normal((cout, cin, *kernel), dtype=np.float32)
    geometry = ConvGeometry(kernel, (1, 1), (1, 1), ((1, 1), (1, 1)), padding_mode, 1)
    epilogue = CompiledEpilogue(None, cout, None)
    packed = PackedWeight(weight, 1, geometry=geometry, epilogue=epilogue, compiled=True)
    assert (packed.direct is not None) == applies
    assert (Conv2dKernel(packed, geometry, epilogue).compute.__name__ == "direct") == applies
    assert packed.direct is None or (packed.planar is None and packed._gemm is None)   # no other form made


# -- int8 ------------------------------------------------------------------------------------

INT8 = Int8(scale=0.02, zero_point=117)
INT8_EPILOGUES = {   # name: (the products' epilogue, the residual's dtype or None)
    "bias": (lambda bias: ProductEpilogue(bias), None),
    "relu, requantized": (lambda bias: ProductEpilogue(bias, InplaceActivation("relu"),
                                                       requantize=Requantize(0.03, 9)), None),
    "hardswish": (lambda bias: ProductEpilogue(bias, InplaceActivation("hardswish")), None),
    "residual, relu": (lambda bias: ProductEpilogue(bias, residual_activation=InplaceActivation("relu")), np.float32),
    "uint8 residual, requantized": (lambda bias: ProductEpilogue(bias, requantize=Requantize(0.05, 128)), np.uint8),
}


def int8_convolutions(weight, epilogue, stride, dilation, pads):
    """The direct int8 convolution and the product of the columns of the same product."""
    product = INT8.product(pack_weight(weight, 1)[0], epilogue)
    assert product.kernel.dot is not None, "int8 products compile from AVX2 up"
    return (DirectInt8Convolution(product, weight, stride, dilation, pads),
            ProductConvolution([product], weight.shape[2:], stride, dilation, pads, "zeros", compiled=True))


@pytest.mark.parametrize("name", INT8_EPILOGUES)
@pytest.mark.parametrize("cin, cout, hw, kernel, stride, dilation, pads", SHAPES)
def test_int8_direct_is_the_product_of_the_columns_to_the_bit(cin, cout, hw, kernel, stride, dilation, pads, name):
    """Sums exact in float32, then the products' epilogue: the int8 product's numbers, float32
    or requantized, with a float32 or uint8 residual; uint8 input as it is, float32 quantized."""
    make_epilogue, residual_type = INT8_EPILOGUES[name]
    x = RNG.standard_normal((2, cin, *hw), dtype=np.float32) * 3
    weight = RNG.standard_normal((cout, cin, *kernel), dtype=np.float32)
    direct_int8, columns = int8_convolutions(weight, make_epilogue(RNG.standard_normal(cout, dtype=np.float32)),
                                             stride, dilation, pads)
    added = {}
    if residual_type is not None:
        shape = (2, cout, *out_hw(hw, kernel, stride, dilation, pads))
        values = RNG.standard_normal(shape, dtype=np.float32) if residual_type == np.float32 else \
            RNG.integers(0, 256, shape, dtype=np.uint8)
        added = {"residual": values, "residual_scale": 0.04, "residual_zero_point": 100}
    for given in (x, direct_int8.products[0].activations(x)):
        ours, expected = direct_int8(given, **added), columns(given, **added)
        assert ours.dtype == expected.dtype and ours.shape == expected.shape
        np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_int8_bands_of_rows_on_threads_give_the_same_numbers(threads, monkeypatch):
    monkeypatch.setattr(direct, "PART_WORK", 5000)
    x = RNG.standard_normal((3, 3, 37, 45), dtype=np.float32)
    weight = RNG.standard_normal((32, 3, 3, 3), dtype=np.float32)
    direct_int8, _ = int8_convolutions(weight, ProductEpilogue(None, InplaceActivation("hardswish")), (2, 2), (1, 1),
                                       ((1, 1), (1, 1)))
    alone = direct_int8(x)
    with intra_op(threads):
        shared = direct_int8(nchw(np.ascontiguousarray(nhwc(x))))
    np.testing.assert_array_equal(shared, alone)


@pytest.mark.parametrize("cin, kernel, cout, compiled, applies", [
    (3, (3, 3), 16, True, True), (1, (3, 3), 32, True, True), (2, (3, 3), 16, True, True),
    (3, (3, 3), 16, False, False), (5, (3, 3), 16, True, False),
    (3, (3, 3), 64, True, False), (3, (7, 7), 64, True, False),   # faster through the columns
    (4, (13, 13), 16, True, False)])
def test_int8_convolutions_compute_directly_where_it_applies(cin, kernel, cout, compiled, applies):
    weight = RNG.standard_normal((cout, cin, *kernel), dtype=np.float32)
    geometry = ConvGeometry(kernel, (2, 2), (1, 1), ((1, 1), (1, 1)), "zeros", 1)
    convolution = product_convolution(weight, None, geometry, INT8, ProductEpilogue(), compiled)
    assert isinstance(convolution, DirectInt8Convolution) == applies


def test_int8_direct_convolution_pays_for_small_stems_by_the_kernel():
    """Measured: a 3x3 RGB stem to 32 channels is faster directly with VNNI products, through
    the columns with AVX2's; 7x7 to 64 channels (ResNet's stem) through the columns with both."""
    assert DirectInt8Convolution.pays((32, 3, 3, 3), VNNI) and not DirectInt8Convolution.pays((32, 3, 3, 3), AVX2)
    assert DirectInt8Convolution.pays((16, 3, 3, 3), AVX2)
    assert not any(DirectInt8Convolution.pays((64, 3, 7, 7), kernel) for kernel in (VNNI, AVX2, REFERENCE))
