"""The PNNX intermediate representation: a Python counterpart of pnnx's ``ir.h``.

A pnnx export is a pair of files. ``model.pnnx.param`` is a text graph: one
:class:`Operator` a line, joined by named :class:`Operand` edges, each operator
carrying typed :class:`Parameter` values (``stride=(1,1)``) and references to
:class:`Attribute` tensors (``@weight=(8,3,3,3)f32``). ``model.pnnx.bin`` is a
stored zip archive holding the raw bytes of every attribute, one entry named
``<operator name>.<attribute name>``.

:class:`Graph` ties them together::

    graph = load_graph("model.pnnx.param")          # finds model.pnnx.bin beside it
    conv = graph.ops[1]
    conv.params["stride"].value                     # [1, 1]
    conv.attrs["weight"].numpy()                    # read-only float32 view, no copy
    save_graph(graph, "copy.pnnx.param")            # byte-identical to pnnx's own writer

This module holds the data and knows no file: the element types are in
:mod:`kuiperinfer.pnnx.dtypes`, the ``.param`` text (its lines and the text of every
parameter value) in :mod:`kuiperinfer.pnnx.param_file`, the archive in
:mod:`kuiperinfer.pnnx.storezip`, and reading and writing the pair in
:mod:`kuiperinfer.pnnx.loading`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import IntEnum
from typing import Any

import numpy as np

from kuiperinfer.errors import GraphError
from kuiperinfer.pnnx.dtypes import bf16_to_float32, dtype_from_numpy, itemsize, storage_dtype, suffix_of

__all__ = ["ParamType", "Parameter", "Attribute", "Operand", "Operator", "Graph",
           "INPUT_TYPE", "OUTPUT_TYPE", "shape_text"]


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


_ARRAY_OF = {ParamType.INT: ParamType.INT_ARRAY, ParamType.FLOAT: ParamType.FLOAT_ARRAY,
             ParamType.STRING: ParamType.STRING_ARRAY, ParamType.COMPLEX: ParamType.COMPLEX_ARRAY}
_ELEMENT_OF = {array: element for element, array in _ARRAY_OF.items()}
_SCALARS = {ParamType.INT: ((int, np.integer), int),
            ParamType.FLOAT: ((int, float, np.integer, np.floating), float),
            ParamType.STRING: (str, str),
            ParamType.COMPLEX: ((int, float, complex, np.number), complex)}
"""Per scalar type, the Python and numpy types it accepts (never a bool) and how it converts them."""


def _scalar(kind: ParamType, v: Any) -> Any:
    accepted, convert = _SCALARS[kind]
    if isinstance(v, accepted) and not isinstance(v, bool):
        return convert(v)
    raise GraphError(f"a {kind.name.lower()} parameter cannot hold {v!r}")


def _coerce(ptype: ParamType, value: Any) -> Any:
    """Check ``value`` fits ``ptype`` and normalise it (ints widen to float/complex)."""
    if ptype in _SCALARS:
        return _scalar(ptype, value)
    element = _ELEMENT_OF.get(ptype)
    if element is not None:
        if not isinstance(value, (list, tuple)):
            raise GraphError(f"a {ptype.name.lower()} parameter needs a list, not {value!r}")
        return [_scalar(element, v) for v in value]
    if ptype == ParamType.NONE:
        if value is not None:
            raise GraphError(f"a None parameter cannot hold {value!r}")
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise GraphError(f"a bool parameter cannot hold {value!r}")
    return bool(value)


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
    list[float], list[str], complex, list[complex]); without ``type`` the type is
    inferred from the value.

    ``text`` is the text the parameter was read from (the reader passes it), None for one
    built in memory; :mod:`kuiperinfer.pnnx.param_file` writes that text back, so reading
    and writing a file never changes it, and formats ``value`` the way pnnx does otherwise.
    """

    __slots__ = ("_type", "_value", "_text")

    def __init__(self, value: Any = None, type: int | None = None, *, text: str | None = None):
        if type is None:
            ptype = _infer_type(value)
        elif isinstance(type, ParamType):
            ptype = type
        elif type in ParamType._value2member_map_:
            ptype = ParamType(type)
        else:
            raise GraphError(f"no parameter type {type!r} (pnnx has {[int(t) for t in ParamType]})")
        self._type = ptype
        self._value = _coerce(ptype, value)
        self._text = text

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

    def __repr__(self) -> str:
        return f"Parameter({self._value!r}, type={self._type.name})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Parameter):
            return NotImplemented
        return self._type == other._type and self._value == other._value

    def __hash__(self) -> int:
        v = self._value
        return hash((self._type, tuple(v) if isinstance(v, list) else v))


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


class Graph:
    """A whole pnnx graph (``Graph`` of ir.h): operators in file order and their operands.

    ``param_path`` and ``bin_path`` are the files it was read from (None for a graph built
    in memory).
    """

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

    def __repr__(self) -> str:
        where = f" from {self.param_path!r}" if self.param_path else ""
        return f"<Graph{where}: {len(self.ops)} operators, {len(self.operands)} operands>"
