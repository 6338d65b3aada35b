"""Convolutions through the matrix engine's products (kuiperinfer/kernels/matrix/convolution.py)
and their compiled columns (kernels/compiled/columns.py): int8's equal to PyTorch summing the
same integers in float64, to the bit; the compiled kernels equal the NumPy reference to the
bit at every geometry, memory layout, stripe size and thread count; bf16's to PyTorch's
float32 products of rounded inputs."""

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pools import intra_op

from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.layout import nchw
from kuiperinfer.kernels.matrix import convolution, int8, products
from kuiperinfer.kernels.matrix.bf16 import round_bf16
from kuiperinfer.kernels.matrix.precision import BFloat16, Int8
from kuiperinfer.kernels.matrix.precision import precision as precision_of
from kuiperinfer.kernels.matrix.products import NO_EPILOGUE, ProductEpilogue, Requantize
from kuiperinfer.layers import convolution as layers

RNG = np.random.default_rng(0)
INT8 = Int8(scale=0.03, zero_point=117)

GEOMETRIES = [   # kernel, stride, dilation, padding ((top, bottom), (left, right)), groups
    ((1, 1), (1, 1), (1, 1), ((0, 0), (0, 0)), 1),
    ((1, 1), (2, 2), (1, 1), ((0, 0), (0, 0)), 1),
    ((3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), 1),
    ((3, 3), (2, 2), (1, 1), ((1, 0), (2, 1)), 1),
    ((3, 3), (1, 1), (2, 2), ((2, 2), (2, 2)), 1),
    ((7, 7), (2, 2), (1, 1), ((3, 3), (3, 3)), 1),
    ((1, 5), (1, 1), (1, 1), ((0, 0), (2, 2)), 1),
    ((3, 3), (1, 2), (1, 1), ((1, 1), (1, 1)), 2),
    ((3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), 4),
]


def product_convolution(precision, weight, geometry, epilogue=NO_EPILOGUE, compiled=True, mode="zeros"):
    kernel, stride, dilation, padding, groups = geometry
    swept = layers.ConvGeometry(kernel, stride, dilation, padding, mode, groups)
    return layers.product_convolution(weight, epilogue.bias, swept, precision, replace(epilogue, bias=None), compiled)


