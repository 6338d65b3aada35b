"""Step 4: run a reverse-Polish program with an explicit stack (KuiperInfer's stack evaluation).

    for each instruction:  INPUT/CONST -> push;  CALL f/n -> pop n, push f(*args);
                           LIST n -> pop n, push them as a list
    at the end exactly one value is left: the result.

Values on the stack are NumPy arrays, Python numbers (``bool``/``int``/``float``/
``complex``), Python lists (shapes) or ``None``.

Semantics follow what ``<model>_pnnx.py`` -- the PyTorch program pnnx writes beside
every export -- does with the expression:

* Arrays behave like torch tensors: NumPy broadcasting, PyTorch's type promotion
  (:mod:`.promotion`; float32 stays float32, ``int / int`` gives float32), and
  torch's integer rules (integer division by zero is an error, shifts past the
  width give 0 or the sign, negative integer powers are refused).
* When every operand is a Python number (shape arithmetic on ``size()`` results)
  the result stays a Python number. ``div``/``floor_divide``/``remainder`` and the
  bitwise functions are the Python operators ``/ // % & | ^`` there, exactly as in
  the generated code (so dividing by zero is an error); the other functions give
  what torch gives for a 0-dim tensor, in double precision; ``ceil``/``floor``/
  ``round``/``trunc`` and ``int``/``torch.long`` give ``int`` (as pnnx's own constant
  folding and Python's ``math.floor`` do); ``pow`` and ``<<`` wrap like int64 rather
  than growing without bound.
* Complex arrays (complex64, complex128 where torch would) and complex literals take
  part where torch accepts them: arithmetic, ``pow``, ``abs`` (a real result), ``neg``,
  ``square`` and the floating functions but ``erf``; the casts keep the real part
  (``torch.bool``: nonzero). The rest (rounding, ``sign``, ``max``/``min``, ``fmod``,
  ``remainder``, ``floor_divide``, ``atan2``, ``logaddexp``, the bitwise functions) refuse
  them, as torch does (torch has a complex ``logaddexp``; it is refused here).

:data:`IMPLEMENTATIONS` maps every name of :data:`functions.FUNCTIONS` to its
implementation; nothing else is callable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import ExpressionError
from kuiperinfer.expression import promotion
from kuiperinfer.expression.functions import FUNCTIONS
from kuiperinfer.expression.promotion import DEFAULT_FLOAT, DEFAULT_INT, result_type
from kuiperinfer.expression.reverse_polish import Instruction, OpCode
from kuiperinfer.kernels.special import erf as _erf_array

Scalar = bool | int | float | complex
Value = np.ndarray | bool | int | float | complex | list | None

_INT64_MIN = -(1 << 63)


class _Failure(Exception):
    """Raised inside an implementation; the evaluator adds the expression and position."""


# --------------------------------------------------------------------------- values


def _is_scalar(value: Any) -> bool:
    """A Python number (never a NumPy scalar: those are turned into 0-dim arrays)."""
    return type(value) in (bool, int, float, complex)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    if value is None:
        return "None"
    return f"a {type(value).__name__}"


def _check_operands(name: str, args: Sequence[Any]) -> bool:
    """Check every operand is an array or a number; return True if all are Python numbers."""
    for value in args:
        if not (isinstance(value, np.ndarray) or _is_scalar(value)):
            raise _Failure(f"{name}() cannot take {_describe(value)}")
    return all(_is_scalar(value) for value in args)


def _as_array(value: Any, dtype: np.dtype) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value.astype(dtype, copy=False)
    return np.asarray(value, dtype=dtype)


def _to_int64(value: int) -> int:
    """Wrap a Python int into the int64 range, as a torch int64 tensor would."""
    return (value - _INT64_MIN) % (1 << 64) + _INT64_MIN


def _scalar_kind(*values: Scalar) -> type:
    """The Python type torch's promotion gives a mix of Python numbers."""
    if any(type(v) is complex for v in values):
        return complex
    if any(type(v) is float for v in values):
        return float
    if any(type(v) is int for v in values):
        return int
    return bool


def _is_complex(value: Any) -> bool:
    """A complex array or a Python complex."""
    return type(value) is complex or (isinstance(value, np.ndarray) and promotion.is_complex(value.dtype))


