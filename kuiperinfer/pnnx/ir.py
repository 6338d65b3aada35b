"""The PNNX intermediate representation: a Python counterpart of pnnx's ``ir.h``.

A pnnx export is a pair of files. ``model.pnnx.param`` is a text graph: one
:class:`Operator` a line, joined by named :class:`Operand` edges, each operator
carrying typed :class:`Parameter` values (``stride=(1,1)``) and references to
:class:`Attribute` tensors (``@weight=(8,3,3,3)f32``). ``model.pnnx.bin`` is a
stored zip archive holding the raw bytes of every attribute, one entry named
``<operator name>.<attribute name>``.

:class:`Graph` ties them together::

    graph = Graph.load("model.pnnx.param")          # finds model.pnnx.bin beside it
    conv = graph.ops[1]
    conv.params["stride"].value                     # [1, 1]
    conv.attrs["weight"].numpy()                    # read-only float32 view, no copy
    graph.save("copy.pnnx.param", "copy.pnnx.bin")  # byte-identical to pnnx's own writer

Reading and writing the text live in :mod:`kuiperinfer.pnnx.param_file`, the archive
in :mod:`kuiperinfer.pnnx.storezip`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from fractions import Fraction
from typing import Any

import numpy as np

from kuiperinfer.errors import BinArchiveError, GraphError, ModelFormatError

__all__ = [
    "DataType", "DATA_TYPES", "dtype_from_suffix", "suffix_of", "numpy_dtype",
    "storage_dtype", "itemsize", "dtype_from_numpy", "bf16_to_float32",
    "ParamType", "Parameter", "format_float", "Attribute", "Operand", "Operator", "Graph",
    "default_bin_path",
]


# --------------------------------------------------------------------------- data types

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


# --------------------------------------------------------------------------- parameters

class ParamType(IntEnum):
    """``Parameter::type`` codes of ir.h."""

    NONE = 0
    BOOL = 1
    INT = 2
    FLOAT = 3
    STRING = 4
    INT_ARRAY = 5
    FLOAT_ARRAY = 6
    STRING_ARRAY = 7
    COMPLEX = 10
    COMPLEX_ARRAY = 11


_F32_SMALL = float(np.float32(0.0001))  # pnnx compares against 0.0001f, a float32 constant
_NUMBER = r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
_INT_RE = re.compile(r"-?[0-9]+\Z")
_FLOAT_RE = re.compile(_NUMBER + r"\Z")
_COMPLEX_RE = re.compile(rf"({_NUMBER})([+-])({_NUMBER})j\Z")


def _strtof_equals(text: str, f: np.float32) -> bool:
    """Does C's ``strtof(text)`` give exactly the finite float32 ``f``?

    Decided exactly, so no double rounding can fool it: ``text`` must lie in the interval
    of reals that round to ``f``, half-way to each neighbour; on an edge, ties go to the
    even significand.
    """
    x = Fraction(float(f))
    with np.errstate(over="ignore"):
        down = np.nextafter(f, np.float32(-np.inf))
        up = np.nextafter(f, np.float32(np.inf))
    # Past the largest float there is no neighbour: mirror the gap on the other side.
    gap_down = x - Fraction(float(down)) if np.isfinite(down) else Fraction(float(up)) - x
    gap_up = Fraction(float(up)) - x if np.isfinite(up) else gap_down
    low, high = x - gap_down / 2, x + gap_up / 2
    q = Fraction(text)
    if low < q < high:
        return True
    even = int(np.array(f, dtype=np.float32).view(np.uint32)) & 1 == 0
    return even and q in (low, high)


def _compact_exponent(text: str) -> str:
    """``1.000000e-05`` -> ``1.000000e-5``, ``1.0e+06`` -> ``1.0e6`` (pnnx's short exponent)."""
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}"


