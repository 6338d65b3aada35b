"""The compiled depthwise convolution, alone and after a 1x1 product in stripes, against the
NumPy reference (kernels/depthwise_stripes.py) on edge shapes."""

import itertools

import numpy as np
import pytest
from pools import intra_op
from product_kernels import BF16_KERNELS, FP32_KERNELS, INT8_KERNELS

from kuiperinfer.kernels.compiled import depthwise
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue
from kuiperinfer.kernels.depthwise import DepthwiseWeight
from kuiperinfer.kernels.depthwise_stripes import depthwise_in_stripes
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.kernels.im2col import pack_weight
from kuiperinfer.kernels.layout import nhwc
from kuiperinfer.kernels.matrix.int8 import quantize
from kuiperinfer.kernels.matrix.products import (
    BF16_WIDENED,
    REFERENCE,
    Bf16Product,
    Fp32Product,
    Int8Product,
    ProductEpilogue,
)

ACTIVATIONS = [None, InplaceActivation("relu"), InplaceActivation("clip", (0.0, 6.0)),
               InplaceActivation("leaky_relu", (0.1,)), InplaceActivation("sigmoid"), InplaceActivation("silu"),
               InplaceActivation("hardsigmoid"), InplaceActivation("hardswish")]
GEOMETRIES = [((3, 3), (1, 1), ((1, 1), (1, 1))), ((3, 3), (2, 2), ((1, 1), (1, 1))),
              ((3, 3), (2, 2), ((0, 1), (0, 1))),          # folded asymmetric padding (EfficientNet-Lite)
              ((5, 5), (1, 1), ((2, 2), (2, 2))), ((5, 5), (2, 2), ((1, 2), (2, 1))),
              ((3, 5), (1, 2), ((0, 0), (2, 3))), ((1, 1), (1, 1), ((0, 0), (0, 0))), ((4, 2), (3, 1), ((2, 0), (1, 1)))]
RNG = np.random.default_rng(0)


def reference(x, weight, bias, act, stride, pads, out_hw, expand=None, expand_bias=None, expand_act=None):
    product = {}
    if expand is not None:
        product = dict(pointwise=pack_weight(expand, 1)[0], pointwise_epilogue=Epilogue(expand_bias, expand_act))
    return depthwise_in_stripes(x, DepthwiseWeight(weight), stride, pads, out_hw, Epilogue(bias, act), **product)


def out_hw(x_hw, kernel, stride, pads):
    return tuple((size + before + after - k) // s + 1 for size, k, s, (before, after) in zip(x_hw, kernel, stride, pads))


def check(ours, expected):
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)
    assert ours.flags.c_contiguous


@pytest.mark.parametrize("padded_bytes", [0, 1 << 30], ids=["borders", "padded"])
@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: "none" if a is None else a.name)
@pytest.mark.parametrize("kernel, stride, pads", GEOMETRIES)
def test_depthwise_matches_the_reference(kernel, stride, pads, act, padded_bytes, monkeypatch):
    monkeypatch.setattr(depthwise, "PADDED_BYTES", padded_bytes)
    x = RNG.standard_normal((3, 11, 13, 19), dtype=np.float32) * 3
    weight = RNG.standard_normal((19, 1, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(19, dtype=np.float32)
    compiled = depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0), CompiledEpilogue(bias, 19, act))
    check(compiled(x, stride, pads), reference(x, weight, bias, act, stride, pads, out_hw((11, 13), kernel, stride, pads)))


@pytest.mark.parametrize("act", [None, InplaceActivation("clip", (0.0, 6.0)), InplaceActivation("hardswish")],
                         ids=lambda a: "none" if a is None else a.name)
