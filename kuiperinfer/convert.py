"""ONNX and TorchScript models to pnnx's .pnnx.param/.pnnx.bin, with the pnnx converter.

>>> from kuiperinfer.convert import convert
>>> conversion = convert("model.onnx", "out/", input_shapes=[(1, 3, 224, 224)])
>>> conversion.param_path                          # out/model.pnnx.param, .pnnx.bin beside it

The converter is the ``pnnx`` binary inside the ``pnnx`` package. It reads ONNX without
PyTorch and TorchScript with the libtorch built into it; the package's Python wrapper,
which imports torch and then imports the Python file pnnx generates, is not used. So
``pip install --no-deps pnnx`` is all it takes (the package declares torch, which pip
would otherwise install; the ``kuiperinfer[convert]`` extra pins the CPU torch 2.13.0).
pnnx runs in a temporary directory on a copy of the model, and only the
.pnnx.param/.pnnx.bin pair is kept.

:func:`cached_conversion` is what ``kuiperinfer.load("model.onnx", input_shapes=...)``
uses: a cache keyed by the file's content, the shapes and the pnnx version, under
``converted/`` in kuiperinfer's cache directory (:func:`kuiperinfer.settings.cache_dir`).

Input shapes: an ONNX file records its inputs' names, types and dimensions, read here
without the ``onnx`` package (:func:`onnx_inputs`). Shapes are needed only for
dimensions the file leaves open other than the first, the batch, which kuiperinfer
runs at any size anyway. A TorchScript file records no shapes, except the example
inputs that ``torch.jit.trace`` keeps and pnnx then uses. ``dynamic_shapes`` (pnnx's
``inputshape2``) are a second set of shapes: dimensions that differ between the two
stay open in the converted model instead of being fixed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kuiperinfer.errors import ConversionError
from kuiperinfer.pnnx.dtypes import DATA_TYPES
from kuiperinfer.pnnx.ir import INPUT_TYPE
from kuiperinfer.settings import cache_dir

ONNX_SUFFIXES = (".onnx",)
TORCHSCRIPT_SUFFIXES = (".pt", ".torchscript")
TORCH_EXPORT_SUFFIXES = (".pt2",)
CONVERTIBLE_SUFFIXES = ONNX_SUFFIXES + TORCHSCRIPT_SUFFIXES + TORCH_EXPORT_SUFFIXES

PNNX_INSTALL = "pip install --no-deps pnnx"
CACHE_FORMAT = 1
"""Part of every cache key: raising it makes earlier conversions stale."""

INPUT_DATA_TYPES = tuple(t for t in DATA_TYPES if t.code and not t.torch.startswith("torch.complex"))
"""The element types an input shape may name for pnnx (``[1,77]i64``): pnnx's, less the complex ones."""
_TYPE_NAMES = {name: t.suffix for t in INPUT_DATA_TYPES for name in (t.suffix, t.name)}
"""An input type by pnnx's suffix or its NumPy name (``i64``, ``int64``)."""
_ONNX_ELEM_TYPES = {t.onnx: t.suffix for t in INPUT_DATA_TYPES}
"""ONNX TensorProto.DataType numbers of the input types."""
_ERROR_LINES = 12
"""How many lines of pnnx's output an error quotes."""
_NOISE_PREFIXES = ("frame #", "Exception raised from", "#####", "┌", "├", "└", "│")
"""Lines of pnnx's output that say nothing about a failure: backtraces, passes, tables."""

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OnnxInput:
    """A graph input of an ONNX file: name, element type and dimensions (None where open)."""

    name: str
    type: str | None
    """pnnx's name of the element type (``f32``, ``i64``), None for a type pnnx does not take."""
    dims: tuple[int | str | None, ...]
    """A fixed size, the symbolic name of an open dimension, or None for an unnamed open one."""

    @property
    def open_dims(self) -> list[int]:
        """Indices of the dimensions whose size the file leaves open."""
        return [i for i, d in enumerate(self.dims) if not isinstance(d, int)]

    def dims_text(self) -> str:
        return "(" + ", ".join(str(d) if isinstance(d, int) else (d or "?") for d in self.dims) + ")"