def _no_complex(name: str, *values: Any) -> None:
    if any(_is_complex(value) for value in values):
        raise _Failure(f"{name}() is not defined for complex operands (as in torch)")


def _round_to_int(name: str, value: float, rounder: Callable[[float], Any]) -> int:
    if math.isnan(value) or math.isinf(value):
        raise _Failure(f"{name}() cannot turn {value} into an integer")
    return int(rounder(value))


# --------------------------------------------------------------------------- unary


def _floating_input(x: np.ndarray) -> np.ndarray:
    """Integer and bool arrays are computed as float32, as torch does for sqrt, sin, ...;
    floating and complex arrays as they are."""
    if promotion.is_inexact(x.dtype):
        return x
    return x.astype(DEFAULT_FLOAT)


def _make_float_unary(name: str, array_fn: Callable[[np.ndarray], np.ndarray],
                      complex_ok: bool = True) -> Callable[[Any], Value]:
    """A function with a floating (or, of complex operands, complex) result: acos, exp, log, sqrt, ..."""

    def apply(x: Any) -> Value:
        if not complex_ok:
            _no_complex(name, x)
        if _check_operands(name, (x,)):
            if type(x) is complex:
                return complex(array_fn(np.asarray(x, dtype=np.complex128)))
            return float(array_fn(np.asarray(float(x), dtype=np.float64)))
        return np.asarray(array_fn(_floating_input(x)))

    apply.__name__ = f"{name}_impl"
    return apply


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(np.sqrt(x))


def _abs(x: Any) -> Value:
    if _check_operands("abs", (x,)):
        return abs(x)
    if x.dtype == promotion.BOOL:
        raise _Failure("abs() is not defined for bool arrays (as in torch)")
    return np.asarray(np.abs(x))


def _neg(x: Any) -> Value:
    if _check_operands("neg", (x,)):
        return -x
    if x.dtype == promotion.BOOL:
        raise _Failure("neg() is not defined for bool arrays (as in torch); use xor with True")
    return np.asarray(np.negative(x))


def _sign(x: Any) -> Value:
    _no_complex("sign", x)  # torch: use sgn for complex numbers
    if _check_operands("sign", (x,)):
        if type(x) is float:
            return 0.0 if math.isnan(x) else float((x > 0) - (x < 0))
        if type(x) is bool:
            return x
        return (x > 0) - (x < 0)
    if x.dtype == promotion.BOOL:
        return x.copy()
    result = np.asarray(np.sign(x))
    if promotion.is_floating(x.dtype):
        result = np.where(np.isnan(x), np.zeros((), x.dtype), result)  # torch.sign(nan) is 0
    return result


def _square(x: Any) -> Value:
    if _check_operands("square", (x,)):
        return x * x
    if x.dtype == promotion.BOOL:
        x = x.astype(DEFAULT_INT)
    return np.asarray(np.square(x))


def _make_rounding(name: str, array_fn: Callable[[np.ndarray], np.ndarray],
                   python_fn: Callable[[float], Any]) -> Callable[[Any], Value]:
    """ceil/floor/round/trunc: dtype-preserving on arrays, ``int`` on Python numbers."""

    def apply(x: Any) -> Value:
        _no_complex(name, x)
        if _check_operands(name, (x,)):
            if type(x) is float:
                return _round_to_int(name, x, python_fn)
            return int(x)
        if promotion.is_floating(x.dtype):
            return np.asarray(array_fn(x))
        return x.copy()  # integers are already whole

    apply.__name__ = f"{name}_impl"
    return apply


# --------------------------------------------------------------------------- casts


def _int(x: Any) -> Value:
    """``int(x)`` (aten::Int): a Python int, rounding toward zero, of a number or 1-element array."""
    if isinstance(x, np.ndarray):
        if x.size != 1:
            raise _Failure(f"int() needs a single number but got {_describe(x)}")
        x = x.reshape(-1)[0].item()
    if not _is_scalar(x) or type(x) is complex:
        raise _Failure(f"int() cannot take {_describe(x)}")
    if type(x) is float:
        return _round_to_int("int", x, math.trunc)
    return int(x)


def _to_long(x: Any) -> Value:
    """``Tensor.to(torch.long)``: rounds toward zero; a complex keeps its real part (torch warns)."""
    if _check_operands("torch.long", (x,)):
        return _int(x.real if type(x) is complex else x)
    return np.real(x).astype(np.int64)