@pytest.mark.parametrize("kernel, stride, pads", GEOMETRIES)
@pytest.mark.parametrize("stripe_bytes", [256 << 10, 2000])    # whole images, or stripes of a few rows
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("padded_bytes", [0, 1 << 30], ids=["borders", "padded"])
def test_pointwise_depthwise_matches_the_reference(kernel, stride, pads, act, stripe_bytes, batch, padded_bytes,
                                                   monkeypatch):
    monkeypatch.setattr(depthwise, "STRIPE_BYTES", stripe_bytes)
    monkeypatch.setattr(depthwise, "PADDED_BYTES", padded_bytes)
    x = RNG.standard_normal((batch, 12, 9, 5), dtype=np.float32)
    expand = RNG.standard_normal((24, 5, 1, 1), dtype=np.float32)
    expand_bias = RNG.standard_normal(24, dtype=np.float32)
    weight = RNG.standard_normal((24, 1, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(24, dtype=np.float32)
    relu6 = InplaceActivation("clip", (0.0, 6.0))
    pointwise = depthwise.float_pointwise(pack_weight(expand, 1)[0], CompiledEpilogue(expand_bias, 24, relu6))
    ours = depthwise.pointwise_depthwise(x, pointwise, 24, depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0),
                                                                     CompiledEpilogue(bias, 24, act)), stride, pads)
    check(ours, reference(x, weight, bias, act, stride, pads, out_hw((12, 9), kernel, stride, pads), expand,
                          expand_bias, relu6))


@pytest.mark.parametrize("pointwise", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("halo_share", [0.25, 100])       # a 1x1 product's parts: blocks of channels, or bands
def test_parts_shared_among_threads_and_strided_inputs(pointwise, batch, halo_share, monkeypatch):
    """Bands of one image's rows or blocks of its channels on several threads, a
    non-contiguous (NCHW) input, a read-only one: the same values."""
    monkeypatch.setattr(depthwise, "HALO_SHARE", halo_share)
    monkeypatch.setattr(depthwise, "PART_WORK", 1)
    monkeypatch.setattr(depthwise, "STRIPE_BYTES", 3000)
    nchw = RNG.standard_normal((batch, 16, 23, 21), dtype=np.float32)
    x = nhwc(nchw)                                     # strided
    channels = 32 if pointwise else 16
    expand = RNG.standard_normal((channels, 16, 1, 1), dtype=np.float32)
    weight = RNG.standard_normal((channels, 1, 5, 5), dtype=np.float32)
    bias = RNG.standard_normal(channels, dtype=np.float32)
    act = InplaceActivation("silu")
    dw = depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0), CompiledEpilogue(bias, channels, act))
    pads, stride = ((2, 2), (2, 2)), (2, 2)
    readonly = np.ascontiguousarray(x)
    readonly.flags.writeable = False
    expected = reference(np.ascontiguousarray(x), weight, bias, act, stride, pads, (12, 11),
                         *((expand, None, None) if pointwise else ()))
    with intra_op(3, min_work=0):
        for source in (x, readonly):
            if pointwise:
                pointwise = depthwise.float_pointwise(pack_weight(expand, 1)[0], CompiledEpilogue(None, channels, None))
                ours = depthwise.pointwise_depthwise(source, pointwise, channels, dw, stride, pads)
            else:
                ours = dw(source, stride, pads)
            check(ours, expected)


def product_pair(kind, kernel, expand, bias, act):
    """A 1x1 product (Cin, E) on ``kernel``'s tiles and its NumPy twin."""
    matrix = expand[:, :, 0, 0].T.copy()
    epilogue = ProductEpilogue(bias, act)
    if kind == "int8":
        scales = np.abs(matrix).max(axis=0) / 127
        weight = np.clip(np.rint(matrix / scales), -127, 127).astype(np.int8)
        return tuple(Int8Product(weight, scales, 0.05, 131, epilogue, k) for k in (kernel, REFERENCE))
    if kind == "bf16":
        return tuple(Bf16Product(matrix, epilogue, k) for k in (kernel, BF16_WIDENED))
    return Fp32Product(matrix, epilogue, kernel), Fp32Product(matrix, epilogue, REFERENCE)


TILED = [pytest.param(kind, *kernel.values, marks=kernel.marks, id=f"{kind}-{kernel.id}")
         for kind, kernels in (("fp32", FP32_KERNELS), ("int8", INT8_KERNELS), ("bf16", BF16_KERNELS[:-1]))
         for kernel in kernels]
"""Every product on compiled tiles (bf16's widened weights have none)."""


