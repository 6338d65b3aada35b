"""The matrix engine's products (kuiperinfer/kernels/matrix/products.py and their compiled
tiles): int8 through AMX, AVX512-VNNI and AVX2 equal to the integer reference exactly, bf16
through AMX and AVX512-BF16 and float32 through FMA tiles (512- and 256-bit) to float32 rounding,
every epilogue, both outputs, any thread count; the kernel chosen from the CPU's flags."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from pools import intra_op
from product_kernels import (
    AMX,
    BF16_KERNELS,
    FP32_KERNELS,
    HERE,
    INT8_KERNELS,
    needs_avx2,
    needs_fma,
    needs_vnni,
)

from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.matrix import products
from kuiperinfer.kernels.matrix.features import MatrixFeatures
from kuiperinfer.kernels.matrix.products import (
    AMX_BF16,
    AMX_FEATURES,
    AMX_INT8,
    AVX2,
    AVX512_BF16,
    BF16_WIDENED,
    FMA256,
    FMA512,
    REFERENCE,
    VNNI,
    Bf16Product,
    Fp32Product,
    Int8Product,
    ProductEpilogue,
    Requantize,
)

RNG = np.random.default_rng(0)

SIZES = [1, 3, 4, 5, 31, 32, 33, 64, 100, 257]
ACTIVATIONS = [None, InplaceActivation("relu"), InplaceActivation("clip", (0.0, 6.0)),
               InplaceActivation("leaky_relu", (0.1,)), InplaceActivation("sigmoid"), InplaceActivation("silu"),
               InplaceActivation("hardsigmoid"), InplaceActivation("hardswish"), InplaceActivation("gelu"),
               InplaceActivation("gelu_tanh")]
EXACT = {None, "relu", "clip", "leaky_relu"}
"""The activations the compiled epilogue computes as NumPy does, to the bit; the others are
approximations within 1e-6 (kuiperinfer/kernels/compiled/activation.py)."""


def name_of(activation):
    return "none" if activation is None else activation.name


def operands(m, k, n, rng=RNG):
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    w = rng.integers(-127, 128, (k, n), dtype=np.int8)
    scales = (rng.random(n, dtype=np.float32) + 0.5) * 0.01
    return a, w, scales


def both(kernel, w, scales, zero_point, epilogue=products.NO_EPILOGUE):
    """The product through ``kernel`` and through the NumPy reference."""
    return (Int8Product(w, scales, 0.02, zero_point, epilogue, kernel),
            Int8Product(w, scales, 0.02, zero_point, epilogue, REFERENCE))


def assert_same_on_two_threads(product, x):
    """The product's outputs on one thread and shared between two, to the bit."""
    alone = product(x)
    with intra_op(2):
        shared = product(x)
    np.testing.assert_array_equal(shared, alone)


@pytest.mark.parametrize("kernel", INT8_KERNELS)
@pytest.mark.parametrize("m", SIZES)
def test_int8_kernel_equals_the_integer_reference_at_every_shape(kernel, m):
    for k in SIZES:
        for n in SIZES:
            a, w, scales = operands(m, k, n)
            ours, reference = both(kernel, w, scales, int(RNG.integers(0, 256)))
            np.testing.assert_array_equal(ours(a), reference(a), err_msg=f"M={m} K={k} N={n}")