def _to_float(x: Any) -> Value:
    if _check_operands("torch.float", (x,)):
        return float(x.real if type(x) is complex else x)
    return np.real(x).astype(np.float32)


def _to_bool(x: Any) -> Value:
    if _check_operands("torch.bool", (x,)):
        return bool(x)
    return x.astype(np.bool_)  # a complex is True where it is nonzero


# --------------------------------------------------------------------------- binary


def _arrays(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    """Both operands as arrays of their torch result dtype."""
    dtype = result_type(a, b)
    return _as_array(a, dtype), _as_array(b, dtype), dtype


def _no_bool(name: str, dtype: np.dtype) -> None:
    if dtype == promotion.BOOL:
        raise _Failure(f"{name}() is not defined for bool operands (as in torch)")


def _no_zero_divisor(name: str, dtype: np.dtype, divisor: np.ndarray) -> None:
    if promotion.is_integer(dtype) and not np.all(divisor):
        raise _Failure(f"{name}() of integers by zero (torch raises ZeroDivisionError)")


def _make_arithmetic(name: str, python_op: Callable[[Any, Any], Any],
                     array_op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Any, Any], Value]:
    """add, sub, mul: Python operators on numbers, promoted NumPy ufuncs on arrays."""

    def apply(a: Any, b: Any) -> Value:
        if _check_operands(name, (a, b)):
            return python_op(a, b)
        if name == "sub" and promotion.BOOL in (result_type(a), result_type(b)):
            raise _Failure("sub() with a bool operand is not defined (as in torch)")
        x, y, _ = _arrays(a, b)
        return np.asarray(array_op(x, y))

    apply.__name__ = f"{name}_impl"
    return apply


def _div(a: Any, b: Any) -> Value:
    """True division: ``a / b``; integer arrays give float32.

    ``number / tensor`` is ``Tensor.__rtruediv__``, which torch computes as
    ``tensor.reciprocal() * number``: two roundings, reproduced here bit for bit.
    """
    if _check_operands("div", (a, b)):
        if b == 0:
            raise _Failure("division by zero (Python numbers)")
        return a / b
    if _is_scalar(a):
        reciprocal = np.asarray(np.reciprocal(_floating_input(b)))
        x, y, _ = _arrays(reciprocal, a)
        return np.asarray(np.multiply(x, y))
    dtype = result_type(a, b)
    if not promotion.is_inexact(dtype):
        dtype = DEFAULT_FLOAT
    return np.asarray(np.true_divide(_as_array(a, dtype), _as_array(b, dtype)))


def _floor_divide(a: Any, b: Any) -> Value:
    """``a // b``, rounding toward minus infinity (torch.floor_divide, Python ``//``)."""
    _no_complex("floor_divide", a, b)
    if _check_operands("floor_divide", (a, b)):
        if b == 0:
            raise _Failure("integer division or modulo by zero (Python numbers)")
        return a // b
    x, y, dtype = _arrays(a, b)
    _no_bool("floor_divide", dtype)
    _no_zero_divisor("floor_divide", dtype, y)
    return np.asarray(np.floor_divide(x, y))


def _remainder(a: Any, b: Any) -> Value:
    """``a % b``: the result has the sign of the divisor (Python-style modulo)."""
    _no_complex("remainder", a, b)
    if _check_operands("remainder", (a, b)):
        if b == 0:
            raise _Failure("integer division or modulo by zero (Python numbers)")
        return a % b
    x, y, dtype = _arrays(a, b)
    _no_bool("remainder", dtype)
    _no_zero_divisor("remainder", dtype, y)
    return np.asarray(np.remainder(x, y))


def _fmod(a: Any, b: Any) -> Value:
    """C-style remainder: the result has the sign of the dividend."""
    _no_complex("fmod", a, b)
    if _check_operands("fmod", (a, b)):
        if _scalar_kind(a, b) is float:
            return float(np.fmod(np.float64(a), np.float64(b)))
        if b == 0:
            raise _Failure("fmod() of integers by zero (torch raises ZeroDivisionError)")
        magnitude = abs(int(a)) % abs(int(b))
        return -magnitude if a < 0 else magnitude
    x, y, dtype = _arrays(a, b)
    _no_bool("fmod", dtype)
    _no_zero_divisor("fmod", dtype, y)
    return np.asarray(np.fmod(x, y))