@dataclass(frozen=True)
class Conversion:
    """The outcome of :func:`convert`: where the pair is and what pnnx recorded."""

    source: Path
    param_path: Path
    bin_path: Path
    input_names: tuple[str, ...]
    """The converted model's input names (pnnx names them ``in0``, ``in1``... for ONNX)."""
    input_shapes: tuple[Shape, ...]
    """Input shapes as pnnx recorded them, -1 for a dimension left open."""
    source_input_names: tuple[str, ...]
    """The inputs' names in the ONNX file, in the same order (empty for TorchScript)."""
    pnnx_version: str

    @property
    def dynamic(self) -> bool:
        """True when an input dimension other than the batch was left open."""
        return any(d < 0 for shape in self.input_shapes for d in shape[1:])


# -- input shapes ----------------------------------------------------------------------

def parse_input_shape(text: str) -> tuple[Shape, str | None]:
    """``"1,3,224,224"`` or ``"1,77:i64"`` (or ``[1,77]i64``, as pnnx writes it) -> shape, type."""
    match = re.fullmatch(r"\s*\[?([\d,\s]*?)\]?\s*(?::?\s*([A-Za-z]\w*))?\s*", text)
    if not match:
        raise ValueError(f"expected sizes separated by commas with an optional :type, got {text!r}")
    sizes, type_name = match.groups()
    try:
        shape = tuple(int(size) for size in sizes.replace(" ", "").split(",") if size)
    except ValueError:
        raise ValueError(f"expected whole numbers separated by commas, got {text!r}") from None
    if not shape or min(shape) < 1:
        raise ValueError(f"every size must be 1 or more, got {text!r}")
    return shape, _pnnx_type(type_name) if type_name else None


def _pnnx_type(name: str) -> str:
    if name.lower() not in _TYPE_NAMES:
        raise ValueError(f"unknown element type {name!r}; pnnx takes "
                         f"{', '.join(t.suffix for t in INPUT_DATA_TYPES)} (or float32, int64, ...)")
    return _TYPE_NAMES[name.lower()]


def _checked_shapes(shapes: Sequence[Sequence[int]] | None, what: str) -> list[Shape] | None:
    if shapes is None:
        return None
    checked = []
    for shape in shapes:
        try:
            values = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ConversionError(f"{what}: expected sequences of whole numbers, got {shape!r}") from None
        if not values or min(values) < 1:
            raise ConversionError(f"{what}: every size must be 1 or more, got {values}")
        checked.append(values)
    return checked


# -- reading an ONNX file's inputs ----------------------------------------------------

