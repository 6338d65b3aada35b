"""Evaluation tests: every function against PyTorch, type promotion, scalars, errors.

The reference for each name is what ``<model>_pnnx.py`` runs for it (pnnx ``ir.cpp``,
``expand_expression``): ``add``..``rshift`` are the Python operators ``+ - * / // % &
| ^ << >>`` on tensors, the rest are ``torch.<name>`` (``neg`` is unary ``-``).
"""

from __future__ import annotations

import math
import operator
import warnings

import numpy as np
import pytest
import torch
from cpu_time import cpu_time
from hypothesis import given, settings
from hypothesis import strategies as st

from kuiperinfer.errors import ExpressionError
from kuiperinfer.expression import FUNCTIONS, compile_expression, evaluate, parse, to_reverse_polish
from kuiperinfer.expression.promotion import result_type
from kuiperinfer.kernels.special import erf as numpy_erf

UNARY = {
    "abs": torch.abs, "acos": torch.acos, "acosh": torch.acosh, "asin": torch.asin,
    "asinh": torch.asinh, "atan": torch.atan, "atanh": torch.atanh, "ceil": torch.ceil,
    "cos": torch.cos, "cosh": torch.cosh, "erf": torch.erf, "exp": torch.exp,
    "expm1": torch.expm1, "floor": torch.floor, "log": torch.log, "log10": torch.log10,
    "log1p": torch.log1p, "neg": operator.neg, "reciprocal": torch.reciprocal,
    "round": torch.round, "rsqrt": torch.rsqrt, "sign": torch.sign, "sin": torch.sin,
    "sinh": torch.sinh, "sqrt": torch.sqrt, "square": torch.square, "tan": torch.tan,
    "tanh": torch.tanh, "trunc": torch.trunc,
}
OPERATORS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floor_divide": operator.floordiv, "remainder": operator.mod, "and": operator.and_,
    "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift, "rshift": operator.rshift,
}
TORCH_BINARY = {
    "pow": torch.pow, "atan2": torch.atan2, "fmod": torch.fmod, "max": torch.max,
    "maximum": torch.maximum, "min": torch.min, "minimum": torch.minimum,
    "logaddexp": torch.logaddexp,
}
FLOAT_BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "atan2", "fmod",
                "max", "maximum", "min", "minimum", "logaddexp"]
BITWISE = ["and", "or", "xor", "lshift", "rshift"]


def test_the_reference_tables_cover_every_function():
    casts_and_shape = {"int", "torch.bool", "torch.float", "torch.long", "size"}
    assert set(UNARY) | set(OPERATORS) | set(TORCH_BINARY) | casts_and_shape == set(FUNCTIONS)


def to_torch(value):
    return torch.from_numpy(np.array(value)) if isinstance(value, np.ndarray) else value


def torch_reference(name, *args):
    """What the generated pnnx Python computes for ``name(*args)``."""
    if name in UNARY:
        return UNARY[name](to_torch(args[0]))
    a, b = (to_torch(v) for v in args)
    if name in OPERATORS:
        return OPERATORS[name](a, b)
    # torch.<fn>(tensor, number) needs a tensor: pnnx writes torch.tensor(literal) (ir.cpp),
    # which promotes exactly like a Python number.
    a, b = (v if isinstance(v, torch.Tensor) else torch.tensor(v) for v in (a, b))
    return TORCH_BINARY[name](a, b)


def ours(name, *args):
    text = f"{name}({','.join(f'@{i}' for i in range(len(args)))})"
    return compile_expression(text).evaluate(list(args))


def assert_matches_torch(name, *args, rtol=1e-5, atol=1e-5):
    expected = torch_reference(name, *args)
    got = ours(name, *args)
    assert isinstance(got, np.ndarray), f"{name} returned {type(got)}"
    torch.testing.assert_close(torch.from_numpy(np.array(got)), expected, rtol=rtol, atol=atol,
                               equal_nan=True)


@pytest.fixture
def rng():
    return np.random.default_rng(20261020)


def unary_domain(name, rng, shape=(2, 3, 4, 5)):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    if name in ("acos", "asin", "atanh"):
        x = np.tanh(x).astype(np.float32) * np.float32(0.999)
    elif name == "acosh":
        x = np.abs(x) + np.float32(1)
    elif name in ("log", "log10", "sqrt", "rsqrt"):
        x = np.abs(x) + np.float32(1e-3)
    elif name == "log1p":
        x = np.abs(x) - np.float32(0.5)
    elif name == "round":
        x = np.round(x * 2) / np.float32(2)  # many exact halves: round half to even
    return x