@pytest.mark.parametrize("kernel", INT8_KERNELS)
@pytest.mark.parametrize("zero_point", [0, 128, 255])
@pytest.mark.parametrize("weight", [127, -127])
@pytest.mark.parametrize("k", [5, 64, 4099])
def test_int8_kernel_is_exact_at_the_extremes(kernel, zero_point, weight, k):
    """Activations of 255 and weights of +-127 in every lane: AVX2's vpmaddubsw would saturate
    its pair sums here; the sums are the definition's, exactly."""
    a = np.full((37, k), 255, np.uint8)
    a[::3, ::2] = 0
    w = np.full((k, 40), weight, np.int8)
    w[:, ::7] = -weight
    scales = np.ones(40, np.float32)
    ours, reference = both(kernel, w, scales, zero_point)
    assert np.abs(products.int8_sums(a, w, 0)).max() >= 255 * 127 * (k // 2)   # the raw sums at their extreme
    np.testing.assert_array_equal(ours(a), reference(a))
    exact = (a.astype(np.int64) - zero_point) @ w.astype(np.int64)
    np.testing.assert_array_equal(reference(a), exact.astype(np.float32) * np.float32(0.02))


@pytest.mark.parametrize("kernel", INT8_KERNELS)
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=name_of)
@pytest.mark.parametrize("output", ["float32", "uint8"])
@pytest.mark.parametrize("residual", [None, "float32", "uint8"])
def test_int8_epilogue_matches_the_reference(kernel, activation, output, residual):
    m, k, n = 37, 70, 53
    a, w, scales = operands(m, k, n)
    epilogue = ProductEpilogue(RNG.standard_normal(n).astype(np.float32), activation,
                               InplaceActivation("relu") if residual else None,
                               Requantize(0.05, 100) if output == "uint8" else None)
    added = {}
    if residual == "float32":
        added = {"residual": RNG.standard_normal((m, n)).astype(np.float32)}
    elif residual == "uint8":
        added = {"residual": RNG.integers(0, 256, (m, n), dtype=np.uint8), "residual_scale": 0.03,
                 "residual_zero_point": 120}
    ours, reference = both(kernel, w, scales, 77, epilogue)
    got, expected = ours(a, **added), reference(a, **added)
    assert got.dtype == expected.dtype == np.dtype(output)
    if name_of(activation) in EXACT:
        np.testing.assert_array_equal(got, expected)
    elif output == "uint8":
        assert np.abs(got.astype(int) - expected).max() <= 1
        assert np.mean(got == expected) > 0.99
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("kernel", INT8_KERNELS)
@pytest.mark.parametrize("n", [8, 16, 24, 40, 64])
@pytest.mark.parametrize("residual_activation", [None, InplaceActivation("clip", (0.0, 6.0))], ids=name_of)
def test_int8_uint8_residual_added_in_the_clamps_pass_is_the_references(kernel, n, residual_activation):
    """A uint8 residual added in the pass of vectors that clamps and requantizes gives the
    separate passes' numbers, to the bit, where the rows are one run of memory (16 and 64
    columns) and where they are not: shorter than a vector (8), or ending in a part of one."""
    m, k = 300, 144
    a, w, scales = operands(m, k, n)
    epilogue = ProductEpilogue(RNG.standard_normal(n).astype(np.float32), None, residual_activation,
                               Requantize(0.05, 100))
    added = {"residual": RNG.integers(0, 256, (m, n), dtype=np.uint8), "residual_scale": 0.03,
             "residual_zero_point": 120}
    ours, reference = both(kernel, w, scales, 77, epilogue)
    np.testing.assert_array_equal(ours(a, **added), reference(a, **added))


@pytest.mark.parametrize("kernel", INT8_KERNELS + [pytest.param(REFERENCE, id="reference")])
def test_int8_requantized_output_is_the_reference_quantize(kernel):
    """Requantized outputs are int8.quantize of the float outputs: ties to even, clipped at 0 and 255."""
    a, w, scales = operands(50, 40, 30)
    float_out = Int8Product(w, scales, 0.02, 5, ProductEpilogue(), kernel)(a)
    uint8_out = Int8Product(w, scales, 0.02, 5, ProductEpilogue(requantize=Requantize(0.01, 128)), kernel)(a)
    np.testing.assert_array_equal(uint8_out, products.int8.quantize(float_out, 0.01, 128))
    assert uint8_out.min() == 0 and uint8_out.max() == 255


@pytest.mark.parametrize("kernel", INT8_KERNELS)
def test_int8_product_is_the_same_on_one_and_two_threads(kernel):
    a, w, scales = operands(600, 300, 200)
    epilogue = ProductEpilogue(RNG.standard_normal(200).astype(np.float32), InplaceActivation("silu"))
    product = Int8Product(w, scales, 0.02, 3, epilogue, kernel)
    assert len(products.product_parts(600, 200, 300, kernel)) > 2
    assert_same_on_two_threads(product, a)