def onnx_inputs(path: str | os.PathLike) -> list[OnnxInput]:
    """The graph inputs of an ONNX model (initializers listed as inputs left out).

    Reads the protobuf fields it needs (ModelProto.graph, GraphProto.input and the
    initializers' names) and skips everything else without copying it.
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        graphs = [value for field, value in _fields(memoryview(data)) if field == 7]
        if not graphs:
            raise ConversionError("not an ONNX model: it has no graph", str(path))
        declared: list[OnnxInput] = []
        initializers: set[str] = set()
        for field, value in _fields(graphs[-1]):
            if field == 11:
                declared.append(_value_info(value))
            elif field == 5:
                initializers.update(_string(v) for f, v in _fields(value) if f == 8)
    except _ProtobufError as exc:
        raise ConversionError(f"not a readable ONNX model ({exc})", str(path)) from None
    return [i for i in declared if i.name not in initializers]


class _ProtobufError(Exception):
    pass


def _fields(buffer: memoryview) -> Iterator[tuple[int, Any]]:
    """(field number, value) of a protobuf message: ints for varints, memoryviews for bytes."""
    position, end = 0, len(buffer)
    while position < end:
        key, position = _varint(buffer, position)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _varint(buffer, position)
        elif wire_type == 1:
            value, position = buffer[position:position + 8], position + 8
        elif wire_type == 2:
            length, position = _varint(buffer, position)
            value, position = buffer[position:position + length], position + length
        elif wire_type == 5:
            value, position = buffer[position:position + 4], position + 4
        else:
            raise _ProtobufError(f"unsupported wire type {wire_type}")
        if position > end or field == 0:
            raise _ProtobufError("truncated or malformed message")
        yield field, value


def _varint(buffer: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise _ProtobufError("truncated or malformed varint")
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _string(value: Any) -> str:
    if not isinstance(value, memoryview):
        raise _ProtobufError("expected a string field")
    return bytes(value).decode("utf-8", "replace")


def _value_info(message: memoryview) -> OnnxInput:
    """ValueInfoProto(name=1, type=2: TypeProto(tensor_type=1: elem_type=1, shape=2))."""
    name, elem_type, dims = "", 0, []
    for field, value in _fields(message):
        if field == 1:
            name = _string(value)
        elif field == 2:
            for type_field, tensor in _fields(value):
                if type_field != 1:
                    continue
                for tensor_field, tensor_value in _fields(tensor):
                    if tensor_field == 1:
                        elem_type = tensor_value
                    elif tensor_field == 2:
                        dims = [_dimension(d) for f, d in _fields(tensor_value) if f == 1]
    return OnnxInput(name, _ONNX_ELEM_TYPES.get(elem_type), tuple(dims))


def _dimension(message: memoryview) -> int | str | None:
    """TensorShapeProto.Dimension(dim_value=1, dim_param=2)."""
    for field, value in _fields(message):
        if field == 1 and isinstance(value, int) and 0 < value < 2 ** 62:
            return value
        if field == 2:
            return _string(value) or None
    return None


# -- running pnnx ---------------------------------------------------------------------

def find_pnnx() -> Path:
    """The pnnx binary inside the installed ``pnnx`` package (found without importing it)."""
    spec = importlib.util.find_spec("pnnx")
    if spec is not None and spec.submodule_search_locations:
        for directory in spec.submodule_search_locations:
            for name in ("pnnx", "pnnx.exe"):
                binary = Path(directory) / name
                if binary.is_file():
                    return binary
    raise ConversionError(f"the pnnx converter is not installed; install it with: {PNNX_INSTALL} "
                          f"(its binary needs no PyTorch)")


def pnnx_version() -> str:
    try:
        return importlib.metadata.version("pnnx")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def convert(model: str | os.PathLike, output_dir: str | os.PathLike | None = None, *,
            input_shapes: Sequence[Sequence[int]] | None = None,
            dynamic_shapes: Sequence[Sequence[int]] | None = None,
            input_types: Sequence[str | None] | None = None,
            name: str | None = None) -> Conversion:
    """Convert an ONNX (.onnx) or TorchScript (.pt, .torchscript) file with pnnx.

    Writes ``NAME.pnnx.param`` and ``NAME.pnnx.bin`` into ``output_dir`` (default: the
    model's directory; ``name`` defaults to the model's file name without its suffix).
    ``input_shapes`` gives one shape per input, in the model's input order;
    ``dynamic_shapes`` a second shape per input whose differing dimensions stay open;
    ``input_types`` pnnx's element type per input (``f32``, ``i64``...; an ONNX file's
    own types by default, else f32). Raises :class:`ConversionError` when pnnx is not
    installed, when an input needs a shape, or with pnnx's own message when it fails.
    """
    source = Path(model)
    if not source.is_file():
        raise ConversionError("no such file", str(source))
    suffix = source.suffix.lower()
    if suffix not in CONVERTIBLE_SUFFIXES:
        raise ConversionError(f"cannot convert a {suffix or 'suffix-less'} file; pnnx converts "
                              f"{', '.join(CONVERTIBLE_SUFFIXES)} models", str(source))
    shapes = _checked_shapes(input_shapes, "input_shapes")
    shapes2 = _checked_shapes(dynamic_shapes, "dynamic_shapes")
    types = list(input_types) if input_types is not None else None
    source_inputs: list[OnnxInput] = []
    if suffix in ONNX_SUFFIXES:
        source_inputs = onnx_inputs(source)
        shapes = _onnx_shapes(source, source_inputs, shapes)
        if types is None:
            types = [i.type for i in source_inputs]
    if shapes2 is not None and (shapes is None or len(shapes2) != len(shapes) or any(
            len(a) != len(b) for a, b in zip(shapes, shapes2))):
        raise ConversionError("dynamic_shapes needs input_shapes, one shape of the same rank "
                                  "for each input", str(source))
    if types is not None and shapes is not None and len(types) != len(shapes):
        raise ConversionError(f"{len(types)} input types for {len(shapes)} input shapes", str(source))
    binary = find_pnnx()
    output = Path(output_dir) if output_dir is not None else source.parent
    stem = name or source.name[:-len(source.suffix)]
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kuiper-convert-") as work:
        workdir = Path(work)
        shutil.copyfile(source, workdir / f"model{suffix}")
        result = _run_pnnx(binary, workdir, suffix, shapes, shapes2, types)
        param, weights = workdir / "model.pnnx.param", workdir / "model.pnnx.bin"
        if result.returncode != 0 or not param.is_file() or not weights.is_file():
            raise ConversionError(_failure_message(source, result), str(source))
        param_path, bin_path = output / f"{stem}.pnnx.param", output / f"{stem}.pnnx.bin"
        shutil.move(param, param_path)
        shutil.move(weights, bin_path)
    names, recorded = _recorded_inputs(param_path)
    return Conversion(source, param_path, bin_path, tuple(names), tuple(recorded),
                      tuple(i.name for i in source_inputs), pnnx_version())


def _onnx_shapes(source: Path, inputs: list[OnnxInput], shapes: list[Shape] | None) -> list[Shape]:
    """The shapes to give pnnx: the user's, checked against the file, or the file's own."""
    if shapes is None:
        need = [i for i in inputs if any(d > 0 for d in i.open_dims)]
        if need:
            listed = ", ".join(f"{i.name!r} {i.dims_text()}" for i in need)
            raise ConversionError(
                f"input{'s' if len(need) > 1 else ''} {listed} "
                f"{'have' if len(need) > 1 else 'has'} open dimensions besides the batch and "
                f"need{'' if len(need) > 1 else 's'} a shape. Give one shape per input, in the order "
                f"{[i.name for i in inputs]} (kuiper convert --input-shape 1,3,224,224; "
                f"load(..., input_shapes=[(1, 3, 224, 224)]))", str(source))
        return [tuple(1 if not isinstance(d, int) else d for d in i.dims) for i in inputs]
    if len(shapes) != len(inputs):
        raise ConversionError(f"{len(shapes)} input shape(s) given, the model has {len(inputs)} "
                              f"input(s): " + ", ".join(f"{i.name!r} {i.dims_text()}" for i in inputs),
                              str(source))
    for given, declared in zip(shapes, inputs):
        if len(given) != len(declared.dims) or any(
                isinstance(d, int) and d != g for g, d in zip(given, declared.dims)):
            raise ConversionError(f"input {declared.name!r} is {declared.dims_text()} in the model; "
                                  f"the shape given, {given}, does not fit it", str(source))
    return shapes


def _shape_argument(shapes: Sequence[Shape], types: Sequence[str | None] | None) -> str:
    """pnnx's ``[1,3,224,224]f32,[1,77]i64``."""
    types = types or [None] * len(shapes)
    return ",".join("[" + ",".join(map(str, shape)) + "]" + (t or "f32")
                    for shape, t in zip(shapes, types))