# --------------------------------------------------------------------------- unary


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32_matches_torch(name, rng):
    x = unary_domain(name, rng)
    assert_matches_torch(name, x)
    assert ours(name, x).dtype == np.float32


EDGES = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-30, -1e-30, 88.0, -88.0, 1e30,
                  np.inf, -np.inf, np.nan], dtype=np.float32)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_edge_values_match_torch(name):
    # zeros, halves, tiny, huge, inf and nan: out-of-domain inputs give nan as in torch
    assert_matches_torch(name, EDGES)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_on_int64_arrays_promotes_like_torch(name):
    x = np.array([[1, 2, 3], [4, 5, 7]], dtype=np.int64)
    assert_matches_torch(name, x)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_keeps_float64_and_float16(name, rng):
    x64 = unary_domain(name, rng, (7,)).astype(np.float64)
    assert_matches_torch(name, x64, rtol=1e-12, atol=1e-12)
    x16 = unary_domain(name, rng, (7,)).astype(np.float16)
    assert ours(name, x16).dtype == np.float16


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_on_a_zero_dim_array_stays_an_array(name):
    x = np.array(0.75, dtype=np.float32) if name != "acosh" else np.array(1.5, dtype=np.float32)
    got = ours(name, x)
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32
    assert_matches_torch(name, x)


def test_sign_of_nan_is_zero_like_torch():
    assert ours("sign", np.array([np.nan, -3.0, 0.0], np.float32)).tolist() == [0.0, -1.0, 0.0]


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.5000002], np.float32)
    assert ours("round", x).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 4.0]


@pytest.mark.parametrize("name, error", [("abs", "bool"), ("neg", "bool")])
def test_unary_refuses_bool_arrays_like_torch(name, error):
    with pytest.raises(ExpressionError, match=error):
        ours(name, np.array([True, False]))


def test_square_of_bool_is_int64_and_sign_of_bool_is_bool():
    assert_matches_torch("square", np.array([True, False]))
    assert_matches_torch("sign", np.array([True, False]))


# --------------------------------------------------------------------------- erf


def test_erf_is_float32_accurate_on_a_dense_grid():
    x = np.linspace(-6, 6, 100_001, dtype=np.float32)
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    got = numpy_erf(x)
    assert got.dtype == np.float32
    ulps = np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(got).astype(np.float32))
    assert ulps.max() <= 1.0


def test_erf_is_double_accurate_for_float64():
    x = np.concatenate([np.linspace(-9, 9, 20_001), np.geomspace(1e-300, 3, 2001)])
    exact = np.array([math.erf(v) for v in x])
    got = numpy_erf(x)
    nonzero = exact != 0
    assert np.max(np.abs(got - exact)[nonzero] / np.abs(exact[nonzero])) < 1e-13
    assert np.all(got[~nonzero] == 0)


def test_erf_special_values():
    got = numpy_erf(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300]))
    assert got[0] == 0 and math.copysign(1, got[1]) == -1
    assert got[2:4].tolist() == [1.0, -1.0] and math.isnan(got[4]) and got[5] == 1.0


def test_erf_is_fast_on_big_arrays():
    x = np.random.default_rng(1).standard_normal(1_000_000).astype(np.float32)
    numpy_erf(x[:10])
    with cpu_time() as spent:
        numpy_erf(x)
    assert spent.seconds < 2.0


# --------------------------------------------------------------------------- binary, float32


def float_operands(name, rng):
    x = (rng.standard_normal((2, 3, 4, 5)) * 4).astype(np.float32)
    y = (rng.standard_normal((1, 3, 1, 1)) * 4).astype(np.float32)
    if name == "pow":
        x = np.abs(x) + np.float32(0.1)  # negative bases with fractional powers are nan
    return x, y


@pytest.mark.parametrize("name", FLOAT_BINARY)
def test_binary_float32_with_broadcasting_matches_torch(name, rng):
    x, y = float_operands(name, rng)
    assert_matches_torch(name, x, y)
    assert_matches_torch(name, y, x)
    assert ours(name, x, y).shape == (2, 3, 4, 5)


@pytest.mark.parametrize("scalar", [2.5, -1.5, 3, -2, 0.0])
@pytest.mark.parametrize("name", FLOAT_BINARY)
def test_binary_float32_with_python_numbers_stays_float32(name, scalar, rng):
    x, _ = float_operands(name, rng)
    for args in ((x, scalar), (scalar, x)):
        if name == "pow" and args[0] is scalar and scalar < 0:
            continue
        got = ours(name, *args)
        assert got.dtype == np.float32, (name, args[0] is scalar)
        assert_matches_torch(name, *args)