@pytest.mark.parametrize("kernel", [products.FMA512, products.FMA256, products.VNNI], ids=lambda kernel: kernel.name)
def test_products_are_cut_the_way_that_reads_least(kernel):   # cutting runs no kernel: any machine
    rows, strips, lanes = products.tile_shape(kernel)
    for m, n, k in [(32, 1536, 384), (32, 384, 1536), (3136, 64, 576), (197, 192, 768), (600, 200, 300)]:
        parts = products.product_parts(m, n, k, kernel)
        cells = [(r, s) for r0, r1, s0, s1 in parts for r in range(r0, r1) for s in range(s0, s1)]
        assert sorted(cells) == [(r, s) for r in range(m) for s in range(-(-n // lanes))]   # each once
        assert len(parts) % 4 == 0 and len(parts) >= products.MAX_PARTS // 2
        sizes = (parts[:, 1] - parts[:, 0]) * (parts[:, 3] - parts[:, 2])
        assert (np.diff(sizes) <= 0).all()   # the largest first: threads taking the next end together
        row_blocks, column_blocks = len(set(parts[:, 0])), len(set(parts[:, 2]))
        if m <= 32 and -(-n // lanes) // strips >= 8:   # a sentence by a large weight: the weight read once
            assert row_blocks == 1
        elif n <= 64:  # many pixels by few channels: the pixels read once
            assert column_blocks == 1


@pytest.mark.parametrize("m, n, k", [(1, 1000, 1024), (3136, 16, 16), (1, 768, 1024)])
def test_a_product_of_about_three_parts_work_is_cut_into_four(m, n, k):
    """A classifier at batch 1, a 1x1 convolution of few channels: three parts left one of two
    threads twice the other's work (the second thread then gained 1.3x instead of 2x)."""
    parts = products.product_parts(m, n, k, products.FMA512)
    assert 3 * products.PART_WORK <= m * n * k < 4 * products.PART_WORK
    assert len(parts) == 4
    sizes = (parts[:, 1] - parts[:, 0]) * (parts[:, 3] - parts[:, 2])
    assert sizes.max() - sizes.min() <= sizes.max() // 4


def test_int8_from_float_quantizes_each_column():
    weight = RNG.standard_normal((20, 6)).astype(np.float32)
    product = Int8Product.from_float(weight, 0.5, 2, kernel=REFERENCE)
    q, scales = products.int8.quantize_weight(weight, axis=1)
    np.testing.assert_array_equal(product.weight, q)
    np.testing.assert_array_equal(product.scale, np.float32(0.5) * scales)


def test_int8_product_refuses_what_it_cannot_compute():
    w = np.zeros((8, 4), np.int8)
    product = Int8Product(w, np.ones(4, np.float32), 1.0, 0, kernel=REFERENCE)
    with pytest.raises(ValueError, match=r"\(M, 8\)"):
        product(np.zeros((3, 9), np.uint8))
    with pytest.raises(ValueError, match=r"float32 \(3, 4\) array, not uint8 \(3, 5\)"):
        product.multiply(np.zeros((3, 8), np.uint8), np.zeros((3, 5), np.uint8))
    with pytest.raises(ValueError, match="int8"):
        Int8Product(w.astype(np.int16), np.ones(4, np.float32), 1.0, 0)
    with pytest.raises(ValueError, match="66311"):
        Int8Product(np.zeros((products.INT8_ACCUMULATION_LIMIT + 1, 1), np.int8), np.ones(1, np.float32), 1.0, 0)


@pytest.mark.parametrize("kernel", INT8_KERNELS + [pytest.param(REFERENCE, id="reference")])
def test_int8_columns_of_a_product(kernel):
    """Any run of columns (a fused operator's block of channels), in this thread: the same
    values as the whole product's, residual and requantizing included."""
    m, k, n = 29, 40, 70
    a, w, scales = operands(m, k, n)
    epilogue = ProductEpilogue(RNG.standard_normal(n).astype(np.float32), InplaceActivation("relu"),
                               InplaceActivation("relu"), Requantize(0.05, 10))
    residual = RNG.standard_normal((m, n)).astype(np.float32)
    product = Int8Product(w, scales, 0.02, 7, epilogue, kernel)
    whole = product(a, residual)
    for start, stop in [(0, 70), (8, 24), (13, 14), (16, 70), (50, 70)]:
        out = np.empty((m, stop - start), np.uint8)
        product.multiply(a, out, residual[:, start:stop].copy(), columns=(start, stop), shared=False)
        np.testing.assert_array_equal(out, whole[:, start:stop], err_msg=f"columns {start}:{stop}")


@pytest.mark.parametrize("kernel", INT8_KERNELS + [pytest.param(REFERENCE, id="reference")])
def test_int8_activations_are_the_reference_quantization_in_the_same_layout(kernel):
    product = Int8Product(np.zeros((6, 3), np.int8), np.ones(3, np.float32), 0.037, 101, kernel=kernel)
    x = (RNG.standard_normal((2, 9, 7, 6)) * 4).astype(np.float32).transpose(0, 3, 1, 2)   # channels-last view
    x[0, 0, 0, :4] = [0.5 * 0.037, 1.5 * 0.037, -100, 100]                                # ties, clipping
    q = product.activations(x)
    assert q.dtype == np.uint8 and q.strides == (x.strides[0] // 4, 1, *(s // 4 for s in x.strides[2:]))
    np.testing.assert_array_equal(q, products.int8.quantize(np.ascontiguousarray(x), 0.037, 101))
    assert product.activations(q) is q
    for view in (x.transpose(0, 2, 1, 3), x[:, :, ::2], x[:, 1:], x[..., ::3]):   # other layouts, gaps
        np.testing.assert_array_equal(product.activations(view),
                                      products.int8.quantize(np.ascontiguousarray(view), 0.037, 101))


@pytest.mark.parametrize("kernel", INT8_KERNELS + [pytest.param(REFERENCE, id="reference")])
def test_quantizing_shared_among_threads_gives_the_same_values(kernel, monkeypatch):
    """A large input is quantized in parts the threads share: the values of one thread's pass."""
    monkeypatch.setattr(products, "ELEMENTWISE_SHARED", 1000)
    monkeypatch.setattr(products, "ELEMENTWISE_PART", 700)
    product = Int8Product(np.zeros((6, 3), np.int8), np.ones(3, np.float32), 0.037, 101, kernel=kernel)
    x = (RNG.standard_normal((2, 6, 31, 17)) * 4).astype(np.float32).transpose(0, 3, 1, 2)
    alone = product.activations(x)
    with intra_op(2):
        shared = product.activations(x)
    np.testing.assert_array_equal(shared, alone)
    np.testing.assert_array_equal(alone, products.int8.quantize(np.ascontiguousarray(x), 0.037, 101))


@needs_vnni
def test_int8_residual_of_another_shape_is_refused():
    w = np.zeros((8, 4), np.int8)
    product = Int8Product(w, np.ones(4, np.float32), 1.0, 0, kernel=VNNI)
    with pytest.raises(ValueError, match="residual"):
        product(np.zeros((3, 8), np.uint8), residual=np.zeros((3, 5), np.float32))


# -- bf16 --------------------------------------------------------------------------------

def test_compiled_bf16_rounding_is_numpy_s_to_the_bit():
    from kuiperinfer.kernels.compiled.products import round_bf16_bits

    x = RNG.standard_normal(10_000).astype(np.float32) * np.float32(1e3)
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0e38, 1e-40, -np.nan]
    x[8:12] = np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x00008000], np.uint32).view(np.float32)   # ties, subnormal
    bits = np.empty(x.shape, np.uint16)
    round_bf16_bits(x, bits)
    np.testing.assert_array_equal(bits, products.bf16_bits(x))


@pytest.mark.parametrize("kernel", BF16_KERNELS)
@pytest.mark.parametrize("activation", [None, InplaceActivation("relu"), InplaceActivation("gelu")], ids=name_of)
@pytest.mark.parametrize("residual", [False, True])
def test_bf16_kernel_matches_the_reference_to_float32_rounding(kernel, activation, residual):
    for m, k, n in [(1, 1, 1), (3, 5, 17), (33, 31, 64), (100, 257, 33), (257, 64, 300)]:
        x = RNG.standard_normal((m, k)).astype(np.float32)
        weight = RNG.standard_normal((k, n)).astype(np.float32)
        epilogue = ProductEpilogue(RNG.standard_normal(n).astype(np.float32), activation,
                                   InplaceActivation("relu") if residual else None)
        added = RNG.standard_normal((m, n)).astype(np.float32) if residual else None
        got = Bf16Product(weight, epilogue, kernel)(x, added)
        expected = products.bf16_reference(x, products.bf16_bits(weight), epilogue, added)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max(),
                                   err_msg=f"M={m} K={k} N={n}")


@pytest.mark.parametrize("kernel", BF16_KERNELS)
def test_bf16_product_is_the_same_on_one_and_two_threads(kernel):
    x = RNG.standard_normal((500, 300)).astype(np.float32)
    assert_same_on_two_threads(Bf16Product(RNG.standard_normal((300, 600)).astype(np.float32), kernel=kernel), x)


@pytest.mark.parametrize("kernel", BF16_KERNELS)
def test_bf16_activations_and_columns(kernel):
    """bf16 activations in the kernel's form (bit patterns or rounded floats), which the
    product takes as they are; a run of columns equals the whole product's (to the bit in
    the tiles, to float32 rounding in BLAS, whose sums depend on the product's width)."""
    x = RNG.standard_normal((31, 45)).astype(np.float32)
    weight = RNG.standard_normal((45, 40)).astype(np.float32)
    product = Bf16Product(weight, ProductEpilogue(RNG.standard_normal(40).astype(np.float32)), kernel)
    a = product.activations(x)
    assert a.dtype == product.in_dtype
    np.testing.assert_array_equal(a if a.dtype == np.float32 else products.widen_bf16(a), products.round_bf16(x))
    whole = product(x)
    np.testing.assert_array_equal(product(a), whole)
    out = np.empty((31, 20), np.float32)
    product.multiply(a, out, columns=(17, 37), shared=False)
    tolerance = 0 if kernel.dot is not None else 1e-6 * np.abs(whole).max()
    np.testing.assert_allclose(out, whole[:, 17:37], rtol=0, atol=tolerance)


def test_bf16_weights_are_held_in_half_the_memory():
    weight = RNG.standard_normal((64, 32)).astype(np.float32)
    for kernel in [BF16_WIDENED] + ([AVX512_BF16] if HERE.avx512_bf16 else []):
        product = Bf16Product(weight, kernel=kernel)
        held = product.weight_bits if kernel.dot is None else product.packed
        assert held.nbytes == weight.nbytes // 2


def test_bf16_product_does_not_requantize():
    with pytest.raises(ValueError, match="requantize"):
        Bf16Product(np.zeros((2, 2), np.float32), ProductEpilogue(requantize=Requantize(1.0, 0)))


# -- float32 -------------------------------------------------------------------------------

FP32_SIZES = [1, 3, 15, 16, 17, 31, 33, 64, 100, 257]
"""Around the tiles' sizes: 12 and 6 rows (and the 8, 4, 2, 1 of the last rows), strips of 16
and 8 columns, in panels of 2."""


def assert_float32_close(got, expected, x, w, what=""):
    """Equal to float32 rounding: the sums are added in another order than BLAS's, which moves
    them by about 1e-7 of the sums of their products' magnitudes, ``|x| @ |w|`` (a sum that
    cancels keeps the rounding of its terms); within 1e-6 of that, or of the output's scale."""
    assert got.dtype == np.float32 and got.shape == expected.shape
    scale = max((np.abs(x) @ np.abs(w)).max(initial=0), np.abs(expected).max(initial=0))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * scale, err_msg=what)