def _run_pnnx(binary: Path, workdir: Path, suffix: str, shapes: list[Shape] | None,
              shapes2: list[Shape] | None, types: list[str | None] | None) -> subprocess.CompletedProcess:
    command = [str(binary), f"model{suffix}", "device=cpu"]
    if shapes is not None:
        command.append("inputshape=" + _shape_argument(shapes, types))
    if shapes2 is not None:
        command.append("inputshape2=" + _shape_argument(shapes2, types))
    try:
        return subprocess.run(command, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, errors="replace", check=False)
    except OSError as exc:
        raise ConversionError(f"could not run {binary}: {exc}") from exc


def _failure_message(source: Path, result: subprocess.CompletedProcess) -> str:
    """pnnx's own words, without its echo of the options, backtraces and progress lines."""
    lines = []
    for line in (result.stderr + "\n" + result.stdout).splitlines():
        line = line.strip()
        if line.startswith("-----"):  # pnnx's sample code for making a TorchScript file follows
            break
        if not line or re.fullmatch(r"\w+ =( .*)?", line) or line.startswith(_NOISE_PREFIXES):
            continue
        lines.append(line if len(line) <= 300 else line[:300] + "...")
    said = "\n  ".join(lines[:_ERROR_LINES]) or f"no message, exit status {result.returncode}"
    message = f"pnnx failed (exit status {result.returncode}):\n  {said}"
    if source.suffix.lower() in TORCH_EXPORT_SUFFIXES or _is_torch_export_archive(source):
        message = (f"pnnx {pnnx_version()} cannot read torch.export archives (.pt2), only TorchScript "
                   f"and ONNX: save the model with torch.jit.trace(model, example).save('model.pt') "
                   f"or torch.onnx.export, and convert that. " + message)
    return message