SIGNED = np.array([-7.5, -7.0, -3.0, -0.5, -0.0, 0.0, 0.5, 3.0, 7.0, 7.5, np.inf, -np.inf, np.nan],
                  dtype=np.float32)


@pytest.mark.parametrize("name", FLOAT_BINARY)
def test_binary_edge_values_match_torch(name):
    # every pair of negatives, zeros, infinities and nan: division by zero, signs of
    # remainder (divisor) vs fmod (dividend), floor of negative quotients, nan propagation
    a = SIGNED.reshape(-1, 1)
    b = SIGNED.reshape(1, -1)
    assert_matches_torch(name, a, b)


@pytest.mark.parametrize("a, b, expected", [
    (-7.0, 2.0, -4.0), (7.0, -2.0, -4.0), (-7.0, -2.0, 3.0), (7.5, 2.0, 3.0), (-0.5, 3.0, -1.0),
])
def test_floor_divide_rounds_down(a, b, expected):
    got = ours("floor_divide", np.array([a], np.float32), np.array([b], np.float32))
    assert got.tolist() == [expected]


def test_remainder_takes_the_divisor_sign_and_fmod_the_dividend_sign():
    a = np.array([-7.0, 7.0, -7.0, 7.0], np.float32)
    b = np.array([3.0, -3.0, -3.0, 3.0], np.float32)
    assert ours("remainder", a, b).tolist() == [2.0, -2.0, -1.0, 1.0]
    assert ours("fmod", a, b).tolist() == [-1.0, 1.0, -1.0, 1.0]


def test_number_divided_by_array_rounds_like_torch_rtruediv():
    # torch computes 3 / t as t.reciprocal() * 3; a single division can differ in the last bit
    x = np.random.default_rng(3).uniform(0.1, 10, 10_000).astype(np.float32)
    expected = (3.0 / torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(ours("div", 3.0, x), expected)
    np.testing.assert_array_equal(ours("div", 7, x.astype(np.int64)), (7 / torch.from_numpy(x.astype(np.int64))).numpy())


def test_div_is_true_division_even_for_pnnx_floor_rounding_mode():
    # pnnx writes torch.div(a, b, rounding_mode='floor') as div(a,b) and the generated
    # Python computes a / b: follow the file
    assert ours("div", np.array([-7.0], np.float32), np.float32(2.0)).tolist() == [-3.5]


def test_max_min_propagate_nan():
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    for name in ("max", "maximum", "min", "minimum"):
        got = ours(name, a, b)
        assert np.isnan(got[:2]).all() and got[2] in (1.0, 2.0)


def test_logaddexp_of_equal_infinities():
    a = np.array([np.inf, -np.inf, 1.0], np.float32)
    assert_matches_torch("logaddexp", a, a)


# --------------------------------------------------------------------------- integers


def int_operands(rng, dtype=np.int64):
    x = rng.integers(-50, 50, size=(2, 3, 4)).astype(dtype)
    y = rng.integers(1, 9, size=(1, 3, 1)).astype(dtype) * rng.choice([-1, 1], size=(1, 3, 1))
    return x, y.astype(dtype)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8])
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "floor_divide", "remainder", "fmod",
                                  "max", "maximum", "min", "minimum", "atan2", "and", "or", "xor"])
def test_binary_integer_arrays_match_torch(name, dtype, rng):
    x, y = int_operands(rng, dtype)
    assert_matches_torch(name, x, y)
    assert_matches_torch(name, x, 3)
    assert_matches_torch(name, -6 if dtype != np.uint8 else 6, y)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("name", ["lshift", "rshift"])
def test_shifts_match_torch_including_out_of_range_amounts(name, dtype, rng):
    bits = np.dtype(dtype).itemsize * 8
    x = rng.integers(-100 if dtype != np.uint8 else 0, 100, size=(3, 1)).astype(dtype)
    amounts = np.array([[0, 1, 3, bits - 1, bits, bits + 5] + ([-1, -9] if dtype != np.uint8 else [])],
                       dtype=dtype)
    assert_matches_torch(name, x, amounts)
    assert_matches_torch(name, x, 2)


def test_pow_of_integers_matches_torch(rng):
    x = rng.integers(-5, 5, size=(3, 4)).astype(np.int64)
    assert_matches_torch("pow", x, 3)
    assert_matches_torch("pow", x, np.array([0, 1, 2, 3], np.int64))
    assert_matches_torch("pow", 2, np.array([0, 1, 2, 3], np.int64))
    assert_matches_torch("pow", x, 0.5)  # float exponent: float32