def float_operands(m, k, n, rng=RNG):
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


@pytest.mark.parametrize("kernel", FP32_KERNELS)
@pytest.mark.parametrize("m", FP32_SIZES)
def test_fp32_kernel_matches_the_reference_at_every_shape(kernel, m):
    for k in FP32_SIZES:
        for n in FP32_SIZES:
            x, w = float_operands(m, k, n)
            assert_float32_close(Fp32Product(w, kernel=kernel)(x), x @ w, x, w, f"M={m} K={k} N={n}")


@pytest.mark.parametrize("kernel", FP32_KERNELS)
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=name_of)
@pytest.mark.parametrize("residual", [None, "none", "relu", "silu"])
def test_fp32_epilogue_matches_the_reference(kernel, activation, residual):
    """Every activation, with a residual or without, and the residual's own activation: a clamp
    (none, ReLU, clip) is applied in the tile's registers, any other on its stored rows."""
    m, k, n = 37, 70, 53
    x, w = float_operands(m, k, n)
    residual_activation = None if residual in (None, "none") else InplaceActivation(residual)
    epilogue = ProductEpilogue(RNG.standard_normal(n).astype(np.float32), activation, residual_activation)
    added = None if residual is None else RNG.standard_normal((m, n)).astype(np.float32)
    got = Fp32Product(w, epilogue, kernel)(x, added)
    assert_float32_close(got, products.fp32_reference(x, w, epilogue, added), x, w)