def _pow(a: Any, b: Any) -> Value:
    if _check_operands("pow", (a, b)):
        if _scalar_kind(a, b) is complex:
            return complex(np.power(np.complex128(a), np.complex128(b)))
        if _scalar_kind(a, b) is float:
            return float(np.power(np.float64(a), np.float64(b)))
        if b < 0:
            raise _Failure("integers to negative integer powers are not allowed (as in torch)")
        return _to_int64(pow(int(a), int(b), 1 << 64))
    x, y, dtype = _arrays(a, b)
    if not promotion.is_inexact(dtype) and np.any(y < 0):
        raise _Failure("integers to negative integer powers are not allowed (as in torch)")
    if dtype == promotion.BOOL:
        x, y = x.astype(DEFAULT_INT), y.astype(DEFAULT_INT)
    return np.asarray(np.power(x, y))


def _atan2(a: Any, b: Any) -> Value:
    _no_complex("atan2", a, b)
    if _check_operands("atan2", (a, b)):
        return math.atan2(float(a), float(b))
    dtype = result_type(a, b)
    if not promotion.is_floating(dtype):
        dtype = DEFAULT_FLOAT
    return np.asarray(np.arctan2(_as_array(a, dtype), _as_array(b, dtype)))


def _logaddexp_scalar(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b:  # also equal infinities
        return a + math.log(2.0)
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


def _logaddexp(a: Any, b: Any) -> Value:
    if _is_complex(a) or _is_complex(b):
        raise _Failure("logaddexp() of complex operands is not supported")
    if _check_operands("logaddexp", (a, b)):
        return _logaddexp_scalar(float(a), float(b))
    x, y, dtype = _arrays(a, b)
    if not promotion.is_floating(dtype):
        raise _Failure(f"logaddexp() is not defined for {dtype} operands (as in torch)")
    return np.asarray(np.logaddexp(x, y))


def _make_extremum(name: str, pick: Callable[[Any, Any], Any],
                   array_op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Any, Any], Value]:
    """max/maximum, min/minimum: elementwise, NaN wins (torch.maximum)."""

    def apply(a: Any, b: Any) -> Value:
        _no_complex(name, a, b)
        if _check_operands(name, (a, b)):
            kind = _scalar_kind(a, b)
            if kind is float and (math.isnan(a) or math.isnan(b)):
                return math.nan
            return kind(pick(a, b))
        x, y, _ = _arrays(a, b)
        return np.asarray(array_op(x, y))

    apply.__name__ = f"{name}_impl"
    return apply


def _make_bitwise(name: str, python_op: Callable[[Any, Any], Any],
                  array_op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Any, Any], Value]:
    """and, or, xor: bool and integer operands only."""

    def apply(a: Any, b: Any) -> Value:
        _no_complex(name, a, b)
        if _check_operands(name, (a, b)):
            if float in (type(a), type(b)):
                raise _Failure(f"{name}() is not defined for floating-point numbers")
            return python_op(a, b)
        x, y, dtype = _arrays(a, b)
        if promotion.is_floating(dtype):
            raise _Failure(f"{name}() is not defined for {dtype} operands (as in torch)")
        return np.asarray(array_op(x, y))

    apply.__name__ = f"{name}_impl"
    return apply


def _shift_operands(name: str, a: Any, b: Any) -> tuple[Any, Any, bool]:
    """Check a shift's operands; return them and whether both are Python numbers."""
    _no_complex(name, a, b)
    scalars = _check_operands(name, (a, b))
    if scalars:
        if float in (type(a), type(b)):
            raise _Failure(f"{name}() is not defined for floating-point numbers")
        if b < 0:
            raise _Failure(f"{name}() by a negative amount (Python numbers)")
        return _to_int64(int(a)), min(int(b), 64), True
    return a, b, False


def _lshift(a: Any, b: Any) -> Value:
    """``a << b``; on arrays, a negative amount or the full width or more gives 0 (torch)."""
    a, b, scalars = _shift_operands("lshift", a, b)
    if scalars:
        return _to_int64(a << b)
    x, y, dtype = _arrays(a, b)
    if not promotion.is_integer(dtype):
        raise _Failure(f"lshift() is not defined for {dtype} operands (as in torch)")
    bits = dtype.itemsize * 8
    out_of_range = (y < 0) | (y >= bits)
    shifted = np.left_shift(x, np.where(out_of_range, 0, y).astype(dtype))
    return np.asarray(np.where(out_of_range, np.zeros((), dtype), shifted).astype(dtype, copy=False))