@pytest.mark.parametrize("kind, kernel", TILED)
@pytest.mark.parametrize("kernel_size, stride, pads", [GEOMETRIES[1], GEOMETRIES[4]])
@pytest.mark.parametrize("threads, halo_share", [(1, 0.5), (3, 0.25), (3, 100)], ids=["one", "channels", "bands"])
@pytest.mark.parametrize("stripe_bytes", [1 << 20, 3000], ids=["whole", "stripes"])
def test_pointwise_depthwise_on_the_tiles_matches_the_stripe_loop(kind, kernel, kernel_size, stride, pads, threads,
                                                                  halo_share, stripe_bytes, monkeypatch):
    """A product on compiled tiles, every part walked in one compiled call, gives what the
    Python loop over stripes calling its NumPy twin gives: in one thread, in blocks of
    channels and in bands of rows shared among threads, whole images and stripes."""
    monkeypatch.setattr(depthwise, "HALO_SHARE", halo_share)
    monkeypatch.setattr(depthwise, "PART_WORK", 1)
    monkeypatch.setattr(depthwise, "STRIPE_BYTES", stripe_bytes)
    channels = 80                                       # blocks of channels, and a strip's tail
    x = RNG.standard_normal((2, 19, 14, 12), dtype=np.float32)
    expand = RNG.standard_normal((channels, 12, 1, 1), dtype=np.float32) / 3
    expand_bias = RNG.standard_normal(channels, dtype=np.float32)
    weight = RNG.standard_normal((channels, 1, *kernel_size), dtype=np.float32)
    bias = RNG.standard_normal(channels, dtype=np.float32)
    tiled, twin = product_pair(kind, kernel, expand, expand_bias, InplaceActivation("clip", (0.0, 6.0)))
    dw = depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0),
                                     CompiledEpilogue(bias, channels, InplaceActivation("hardswish")))

    def stripe_rows(rows, out, block):
        twin.multiply(twin.activations(rows), out, columns=(block.start, block.stop), shared=False)

    stripes = depthwise.TiledStripes(tiled.tiles(), dw)
    with intra_op(threads, min_work=0):
        ours = depthwise.pointwise_depthwise(tiled.activations(x), stripes, channels, dw, stride, pads)
        expected = depthwise.pointwise_depthwise(x, stripe_rows, channels, dw, stride, pads)
    exact = kind == "int8"                              # integer sums: the same bits, but the epilogue's order
    np.testing.assert_allclose(ours, expected, atol=1e-5 if exact else 1e-4, rtol=1e-5 if exact else 1e-4)
    (call,) = stripes._calls.values()
    (head,) = call._heads.values()
    own = [stripes.packed, stripes.correction, stripes.scale, stripes.bias, stripes.numbers, dw.taps, dw.bias]
    held = [value for value in (*head.before, *head.between) if isinstance(value, np.ndarray)]
    assert held and all(any(value is mine for mine in own) for value in held)   # the taps once: every part reads dw's


@pytest.mark.parametrize("kernel", FP32_KERNELS)
def test_a_part_hands_its_kernels_over_as_addresses(kernel, monkeypatch):
    """A part's walk takes its two kernels as addresses: Numba never takes a function object
    apart in Python (which unpickles its signature, 10-25 us under the GIL on every call)."""
    from numba.experimental import function_type

    def refuse(*args):
        raise AssertionError("a kernel went to a compiled walk as a Python function object")
    monkeypatch.setattr(function_type, "_get_wrapper_address", refuse)
    monkeypatch.setattr(function_type, "_get_jit_address", refuse)
    x = RNG.standard_normal((1, 9, 8, 12), dtype=np.float32)
    expand = RNG.standard_normal((32, 12, 1, 1), dtype=np.float32)
    weight = RNG.standard_normal((32, 1, 3, 3), dtype=np.float32)
    tiled, twin = product_pair("fp32", kernel, expand, None, None)
    dw = depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0), CompiledEpilogue(None, 32, None))

    def stripe_rows(rows, out, block):
        twin.multiply(rows, out, columns=(block.start, block.stop), shared=False)

    ours = depthwise.pointwise_depthwise(x, depthwise.TiledStripes(tiled.tiles(), dw), 32, dw, (1, 1), ((1, 1), (1, 1)))
    check(ours, depthwise.pointwise_depthwise(x, stripe_rows, 32, dw, (1, 1), ((1, 1), (1, 1))))