@pytest.mark.parametrize("kernel", FP32_KERNELS)
def test_fp32_deep_products_are_summed_in_blocks_as_accurately_as_blas(kernel):
    """Deeper than a block of the depth (512 steps), the sums of each block are added into the
    output; the result is as close to the exact product as NumPy's. The last product has
    several blocks of rows, of columns and of the depth."""
    for m, k, n in [(13, 4099, 40), (30, 1025, 17), (1, 513, 300), (400, 1100, 300)]:
        x, w = float_operands(m, k, n)
        epilogue = ProductEpilogue(RNG.standard_normal(n).astype(np.float32), InplaceActivation("relu"))
        got, expected = Fp32Product(w, epilogue, kernel)(x), products.fp32_reference(x, w, epilogue)
        assert_float32_close(got, expected, x, w, f"M={m} K={k} N={n}")
        exact = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + epilogue.bias, 0)
        assert np.abs(got - exact).max() <= 2 * np.abs(expected - exact).max() + 1e-7 * np.abs(exact).max()


@pytest.mark.parametrize("kernel", FP32_KERNELS)
def test_fp32_clamps_keep_nan_and_take_any_residual_layout(kernel):
    x, w = float_operands(20, 30, 40)
    x[3, 5] = np.nan
    epilogue = ProductEpilogue(activation=InplaceActivation("clip", (-1.0, 2.0)),
                               residual_activation=InplaceActivation("relu"))
    residual = np.asfortranarray(RNG.standard_normal((20, 40)).astype(np.float32))
    got = Fp32Product(w, epilogue, kernel)(x, residual)
    expected = products.fp32_reference(x, w, epilogue, residual)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    assert np.isnan(got[3]).all()
    finite = ~np.isnan(expected)
    assert_float32_close(got[finite], expected[finite], np.nan_to_num(x), w)