def operands(geometry, batch=2, channels=8, out=16, size=(11, 9)):
    kernel, *_, groups = geometry
    x = RNG.standard_normal((batch, channels, *size)).astype(np.float32) * 2
    weight = RNG.standard_normal((out, channels // groups, *kernel)).astype(np.float32)
    return x, weight


def relu_epilogue(precision, channels):
    """A bias, ReLU, and ReLU after the residual; int8 requantizes its output."""
    return ProductEpilogue(RNG.standard_normal(channels).astype(np.float32), InplaceActivation("relu"),
                           InplaceActivation("relu"), Requantize(0.05, 9) if precision is INT8 else None)


def residuals(shape, precision):
    """Residuals of an NHWC output ``shape`` (as NCHW views) with the form each arrives in:
    float32, and for int8 also uint8 with its scale and zero point."""
    found = [(nchw(RNG.standard_normal(shape).astype(np.float32)), {})]
    if precision is INT8:
        found.append((nchw(RNG.integers(0, 256, shape, dtype=np.uint8)),
                      {"residual_scale": 0.04, "residual_zero_point": 100}))
    return found


def torch_int8(x, weight, geometry, mode="zeros"):
    """The definition in PyTorch: the integer sums in float64, scaled into float32."""
    kernel, stride, dilation, padding, groups = geometry
    (top, bottom), (left, right) = padding
    q = torch.from_numpy(int8.quantize(x, INT8.scale, INT8.zero_point).astype(np.float64) - INT8.zero_point)
    if mode == "zeros":
        q = F.pad(q, (left, right, top, bottom))
    else:
        q = F.pad(q, (left, right, top, bottom), mode=mode)
    w_q, scales = int8.quantize_weight(weight, 0)
    sums = F.conv2d(q, torch.from_numpy(w_q.astype(np.float64)), stride=stride, dilation=dilation, groups=groups)
    return sums.float().numpy() * (np.float32(INT8.scale) * scales).reshape(-1, 1, 1)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_int8_convolution_is_the_integer_definition(geometry):
    x, weight = operands(geometry)
    expected = torch_int8(x, weight, geometry)
    for compiled in (True, False):
        ours = nchw(product_convolution(INT8, weight, geometry, compiled=compiled)(x))
        np.testing.assert_array_equal(ours, expected, err_msg=f"compiled={compiled}")


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_int8_padding_modes(mode):
    geometry = GEOMETRIES[3]
    x, weight = operands(geometry)
    for compiled in (True, False):
        ours = nchw(product_convolution(INT8, weight, geometry, compiled=compiled, mode=mode)(x))
        np.testing.assert_array_equal(ours, torch_int8(x, weight, geometry, mode))


@pytest.mark.parametrize("geometry", GEOMETRIES[2:6], ids=str)
def test_compiled_equals_reference_in_every_layout_stripe_and_thread_count(geometry, monkeypatch):
    """Row-major and channels-last float32 inputs and already quantized ones, a residual, a
    requantized output, stripes of a few rows shared by two threads: the reference's values."""
    x, weight = operands(geometry, batch=3, size=(13, 12))
    epilogue = ProductEpilogue(RNG.standard_normal(16).astype(np.float32), InplaceActivation("relu"),
                               InplaceActivation("relu"), Requantize(0.05, 9))
    reference = product_convolution(INT8, weight, geometry, epilogue, compiled=False)
    compiled = product_convolution(INT8, weight, geometry, epilogue)
    out_shape = reference(x).shape
    residual = nchw(RNG.standard_normal(out_shape).astype(np.float32))
    expected = reference(x, residual)
    channels_last = nchw(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    quantized = compiled.products[0].activations(channels_last)
    assert quantized.dtype == np.uint8
    for source in (x, channels_last, quantized):
        np.testing.assert_array_equal(compiled(source, residual), expected)
    monkeypatch.setattr(convolution, "BLOCK_BYTES", 200)
    with intra_op(2):
        np.testing.assert_array_equal(compiled(x, residual), expected)


@pytest.mark.skipif(products.fp32_kernel() is products.REFERENCE, reason="this CPU (or Numba's target) has no FMA")
@pytest.mark.parametrize("geometry", [g for g in GEOMETRIES if g[4] == 1 and g[0] != (1, 1)], ids=str)
def test_fp32_stripes_in_compiled_parts_match_pytorch(geometry, monkeypatch):
    """fp32 on the float32 tiles: stripes of a few rows, each made and multiplied in one
    compiled call, shared by two threads, give PyTorch's values, activations and a residual
    included, as the convolution in one stripe does."""
    kernel, stride, dilation, padding, _ = geometry
    x, weight = operands(geometry, batch=3, channels=13, out=40, size=(21, 17))
    weight /= np.float32(np.sqrt(weight[0].size))
    bias = RNG.standard_normal(40).astype(np.float32)
    swept = layers.ConvGeometry(kernel, stride, dilation, padding, "zeros", 1)
    conv = layers.product_convolution(weight, bias, swept, precision_of("fp32"), ProductEpilogue(
        None, InplaceActivation("silu"), InplaceActivation("relu")), True, float_tiles=True)
    (top, bottom), (left, right) = padding
    out = F.silu(F.conv2d(F.pad(torch.from_numpy(x), (left, right, top, bottom)), torch.from_numpy(weight),
                          torch.from_numpy(bias), stride=stride, dilation=dilation))
    residual = RNG.standard_normal(out.shape).astype(np.float32)
    expected = F.relu(out + torch.from_numpy(residual)).numpy()
    whole = nchw(conv(x, residual))
    np.testing.assert_allclose(whole, expected, atol=1e-4, rtol=0)
    monkeypatch.setattr(convolution, "BLOCK_BYTES", 2000)
    for threads in (1, 2):
        with intra_op(threads):
            np.testing.assert_allclose(nchw(conv(x, residual)), whole, atol=1e-5, rtol=1e-5)
    assert conv._stripes is not None


@pytest.mark.parametrize("precision", [INT8, BFloat16()], ids=["int8", "bf16"])
@pytest.mark.parametrize("geometry", [GEOMETRIES[2], GEOMETRIES[3], GEOMETRIES[5]], ids=str)
def test_integer_and_bf16_stripes_in_compiled_parts_are_the_reference(precision, geometry, monkeypatch):
    """A stem's few channels (not whole groups of 4 bytes) take the columns: stripes of a few
    rows, each made and multiplied in one compiled call on 1-3 threads, give the reference's
    values (int8, to the bit) and the one-stripe product's (both, to the bit), with a float32
    or a uint8 residual and a requantized or float32 output."""
    x, weight = operands(geometry, batch=3, channels=3, out=40, size=(21, 17))
    epilogue = relu_epilogue(precision, 40)
    compiled = product_convolution(precision, weight, geometry, epilogue)
    if compiled.products[0].kernel.dot is None:
        pytest.skip("this CPU's products run the NumPy reference")
    assert not compiled.indirect and compiled._stripes is not None
    shape = compiled(x).shape
    reference = product_convolution(precision, weight, geometry, epilogue, compiled=False)
    for residual, added in residuals(shape, precision):
        whole = compiled(x, residual, **added)
        if precision is INT8:
            np.testing.assert_array_equal(whole, reference(x, residual, **added))
        with monkeypatch.context() as patched:
            patched.setattr(convolution, "BLOCK_BYTES", 600)
            for threads in (1, 2, 3):
                with intra_op(threads):
                    np.testing.assert_array_equal(compiled(x, residual, **added), whole)


@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[3], GEOMETRIES[7]], ids=str)
def test_bf16_convolution_is_pytorchs_on_rounded_inputs(geometry):
    x, weight = operands(geometry)
    kernel, stride, dilation, padding, groups = geometry
    (top, bottom), (left, right) = padding
    rounded = F.pad(torch.from_numpy(round_bf16(x)), (left, right, top, bottom))
    expected = F.conv2d(rounded.double(), torch.from_numpy(round_bf16(weight)).double(), stride=stride,
                        dilation=dilation, groups=groups).float().numpy()
    for compiled in (True, False):
        ours = nchw(product_convolution(BFloat16(), weight, geometry, compiled=compiled)(x))
        np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("precision", [INT8, BFloat16()], ids=["int8", "bf16"])
@pytest.mark.parametrize("geometry", [g for g in GEOMETRIES if g[0] != (1, 1) and g[4] == 1], ids=str)
def test_windows_read_where_they_lie_are_the_columns_to_the_bit(precision, geometry, monkeypatch):
    """The indirect rows (each window's pixels read in the input) against the columns of the
    same products: float32 and uint8 residuals, small parts on 1-3 threads."""
    x, weight = operands(geometry, batch=3, channels=12, out=40, size=(13, 12))
    epilogue = relu_epilogue(precision, 40)
    indirect = product_convolution(precision, weight, geometry, epilogue)
    if indirect.products[0].kernel.dot is None:
        pytest.skip("this CPU's products run the NumPy reference, which takes columns")
    columns = product_convolution(precision, weight, geometry, epilogue)
    columns.indirect = False
    assert indirect.indirect
    shape = columns(x).shape
    monkeypatch.setattr(products, "PART_WORK", 2000)
    for residual, added in residuals(shape, precision):
        expected = columns(x, residual, **added)
        for threads in (1, 2, 3):
            with intra_op(threads):
                np.testing.assert_array_equal(indirect(x, residual, **added), expected)
    (key, offsets), = indirect._offsets.items()
    assert offsets.dtype == np.int32
    indirect._offsets[key] = offsets.astype(np.int64)   # the offsets of an input of 2 GiB or more
    residual, _ = residuals(shape, precision)[0]
    np.testing.assert_array_equal(indirect(x, residual), columns(x, residual))


def test_channels_of_other_than_whole_groups_of_4_bytes_take_the_columns():
    geometry = GEOMETRIES[2]
    x, weight = operands(geometry, channels=6)
    convolution = product_convolution(INT8, weight, geometry)
    assert not convolution.indirect
    np.testing.assert_array_equal(nchw(convolution(x)), torch_int8(x, weight, geometry))
