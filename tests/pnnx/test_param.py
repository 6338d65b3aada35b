"""Parameter values and dtypes: pnnx's parse_from_string rules and its exact formatting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuiperinfer.errors import GraphError, ModelFormatError
from kuiperinfer.pnnx import (
    Attribute,
    Parameter,
    ParamType,
    bf16_to_float32,
    dtype_from_numpy,
    dtype_from_suffix,
    encode_parameter,
    format_float,
    itemsize,
    numpy_dtype,
    parameter_text,
    parse_parameter,
    storage_dtype,
    suffix_of,
)

T = ParamType


def parsed(text):
    p = parse_parameter(text)
    return p.type, p.value


# ---------------------------------------------------------------- parsing, rule by rule

@pytest.mark.parametrize("text", ["None", "()", "[]"])
def test_none_forms(text):
    assert parsed(text) == (T.NONE, None)


def test_bools():
    assert parsed("True") == (T.BOOL, True)
    assert parsed("False") == (T.BOOL, False)


@pytest.mark.parametrize("text,value", [("0", 0), ("1", 1), ("-3", -3), ("2147483647", 2147483647),
                                        ("-2147483648", -2147483648), ("20", 20)])
def test_ints(text, value):
    assert parsed(text) == (T.INT, value)
    assert type(parse_parameter(text).value) is int


@pytest.mark.parametrize("text,value", [("1.000000e-05", 1e-5), ("1.000000e-5", 1e-5), ("0.1", 0.1),
                                        ("-0.5", -0.5), ("2.0", 2.0), ("1e5", 1e5), ("3.", 3.0),
                                        ("1.000000e7", 1e7), ("-1.000000e7", -1e7), ("0.0", 0.0)])
def test_floats(text, value):
    assert parsed(text) == (T.FLOAT, value)


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "nan.0"])
def test_inf_and_nan_words_are_strings_as_in_pnnx(text):
    # rule 5: does not start with a digit or -digit -> string; consumers convert
    assert parsed(text) == (T.STRING, text)


@pytest.mark.parametrize("text", ["zeros", "bilinear", "torch.float", "ij,jk->ik", "...ij->...ji",
                                  "cpu", "-", "same", "add(mul(@0,2),1.5)", ""])
def test_strings(text):
    assert parsed(text) == (T.STRING, text)


@pytest.mark.parametrize("text", ["%abc", "(1,%x)", "[%1,2]", "50%", "1%"])
def test_percent_anywhere_makes_a_string(text):
    assert parsed(text) == (T.STRING, text)


def test_expression_that_looks_like_a_list_keeps_its_text():
    p = parse_parameter("[size(@0,0),-1,16]")
    assert p.type == T.STRING_ARRAY
    assert parameter_text(p) == "[size(@0,0),-1,16]"


def test_int_arrays():
    assert parsed("(1,1)") == (T.INT_ARRAY, [1, 1])
    assert parsed("(2)") == (T.INT_ARRAY, [2])          # one element
    assert parsed("[3,-1,4]") == (T.INT_ARRAY, [3, -1, 4])


def test_float_arrays():
    assert parsed("(2.5,1.5)") == (T.FLOAT_ARRAY, [2.5, 1.5])
    assert parsed("(1.000000e-5)") == (T.FLOAT_ARRAY, [1e-5])


def test_mixed_int_and_float_list_is_a_float_array():
    assert parsed("(1,2.5)") == (T.FLOAT_ARRAY, [1.0, 2.5])


def test_string_arrays():
    assert parsed("(a,b)") == (T.STRING_ARRAY, ["a", "b"])
    assert parsed("(zeros)") == (T.STRING_ARRAY, ["zeros"])
    assert parsed("(inf,1.0)") == (T.STRING_ARRAY, ["inf", "1.0"])  # raw elements kept


def test_empty_list_elements_follow_pnnx_getline():
    assert parsed("(1,2,)") == (T.STRING_ARRAY, ["1", "2", ""])


def test_complex_scalar_in_pnnx_writer_form():
    p = parse_parameter("1.000000e+00+2.000000e+00j")
    assert (p.type, p.value) == (T.COMPLEX, 1 + 2j)
    assert parsed("1.0+-2.5j") == (T.COMPLEX, 1 - 2.5j)
    assert parsed("1.0-2.5j") == (T.COMPLEX, 1 - 2.5j)


def test_complex_array():
    assert parsed("(1.0+2.0j,0.0+-1.0j)") == (T.COMPLEX_ARRAY, [1 + 2j, -1j])
    assert parsed("(1.0+2.0j,3)") == (T.COMPLEX_ARRAY, [1 + 2j, 3 + 0j])


@pytest.mark.parametrize("text", ["3x", "1.5.2", "0x10", "1e", "2j", "12abc"])
def test_malformed_numbers_stay_strings_instead_of_a_prefix(text):
    # pnnx's stoi/stof would silently read a prefix; we keep the whole text
    assert parsed(text) == (T.STRING, text)


def test_parse_keeps_text_and_round_trips():
    for text in ["1.000000e-05", "(1,1)", "0.30000001", "1e5", "nan.0", "[]", "007"]:
        p = parse_parameter(text)
        assert p.text == text and parameter_text(p) == text


def test_parameter_is_immutable():
    p = parse_parameter("3")
    with pytest.raises(AttributeError):
        p.value = 4  # type: ignore[misc]


# ---------------------------------------------------------------- building and encoding

@pytest.mark.parametrize("value,ptype,text", [
    (None, T.NONE, "None"), (True, T.BOOL, "True"), (False, T.BOOL, "False"),
    (7, T.INT, "7"), (-1, T.INT, "-1"), (1e-5, T.FLOAT, "1.000000e-5"), (0.25, T.FLOAT, "0.25"),
    ("zeros", T.STRING, "zeros"), ([1, 2], T.INT_ARRAY, "(1,2)"), ([3], T.INT_ARRAY, "(3)"),
    ([0.5, 2.0], T.FLOAT_ARRAY, "(0.5,2.0)"), (["a", "b"], T.STRING_ARRAY, "(a,b)"),
    (1 + 2j, T.COMPLEX, "1.000000e+00+2.000000e+00j"),
    (1 - 2j, T.COMPLEX, "1.000000e+00+-2.000000e+00j"),
    ([1j, 2], T.COMPLEX_ARRAY, "(0.000000e+00+1.000000e+00j,2.000000e+00+0.000000e+00j)"),
])
def test_encode_builds_what_pnnx_writes(value, ptype, text):
    p = Parameter(value)
    assert p.type == ptype
    assert p.text is None
    assert encode_parameter(p) == text
    assert parameter_text(p) == text
    assert parse_parameter(text) == p


def test_explicit_type_widens_ints():
    assert Parameter([1, 2], type=T.FLOAT_ARRAY).value == [1.0, 2.0]
    assert encode_parameter(Parameter(1, type=T.FLOAT)) == "1.0"


def test_empty_int_array_writes_parens_that_read_back_as_none():
    assert encode_parameter(Parameter([])) == "()"
    assert parse_parameter("()").type == T.NONE


@pytest.mark.parametrize("value,ptype", [("x", T.INT), (True, T.INT), ([1, "a"], T.INT_ARRAY),
                                         (3, T.NONE), (1.5, T.BOOL)])
def test_wrong_value_for_type_is_a_graph_error(value, ptype):
    with pytest.raises(GraphError):
        Parameter(value, type=ptype)


def test_unrepresentable_value_is_a_graph_error():
    with pytest.raises(GraphError):
        Parameter({"a": 1})


# ---------------------------------------------------------------- float formatting

# What the pnnx 20261020 build wrote for F.leaky_relu(negative_slope=<value>)
PNNX_WROTE = [
    (0.1, "0.1"), (0.123456789, "0.123456791"), (1 / 3, "0.333333343"), (1e-4, "0.0001"),
    (9.99e-5, "9.990000e-5"), (0.000123456, "0.000123456"), (1e6, "1.000000e6"),
    (999999.9, "999999.875"), (123456.789, "123456.789"), (3e38, "3.000000e38"), (-0.5, "-0.5"),
    (2.0, "2.0"), (100.0, "100.0"), (1e5, "100000.0"), (12345678, "1.23456780e7"),
    (float("nan"), "nan.0"), (float("-inf"), "-inf"), (float("inf"), "inf"), (0.2, "0.2"),
    (0.30000001, "0.3"), (1234567.0, "1.234567e6"), (1e-10, "1.000000e-10"),
    (-1e-30, "-1.000000e-30"), (1e20, "1.000000e20"), (1.17549435e-38, "1.17549435e-38"),
    (1e-5, "1.000000e-5"), (1e-7, "1.000000e-7"), (-1e7, "-1.000000e7"), (0.0, "0.0"),
    (-0.0, "0.0"), (0.038267407566308975, "3.82674076e-2"), (-0.06428562104701996, "-0.064285621"),
    (0.0007894317386671901, "7.89431739e-4"), (0.00010000001202570274, "1.00000012e-4"),
    (0.2663199007511139, "0.266319901"), (-84583.2421875, "-84583.2422"),
]


@pytest.mark.parametrize("value,text", PNNX_WROTE)
def test_format_float_matches_pnnx(value, text):
    assert format_float(value) == text


@pytest.mark.parametrize("value,text", [v for v in PNNX_WROTE if not math.isnan(v[0])])
def test_pnnx_float_text_encodes_back_to_itself(value, text):
    p = parse_parameter(text)
    if p.type == T.FLOAT:
        assert encode_parameter(p) == text


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_format_float_reads_back_to_the_same_float32(x):
    text = format_float(x)
    assert np.float32(float(text)) == np.float32(x)
    assert parse_parameter(text).type == T.FLOAT


@given(st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=float(np.float32(0.1)),
                 max_value=9e5))
def test_floats_from_a_tenth_to_a_million_never_use_an_exponent(x):
    assert "e" not in format_float(x)


# ---------------------------------------------------------------- data types

@pytest.mark.parametrize("suffix,code,size,dtype", [
    ("null", 0, 0, None), ("f32", 1, 4, np.float32), ("f64", 2, 8, np.float64),
    ("f16", 3, 2, np.float16), ("i32", 4, 4, np.int32), ("i64", 5, 8, np.int64),
    ("i16", 6, 2, np.int16), ("i8", 7, 1, np.int8), ("u8", 8, 1, np.uint8), ("bool", 9, 1, np.bool_),
    ("c64", 10, 8, np.complex64), ("c128", 11, 16, np.complex128), ("c32", 12, 4, None),
    ("bf16", 13, 2, None),
])
def test_dtype_table(suffix, code, size, dtype):
    assert dtype_from_suffix(suffix) == code
    assert suffix_of(code) == suffix
    assert itemsize(code) == size
    assert numpy_dtype(code) == (None if dtype is None else np.dtype(dtype))
    if code:
        assert storage_dtype(code).itemsize == size


def test_unknown_suffix_and_code():
    with pytest.raises(ModelFormatError, match="f8"):
        dtype_from_suffix("f8")
    assert suffix_of(99) == "null"
    assert itemsize(99) == 0
    assert numpy_dtype(99) is None


def test_dtype_from_numpy():
    assert dtype_from_numpy(np.float32) == 1
    assert dtype_from_numpy(np.dtype(">f4")) == 1
    assert dtype_from_numpy(np.bool_) == 9
    assert dtype_from_numpy(np.uint16) == 0


# ---------------------------------------------------------------- attributes

def test_attribute_from_numpy_and_back():
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a = Attribute.from_numpy(w)
    assert (a.type, a.shape, a.elemcount(), a.nbytes()) == (1, [2, 3, 4], 24, 96)
    view = a.numpy()
    np.testing.assert_array_equal(view, w)
    assert view.dtype == np.float32 and not view.flags.writeable


def test_zero_dim_array_is_stored_with_shape_one_as_pnnx():
    a = Attribute.from_numpy(np.float64(2.5))
    assert a.shape == [1] and a.type == 2
    assert a.numpy().tolist() == [2.5]


def test_attribute_numpy_is_a_zero_copy_view_even_unaligned():
    w = np.array([1.5, -2.25, 3.0], dtype=np.float32)
    backing = bytearray(1) + bytearray(w.tobytes())
    a = Attribute(1, [3], memoryview(backing)[1:])     # data starts at an odd address
    arr = a.numpy()
    assert not arr.flags.aligned
    np.testing.assert_array_equal(arr, w)
    backing[1:5] = np.float32(9.0).tobytes()            # a view, not a copy
    assert arr[0] == 9.0


def test_big_endian_input_is_stored_little_endian():
    a = Attribute.from_numpy(np.array([1, 2], dtype=">i4"))
    assert bytes(a.data) == b"\x01\0\0\0\x02\0\0\0"


def test_bf16_decodes_to_float32():
    values = np.array([1.0, -2.5, 3.140625], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    a = Attribute.from_numpy(bits, type=13)
    assert a.raw_numpy().dtype == np.uint16
    np.testing.assert_array_equal(a.numpy(), values)
    np.testing.assert_array_equal(bf16_to_float32(bits), values)


def test_c32_decodes_to_complex64():
    pair = np.zeros(2, dtype=storage_dtype(12))
    pair["real"] = [1.0, 0.5]
    pair["imag"] = [-2.0, 4.0]
    a = Attribute.from_numpy(pair)
    assert a.type == 12 and a.nbytes() == 8
    np.testing.assert_array_equal(a.numpy(), np.array([1 - 2j, 0.5 + 4j], dtype=np.complex64))


def test_attribute_data_size_is_checked():
    with pytest.raises(GraphError, match="needs 8 bytes"):
        Attribute(1, [2], b"\0" * 7)


def test_empty_shape_holds_nothing():
    a = Attribute(1, [], b"")
    assert a.elemcount() == 0 and a.nbytes() == 0 and a.numpy().size == 0


def test_attribute_equality_compares_type_shape_and_bytes():
    a = Attribute.from_numpy(np.ones(3, np.float32))
    assert a == Attribute(1, [3], memoryview(np.ones(3, np.float32).tobytes()))
    assert a != Attribute.from_numpy(np.zeros(3, np.float32))
    assert a != Attribute.from_numpy(np.ones((1, 3), np.float32))


def test_unknown_type_code_is_a_graph_error():
    with pytest.raises(GraphError, match="no parameter type 8"):
        Parameter(1, type=8)


def test_array_values_are_copies_so_text_and_value_stay_in_step():
    p = parse_parameter("(1,2)")
    p.value.append(3)
    assert p.value == [1, 2] and parameter_text(p) == "(1,2)"