@pytest.mark.parametrize("kernel", FP32_KERNELS)
def test_fp32_product_is_the_same_on_one_and_two_threads(kernel):
    x, w = float_operands(500, 300, 600)
    epilogue = ProductEpilogue(RNG.standard_normal(600).astype(np.float32), InplaceActivation("gelu"),
                               InplaceActivation("relu"))
    product = Fp32Product(w, epilogue, kernel)
    assert len(products.product_parts(500, 600, 300, kernel)) > 2
    residual = RNG.standard_normal((500, 600)).astype(np.float32)
    alone = product(x, residual)
    with intra_op(2):
        shared = product(x, residual)
    np.testing.assert_array_equal(shared, alone)
    assert_same_on_two_threads(Fp32Product(w[:, :40], kernel=kernel), x[:7])   # few rows: blocks of strips


@pytest.mark.parametrize("kernel", FP32_KERNELS + [pytest.param(REFERENCE, id="reference")])
def test_fp32_product_writes_into_a_block_of_a_larger_output(kernel):
    """As im2col multiplies a stripe of output rows into its place in the whole output."""
    x, w = float_operands(30, 20, 24)
    epilogue = ProductEpilogue(RNG.standard_normal(24).astype(np.float32), InplaceActivation("relu"))
    whole = np.full((50, 24), -7.0, np.float32)
    product = Fp32Product(w, epilogue, kernel)
    product.multiply(x, whole[10:40])
    assert_float32_close(whole[10:40], products.fp32_reference(x, w, epilogue), x, w)
    assert (whole[:10] == -7).all() and (whole[40:] == -7).all()
    with pytest.raises(ValueError, match=r"float32 \(30, 24\) array, not float32 \(30, 20\)"):
        product.multiply(x, whole[10:40, :20])
    residual = RNG.standard_normal((30, 24)).astype(np.float32)
    expected = products.fp32_reference(x, w, epilogue, residual.copy())
    whole[10:40] = residual
    product.multiply(x, whole[10:40], whole[10:40])   # the residual in the output's memory: y += x @ w
    assert_float32_close(whole[10:40], expected, x, w)


@pytest.mark.parametrize("kernel", FP32_KERNELS + [pytest.param(REFERENCE, id="reference")])
def test_fp32_columns_of_a_product(kernel):
    """Any run of columns (a group's channels), from a strip's start or within one, with a
    residual: the whole product's values to float32 rounding (a tile's rows of fewer strips
    keep more sums going, added in another order)."""
    m, k, n = 29, 600, 70
    x, w = float_operands(m, k, n)
    epilogue = ProductEpilogue(RNG.standard_normal(n).astype(np.float32), InplaceActivation("silu"),
                               InplaceActivation("relu"))
    residual = RNG.standard_normal((m, n)).astype(np.float32)
    product = Fp32Product(w, epilogue, kernel)
    whole = product(x, residual)
    for start, stop in [(0, 70), (8, 24), (13, 14), (16, 70), (50, 70)]:
        out = np.empty((m, stop - start), np.float32)
        product.multiply(x, out, residual[:, start:stop].copy(), columns=(start, stop), shared=False)
        assert_float32_close(out, whole[:, start:stop], x, w[:, start:stop], f"columns {start}:{stop}")


def test_fp32_reference_kernel_is_numpy_s_matmul():
    x, w = float_operands(9, 12, 5)
    epilogue = ProductEpilogue(RNG.standard_normal(5).astype(np.float32), InplaceActivation("relu"))
    product = Fp32Product(w, epilogue, REFERENCE)
    np.testing.assert_array_equal(product(x), np.maximum(x @ w + epilogue.bias, 0))