def _is_torch_export_archive(path: Path) -> bool:
    """A zip holding ``archive_format`` and a ``models/`` JSON, as ``torch.export.save`` writes."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return any(n.endswith("/archive_format") for n in names) and any("/models/" in n for n in names)


def _recorded_inputs(param_path: Path) -> tuple[list[str], list[Shape]]:
    """The pnnx.Input operators' names and shapes (-1 for ``?``) from the .param text."""
    from kuiperinfer.inspect import summarize

    inputs = [op for op in summarize(param_path).operators if op.type == INPUT_TYPE]
    return [op.name for op in inputs], [tuple(op.output_shapes[0]) if op.output_shapes else ()
                                        for op in inputs]


# -- the conversion cache -------------------------------------------------------------

def cache_key(model: str | os.PathLike, input_shapes: Sequence[Shape] | None,
              dynamic_shapes: Sequence[Shape] | None) -> str:
    """SHA-256 of the model's bytes, the shapes, the pnnx version and our cache format."""
    digest = hashlib.sha256()
    with open(model, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    options = {"shapes": input_shapes, "shapes2": dynamic_shapes, "pnnx": pnnx_version(),
               "format": CACHE_FORMAT, "suffix": Path(model).suffix.lower()}
    digest.update(json.dumps(options, sort_keys=True).encode())
    return digest.hexdigest()


def cached_conversion(model: str | os.PathLike,
                      input_shapes: Sequence[Sequence[int]] | None = None,
                      dynamic_shapes: Sequence[Sequence[int]] | None = None) -> Path:
    """The .pnnx.param of ``model`` converted with these shapes, converting on first use."""
    shapes = _checked_shapes(input_shapes, "input_shapes")
    shapes2 = _checked_shapes(dynamic_shapes, "dynamic_shapes")
    if not Path(model).is_file():
        raise ConversionError("no such file", str(model))
    entry = cache_dir("converted") / cache_key(model, shapes, shapes2)[:40]
    param_path = entry / "model.pnnx.param"
    if param_path.is_file() and (entry / "model.pnnx.bin").is_file():
        return param_path
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".incomplete-", dir=entry.parent))
    try:
        convert(model, staging, input_shapes=shapes, dynamic_shapes=shapes2, name="model")
        try:
            staging.rename(entry)
        except OSError:
            if not param_path.is_file():  # not another process that finished the same conversion first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return param_path


def resolve_model(path: str | os.PathLike, bin_path: str | os.PathLike | None,
                  input_shapes: Sequence[Sequence[int]] | None,
                  dynamic_shapes: Sequence[Sequence[int]] | None) -> str | os.PathLike:
    """What ``kuiperinfer.load`` reads: a .pnnx.param as given, or an ONNX/TorchScript file's
    cached conversion. Shapes only make sense for the latter."""
    if Path(path).suffix.lower() in CONVERTIBLE_SUFFIXES:
        if bin_path is not None:
            raise ConversionError("bin_path applies to a .pnnx.param, not to a model pnnx converts",
                                  str(path))
        return cached_conversion(path, input_shapes, dynamic_shapes)
    if input_shapes is not None or dynamic_shapes is not None:
        raise ConversionError("input_shapes and dynamic_shapes apply to ONNX and TorchScript models "
                              "(" + ", ".join(CONVERTIBLE_SUFFIXES) + "), which pnnx converts first",
                              str(path))
    return path