def format_float(value: float) -> str:
    """A float the way pnnx writes it (``float_to_string`` of the pnnx 20261020 build).

    The value is first rounded to float32, as pnnx holds it. Then: ``0.0`` for zero;
    for |f| < 1e-4 or >= 1e6 ``%e`` (``%.8e`` if ``%e`` does not read back to the same
    float32) with the exponent shortened (``1.000000e-5``, ``1.23456780e7``); otherwise
    ``%g``, or if that does not read back ``%.9g`` (``0.333333343``) unless that has more
    than 9 decimals, which goes to the short ``%.8e`` (``3.82674076e-2``); then ``.0`` on
    whole numbers. ``inf``, ``-inf`` stay words; NaN comes out as ``nan.0`` (pnnx
    appends ``.0`` to it too).

    pnnx's source for this build was not at hand: these rules were fitted to, and
    checked against, what that build wrote for ~900 float32 values of every magnitude.
    """
    with np.errstate(over="ignore"):
        f = np.float32(value)
    if f == 0:
        return "0.0"
    if np.isnan(f):
        return ("-" if np.signbit(f) else "") + "nan.0"
    if np.isinf(f):
        return "-inf" if f < 0 else "inf"
    d = float(f)
    if abs(d) < _F32_SMALL or abs(d) >= 1000000.0:
        text = f"{d:e}"
        if not _strtof_equals(text, f):
            text = f"{d:.8e}"
        return _compact_exponent(text)
    text = f"{d:g}"
    if not _strtof_equals(text, f):
        text = f"{d:.9g}"
        if len(text.lstrip("-")) > 11:  # more than 9 decimals, as 0.0382674076: pnnx goes to %e
            return _compact_exponent(f"{d:.8e}")
    if not any(c in text for c in ".eE"):
        text += ".0"
    return text


def _format_c_e(value: float) -> str:
    """C's ``%e`` of a float32 promoted to double (``inf``/``nan`` as glibc spells them)."""
    with np.errstate(over="ignore"):
        f = np.float32(value)
    if np.isnan(f):
        return ("-" if np.signbit(f) else "") + "nan"
    return f"{float(f):e}"


def _format_complex(value: complex) -> str:
    """pnnx writes a complex as ``%e+%ej``: ``1.000000e+00+-2.000000e+00j`` for 1-2j."""
    return f"{_format_c_e(value.real)}+{_format_c_e(value.imag)}j"


def _starts_like_number(text: str) -> bool:
    """pnnx's test: a digit, or ``-`` followed by a digit."""
    c0 = text[:1]
    if c0.isdigit() and c0.isascii():
        return True
    c1 = text[1:2]
    return c0 == "-" and c1.isdigit() and c1.isascii()


def _classify(text: str) -> tuple[ParamType, Any]:
    """One scalar (or list element) by pnnx's rules; a number that is malformed stays a string."""
    if not _starts_like_number(text):
        return ParamType.STRING, text
    if text.endswith("j"):
        m = _COMPLEX_RE.match(text)
        if m is not None:
            imag = float(m.group(3))
            return ParamType.COMPLEX, complex(float(m.group(1)), -imag if m.group(2) == "-" else imag)
        return ParamType.STRING, text
    if "." in text or "e" in text:
        if _FLOAT_RE.match(text):
            return ParamType.FLOAT, float(text)
        return ParamType.STRING, text
    if _INT_RE.match(text):
        return ParamType.INT, int(text)
    return ParamType.STRING, text


_ARRAY_OF = {ParamType.INT: ParamType.INT_ARRAY, ParamType.FLOAT: ParamType.FLOAT_ARRAY,
             ParamType.STRING: ParamType.STRING_ARRAY, ParamType.COMPLEX: ParamType.COMPLEX_ARRAY}