@pytest.mark.parametrize("kernel", FP32_KERNELS)
def test_fp32_weights_are_packed_once_in_aligned_strips(kernel):
    w = RNG.standard_normal((7, 20)).astype(np.float32)
    product = Fp32Product(w, kernel=kernel)
    lanes = products.tile_shape(kernel)[2]
    strips = product.packed.reshape(-1, 7, lanes)
    assert len(strips) == -(-20 // lanes) and product.packed.ctypes.data % 64 == 0
    np.testing.assert_array_equal(np.concatenate(list(strips), axis=1)[:, :20], w)
    assert not np.concatenate(list(strips), axis=1)[:, 20:].any()
    assert product(np.zeros((0, 7), np.float32)).shape == (0, 20)


def test_fp32_product_refuses_what_it_cannot_compute():
    product = Fp32Product(np.ones((8, 4), np.float32))
    assert product(np.ones((3, 8), np.float64)).dtype == np.float32   # taken as float32, as the others take it
    with pytest.raises(ValueError, match=r"\(M, 8\)"):
        product(np.zeros((3, 9), np.float32))
    with pytest.raises(ValueError, match="requantize"):
        Fp32Product(np.zeros((2, 2), np.float32), ProductEpilogue(requantize=Requantize(1.0, 0)))
    with pytest.raises(ValueError, match="bias of 4"):
        Fp32Product(np.zeros((8, 4), np.float32), ProductEpilogue(bias=np.zeros(5, np.float32)))
    if product.kernel.dot is not None:
        with pytest.raises(ValueError, match="residual"):
            product(np.zeros((3, 8), np.float32), residual=np.zeros((3, 4), np.uint8))


# -- choosing the kernel -----------------------------------------------------------------

ALL = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "avx512bf16"})
ZEN4 = {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"}


@pytest.mark.parametrize("flags, compilable, int8, bf16, fp32", [
    (ZEN4, ALL, VNNI, AVX512_BF16, FMA512),
    ({"avx2", "fma", "avx512f", "avx512_vnni"}, ALL, VNNI, BF16_WIDENED, FMA512),
    ({"avx2", "fma", "avx_vnni"}, ALL, AVX2, BF16_WIDENED, FMA256),                # AVX-VNNI is 256-bit only
    ({"avx2", "fma"}, ALL, AVX2, BF16_WIDENED, FMA256),
    ({"avx2"}, ALL, AVX2, BF16_WIDENED, REFERENCE),                                # no FMA: no float32 tiles
    ({"avx", "sse4_2"}, ALL, REFERENCE, BF16_WIDENED, REFERENCE),
    (ZEN4, frozenset({"avx2", "fma"}), AVX2, BF16_WIDENED, FMA256),               # Numba told haswell
    (ZEN4, frozenset(), REFERENCE, BF16_WIDENED, REFERENCE),                     # no Numba
])
def test_the_kernel_is_chosen_from_the_cpu_and_what_numba_may_compile(flags, compilable, int8, bf16, fp32):
    features = MatrixFeatures.from_flags(frozenset(flags))
    assert products.int8_kernel(features, compilable) is int8
    assert products.bf16_kernel(features, compilable) is bf16
    assert products.fp32_kernel(features, compilable) is fp32


def test_an_amx_cpu_takes_its_tiles_where_linux_grants_them_and_vnni_for_shallow_int8_products():
    features = MatrixFeatures.from_flags(frozenset(ZEN4 | {"amx_tile", "amx_int8", "amx_bf16"}))
    compilable = ALL | AMX_FEATURES
    assert products.int8_kernel(features, compilable) is (AMX_INT8 if AMX else VNNI)
    assert products.int8_kernel(features, compilable, depth=65) is (AMX_INT8 if AMX else VNNI)
    assert products.int8_kernel(features, compilable, depth=64) is VNNI
    assert products.bf16_kernel(features, compilable) is (AMX_BF16 if AMX else AVX512_BF16)
    assert products.int8_kernel(features, ALL) is VNNI          # Numba may not compile the tiles
    assert AMX_INT8.narrow is VNNI and AMX_BF16.narrow is None   # bf16's float32 sums would change with the batch


def test_a_product_on_amx_tiles_linux_refuses_is_refused_before_it_runs(monkeypatch):
    monkeypatch.setattr(products, "request_tile_state", lambda: False)
    for make in (lambda: Int8Product(np.ones((80, 4), np.int8), np.ones(4, np.float32), 1.0, 0, kernel=AMX_INT8),
                 lambda: Bf16Product(np.ones((80, 4), np.float32), kernel=AMX_BF16)):
        with pytest.raises(ValueError, match="AMX tiles"):
            make()


def test_an_int8_product_takes_this_machine_s_kernel_by_default():
    for depth in (4, 80):
        product = Int8Product(np.zeros((depth, 4), np.int8), np.ones(4, np.float32), 1.0, 0)
        assert product.kernel is products.int8_kernel(depth=depth)


def run_as_haswell(script):
    """What ``script`` prints, run with Numba told to compile for Haswell (AVX2 and FMA, no
    AVX-512: an AVX2-only CPU's code, which this CPU runs too)."""
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "+avx,+avx2,+fma,+bmi2,+f16c"}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@needs_avx2
def test_avx2_kernel_compiled_for_an_avx2_only_cpu_is_exact():
    """Numba told to compile for Haswell (no AVX-512, so no vpdpwssd to fuse into): the AVX2
    kernel is chosen and its vpmaddwd tiles equal the reference at the extremes and at random."""
    assert run_as_haswell("""
        import numpy as np
        from kuiperinfer.kernels.matrix import products
        assert products.int8_kernel() is products.AVX2, products.int8_kernel()
        assert products.bf16_kernel() is products.BF16_WIDENED
        rng = np.random.default_rng(1)
        for m, k, n in [(13, 4099, 40), (31, 33, 100), (1, 5, 3)]:
            a = rng.integers(0, 256, (m, k), dtype=np.uint8)
            a[::2] = 255
            w = rng.integers(-127, 128, (k, n), dtype=np.int8)
            w[:, ::2] = 127
            scales = np.ones(n, np.float32)
            ours = products.Int8Product(w, scales, 1.0, 128)(a)
            reference = products.Int8Product(w, scales, 1.0, 128, kernel=products.REFERENCE)(a)
            assert np.array_equal(ours, reference), (m, k, n)
        print("exact")
    """) == "exact"