@pytest.mark.parametrize("name", ["and", "or", "xor"])
def test_bitwise_on_bool_arrays(name):
    a = np.array([[True], [False]])
    b = np.array([True, False])
    assert_matches_torch(name, a, b)
    assert_matches_torch(name, a, True)


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod"])
def test_integer_division_by_zero_is_an_error_like_torch(name):
    with pytest.raises(RuntimeError):
        torch_reference(name, np.array([5, -5]), np.array([0, 2]))
    with pytest.raises(ExpressionError, match="by zero") as info:
        compile_expression(f"add(@0,{name}(@0,@1))").evaluate([np.array([5, -5]), np.array([0, 2])])
    assert info.value.position == 7


@pytest.mark.parametrize("name", BITWISE)
def test_bitwise_functions_refuse_floats(name):
    with pytest.raises(ExpressionError, match="not defined"):
        ours(name, np.ones(3, np.float32), 1)
    with pytest.raises(ExpressionError, match="not defined"):
        ours(name, np.ones(3, np.int64), 1.5)


def test_integer_negative_powers_are_refused_like_torch():
    with pytest.raises(ExpressionError, match="negative integer powers"):
        ours("pow", np.array([1, 2]), -1)


def test_logaddexp_refuses_integers_like_torch():
    with pytest.raises(ExpressionError, match="logaddexp"):
        ours("logaddexp", np.array([1, 2]), np.array([1, 2]))


@pytest.mark.parametrize("name", ["floor_divide", "remainder"])
def test_floor_divide_and_remainder_refuse_bools(name):
    with pytest.raises(ExpressionError, match="bool"):
        ours(name, np.array([True]), np.array([True]))


def test_sub_with_bool_is_refused_like_torch():
    with pytest.raises(ExpressionError, match="bool"):
        ours("sub", np.array([1, 2]), True)


# --------------------------------------------------------------------------- promotion


@pytest.mark.parametrize("a, b, dtype", [
    (np.ones(3, np.int32), 2.5, np.float32),               # int tensor, Python float
    (np.ones(3, np.int64), 2, np.int64),
    (np.ones(3, np.int32), 2, np.int32),                   # Python int does not widen
    (np.ones(3, np.bool_), 1, np.int64),
    (np.ones(3, np.float16), 0.1, np.float16),
    (np.ones(3, np.int64), np.ones(3, np.float16), np.float16),
    (np.ones(3, np.int32), np.array(1, np.int64), np.int32),        # 0-dim, same category
    (np.ones(3, np.int32), np.array(1.5, np.float64), np.float64),  # 0-dim, higher category
    (np.ones(3, np.float32), np.array(1.5, np.float64), np.float32),
    (np.array(1, np.int32), 2.0, np.float32),
    (np.ones(3, np.uint8), np.ones(3, np.int8), np.int16),
])
def test_result_type_matches_torch(a, b, dtype):
    expected = torch.result_type(to_torch(a) if isinstance(a, np.ndarray) else a,
                                 to_torch(b) if isinstance(b, np.ndarray) else b)
    assert str(expected).replace("torch.", "") == np.dtype(dtype).name
    assert result_type(a, b) == np.dtype(dtype)
    assert ours("add", a, b).dtype == np.dtype(dtype)


def test_integer_true_division_gives_float32():
    got = ours("div", np.array([1, 2, 3]), 2)
    assert got.dtype == np.float32 and got.tolist() == [0.5, 1.0, 1.5]


def test_uint8_arithmetic_wraps_like_torch():
    assert_matches_torch("sub", np.array([7], np.uint8), 10)


# --------------------------------------------------------------------------- casts


@pytest.mark.parametrize("name, dtype", [("torch.float", torch.float), ("torch.long", torch.long),
                                          ("torch.bool", torch.bool)])
def test_casts_of_arrays_match_tensor_to(name, dtype):
    x = np.array([-2.7, -0.5, 0.0, 0.3, 2.5, 7.9], np.float32)
    torch.testing.assert_close(torch.from_numpy(ours(name, x)), torch.from_numpy(x).to(dtype))
    i = np.array([-3, 0, 5], np.int64)
    torch.testing.assert_close(torch.from_numpy(ours(name, i)), torch.from_numpy(i).to(dtype))