def _coerce(ptype: ParamType, value: Any) -> Any:
    """Check ``value`` fits ``ptype`` and normalise it (ints widen to float/complex)."""
    def scalar(kind: ParamType, v: Any) -> Any:
        if kind == ParamType.INT and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return int(v)
        if kind == ParamType.FLOAT and isinstance(v, (int, float, np.integer, np.floating)) \
                and not isinstance(v, bool):
            return float(v)
        if kind == ParamType.STRING and isinstance(v, str):
            return v
        if kind == ParamType.COMPLEX and isinstance(v, (int, float, complex, np.number)) \
                and not isinstance(v, bool):
            return complex(v)
        raise GraphError(f"a {kind.name.lower()} parameter cannot hold {v!r}")

    if ptype == ParamType.NONE:
        if value is not None:
            raise GraphError(f"a None parameter cannot hold {value!r}")
        return None
    if ptype == ParamType.BOOL:
        if not isinstance(value, (bool, np.bool_)):
            raise GraphError(f"a bool parameter cannot hold {value!r}")
        return bool(value)
    if ptype in (ParamType.INT, ParamType.FLOAT, ParamType.STRING, ParamType.COMPLEX):
        return scalar(ptype, value)
    element = {v: k for k, v in _ARRAY_OF.items()}[ptype]
    if not isinstance(value, (list, tuple)):
        raise GraphError(f"a {ptype.name.lower()} parameter needs a list, not {value!r}")
    return [scalar(element, v) for v in value]


def _infer_type(value: Any) -> ParamType:
    if value is None:
        return ParamType.NONE
    if isinstance(value, (bool, np.bool_)):
        return ParamType.BOOL
    if isinstance(value, (int, np.integer)):
        return ParamType.INT
    if isinstance(value, (float, np.floating)):
        return ParamType.FLOAT
    if isinstance(value, str):
        return ParamType.STRING
    if isinstance(value, (complex, np.complexfloating)):
        return ParamType.COMPLEX
    if isinstance(value, (list, tuple)):
        kinds = {_infer_type(v) for v in value}
        if not kinds or kinds == {ParamType.INT}:
            return ParamType.INT_ARRAY
        if kinds <= {ParamType.INT, ParamType.FLOAT}:
            return ParamType.FLOAT_ARRAY
        if kinds <= {ParamType.INT, ParamType.FLOAT, ParamType.COMPLEX}:
            return ParamType.COMPLEX_ARRAY
        if kinds == {ParamType.STRING}:
            return ParamType.STRING_ARRAY
    raise GraphError(f"no pnnx parameter type holds {value!r}")