def _rshift(a: Any, b: Any) -> Value:
    """``a >> b`` (arithmetic); on arrays, out-of-range amounts leave only the sign (torch)."""
    a, b, scalars = _shift_operands("rshift", a, b)
    if scalars:
        return a >> b
    x, y, dtype = _arrays(a, b)
    if not promotion.is_integer(dtype):
        raise _Failure(f"rshift() is not defined for {dtype} operands (as in torch)")
    bits = dtype.itemsize * 8
    out_of_range = (y < 0) | (y >= bits)
    safe_shift = np.where(out_of_range, 0, y).astype(dtype)
    shifted = np.right_shift(x, safe_shift)
    if dtype.kind == "i":
        saturated = np.right_shift(x, np.asarray(bits - 1, dtype))  # all sign bits
    else:
        saturated = np.zeros((), dtype)
    return np.asarray(np.where(out_of_range, saturated, shifted).astype(dtype, copy=False))


# --------------------------------------------------------------------------- shapes


def _size(x: Any, dim: Any = None) -> Value:
    """``size(@0)``: the shape as a list of ints; ``size(@0,d)``: one dimension (d may be negative)."""
    if not isinstance(x, np.ndarray):
        raise _Failure(f"size() needs an array but got {_describe(x)}")
    if dim is None:
        return [int(d) for d in x.shape]
    if isinstance(dim, np.ndarray) and dim.size == 1 and promotion.is_integer(dim.dtype):
        dim = int(dim.reshape(-1)[0])
    if type(dim) is not int:
        raise _Failure(f"size() needs an integer dimension but got {_describe(dim)}")
    rank = x.ndim
    if not -rank <= dim < rank:
        raise _Failure(f"dimension {dim} is out of range for an array of rank {rank} (shape {x.shape})")
    return int(x.shape[dim])


def _build_list(items: list[Any]) -> list[Any]:
    """A list literal: 0-dim arrays become Python numbers, as shape entries."""
    return [item.item() if isinstance(item, np.ndarray) and item.ndim == 0 else item for item in items]


# --------------------------------------------------------------------------- the table


IMPLEMENTATIONS: dict[str, Callable[..., Value]] = {
    # unary, floating result
    "acos": _make_float_unary("acos", np.arccos),
    "acosh": _make_float_unary("acosh", np.arccosh),
    "asin": _make_float_unary("asin", np.arcsin),
    "asinh": _make_float_unary("asinh", np.arcsinh),
    "atan": _make_float_unary("atan", np.arctan),
    "atanh": _make_float_unary("atanh", np.arctanh),
    "cos": _make_float_unary("cos", np.cos),
    "cosh": _make_float_unary("cosh", np.cosh),
    "erf": _make_float_unary("erf", _erf_array, complex_ok=False),
    "exp": _make_float_unary("exp", np.exp),
    "expm1": _make_float_unary("expm1", np.expm1),
    "log": _make_float_unary("log", np.log),
    "log10": _make_float_unary("log10", np.log10),
    "log1p": _make_float_unary("log1p", np.log1p),
    "reciprocal": _make_float_unary("reciprocal", np.reciprocal),
    "rsqrt": _make_float_unary("rsqrt", _rsqrt),
    "sin": _make_float_unary("sin", np.sin),
    "sinh": _make_float_unary("sinh", np.sinh),
    "sqrt": _make_float_unary("sqrt", np.sqrt),
    "tan": _make_float_unary("tan", np.tan),
    "tanh": _make_float_unary("tanh", np.tanh),
    # unary, dtype preserving
    "abs": _abs,
    "neg": _neg,
    "sign": _sign,
    "square": _square,
    "ceil": _make_rounding("ceil", np.ceil, math.ceil),
    "floor": _make_rounding("floor", np.floor, math.floor),
    "round": _make_rounding("round", np.round, round),  # half to even, like torch
    "trunc": _make_rounding("trunc", np.trunc, math.trunc),
    # casts
    "int": _int,
    "torch.long": _to_long,
    "torch.float": _to_float,
    "torch.bool": _to_bool,
    # binary
    "add": _make_arithmetic("add", lambda a, b: a + b, np.add),
    "sub": _make_arithmetic("sub", lambda a, b: a - b, np.subtract),
    "mul": _make_arithmetic("mul", lambda a, b: a * b, np.multiply),
    "div": _div,
    "floor_divide": _floor_divide,
    "remainder": _remainder,
    "fmod": _fmod,
    "pow": _pow,
    "atan2": _atan2,
    "logaddexp": _logaddexp,
    "max": _make_extremum("max", max, np.maximum),
    "maximum": _make_extremum("maximum", max, np.maximum),
    "min": _make_extremum("min", min, np.minimum),
    "minimum": _make_extremum("minimum", min, np.minimum),
    "and": _make_bitwise("and", lambda a, b: a & b, np.bitwise_and),
    "or": _make_bitwise("or", lambda a, b: a | b, np.bitwise_or),
    "xor": _make_bitwise("xor", lambda a, b: a ^ b, np.bitwise_xor),
    "lshift": _lshift,
    "rshift": _rshift,
    # shapes
    "size": _size,
}