@pytest.mark.parametrize("value, expected", [(2.7, 2), (-2.7, -2), (5, 5), (True, 1),
                                             (np.array(3.9, np.float32), 3), (np.array([6]), 6)])
def test_int_truncates_toward_zero_to_a_python_int(value, expected):
    got = ours("int", value)
    assert got == expected and type(got) is int


def test_casts_of_python_numbers():
    assert ours("torch.long", -3.7) == -3 and type(ours("torch.long", -3.7)) is int
    assert ours("torch.float", 3) == 3.0 and type(ours("torch.float", 3)) is float
    assert ours("torch.bool", 0) is False and ours("torch.bool", 0.5) is True


@pytest.mark.parametrize("value", [np.ones(3), float("nan"), float("inf"), [1, 2]])
def test_int_refuses_what_python_int_refuses(value):
    with pytest.raises(ExpressionError):
        ours("int", value)


# --------------------------------------------------------------------------- shapes


def test_size_one_dimension_and_the_whole_shape():
    x = np.zeros((2, 3, 8, 5), np.float32)
    assert compile_expression("size(@0,2)").evaluate([x]) == 8
    assert compile_expression("size(@0,-1)").evaluate([x]) == 5
    assert compile_expression("size(@0)").evaluate([x]) == [2, 3, 8, 5]
    assert type(compile_expression("size(@0,0)").evaluate([x])) is int


def test_shape_lists_for_reshape():
    x = np.zeros((2, 3, 8, 16), np.float32)
    assert compile_expression("[size(@0,0),-1,16]").evaluate([x]) == [2, -1, 16]
    value = compile_expression("[int(div(size(@0,2),2)),mul(size(@0,1),size(@0,3)),-1]").evaluate([x])
    assert value == [4, 48, -1] and all(type(v) is int for v in value)
    assert x.reshape(compile_expression("[size(@0,0),-1,16]").evaluate([x])).shape == (2, 24, 16)


def test_list_literals_keep_floats_bools_and_none_and_unwrap_zero_dim_arrays():
    assert compile_expression("[1.5,True,None,[]]").evaluate([]) == [1.5, True, None, []]
    got = compile_expression("[@0,2]").evaluate([np.array(3, np.int64)])
    assert got == [3, 2] and type(got[0]) is int


@pytest.mark.parametrize("text, words", [
    ("size(@0,4)", "out of range"), ("size(@0,-5)", "out of range"), ("size(@0,1.0)", "integer dimension"),
    ("size(2,0)", "needs an array"), ("size(@0,True)", "integer dimension"),
])
def test_size_errors(text, words):
    with pytest.raises(ExpressionError, match=words):
        compile_expression(text).evaluate([np.zeros((1, 2, 3, 4))])


# --------------------------------------------------------------------------- Python numbers


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "floor_divide", "remainder",
                                  "and", "or", "xor", "lshift", "rshift"])
@pytest.mark.parametrize("a, b", [(7, 2), (-7, 2), (7, -2), (-7, -3), (12, 5)])
def test_python_ints_follow_the_generated_python_operators(name, a, b):
    try:
        expected = OPERATORS[name](a, b)
    except ValueError:  # Python refuses negative shift counts
        with pytest.raises(ExpressionError, match="negative"):
            ours(name, a, b)
        return
    got = ours(name, a, b)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("a, b", [(7.5, 2), (-7.5, 2.0), (3, -0.5)])
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "floor_divide", "remainder"])
def test_python_floats_follow_python(name, a, b):
    got = ours(name, a, b)
    assert got == OPERATORS[name](a, b) and type(got) is float


@pytest.mark.parametrize("name", ["div", "floor_divide", "remainder"])
def test_python_division_by_zero_is_an_error(name):
    with pytest.raises(ExpressionError, match="by zero"):
        ours(name, 3, 0)