@needs_avx2
def test_avx2_tiles_read_a_convolution_s_windows_where_they_lie_as_its_columns():
    """Compiled for Haswell, an int8 convolution's indirect rows (no columns) on the vpmaddwd
    tiles give its columns' numbers, padding and strides included."""
    assert run_as_haswell("""
        import numpy as np
        from kuiperinfer.kernels.im2col import pack_weight
        from kuiperinfer.kernels.matrix import products
        from kuiperinfer.kernels.matrix.convolution import ProductConvolution
        from kuiperinfer.kernels.matrix.precision import Int8
        rng = np.random.default_rng(2)
        x = rng.standard_normal((2, 8, 11, 9), dtype=np.float32) * 2
        weight = rng.standard_normal((24, 8, 3, 3), dtype=np.float32)
        product = Int8(scale=0.03, zero_point=117).product(pack_weight(weight, 1)[0], products.ProductEpilogue())
        assert product.kernel is products.AVX2, product.kernel
        geometry = ((3, 3), (2, 1), (1, 1), ((1, 0), (1, 1)), "zeros", True)
        indirect, columns = ProductConvolution([product], *geometry), ProductConvolution([product], *geometry)
        columns.indirect = False
        assert indirect.indirect
        assert np.array_equal(indirect(x), columns(x))
        print("exact")
    """) == "exact"


@needs_fma
def test_fp32_avx2_kernel_compiled_for_an_avx2_only_cpu_matches_the_reference():
    """Compiled for Haswell, the 256-bit FMA tiles are chosen and match the reference at the
    edge shapes, deeper than a block of the depth, with clamps in registers and without."""
    assert run_as_haswell("""
        import numpy as np
        from kuiperinfer.kernels.elementwise import InplaceActivation
        from kuiperinfer.kernels.matrix import products
        assert products.fp32_kernel() is products.FMA256, products.fp32_kernel()
        rng = np.random.default_rng(2)
        sizes = [1, 3, 7, 8, 9, 15, 16, 17, 33, 100]
        shapes = [(m, k, n) for m in sizes for k in sizes[::3] for n in sizes] + [(13, 4099, 40), (1, 1025, 9)]
        for i, (m, k, n) in enumerate(shapes):
            x = rng.standard_normal((m, k)).astype(np.float32)
            w = rng.standard_normal((k, n)).astype(np.float32)
            activation = [None, InplaceActivation("relu"), InplaceActivation("hardswish")][i % 3]
            epilogue = products.ProductEpilogue(rng.standard_normal(n).astype(np.float32), activation,
                                                InplaceActivation("relu"))
            residual = rng.standard_normal((m, n)).astype(np.float32)
            ours = products.Fp32Product(w, epilogue)(x, residual)
            expected = products.fp32_reference(x, w, epilogue, residual)
            scale = max((np.abs(x) @ np.abs(w)).max(), np.abs(expected).max())
            assert np.abs(ours - expected).max() <= 1e-6 * scale, (m, k, n)
        print(len(shapes), "match")
    """) == "402 match"