if IMPLEMENTATIONS.keys() != FUNCTIONS.keys():  # one table of names, two columns
    raise ImportError(
        "expression function tables disagree: "
        f"{sorted(IMPLEMENTATIONS.keys() ^ FUNCTIONS.keys())}")


# --------------------------------------------------------------------------- evaluation


def _normalize_input(index: int, value: Any, expression: str | None, position: int) -> Value:
    """Bring an input into the value model: arrays, Python numbers and lists."""
    if isinstance(value, np.ndarray):
        array = value
    elif _is_scalar(value):
        return value
    elif isinstance(value, (list, tuple)):
        return list(value)
    elif isinstance(value, np.generic) or hasattr(value, "__array__"):
        array = np.asarray(value)
    else:
        raise ExpressionError(f"input @{index} is {_describe(value)}, not an array or a number",
                              expression, position)
    if array.dtype.kind not in "biufc":
        raise ExpressionError(f"input @{index} has unsupported dtype {array.dtype}", expression, position)
    return array


def evaluate(program: Sequence[Instruction], inputs: Sequence[Any], expression: str | None = None) -> Value:
    """Run ``program`` on ``inputs`` and return the single value it leaves.

    ``inputs`` are NumPy arrays, Python numbers or lists, indexed by ``@N``.
    ``expression`` is the source text, used only in error messages. Every failure
    is an :class:`ExpressionError` naming the function and position.
    """
    for instruction in program:
        if instruction.opcode is OpCode.INPUT and not 0 <= instruction.operand < len(inputs):
            raise ExpressionError(
                f"the expression uses input @{instruction.operand} but only {len(inputs)} "
                f"input{'' if len(inputs) == 1 else 's'} {'was' if len(inputs) == 1 else 'were'} given",
                expression, instruction.position)

    stack: list[Value] = []
    with np.errstate(all="ignore"):  # torch does not warn about inf/nan either
        for instruction in program:
            opcode = instruction.opcode
            if opcode is OpCode.INPUT:
                index = instruction.operand
                stack.append(_normalize_input(index, inputs[index], expression, instruction.position))
                continue
            if opcode is OpCode.CONST:
                stack.append(instruction.operand)
                continue
            count = instruction.count
            if count > len(stack):
                raise ExpressionError(f"malformed program: {instruction} needs {count} values",
                                      expression, instruction.position)
            args = stack[len(stack) - count:]
            del stack[len(stack) - count:]
            if opcode is OpCode.LIST:
                stack.append(_build_list(args))
                continue
            name = instruction.operand
            function = IMPLEMENTATIONS.get(name)
            if function is None or not FUNCTIONS[name].accepts(count):
                raise ExpressionError(f"malformed program: cannot call {name!r} with {count} values",
                                      expression, instruction.position)
            try:
                stack.append(function(*args))
            except ExpressionError:
                raise
            except _Failure as failure:
                raise ExpressionError(str(failure), expression, instruction.position) from None
            except Exception as exc:  # NumPy's broadcasting, overflow, memory errors
                raise ExpressionError(f"{name}() failed: {exc}", expression, instruction.position) from exc
    if len(stack) != 1:
        raise ExpressionError(f"malformed program: it leaves {len(stack)} values instead of 1", expression)
    return stack[0]