@pytest.mark.parametrize("name", sorted(set(UNARY) - {"ceil", "floor", "round", "trunc"}))
def test_unary_on_python_numbers_gives_python_numbers_like_torch_in_double(name):
    value = {"acosh": 1.5, "acos": 0.25, "asin": 0.25, "atanh": 0.25}.get(name, 2.25)
    got = ours(name, value)
    expected = UNARY[name](torch.tensor(value, dtype=torch.float64)).item()
    assert type(got) is float and got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name, value, expected", [
    ("floor", -2.5, -3), ("ceil", -2.5, -2), ("trunc", -2.5, -2), ("round", 2.5, 2), ("round", 3.5, 4),
    ("floor", 7, 7), ("abs", -3, 3), ("neg", 4, -4), ("square", -3, 9), ("sign", -4, -1), ("sign", 0.0, 0.0),
])
def test_dtype_preserving_unary_on_python_numbers(name, value, expected):
    got = ours(name, value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("name, a, b, expected", [
    ("pow", 2, 10, 1024), ("pow", 2.0, -1, 0.5), ("pow", -8.0, 1 / 3, math.nan), ("fmod", -7, 3, -1),
    ("fmod", 7.5, -2.0, 1.5), ("max", 3, 2.5, 3.0), ("min", 2, 5, 2), ("maximum", math.nan, 1.0, math.nan),
    ("atan2", 1, 1, math.pi / 4), ("logaddexp", 0.0, 0.0, math.log(2.0)), ("lshift", 1, 64, 0),
    ("rshift", -8, 70, -1), ("pow", 3, 41, 36472996377170786403 - (1 << 65)),
])
def test_other_functions_on_python_numbers(name, a, b, expected):
    got = ours(name, a, b)
    assert type(got) is type(expected)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected, rel=1e-12)


def test_python_integer_negative_power_is_refused():
    with pytest.raises(ExpressionError, match="negative integer powers"):
        ours("pow", 2, -1)


def test_scalar_shape_arithmetic_stays_python():
    value = compile_expression("floor_divide(mul(size(@0,1),size(@0,2)),3)").evaluate([np.zeros((1, 5, 7))])
    assert value == 11 and type(value) is int


# --------------------------------------------------------------------------- inputs and errors


def test_missing_input_is_named_with_its_index_and_position():
    expression = compile_expression("add(@0,@999)")
    with pytest.raises(ExpressionError) as info:
        expression.evaluate([np.ones(2)])
    assert "@999" in str(info.value) and "only 1 input was given" in str(info.value)
    assert info.value.position == 7


def test_broadcasting_mismatch_is_an_expression_error_with_position():
    with pytest.raises(ExpressionError) as info:
        compile_expression("mul(@0,add(@0,@1))").evaluate([np.ones((2, 3)), np.ones((4,))])
    assert info.value.position == 7 and "add()" in str(info.value)


@pytest.mark.parametrize("value", [None, "text", {"a": 1}, np.array(["a"]), np.zeros(2, "datetime64[s]")])
def test_unsupported_inputs_are_refused(value):
    with pytest.raises(ExpressionError, match="@0"):
        ours("neg", value)


def test_lists_and_none_cannot_take_part_in_arithmetic():
    with pytest.raises(ExpressionError, match="list"):
        ours("add", [1, 2], 1)
    with pytest.raises(ExpressionError, match="None"):
        compile_expression("add(@0,None)").evaluate([np.ones(2)])


def test_numpy_scalars_and_tuples_are_accepted():
    got = ours("add", np.float32(1.5), np.ones(2, np.float32))
    assert got.dtype == np.float32 and got.tolist() == [2.5, 2.5]
    assert compile_expression("@0").evaluate([(1, 2)]) == [1, 2]
    assert ours("add", torch.ones(2), 1).tolist() == [2.0, 2.0]  # anything with __array__


def test_inputs_are_not_modified():
    x = np.array([1.5, -2.5], np.float32)
    before = x.copy()
    for name in sorted(UNARY) + ["torch.long", "torch.float"]:
        ours(name, x)
    np.testing.assert_array_equal(x, before)


def test_hand_built_malformed_programs_are_refused():
    program = to_reverse_polish(parse("add(@0,@1)"))
    with pytest.raises(ExpressionError, match="malformed"):
        evaluate(program[:2], [1, 2])
    with pytest.raises(ExpressionError, match="malformed"):
        evaluate(program[1:], [1, 2])


def test_no_numpy_warnings_escape(recwarn):
    ours("div", np.array([1.0, 0.0], np.float32), 0.0)
    ours("log", np.array([-1.0], np.float32))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# --------------------------------------------------------------------------- random trees


# Continuous functions only: NumPy's and torch's float32 sin/tanh/... may differ in the
# last bit, and exp(exp(.)) or remainder(1e5 x, tanh(x)) would turn that into a visible
# difference. The discontinuous ones are tested exactly above. Compositions can still be
# ill-conditioned (sin(tanh(x) / (1e-5 x)) takes the sine of ~1e5, where one float32 ulp
# is 0.008): the comparison skips the elements where torch's own float32 result is not
# within tolerance of its float64 one, or where the float64 result moves beyond it when
# the inputs move by 1e-6 of themselves (a few float32 roundings: torch's float32 can
# land near the float64 value by luck where NumPy's does not).
RANDOM_UNARY = ["abs", "neg", "tanh", "sin", "sqrt", "square", "erf", "atan"]
RANDOM_BINARY = ["add", "sub", "mul", "div", "maximum", "min", "atan2"]
LITERALS = ["0.5", "-2.0", "3", "1.000000e-5", "-1"]


