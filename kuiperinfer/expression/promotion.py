"""PyTorch's type promotion, restated for NumPy dtypes.

Why not ``np.result_type``? NumPy and PyTorch disagree in exactly the places an
inference engine trips over:

* ``int64 tensor + 0.5``: PyTorch gives float32 (the default dtype), NumPy float64.
* ``int64 + float16``: PyTorch float16, NumPy float64.
* a 0-dim tensor does not widen a dimensioned tensor of the same category
  (``float32[3] + float64 0-dim -> float32``), but does lift it into a higher
  category (``int32[3] + float64 0-dim -> float64``).

The rule (c10 ``ResultTypeState``): operands form three priority groups --
dimensioned arrays, 0-dim arrays, Python numbers ("wrapped numbers": bool -> bool,
int -> int64, float -> float32, complex -> complex64). Each group is promoted on its
own; then a lower group only matters if it is of a higher *category* (bool < integer <
floating < complex). A complex of a lower group keeps the precision of a floating higher
one (``float64[3] * 1j -> complex128``, ``float32[3] * complex128 0-dim -> complex64``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: ``torch.get_default_dtype()``: what a Python float becomes, and what integer true
#: division and integer inputs of floating functions (sqrt, sin, ...) produce.
DEFAULT_FLOAT = np.dtype(np.float32)
DEFAULT_INT = np.dtype(np.int64)
#: ``torch.get_default_complex_dtype()``: what a Python complex becomes.
DEFAULT_COMPLEX = np.dtype(np.complex64)
BOOL = np.dtype(np.bool_)

_BOOL, _INTEGER, _FLOATING, _COMPLEX = 0, 1, 2, 3


def category(dtype: np.dtype) -> int:
    """0 for bool, 1 for (un)signed integers, 2 for floating point, 3 for complex."""
    if dtype == BOOL:
        return _BOOL
    if dtype.kind in "iu":
        return _INTEGER
    if dtype.kind == "f":
        return _FLOATING
    if dtype.kind == "c":
        return _COMPLEX
    raise TypeError(f"unsupported dtype {dtype}")


def is_floating(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def is_complex(dtype: np.dtype) -> bool:
    return dtype.kind == "c"


def is_inexact(dtype: np.dtype) -> bool:
    """Floating point or complex: what sqrt, exp, division... compute in."""
    return dtype.kind in "fc"


def is_integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu"


def to_complex(dtype: np.dtype) -> np.dtype:
    """The complex dtype of a floating one's precision (float64 -> complex128), else complex64."""
    return np.dtype(np.complex128) if dtype == np.float64 else DEFAULT_COMPLEX


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """``torch.promote_types``: the higher category wins outright, except that complex and
    floating meet at the wider precision (complex64 with float64 is complex128); within
    one category, NumPy's rule."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if {ca, cb} == {_FLOATING, _COMPLEX}:
        return np.promote_types(a, b)
    if ca != cb:
        return a if ca > cb else b
    return np.promote_types(a, b)


def wrapped_number_dtype(value: bool | int | float | complex) -> np.dtype:
    """The dtype PyTorch gives a Python number taking part in a tensor operation."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return DEFAULT_INT
    if isinstance(value, complex):
        return DEFAULT_COMPLEX
    return DEFAULT_FLOAT


def _promote_optional(a: np.dtype | None, b: np.dtype) -> np.dtype:
    return b if a is None else promote_types(a, b)


def _combine_categories(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    if higher is None:
        return lower
    if lower is None or is_complex(higher):
        return higher
    if is_complex(lower):  # a floating higher group keeps its precision
        return to_complex(higher) if is_floating(higher) else lower
    if is_floating(higher):
        return higher
    if higher == BOOL or is_floating(lower):
        return promote_types(higher, lower)
    return higher


def result_type(*operands: Any) -> np.dtype:
    """The dtype PyTorch computes ``op(*operands)`` in (``torch.result_type``).

    Operands are NumPy arrays (``ndim == 0`` counts as a 0-dim tensor) or Python
    numbers. At least one operand must be given.
    """
    dimensioned: np.dtype | None = None
    zero_dim: np.dtype | None = None
    wrapped: np.dtype | None = None
    for operand in operands:
        if isinstance(operand, np.ndarray):
            if operand.ndim:
                dimensioned = _promote_optional(dimensioned, operand.dtype)
            else:
                zero_dim = _promote_optional(zero_dim, operand.dtype)
        else:
            wrapped = _promote_optional(wrapped, wrapped_number_dtype(operand))
    result = _combine_categories(dimensioned, _combine_categories(zero_dim, wrapped))
    if result is None:
        raise TypeError("result_type needs at least one operand")
    return result
