"""pnnx's element types: one table, and the lookups the reader, the writer and the runtime use.

Every operand and attribute of a ``.pnnx.param`` names its element type by a suffix
(``(1,3,224,224)f32``); pnnx numbers the same types with the codes of ``ir.h``
(1 = f32, ... 13 = bf16, 0 = null). :data:`DATA_TYPES` holds one :class:`DataType` a
code, with the numpy dtype of its values and of its stored bytes, and the names PyTorch,
NumPy and ONNX give it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import ModelFormatError

__all__ = [
    "DataType", "DATA_TYPES", "dtype_from_suffix", "suffix_of", "numpy_dtype",
    "storage_dtype", "itemsize", "dtype_from_numpy", "bf16_to_float32",
]


@dataclass(frozen=True)
class DataType:
    """One row of pnnx's element-type table.

    ``numpy`` is the numpy dtype of the *values* (``None`` where numpy has none:
    ``null``, ``c32`` and ``bf16``). ``storage`` is the numpy dtype that views the raw
    little-endian bytes without copying: for ``bf16`` that is ``uint16`` (the top half
    of a float32), for ``c32`` a structured pair of float16 ``(real, imag)``. ``torch``
    and ``name`` are pnnx's PyTorch and NumPy spellings; ``onnx`` is ONNX's
    ``TensorProto.DataType`` number (None where ONNX has no such type).
    """

    code: int
    suffix: str
    itemsize: int
    numpy: np.dtype | None
    storage: np.dtype | None
    torch: str
    name: str
    onnx: int | None


_C32 = np.dtype([("real", "<f2"), ("imag", "<f2")])

DATA_TYPES: tuple[DataType, ...] = (
    DataType(0, "null", 0, None, None, "null", "null", None),
    DataType(1, "f32", 4, np.dtype("<f4"), np.dtype("<f4"), "torch.float", "float32", 1),
    DataType(2, "f64", 8, np.dtype("<f8"), np.dtype("<f8"), "torch.double", "float64", 11),
    DataType(3, "f16", 2, np.dtype("<f2"), np.dtype("<f2"), "torch.half", "float16", 10),
    DataType(4, "i32", 4, np.dtype("<i4"), np.dtype("<i4"), "torch.int", "int32", 6),
    DataType(5, "i64", 8, np.dtype("<i8"), np.dtype("<i8"), "torch.long", "int64", 7),
    DataType(6, "i16", 2, np.dtype("<i2"), np.dtype("<i2"), "torch.short", "int16", 5),
    DataType(7, "i8", 1, np.dtype("i1"), np.dtype("i1"), "torch.int8", "int8", 3),
    DataType(8, "u8", 1, np.dtype("u1"), np.dtype("u1"), "torch.uint8", "uint8", 2),
    DataType(9, "bool", 1, np.dtype("?"), np.dtype("?"), "torch.bool", "bool", 9),
    DataType(10, "c64", 8, np.dtype("<c8"), np.dtype("<c8"), "torch.complex64", "csingle", 14),
    DataType(11, "c128", 16, np.dtype("<c16"), np.dtype("<c16"), "torch.complex128", "cdouble", 15),
    DataType(12, "c32", 4, None, _C32, "torch.complex32", "chalf", None),
    DataType(13, "bf16", 2, None, np.dtype("<u2"), "torch.bfloat16", "bfloat16", 16),
)

_BY_CODE = {t.code: t for t in DATA_TYPES}
_BY_SUFFIX = {t.suffix: t for t in DATA_TYPES}


def dtype_from_suffix(suffix: str) -> int:
    """The type code of a suffix such as ``f32``; ``null`` is 0. Unknown: ModelFormatError."""
    t = _BY_SUFFIX.get(suffix)
    if t is None:
        known = " ".join(x.suffix for x in DATA_TYPES)
        raise ModelFormatError(f"unknown dtype suffix {suffix!r} (known: {known})")
    return t.code


def suffix_of(code: int) -> str:
    """The suffix pnnx writes for a type code; ``null`` for 0 and unknown codes (as pnnx)."""
    t = _BY_CODE.get(code)
    return t.suffix if t is not None else "null"


def numpy_dtype(code: int) -> np.dtype | None:
    """The numpy dtype of the values, or None (null, unknown, c32, bf16)."""
    t = _BY_CODE.get(code)
    return t.numpy if t is not None else None


def storage_dtype(code: int) -> np.dtype | None:
    """The numpy dtype that views the stored bytes as they are (bf16 -> uint16, c32 -> pair of f16)."""
    t = _BY_CODE.get(code)
    return t.storage if t is not None else None


def itemsize(code: int) -> int:
    """Bytes per element; 0 for null and unknown codes (as pnnx's ``type_to_elemsize``)."""
    t = _BY_CODE.get(code)
    return t.itemsize if t is not None else 0


def dtype_from_numpy(dtype: Any) -> int:
    """The type code of a numpy dtype (byte order ignored); 0 when pnnx has no such type."""
    dtype = np.dtype(dtype)
    if dtype == _C32:
        return 12
    for t in DATA_TYPES:
        if t.numpy is not None and t.numpy.kind == dtype.kind and t.numpy.itemsize == dtype.itemsize:
            return t.code
    return 0


def bf16_to_float32(raw: np.ndarray) -> np.ndarray:
    """Decode bfloat16 bit patterns (uint16) to float32: they are the float32's high half."""
    return (np.asarray(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)