class Parameter:
    """A typed operator parameter (``Parameter`` of ir.h). Immutable.

    ``type`` is a :class:`ParamType` (an int: 0 None, 1 bool, 2 int, 3 float, 4 string,
    5 int array, 6 float array, 7 string array, 10 complex, 11 complex array) and
    ``value`` the matching Python value (None, bool, int, float, str, list[int],
    list[float], list[str], complex, list[complex]).

    A parameter read from a file keeps its original ``text``, and :meth:`to_string`
    returns that text, so reading and writing a file never changes it; :meth:`encode`
    always formats ``value`` the way pnnx does.
    """

    __slots__ = ("_type", "_value", "_text")

    def __init__(self, value: Any = None, type: int | None = None):
        if type is None:
            ptype = _infer_type(value)
        elif type in ParamType._value2member_map_:
            ptype = ParamType(type)
        else:
            raise GraphError(f"no parameter type {type!r} (pnnx has {[int(t) for t in ParamType]})")
        self._type = ptype
        self._value = _coerce(ptype, value)
        self._text: str | None = None

    @property
    def type(self) -> ParamType:
        return self._type

    @property
    def value(self) -> Any:
        """The Python value (a fresh list for arrays, so the parameter cannot change)."""
        v = self._value
        return list(v) if isinstance(v, list) else v

    @property
    def text(self) -> str | None:
        """The text this parameter was parsed from, or None if it was built in memory."""
        return self._text

    @classmethod
    def parse(cls, text: str) -> Parameter:
        """Read a value as pnnx's ``Parameter::parse_from_string`` does, in this order.

        1. contains ``%`` -> string; 2. ``None``, ``()``, ``[]`` -> None;
        3. ``True``/``False`` -> bool; 4. starts with ``(`` or ``[`` -> a list of the
        text between the first and last character split on ``,``, each element by
        rules 5-6; 5. does not start with a digit or ``-digit`` -> string (so ``inf``,
        ``nan``, ``torch.float``, ``ij,jk->ik`` are strings); 6. contains ``.`` or ``e``
        -> float, else int.

        Where pnnx would silently read a prefix or lose data, this keeps it instead:
        ``a+bj`` is a complex (pnnx's own writer makes those; its reader would keep only
        ``a``); a text that starts like a number but is not one (``3x``, ``1.5.2``) stays
        a string; a list mixing ints and floats is a float array; a list with any string
        element (``[size(@0,0),-1]``) is a string array of the raw elements.
        """
        p = cls.__new__(cls)
        p._text = text
        p._type, p._value = _parse_value(text)
        return p

    def encode(self) -> str:
        """``value`` formatted exactly as pnnx's ``Parameter::encode_to_string``."""
        t, v = self._type, self._value
        if t == ParamType.NONE:
            return "None"
        if t == ParamType.BOOL:
            return "True" if v else "False"
        if t == ParamType.INT:
            return str(v)
        if t == ParamType.FLOAT:
            return format_float(v)
        if t == ParamType.STRING:
            return v
        if t == ParamType.COMPLEX:
            return _format_complex(v)
        fmt = {ParamType.INT_ARRAY: str, ParamType.FLOAT_ARRAY: format_float,
               ParamType.STRING_ARRAY: str, ParamType.COMPLEX_ARRAY: _format_complex}[t]
        return "(" + ",".join(fmt(x) for x in v) + ")"

    def to_string(self) -> str:
        """The text to write: the original text if parsed, else :meth:`encode`."""
        return self._text if self._text is not None else self.encode()

    __str__ = to_string

    def __repr__(self) -> str:
        return f"Parameter({self._value!r}, type={self._type.name})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Parameter):
            return NotImplemented
        return self._type == other._type and self._value == other._value

    def __hash__(self) -> int:
        v = self._value
        return hash((self._type, tuple(v) if isinstance(v, list) else v))


def _parse_value(text: str) -> tuple[ParamType, Any]:
    if "%" in text:
        return ParamType.STRING, text
    if text in ("None", "()", "[]"):
        return ParamType.NONE, None
    if text in ("True", "False"):
        return ParamType.BOOL, text == "True"
    if text[:1] in ("(", "["):
        elements = [_classify(e) for e in text[1:-1].split(",")]
        kinds = {k for k, _ in elements}
        if ParamType.STRING in kinds:
            return ParamType.STRING_ARRAY, text[1:-1].split(",")
        if kinds == {ParamType.INT}:
            return ParamType.INT_ARRAY, [v for _, v in elements]
        if ParamType.COMPLEX in kinds:
            return ParamType.COMPLEX_ARRAY, [complex(v) for _, v in elements]
        return ParamType.FLOAT_ARRAY, [float(v) for _, v in elements]
    return _classify(text)


# --------------------------------------------------------------------------- attributes