SHAPES = [  # channels (a block of vectors, a tail, fewer than a vector), height, width, kernel, stride, padding
    (16, 9, 9, (3, 3), (1, 1), ((1, 1), (1, 1))), (40, 8, 7, (3, 3), (2, 2), ((1, 1), (1, 1))),
    (72, 7, 7, (5, 5), (1, 1), ((2, 2), (2, 2))), (5, 10, 11, (5, 5), (2, 2), ((2, 2), (2, 2))),
    (24, 3, 3, (5, 5), (1, 1), ((2, 2), (2, 2))),           # no interior: every pixel on a border
    (33, 6, 1, (3, 3), (1, 2), ((1, 1), (1, 1))),           # one column
    (17, 5, 13, (3, 3), (2, 1), ((3, 0), (4, 2))),          # pixels whose windows lie in the padding
    (48, 4, 21, (1, 7), (1, 3), ((0, 0), (3, 3))), (20, 12, 9, (7, 7), (2, 2), ((3, 3), (3, 3)))]


@pytest.mark.parametrize("padded_bytes", [0, 1 << 30], ids=["borders", "padded"])
@pytest.mark.parametrize("act", [None, InplaceActivation("hardswish"), InplaceActivation("silu")],
                         ids=lambda a: "none" if a is None else a.name)
@pytest.mark.parametrize("channels, h, w, kernel, stride, pads", SHAPES)
def test_channel_counts_borders_and_kernel_sizes(channels, h, w, kernel, stride, pads, act, padded_bytes,
                                                 monkeypatch):
    """Blocks of a vector's channels with a tail, fewer channels than a vector, rows and
    columns without an interior, windows wholly in the padding, kernels of 1x7 to 7x7; the
    border pixels apart, or every pixel through a padded copy."""
    monkeypatch.setattr(depthwise, "PADDED_BYTES", padded_bytes)
    x = RNG.standard_normal((2, h, w, channels), dtype=np.float32) * 3
    weight = RNG.standard_normal((channels, 1, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(channels, dtype=np.float32)
    compiled = depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0), CompiledEpilogue(bias, channels, act))
    ours = compiled(x, stride, pads)
    check(ours, reference(x, weight, bias, act, stride, pads, out_hw((h, w), kernel, stride, pads)))
    assert ours.ctypes.data % 64 == 0


IN_REGISTERS = [None, InplaceActivation("relu"), InplaceActivation("clip", (0.0, 6.0)),
                InplaceActivation("leaky_relu", (0.1,)), InplaceActivation("hardsigmoid"), InplaceActivation("hardswish")]
FORM = (np.float32(0.043), np.float32(37))
"""A uint8 form whose range (-1.6 to 9.4) clips some outputs."""


@pytest.mark.parametrize("padded_bytes", [0, 1 << 30], ids=["borders", "padded"])
@pytest.mark.parametrize("act", IN_REGISTERS, ids=lambda a: "none" if a is None else a.name)
@pytest.mark.parametrize("channels, h, w, kernel, stride, pads", SHAPES[:7])
def test_depthwise_hands_its_output_on_as_uint8(channels, h, w, kernel, stride, pads, act, padded_bytes,
                                                monkeypatch):
    """With a uint8 form the kernel stores each output quantized, as the int8 reference
    quantizes its float32 output: the same bytes, a vector's tail and fewer channels than a
    vector included."""
    monkeypatch.setattr(depthwise, "PADDED_BYTES", padded_bytes)
    x = RNG.standard_normal((2, h, w, channels), dtype=np.float32) * 3
    weight = RNG.standard_normal((channels, 1, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(channels, dtype=np.float32)
    compiled = depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0), CompiledEpilogue(bias, channels, act))
    ours = compiled(x, stride, pads, FORM)
    assert ours.dtype == np.uint8 and len(np.unique(ours)) > 10
    np.testing.assert_array_equal(ours, quantize(compiled(x, stride, pads), *FORM))


def test_an_activation_after_the_stores_keeps_float32():
    """SiLU is applied over the stored sums: such a kernel refuses a uint8 form."""
    weight = RNG.standard_normal((3, 3, 16), dtype=np.float32)
    compiled = depthwise.CompiledDepthwise(weight, CompiledEpilogue(None, 16, InplaceActivation("silu")))
    assert not compiled.quantizes
    with pytest.raises(ValueError, match="float32 only"):
        compiled(RNG.standard_normal((1, 5, 5, 16), dtype=np.float32), (1, 1), ((1, 1), (1, 1)), FORM)