def _random_tree(draw, depth):
    """A random pnnx-style expression; every sub-expression involves an input (a tensor)."""
    if depth == 0:
        return draw(st.sampled_from(["@0", "@1", "@2"]))
    shape = draw(st.sampled_from(["input", "unary", "binary", "left literal", "right literal"]))
    if shape == "input":
        return draw(st.sampled_from(["@0", "@1", "@2"]))
    if shape == "unary":
        return f"{draw(st.sampled_from(RANDOM_UNARY))}({_random_tree(draw, depth - 1)})"
    name = draw(st.sampled_from(RANDOM_BINARY))
    a = _random_tree(draw, depth - 1)
    b = draw(st.sampled_from(LITERALS)) if shape != "binary" else _random_tree(draw, depth - 1)
    return f"{name}({b},{a})" if shape == "left literal" else f"{name}({a},{b})"


@st.composite
def expressions(draw):
    return _random_tree(draw, 4)


def _torch_eval(text, inputs):
    """An independent interpreter: Python's own parser on the pnnx text, torch underneath."""
    functions = {name: (lambda n: lambda *args: torch_reference(n, *args))(name)
                 for name in RANDOM_UNARY + RANDOM_BINARY}
    variables = {f"v{i}": tensor for i, tensor in enumerate(inputs)}
    return eval(text.replace("@", "v"), {"__builtins__": {}}, {**functions, **variables})


@settings(max_examples=200, deadline=None)
@given(expressions())
def test_random_float32_expressions_match_torch(text):
    rng = np.random.default_rng(len(text))
    inputs = [(rng.standard_normal(shape) * 3).astype(np.float32)
              for shape in ((2, 3, 4), (1, 3, 1), (4,))]
    expected = _torch_eval(text, [torch.from_numpy(x) for x in inputs])
    exact = _torch_eval(text, [torch.from_numpy(x.astype(np.float64)) for x in inputs])
    got = compile_expression(text).evaluate(inputs)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == tuple(expected.shape)
    conditioned = torch.isclose(expected.double(), exact, rtol=1e-4, atol=1e-4, equal_nan=True)
    for nudge in (1 - 1e-6, 1 + 1e-6):
        moved = _torch_eval(text, [torch.from_numpy(x.astype(np.float64) * nudge) for x in inputs])
        conditioned &= torch.isclose(moved, exact, rtol=1e-4, atol=1e-4, equal_nan=True)
    torch.testing.assert_close(torch.from_numpy(got)[conditioned], expected[conditioned],
                               rtol=1e-4, atol=1e-4, equal_nan=True)


# --------------------------------------------------------------------------- complex values