class Attribute:
    """A constant tensor of an operator (``@weight=(8,3,3,3)f32``): ``Attribute`` of ir.h.

    ``type`` is the dtype code, ``shape`` the dimensions and ``data`` the raw
    little-endian bytes: a zero-copy ``memoryview`` into the memory-mapped archive for a
    loaded graph, ``bytes`` for one built in memory, ``None`` while not yet loaded.
    pnnx stores a 0-dim tensor with shape ``[1]``; an empty shape holds no data.
    """

    __slots__ = ("type", "shape", "data")

    def __init__(self, type: int, shape: Sequence[int], data: bytes | bytearray | memoryview | None = b""):
        self.type = int(type)
        self.shape = [int(d) for d in shape]
        if data is not None:
            data = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
            if len(data) != self.nbytes():
                raise GraphError(f"attribute {suffix_of(self.type)}{tuple(self.shape)} needs "
                                 f"{self.nbytes()} bytes, got {len(data)}")
        self.data = data

    @classmethod
    def from_numpy(cls, array: Any, type: int | None = None) -> Attribute:
        """An attribute holding a copy of ``array`` (0-dim becomes shape ``[1]``, as pnnx).

        ``type`` overrides the code inferred from the dtype; use it for bf16 (pass the
        uint16 bit patterns) and c32 (pass a structured pair of float16).
        """
        arr = np.asarray(array)
        code = dtype_from_numpy(arr.dtype) if type is None else int(type)
        if code == 0:
            raise GraphError(f"pnnx has no element type for numpy dtype {arr.dtype}")
        stored = storage_dtype(code)
        if stored is None or stored.itemsize != arr.dtype.itemsize:
            raise GraphError(f"numpy dtype {arr.dtype} cannot be stored as {suffix_of(code)}")
        if stored.fields is None:
            arr = arr.astype(stored, copy=False)
        shape = list(arr.shape) or [1]
        return cls(code, shape, np.ascontiguousarray(arr).tobytes())

    def elemcount(self) -> int:
        """Number of elements: the product of the shape, 0 for an empty shape (as pnnx)."""
        if not self.shape:
            return 0
        n = 1
        for d in self.shape:
            n *= d
        return n

    def nbytes(self) -> int:
        """Declared byte size: ``elemcount() * itemsize``."""
        return self.elemcount() * itemsize(self.type)

    def raw_numpy(self) -> np.ndarray:
        """A read-only view of the stored bytes in the storage dtype and shape; never copies.

        The view may be unaligned (archive entries are not padded); numpy handles that
        correctly. bf16 shows as uint16 bit patterns, c32 as a structured pair of float16.
        """
        if self.data is None:
            raise GraphError("attribute data is not loaded")
        dtype = storage_dtype(self.type)
        if dtype is None:
            raise GraphError(f"attribute of type {suffix_of(self.type)} has no data")
        if not self.shape:
            arr = np.frombuffer(b"", dtype=dtype)
        else:
            arr = np.frombuffer(self.data, dtype=dtype, count=self.elemcount()).reshape(self.shape)
        arr.flags.writeable = False
        return arr

    def numpy(self) -> np.ndarray:
        """The values as a read-only array of the stored dtype and shape.

        A zero-copy view for every type numpy has. bf16 and c32 have no numpy dtype: they
        are decoded on demand to float32 and complex64 arrays (a copy, also read-only).
        """
        arr = self.raw_numpy()
        if self.type == 13:
            arr = bf16_to_float32(arr)
            arr.flags.writeable = False
        elif self.type == 12:
            decoded = arr["real"].astype(np.float32) + 1j * arr["imag"].astype(np.float32)
            arr = decoded.astype(np.complex64)
            arr.flags.writeable = False
        return arr

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Attribute):
            return NotImplemented
        if self.type != other.type:
            return False
        if self.type == 0:
            return True
        return self.shape == other.shape and bytes(self.data or b"") == bytes(other.data or b"")

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Attribute({suffix_of(self.type)}, shape={tuple(self.shape)})"


# --------------------------------------------------------------------------- graph

INPUT_TYPE = "pnnx.Input"
"""The operator type of a graph input (its one output operand is the input)."""
OUTPUT_TYPE = "pnnx.Output"
"""The operator type of the graph outputs (its input operands are the outputs)."""


def shape_text(shape: Iterable[int]) -> str:
    """A shape as pnnx writes it, ``(1,3,?,?)``: ``?`` for an unknown dimension."""
    return "(" + ",".join("?" if d < 0 else str(d) for d in shape) + ")"


