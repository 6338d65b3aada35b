"""Reading and writing the ``.pnnx.param`` text, exactly as pnnx's ``Graph::load``/``save``.

The file::

    7767517                                     magic
    4 4                                         operator count, operand count
    pnnx.Input   pnnx_input_0  0 1 0 #0=(1,3,8,8)f32
    nn.Conv2d    conv          1 1 0 1 bias=True stride=(1,1) @weight=(8,3,3,3)f32
                               $input=0 #0=(1,3,8,8)f32 #1=(1,8,8,8)f32   (one line)
    ...

Each operator line is ``type name n_in n_out``, the ``n_in`` input and ``n_out`` output
operand names, then ``key=value`` tokens (split at the first ``=``) in this order:
parameters (sorted by key), ``@attr=(shape)dtype`` attributes (sorted),
``$inputname=operand`` for named inputs, and ``#operand=(shape)dtype`` for each input
then output operand whose shape is known (``?`` is an unknown dimension). pnnx pads
type and name to 24 columns (``%-24s %-24s %d %d``).

Each parameter value is text too (``stride=(1,1)``, ``eps=1.000000e-5``):
:func:`parse_parameter` reads one as pnnx does, :func:`encode_parameter` and
:func:`format_float` write one as pnnx does.

The reader is strict: every malformed line raises
:class:`~kuiperinfer.errors.ParamSyntaxError` naming the file, the line and the
problem. Blank lines after the counts are skipped.
"""

from __future__ import annotations

import io
import os
import re
from fractions import Fraction
from typing import Any, BinaryIO

import numpy as np

from kuiperinfer.errors import ModelFormatError, ParamSyntaxError
from kuiperinfer.pnnx.dtypes import dtype_from_suffix, itemsize, suffix_of
from kuiperinfer.pnnx.ir import Attribute, Graph, Operand, Operator, Parameter, ParamType

__all__ = ["MAGIC", "MAX_OPERATORS", "MAX_OPERANDS", "MAX_LINE_BYTES", "MAX_LINE_TOKENS",
           "DEFAULT_MAX_TENSOR_BYTES",
           "read_param", "parse_param", "format_param",
           "parse_parameter", "encode_parameter", "parameter_text", "format_float"]

MAGIC = "7767517"
MAX_OPERATORS = 10_000_000
"""More operators than this on line 2 is refused as absurd."""
MAX_OPERANDS = 10_000_000
"""More operands than this on line 2 is refused as absurd."""
MAX_LINE_BYTES = 16 * 1024 * 1024
"""A longer line is refused before it is read whole."""
MAX_LINE_TOKENS = 65_536
"""An operator line with more tokens than this is refused before any is parsed (each costs
microseconds: a million parameters on one line would take seconds)."""
DEFAULT_MAX_TENSOR_BYTES = 4 * 1024 ** 3
"""Default limit on the declared byte size of one attribute or operand (4 GiB); layers that
create tensors from parameters (``torch.full``) hold their sizes to it too."""

UNKNOWN_DIM = -1
"""``?`` in a shape."""
SYMBOLIC_DIM = -233
"""``%name`` in an operand shape; pnnx keeps the name in ``operand.params["__shape__<i>"]``."""

_COUNT_RE = re.compile(r"[0-9]+\Z")


