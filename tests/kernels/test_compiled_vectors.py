"""The vectors compiled kernels hold in registers (kernels/compiled/vectors.py)."""

import os

import numpy as np
import pytest

from kuiperinfer.kernels.compiled.activation import ActivationCode, finish_row, finish_vector
from kuiperinfer.kernels.compiled.vectors import (
    LANES,
    load,
    load_dequantized,
    load_if,
    load_strided,
    multiply_add,
    multiply_add_splats,
    repeat,
    splat,
    store,
    store_output,
    where_above,
    where_below,
)
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.jit import kernel
from kuiperinfer.kernels.matrix.features import cpu_flags
from kuiperinfer.kernels.matrix.int8 import dequantize, quantize


def test_lanes_fill_the_widest_register():
    with open("/proc/cpuinfo") as cpuinfo:
        avx512 = "avx512f" in cpu_flags(cpuinfo.read())
    if os.environ.get("NUMBA_CPU_FEATURES"):                       # compiling for another CPU
        avx512 = "+avx512f" in os.environ["NUMBA_CPU_FEATURES"].split(",")
    assert LANES == (16 if avx512 else 8)


@kernel
def _copy_first(source, target, index, count):
    store(target, index, load(source, index, count), count)


@kernel
def _copy_all(source, target, index):
    store(target, index, load(source, index, None), None)


@pytest.mark.parametrize("count", [0, 1, 5, LANES - 1])
def test_a_masked_load_and_store_touch_only_their_lanes(count):
    source = np.arange(3 * LANES, dtype=np.float32)
    target = np.full(3 * LANES, -1, np.float32)
    _copy_first(source, target, 7, count)
    expected = np.full(3 * LANES, -1, np.float32)
    expected[7:7 + count] = source[7:7 + count]
    np.testing.assert_array_equal(target, expected)
    _copy_all(source, target, LANES + 3)
    expected[LANES + 3:2 * LANES + 3] = source[LANES + 3:2 * LANES + 3]
    np.testing.assert_array_equal(target, expected)


@kernel
def _requantize(source, target, scale, zero_point, count):
    for k in range(0, source.size - LANES + 1, LANES):
        store_output(target, k, load(source, k, None), None, scale, zero_point)
    store_output(target, source.size - count, load(source, source.size - count, count), count, scale, zero_point)


@kernel
def _dequantize(source, target, scale, zero_point, count):
    for k in range(0, source.size - LANES + 1, LANES):
        store(target, k, load_dequantized(source, k, None, scale, zero_point), None)
    store(target, source.size - count, load_dequantized(source, source.size - count, count, scale, zero_point), count)


@pytest.mark.parametrize("count", [1, 5, LANES - 1])
def test_uint8_stored_and_loaded_as_int8_quantizes_and_dequantizes(count):
    """A vector stored into a uint8 array is int8.quantize's bytes (ties to even, clipped at
    0 and 255), a masked one only its lanes; loaded back, dequantize's values."""
    values = np.random.default_rng(count).uniform(-3, 9, 4 * LANES).astype(np.float32)
    values[:4] = [0.5 * 0.04 - 2 * 0.04, 2.5 * 0.04, -50.0, 50.0]      # ties, and beyond the range
    scale, zero_point = np.float32(0.04), np.float32(77)
    q = np.full(4 * LANES, 7, np.uint8)
    _requantize(values[:3 * LANES + count], q, scale, zero_point, count)
    np.testing.assert_array_equal(q[:3 * LANES + count], quantize(values[:3 * LANES + count], scale, 77))
    assert (q[3 * LANES + count:] == 7).all()
    floats = np.full(4 * LANES, -1, np.float32)
    _dequantize(q[:3 * LANES + count], floats, scale, zero_point, count)
    np.testing.assert_array_equal(floats[:3 * LANES + count], dequantize(q[:3 * LANES + count], scale, 77))
    assert (floats[3 * LANES + count:] == -1).all()


@kernel
def _load_if(source, target, index, condition):
    store(target, 0, load_if(source, index, None, condition), None)


def test_a_load_if_loads_only_where_its_condition_holds():
    source = np.arange(2 * LANES, dtype=np.float32)
    target = np.full(LANES, -1, np.float32)
    _load_if(source, target, 3, True)
    np.testing.assert_array_equal(target, source[3:3 + LANES])
    _load_if(source, target, -(1 << 40), False)         # far outside the array: not read
    np.testing.assert_array_equal(target, np.zeros(LANES, np.float32))


@kernel
def _arithmetic(values, out):
    a, b, c = load_strided(values, 0, LANES, 3, None)
    store(out, 0, multiply_add(a, b, c), None)
    store(out, LANES, a * b + splat(2.5), None)
    store(out, 2 * LANES, where_above(where_below(a, splat(-1), splat(-1)), splat(1), splat(1)), None)


def test_arithmetic_lane_by_lane_keeps_nan():
    values = np.random.default_rng(0).standard_normal(3 * LANES).astype(np.float32)
    values[1] = np.nan
    out = np.empty(3 * LANES, np.float32)
    _arithmetic(values, out)
    a, b, c = values.reshape(3, LANES)
    np.testing.assert_allclose(out[:LANES], a * b + c, rtol=1e-6)
    np.testing.assert_allclose(out[LANES:2 * LANES], a * b + 2.5, rtol=1e-6)
    np.testing.assert_array_equal(out[2 * LANES:], np.where(np.isnan(a), a, np.clip(a, -1, 1)))


@kernel
def _outer(numbers, vector, out):
    sums = multiply_add_splats(numbers, 1, 2, load(vector, 0, None), repeat(splat(0.5), 3))
    for m in range(3):
        store(out, m * LANES, sums[m], None)


def test_a_row_of_numbers_times_a_vector_into_a_tuple_of_sums():
    numbers = np.arange(8, dtype=np.float32)
    vector = np.linspace(-1, 1, LANES, dtype=np.float32)
    out = np.empty(3 * LANES, np.float32)
    _outer(numbers, vector, out)
    np.testing.assert_allclose(out.reshape(3, LANES), numbers[1:6:2, None] * vector + 0.5, rtol=1e-6)


@kernel
def _finish(values, code, a, b):
    store(values, 0, finish_vector(load(values, 0, None), code, a, b), None)


@pytest.mark.parametrize("activation", [None, InplaceActivation("relu"), InplaceActivation("clip", (0.0, 6.0)),
                                        InplaceActivation("leaky_relu", (0.1,)), InplaceActivation("hardsigmoid"),
                                        InplaceActivation("hardswish")], ids=lambda a: "none" if a is None else a.name)
def test_activations_in_registers_match_the_rows(activation):
    values = np.linspace(-8, 8, LANES, dtype=np.float32)
    values[0] = np.nan
    expected = values.copy()
    finish_row(expected, np.zeros(LANES, np.float32), *ActivationCode.of(activation))
    _finish(values, *ActivationCode.of(activation))
    np.testing.assert_allclose(values, expected, rtol=1e-6)