class Operand:
    """A tensor edge (``Operand`` of ir.h): made by one producer, read by consumers.

    ``shape`` uses -1 for an unknown dimension (``?`` in the file); ``type`` is the
    dtype code, 0 when the file does not say. ``consumers`` holds an operator once per
    input slot it reads this operand from (``torch.cat`` of ``x, x`` appears twice).
    """

    __slots__ = ("name", "producer", "consumers", "type", "shape", "params")

    def __init__(self, name: str):
        self.name = name
        self.producer: Operator | None = None
        self.consumers: list[Operator] = []
        self.type = 0
        self.shape: list[int] = []
        self.params: dict[str, Parameter] = {}

    def remove_consumer(self, op: Operator) -> None:
        """Drop one occurrence of ``op`` from ``consumers`` (no-op if absent)."""
        for i, c in enumerate(self.consumers):
            if c is op:
                del self.consumers[i]
                return

    def __repr__(self) -> str:
        return f"Operand({self.name!r}, {shape_text(self.shape)}{suffix_of(self.type)})"


class Operator:
    """A node (``Operator`` of ir.h): call the PyTorch API ``type`` with ``params``.

    ``inputnames[i]`` is the keyword of ``inputs[i]`` (``$input=0``), "" where unnamed.
    ``line`` is the 1-based .param line it was read from (0 if built in memory).
    """

    __slots__ = ("type", "name", "inputs", "outputs", "inputnames", "params", "attrs", "line")

    def __init__(self, type: str, name: str):
        self.type = type
        self.name = name
        self.inputs: list[Operand] = []
        self.outputs: list[Operand] = []
        self.inputnames: list[str] = []
        self.params: dict[str, Parameter] = {}
        self.attrs: dict[str, Attribute] = {}
        self.line = 0

    def named_input(self, key: str) -> Operand | None:
        """The input whose ``$name`` is ``key``, or None."""
        for name, operand in zip(self.inputnames, self.inputs):
            if name == key:
                return operand
        return None

    def __repr__(self) -> str:
        return f"Operator({self.type!r}, {self.name!r})"


def default_bin_path(param_path: str | os.PathLike) -> str:
    """The archive beside a .param: ``x.pnnx.param`` -> ``x.pnnx.bin``."""
    path = os.fspath(param_path)
    return (path[:-len(".param")] if path.endswith(".param") else path) + ".bin"