def complex_operand(rng, shape=(2, 3, 4), scale=2.0):
    return ((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * scale).astype(np.complex64)


def torch_or_error(name, *args):
    """torch's result, or None where torch refuses complex operands."""
    try:
        return torch_reference(name, *args)
    except (RuntimeError, TypeError):
        return None


def assert_complex_case(name, *args, rtol=1e-5, atol=1e-5):
    """Ours matches torch (values and dtype) where torch computes, and refuses where torch does."""
    expected = torch_or_error(name, *args)
    if expected is None:
        with pytest.raises(ExpressionError, match="complex"):
            ours(name, *args)
        return
    got = ours(name, *args)
    if not isinstance(expected, torch.Tensor):  # Python numbers in, Python number out
        assert type(got) is type(expected) and got == pytest.approx(expected)
        return
    assert isinstance(got, np.ndarray) and got.dtype == np.dtype(str(expected.dtype).replace("torch.", ""))
    torch.testing.assert_close(torch.from_numpy(np.array(got)), expected.resolve_conj(), rtol=rtol,
                               atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_on_complex64_matches_torch_or_is_refused_like_torch(name, rng):
    # abs gives float32; erf, sign and the rounding functions refuse complex as torch does
    z = complex_operand(rng, scale=0.7)
    assert_complex_case(name, z)
    assert_complex_case(name, z.astype(np.complex128))


def test_which_functions_refuse_complex():
    z = np.array([1 + 2j], np.complex64)
    refused = {name for name in UNARY if name not in ("abs", "neg") and torch_or_error(name, z) is None}
    assert refused == {"ceil", "erf", "floor", "round", "sign", "trunc"}
    for name in sorted(refused):
        with pytest.raises(ExpressionError, match=f"{name}\\(\\) is not defined for complex operands"):
            ours(name, z)


@pytest.mark.parametrize("name", [name for name in FLOAT_BINARY + BITWISE if name != "logaddexp"])
def test_binary_with_complex_operands_matches_torch_or_is_refused(name, rng):
    z, w = complex_operand(rng), complex_operand(rng, (1, 3, 1))
    x = (rng.standard_normal((2, 3, 4)) * 2).astype(np.float32)
    for args in ((z, w), (w, z), (z, x), (x, z), (z, 1.5 - 0.5j), (2.0 + 1.0j, z), (x, 0.5 + 2.0j),
                 (z, 3), (z, 2.5)):
        assert_complex_case(name, *args, rtol=1e-4, atol=1e-4)


def test_logaddexp_of_complex_is_refused_although_torch_has_it():
    with pytest.raises(ExpressionError, match="logaddexp\\(\\) of complex operands is not supported"):
        ours("logaddexp", np.ones(2, np.complex64), np.ones(2, np.complex64))


@pytest.mark.parametrize("a, b, dtype", [
    (np.ones(3, np.float32), 1j, np.complex64),              # Python complex: complex64
    (np.ones(3, np.float64), 1j, np.complex128),             # ... keeping a float64 tensor's precision
    (np.ones(3, np.int64), 1j, np.complex64),
    (np.ones(3, np.bool_), 2 + 1j, np.complex64),
    (np.ones(3, np.complex64), 2.5, np.complex64),
    (np.ones(3, np.complex64), np.ones(3, np.float64), np.complex128),   # same group: wider
    (np.ones(3, np.complex64), np.ones(3, np.complex128), np.complex128),
    (np.ones(3, np.float32), np.array(1j, np.complex128), np.complex64),  # 0-dim complex
    (np.ones(3, np.int32), np.array(1j, np.complex128), np.complex128),
    (np.ones(3, np.complex64), np.array(1.5, np.float64), np.complex64),
    (np.array(1j, np.complex64), 2.0, np.complex64),
])
def test_result_type_with_complex_matches_torch(a, b, dtype):
    expected = torch.result_type(to_torch(a) if isinstance(a, np.ndarray) else a,
                                 to_torch(b) if isinstance(b, np.ndarray) else b)
    assert str(expected).replace("torch.", "") == np.dtype(dtype).name
    assert result_type(a, b) == np.dtype(dtype)
    assert ours("add", a, b).dtype == np.dtype(dtype)


@pytest.mark.parametrize("name, dtype", [("torch.float", torch.float), ("torch.long", torch.long),
                                          ("torch.bool", torch.bool)])
def test_casts_of_complex_arrays_keep_the_real_part_like_tensor_to(name, dtype):
    z = np.array([2.7 - 1j, -0.5 + 3j, 0j, 1j, -7.9 + 0j], np.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns (once) that the imaginary part is discarded
        expected = torch.from_numpy(z).to(dtype)
    torch.testing.assert_close(torch.from_numpy(ours(name, z)), expected)


def test_complex_python_numbers():
    assert ours("mul", 1 + 2j, 3) == 3 + 6j and type(ours("mul", 1 + 2j, 3)) is complex
    assert ours("abs", 3 + 4j) == 5.0 and type(ours("abs", 3 + 4j)) is float
    assert ours("exp", 1j) == pytest.approx(complex(math.cos(1), math.sin(1)))
    assert ours("pow", 1j, 2) == pytest.approx(-1)
    assert ours("torch.float", 2.5 - 1j) == 2.5 and ours("torch.bool", 0j) is False
    for name in ("int", "floor", "max", "and", "lshift"):
        with pytest.raises(ExpressionError):
            ours(name, *([1 + 1j] * FUNCTIONS[name].min_args))


def test_complex_literals_evaluate_as_pnnx_writes_them():
    z = np.array([1 + 1j, -2 + 0.5j], np.complex64)
    got = compile_expression("mul(@0,1.000000e+00-2.000000e+00j)").evaluate([z])
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, z * (1 - 2j), rtol=1e-6)
    real = compile_expression("add(@0,0.000000e+00+1.000000e+00j)").evaluate([np.ones(2, np.float32)])
    assert real.dtype == np.complex64 and real.tolist() == [1 + 1j, 1 + 1j]
    assert compile_expression("-nan+infj").evaluate([]).imag == math.inf
