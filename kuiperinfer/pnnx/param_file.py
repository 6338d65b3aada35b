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

The reader is strict: every malformed line raises
:class:`~kuiperinfer.errors.ParamSyntaxError` naming the file, the line and the
problem. Blank lines after the counts are skipped.
"""

from __future__ import annotations

import io
import os
import re
from typing import BinaryIO

from kuiperinfer.errors import ModelFormatError, ParamSyntaxError
from kuiperinfer.pnnx.ir import Attribute, Graph, Operand, Operator, Parameter, dtype_from_suffix, itemsize, suffix_of

__all__ = ["MAGIC", "MAX_OPERATORS", "MAX_OPERANDS", "MAX_LINE_BYTES", "MAX_LINE_TOKENS",
           "DEFAULT_MAX_TENSOR_BYTES",
           "read_param", "parse_param", "format_param", "write_param"]

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

    :meth:`Graph.load` then fills the attribute data from the archive.
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
            tokens.append(f"{key}={op.params[key].to_string()}")
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


def write_param(graph: Graph, path: str | os.PathLike) -> None:
    """Write :func:`format_param` of ``graph`` to ``path`` (UTF-8, ``\\n`` line ends)."""
    with open(path, "wb") as f:
        f.write(format_param(graph).encode("utf-8"))


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
                op.params[key] = Parameter.parse(value)

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