class Graph:
    """A whole pnnx graph (``Graph`` of ir.h): operators in file order and their operands."""

    def __init__(self) -> None:
        self.ops: list[Operator] = []
        self.operands: list[Operand] = []
        self.param_path: str | None = None
        self.bin_path: str | None = None
        self._operand_index: dict[str, Operand] = {}

    def new_operator(self, type: str, name: str) -> Operator:
        """Append a new operator and return it."""
        op = Operator(type, name)
        self.ops.append(op)
        return op

    def new_operand(self, name: str) -> Operand:
        """Append a new operand and return it."""
        operand = Operand(name)
        self.operands.append(operand)
        self._operand_index.setdefault(name, operand)
        return operand

    def get_operand(self, name: str) -> Operand | None:
        """The operand called ``name``, or None."""
        operand = self._operand_index.get(name)
        if operand is not None and operand.name == name:
            return operand
        for operand in self.operands:  # added to the list directly: index it now
            if operand.name == name:
                self._operand_index[name] = operand
                return operand
        return None

    @classmethod
    def load(cls, param_path: str | os.PathLike, bin_path: str | os.PathLike | None = None,
             *, max_tensor_bytes: int | None = None) -> Graph:
        """Read a ``.pnnx.param`` and its ``.pnnx.bin`` (default: the .bin beside it).

        Attribute data stays in the memory-mapped archive (zero-copy views). A graph
        without attributes needs no archive. ``max_tensor_bytes`` (default
        :data:`kuiperinfer.pnnx.param_file.DEFAULT_MAX_TENSOR_BYTES`) refuses absurd
        declared tensor sizes before anything is allocated. Raises
        :class:`~kuiperinfer.errors.ParamSyntaxError` or
        :class:`~kuiperinfer.errors.BinArchiveError`.
        """
        from kuiperinfer.pnnx import param_file
        from kuiperinfer.pnnx.storezip import StoreZipReader

        graph = param_file.read_param(param_path, max_tensor_bytes=max_tensor_bytes)
        graph.bin_path = default_bin_path(param_path) if bin_path is None else os.fspath(bin_path)

        pending = [(op, key, attr) for op in graph.ops for key, attr in op.attrs.items()
                   if attr.data is None]
        for _, _, attr in pending:  # no bytes to read: null type or empty shape
            if attr.nbytes() == 0 and (attr.type == 0 or not attr.shape):
                attr.data = b""
        pending = [item for item in pending if item[2].data is None]
        if not pending:
            return graph
        if not os.path.exists(graph.bin_path):
            op, key, _ = pending[0]
            raise BinArchiveError(f"archive not found; it must hold {len(pending)} attribute(s), "
                                  f"first {op.name + '.' + key!r}", graph.bin_path)
        with StoreZipReader(graph.bin_path) as archive:
            for op, key, attr in pending:
                entry = op.name + "." + key
                expected = attr.nbytes()
                shape = ",".join(map(str, attr.shape))
                where = (f"operator {op.name!r} ({op.type}, {graph.param_path}:{op.line}) "
                         f"attribute {key!r} ({shape}){suffix_of(attr.type)}")
                if entry not in archive:
                    raise BinArchiveError(f"{where}: entry {entry!r} is missing "
                                          f"(expected {expected} bytes)", graph.bin_path)
                actual = archive.size(entry)
                if actual != expected:
                    raise BinArchiveError(f"{where}: expected {expected} bytes, entry {entry!r} "
                                          f"has {actual} bytes", graph.bin_path)
                attr.data = archive.view(entry)
        return graph

    def save(self, param_path: str | os.PathLike, bin_path: str | os.PathLike | None = None) -> None:
        """Write the graph as pnnx does: the .param text and the stored-zip .bin.

        For a graph read from a pnnx export both files come out byte-identical. Each file
        is written beside its target and renamed into place, so saving over the archive
        a graph was loaded from is safe.
        """
        from kuiperinfer.pnnx import param_file
        from kuiperinfer.pnnx.storezip import StoreZipWriter

        param_path = os.fspath(param_path)
        bin_path = default_bin_path(param_path) if bin_path is None else os.fspath(bin_path)
        text = param_file.format_param(self).encode("utf-8")

        bin_tmp = _temp_beside(bin_path)
        try:
            with StoreZipWriter(bin_tmp) as writer:
                for op, key, attr in _sorted_attrs(self):
                    if attr.data is None:
                        raise GraphError(f"operator {op.name!r} attribute {key!r} has no data")
                    writer.write_file(op.name + "." + key, attr.data)
            param_tmp = _temp_beside(param_path)
            try:
                with open(param_tmp, "wb") as f:
                    f.write(text)
                os.replace(param_tmp, param_path)
            finally:
                if os.path.exists(param_tmp):
                    os.unlink(param_tmp)
            os.replace(bin_tmp, bin_path)
        finally:
            if os.path.exists(bin_tmp):
                os.unlink(bin_tmp)

    def __repr__(self) -> str:
        where = f" from {self.param_path!r}" if self.param_path else ""
        return f"<Graph{where}: {len(self.ops)} operators, {len(self.operands)} operands>"


def _temp_beside(path: str) -> str:
    return f"{path}.tmp{os.getpid()}"


def _sorted_attrs(graph: Graph) -> Iterable[tuple[Operator, str, Attribute]]:
    """Every attribute in pnnx's archive order: operators in order, keys sorted."""
    for op in graph.ops:
        for key in sorted(op.attrs):
            yield op, key, op.attrs[key]
