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
int -> int64, float -> float32). Each group is promoted on its own; then a lower
group only matters if it is of a higher *category* (bool < integer < floating).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: ``torch.get_default_dtype()``: what a Python float becomes, and what integer true
#: division and integer inputs of floating functions (sqrt, sin, ...) produce.
DEFAULT_FLOAT = np.dtype(np.float32)
DEFAULT_INT = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)

_BOOL, _INTEGER, _FLOATING = 0, 1, 2


def category(dtype: np.dtype) -> int:
    """0 for bool, 1 for (un)signed integers, 2 for floating point."""
    if dtype == BOOL:
        return _BOOL
    if dtype.kind in "iu":
        return _INTEGER
    if dtype.kind == "f":
        return _FLOATING
    raise TypeError(f"unsupported dtype {dtype}")


def is_floating(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def is_integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu"


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """``torch.promote_types``: the higher category wins outright; within one, NumPy's rule."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    return np.promote_types(a, b)


def wrapped_number_dtype(value: bool | int | float) -> np.dtype:
    """The dtype PyTorch gives a Python number taking part in a tensor operation."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return DEFAULT_INT
    return DEFAULT_FLOAT


def _promote_optional(a: np.dtype | None, b: np.dtype) -> np.dtype:
    return b if a is None else promote_types(a, b)


def _combine_categories(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    if higher is None:
        return lower
    if lower is None or is_floating(higher):
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