@pytest.mark.parametrize("kind, kernel", [param for param in TILED if param.id.startswith(("int8", "fp32"))])
@pytest.mark.parametrize("threads, halo_share", [(1, 0.5), (3, 0.25), (3, 100)], ids=["one", "channels", "bands"])
def test_pointwise_depthwise_hands_its_output_on_as_uint8(kind, kernel, threads, halo_share, monkeypatch):
    """The fused 1x1 product and depthwise convolution on the tiles, and the stripe loop,
    store uint8 in a form as the float32 output quantized: in one thread, in blocks of
    channels and in bands of rows."""
    monkeypatch.setattr(depthwise, "HALO_SHARE", halo_share)
    monkeypatch.setattr(depthwise, "PART_WORK", 1)
    monkeypatch.setattr(depthwise, "STRIPE_BYTES", 3000)
    channels, stride, pads = 80, *GEOMETRIES[4][1:]
    x = RNG.standard_normal((2, 19, 14, 12), dtype=np.float32)
    expand = RNG.standard_normal((channels, 12, 1, 1), dtype=np.float32) / 3
    weight = RNG.standard_normal((channels, 1, *GEOMETRIES[4][0]), dtype=np.float32)
    tiled, twin = product_pair(kind, kernel, expand, None, InplaceActivation("relu"))
    dw = depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0),
                                     CompiledEpilogue(None, channels, InplaceActivation("clip", (0.0, 6.0))))

    def stripe_rows(rows, out, block):
        twin.multiply(twin.activations(rows), out, columns=(block.start, block.stop), shared=False)

    stripes = depthwise.TiledStripes(tiled.tiles(), dw)
    with intra_op(threads, min_work=0):
        for pointwise, source in ((stripes, tiled.activations(x)), (stripe_rows, x)):
            ours = depthwise.pointwise_depthwise(source, pointwise, channels, dw, stride, pads, FORM)
            floats = depthwise.pointwise_depthwise(source, pointwise, channels, dw, stride, pads)
            assert ours.dtype == np.uint8
            np.testing.assert_array_equal(ours, quantize(floats, *FORM))


def test_a_block_of_channels_writes_only_its_own():
    """The kernel on channels 16:56 of 72 (a stripe buffer's block) leaves the others alone."""
    x = RNG.standard_normal((6, 9, 72), dtype=np.float32)
    weight = RNG.standard_normal((72, 1, 3, 3), dtype=np.float32)
    compiled = depthwise.CompiledDepthwise(weight[:, 0].transpose(1, 2, 0), CompiledEpilogue(None, 72, None))
    expected = compiled(x[None], (1, 1), ((1, 1), (1, 1)))[0]
    out = np.full((6, 9, 72), 7.0, np.float32)
    compiled.rows(np.ascontiguousarray(x[1:, :, 16:56]), 1, 6, out, slice(16, 56), 2, 5, (1, 1), ((1, 1), (1, 1)))
    np.testing.assert_array_equal(out[2:5, :, 16:56], expected[2:5, :, 16:56])
    untouched = np.ones(out.shape, bool)
    untouched[2:5, :, 16:56] = False
    assert (out[untouched] == 7.0).all()


def test_row_parts_cover_every_row_once():
    for (images, rows, threads), halo in itertools.product([(1, 56, 2), (1, 7, 4), (2, 9, 3), (8, 14, 2), (1, 1, 2)], [0, 4]):
        parts = depthwise.parts_of(images, rows, 24, 1 << 30, threads, halo, 1)
        covered = sorted((image, y, c) for image, first, stop, block in parts for y in range(first, stop)
                         for c in range(block.start, block.stop))
        assert covered == [(image, y, c) for image in range(images) for y in range(rows) for c in range(24)]


def test_channel_blocks_hold_a_vector_each():
    for channels in (32, 40, 63, 72, 88, 1152):
        parts = depthwise.parts_of(1, 7, channels, 1 << 30, 2, halo=100)
        blocks = [block for *_, block in parts]
        assert blocks[0].start == 0 and blocks[-1].stop == channels and len(blocks) > 1
        assert all(b.stop - b.start >= depthwise.LANES and b.start % depthwise.LANES == 0 for b in blocks)