def read_param(path: str | os.PathLike, *, max_tensor_bytes: int | None = None) -> Graph:
    """Read a .param file into a :class:`Graph` whose attributes have ``data=None``.

    :func:`kuiperinfer.pnnx.loading.load_graph` then fills the attribute data from the archive.
    """
    path = os.fspath(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ParamSyntaxError(f"cannot open: {e.strerror}", path) from None
    with f:
        graph = _Reader(path, max_tensor_bytes).read(f)
    graph.param_path = path
    return graph


def parse_param(text: str | bytes, path: str = "<string>", *,
                max_tensor_bytes: int | None = None) -> Graph:
    """Parse .param text held in memory (``path`` is only used in messages)."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return _Reader(path, max_tensor_bytes).read(io.BytesIO(data))


def format_param(graph: Graph) -> str:
    """The .param text of ``graph``, byte for byte what pnnx's ``Graph::save`` writes."""
    lines = [MAGIC, f"{len(graph.ops)} {len(graph.operands)}"]
    for op in graph.ops:
        tokens = [f"{_pad24(op.type)} {_pad24(op.name)} {len(op.inputs)} {len(op.outputs)}"]
        tokens += [operand.name for operand in op.inputs]
        tokens += [operand.name for operand in op.outputs]
        for key in sorted(op.params):
            tokens.append(f"{key}={parameter_text(op.params[key])}")
        for key in sorted(op.attrs):
            attr = op.attrs[key]
            dims = ",".join(str(d) for d in attr.shape)
            tokens.append(f"@{key}=({dims}){suffix_of(attr.type)}")
        if len(op.inputnames) == len(op.inputs):
            for inputname, operand in zip(op.inputnames, op.inputs):
                if inputname:
                    tokens.append(f"${inputname}={operand.name}")
        for operand in op.inputs + op.outputs:
            if operand.shape:
                tokens.append(f"#{operand.name}=({_format_dims(operand)}){suffix_of(operand.type)}")
        lines.append(" ".join(tokens))
    return "\n".join(lines) + "\n"


def _pad24(text: str) -> str:
    """C's ``%-24s``: pads to 24 *bytes*, so a non-ASCII name pads as pnnx pads it."""
    return text + " " * (24 - len(text.encode("utf-8")))


def _format_dims(operand: Operand) -> str:
    out = []
    for i, d in enumerate(operand.shape):
        if d == UNKNOWN_DIM:
            out.append("?")
        elif d == SYMBOLIC_DIM and f"__shape__{i}" in operand.params:
            out.append("%" + str(operand.params[f"__shape__{i}"].value))
        else:
            out.append(str(d))
    return ",".join(out)


# --------------------------------------------------------------------------- parameter values

def parse_parameter(text: str) -> Parameter:
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
    element (``[size(@0,0),-1]``) is a string array of the raw elements. The parameter
    keeps ``text``.
    """
    ptype, value = _parse_value(text)
    return Parameter(value, ptype, text=text)


def encode_parameter(parameter: Parameter) -> str:
    """``parameter.value`` formatted exactly as pnnx's ``Parameter::encode_to_string``."""
    t, v = parameter.type, parameter.value
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


def parameter_text(parameter: Parameter) -> str:
    """The text to write after ``key=``: the text the parameter was read from, else
    :func:`encode_parameter`, so that reading and writing a file never changes it."""
    return parameter.text if parameter.text is not None else encode_parameter(parameter)


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


# --------------------------------------------------------------------------- reading

class _Reader:
    """One pass over the file; knows the path and current line for every message."""

    def __init__(self, path: str, max_tensor_bytes: int | None):
        self.path = path
        self.max_tensor_bytes = DEFAULT_MAX_TENSOR_BYTES if max_tensor_bytes is None else max_tensor_bytes
        self.lineno = 0
        self.graph = Graph()
        self.op_lines: dict[str, int] = {}        # operator name -> line
        self.produced: dict[str, Operand] = {}    # operand name -> operand
        self.declared: dict[str, tuple[str, int]] = {}  # operand name -> (shape text, line)

    def error(self, message: str, line: int | None = None) -> ParamSyntaxError:
        return ParamSyntaxError(message, self.path, self.lineno if line is None else line)

    def lines(self, f: BinaryIO):
        """Yield ``(line number, text)``; refuses over-long lines and bad UTF-8."""
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            self.lineno += 1
            content = raw[:-1] if raw.endswith(b"\n") else raw
            if len(content) > MAX_LINE_BYTES:
                raise self.error(f"line is longer than {MAX_LINE_BYTES} bytes")
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as e:
                raise self.error(f"not valid UTF-8: byte 0x{content[e.start]:02x} "
                                 f"at column {e.start + 1}") from None
            yield self.lineno, text

    def read(self, f: BinaryIO) -> Graph:
        lines = self.lines(f)

        first = next(lines, None)
        if first is None:
            raise self.error(f"empty file; expected the magic number {MAGIC}", 1)
        if first[1].strip() != MAGIC:
            raise self.error(f"bad magic {first[1].strip()[:40]!r}; a pnnx .param starts with {MAGIC}")

        second = next(lines, None)
        if second is None:
            raise self.error("missing line 2: '<operator count> <operand count>'", 2)
        counts = second[1].split()
        if len(counts) != 2 or not all(_COUNT_RE.match(c) for c in counts):
            raise self.error(f"expected '<operator count> <operand count>', got {second[1].strip()[:80]!r}")
        n_ops, n_operands = int(counts[0]), int(counts[1])
        if n_ops > MAX_OPERATORS:
            raise self.error(f"operator count {n_ops} exceeds the limit of {MAX_OPERATORS}")
        if n_operands > MAX_OPERANDS:
            raise self.error(f"operand count {n_operands} exceeds the limit of {MAX_OPERANDS}")

        for _lineno, text in lines:
            tokens = text.split()
            if not tokens:
                continue
            if len(self.graph.ops) == n_ops:
                raise self.error(f"more operator lines than the {n_ops} declared on line 2")
            if len(tokens) > MAX_LINE_TOKENS:
                raise self.error(f"{len(tokens)} fields on one line; at most {MAX_LINE_TOKENS} are accepted")
            self.operator(tokens)

        if len(self.graph.ops) != n_ops:
            raise self.error(f"line 2 declares {n_ops} operators but the file has "
                             f"{len(self.graph.ops)} operator lines", 2)
        if len(self.graph.operands) != n_operands:
            raise self.error(f"line 2 declares {n_operands} operands but the operators "
                             f"produce {len(self.graph.operands)}", 2)
        return self.graph

    def operator(self, tokens: list[str]) -> None:
        if len(tokens) < 4:
            raise self.error(f"expected 'type name n_in n_out ...', got only {len(tokens)} field(s)")
        op_type, name = tokens[0], tokens[1]
        n_in, n_out = self.count(tokens[2], "input"), self.count(tokens[3], "output")
        names = tokens[4:4 + n_in + n_out]
        if len(names) < n_in + n_out:
            raise self.error(f"operator {name!r} declares {n_in} input(s) and {n_out} output(s) "
                             f"but only {len(names)} operand name(s) follow")
        for token in names:
            if "=" in token:
                raise self.error(f"operator {name!r}: found {token!r} where an operand name was "
                                 f"expected; n_in/n_out ({n_in} {n_out}) do not match the operands")
        if name in self.op_lines:
            raise self.error(f"duplicate operator name {name!r} (first on line {self.op_lines[name]})")
        self.op_lines[name] = self.lineno

        op = self.graph.new_operator(op_type, name)
        op.line = self.lineno
        for operand_name in names[:n_in]:
            operand = self.produced.get(operand_name)
            if operand is None:
                raise self.error(f"operator {name!r} consumes operand {operand_name!r} "
                                 f"before any operator produces it")
            operand.consumers.append(op)
            op.inputs.append(operand)
        op.inputnames = [""] * n_in
        for operand_name in names[n_in:]:
            if operand_name in self.produced:
                first = self.produced[operand_name].producer
                raise self.error(f"operand {operand_name!r} is produced twice (first by "
                                 f"{first.name!r} on line {first.line})")
            operand = self.graph.new_operand(operand_name)
            operand.producer = op
            op.outputs.append(operand)
            self.produced[operand_name] = operand

        for token in tokens[4 + n_in + n_out:]:
            key, eq, value = token.partition("=")
            if not eq:
                raise self.error(f"operator {name!r}: expected key=value, got {token!r}; "
                                 f"n_in/n_out ({n_in} {n_out}) do not match the operands")
            if key[:1] == "@":
                self.attribute(op, key[1:], value)
            elif key[:1] == "$":
                self.input_name(op, key[1:], value)
            elif key[:1] == "#":
                self.operand_shape(op, key[1:], value)
            else:
                if not key:
                    raise self.error(f"operator {name!r}: parameter with an empty key in {token!r}")
                if key in op.params:
                    raise self.error(f"operator {name!r}: duplicate parameter {key!r}")
                op.params[key] = parse_parameter(value)

    def count(self, token: str, what: str) -> int:
        if not _COUNT_RE.match(token):
            raise self.error(f"the {what} count must be a non-negative integer, got {token!r}")
        return int(token)

    def typed_shape(self, value: str, what: str,
                    allow_unknown: bool) -> tuple[list[int], int, dict[int, str]]:
        """Parse ``(d0,d1,...)suffix``; returns shape, type code and symbolic dims."""
        close = value.rfind(")")
        if not value.startswith("(") or close < 0:
            raise self.error(f"{what}: expected '(shape)dtype', got {value!r}")
        suffix = value[close + 1:]
        if not suffix:
            raise self.error(f"{what}: missing dtype suffix after the shape in {value!r}")
        try:
            code = dtype_from_suffix(suffix)
        except ModelFormatError as e:
            raise self.error(f"{what}: {e.reason}") from None
        inner = value[1:close]
        shape: list[int] = []
        symbols: dict[int, str] = {}
        if inner:
            for i, dim in enumerate(inner.split(",")):
                if _COUNT_RE.match(dim):
                    shape.append(int(dim))
                elif allow_unknown and dim == "?":
                    shape.append(UNKNOWN_DIM)
                elif allow_unknown and dim[:1] == "%" and len(dim) > 1:
                    shape.append(SYMBOLIC_DIM)
                    symbols[i] = dim[1:]
                else:
                    allowed = "a non-negative integer or ?" if allow_unknown else "a non-negative integer"
                    raise self.error(f"{what}: bad dimension {dim!r} in {value!r} (expected {allowed})")
        known = 1
        for d in shape:
            if d >= 0:
                known *= d
        nbytes = known * itemsize(code)
        if nbytes > self.max_tensor_bytes:
            raise self.error(f"{what}: declared size {nbytes} bytes exceeds the limit of "
                             f"{self.max_tensor_bytes} bytes (max_tensor_bytes)")
        return shape, code, symbols

    def attribute(self, op: Operator, key: str, value: str) -> None:
        what = f"operator {op.name!r} attribute {key!r}"
        if not key:
            raise self.error(f"operator {op.name!r}: attribute with an empty name")
        if key in op.attrs:
            raise self.error(f"{what} appears twice")
        shape, code, _ = self.typed_shape(value, what, allow_unknown=False)
        op.attrs[key] = Attribute(code, shape, None)

    def input_name(self, op: Operator, key: str, value: str) -> None:
        if not key:
            raise self.error(f"operator {op.name!r}: input name is empty in '$={value}'")
        if key in op.inputnames:
            raise self.error(f"operator {op.name!r}: input name {key!r} appears twice")
        matches = [i for i, operand in enumerate(op.inputs) if operand.name == value]
        if not matches:
            raise self.error(f"operator {op.name!r}: ${key} names {value!r}, which is not an input")
        for i in matches:  # the same operand twice ($input=0 $other=0): fill the slots in order
            if not op.inputnames[i]:
                op.inputnames[i] = key
                return
        raise self.error(f"operator {op.name!r}: more $names for {value!r} than times it is an input")

    def operand_shape(self, op: Operator, key: str, value: str) -> None:
        operand = next((r for r in op.inputs + op.outputs if r.name == key), None)
        if operand is None:
            raise self.error(f"operator {op.name!r}: #{key} describes an operand that is "
                             f"neither an input nor an output of it")
        previous = self.declared.get(key)
        if previous is not None:
            if previous[0] != value:
                raise self.error(f"operand {key!r} is {value} here but {previous[0]} on line {previous[1]}")
            return
        shape, code, symbols = self.typed_shape(value, f"operand {key!r}", allow_unknown=True)
        operand.shape = shape
        operand.type = code
        for i, symbol in symbols.items():
            operand.params[f"__shape__{i}"] = Parameter(symbol)
        self.declared[key] = (value, self.lineno)
