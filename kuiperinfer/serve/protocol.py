"""The Open Inference Protocol's messages (KServe v2, Triton): parsing, checking, encoding.

Nothing here does I/O: :func:`parse_infer_request` turns a REST request body into arrays
checked against a model's signature, :func:`encode_infer_response` turns outputs into a
body, and every problem with a request is a :class:`ProtocolError` carrying its HTTP status.
The gRPC service (:mod:`kuiperinfer.serve.rpc`) reads its messages through the same checks
(:func:`input_spec`, :func:`checked_shape`, :func:`array_from_raw`, :func:`array_from_values`,
:func:`model_inputs`, :func:`requested_outputs`, :func:`output_tensor`): one place decides
what a valid request is, whichever way it came.

Tensors travel as JSON (``"data"``: the values in row-major order, flat or nested) or,
with the binary tensor data extension, as raw little-endian bytes after the JSON header:
the ``Inference-Header-Content-Length`` header says where the JSON ends, and each binary
tensor says its size in ``parameters.binary_data_size``, in the order of the tensors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.pnnx.dtypes import DATA_TYPES

HEADER_LENGTH = "Inference-Header-Content-Length"
"""The binary tensor data extension's header: bytes of JSON before the binary tensors."""


def _named(dtype: np.dtype) -> str:
    """The protocol's name of a kind of number: BOOL, else UINT, INT or FP and the bits (``FP32``)."""
    kind = {"b": "BOOL", "u": "UINT", "i": "INT", "f": "FP"}[dtype.kind]
    return kind if dtype.kind == "b" else f"{kind}{8 * dtype.itemsize}"


_NUMBERS = [t.numpy for t in DATA_TYPES if t.numpy is not None and t.numpy.kind in "buif"]
_NUMBERS += [np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8")]   # the protocol has them, pnnx not
DATATYPES: dict[str, np.dtype | None] = {
    **{_named(d): d for d in sorted(_NUMBERS, key=lambda d: ("buif".index(d.kind), d.itemsize))},
    "BF16": None, "BYTES": None,
}
"""The protocol's tensor datatypes and their little-endian NumPy dtypes (None: no numeric array):
pnnx's numbers under the protocol's names, in the protocol's order, then its others."""

_VALUE_KINDS = {"b": "b", "u": "iu", "i": "iu", "f": "iuf"}
"""For each NumPy kind of a datatype, the kinds of listed values (JSON's ``data``, gRPC's
typed contents) it may hold."""


class ProtocolError(Exception):
    """A request the server refuses: ``status`` is the HTTP status, the message its error body."""

    def __init__(self, message: str, status: int = 400):
        self.status = status
        super().__init__(message)


def datatype_of(dtype: np.dtype) -> str:
    """The protocol's name of a NumPy dtype (``float32`` -> ``FP32``)."""
    for name, known in DATATYPES.items():
        if known is not None and known.kind == dtype.kind and known.itemsize == dtype.itemsize:
            return name
    raise ValueError(f"no Open Inference Protocol datatype for {dtype}")


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output as the protocol describes it; -1 for a dimension of any size."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    binary: bool


@dataclass(frozen=True)
class InferRequest:
    """A checked inference request: one array per model input, in the model's order."""

    id: str | None
    inputs: tuple[np.ndarray, ...]
    outputs: tuple[RequestedOutput, ...]
    """The outputs to return, in order (every output when the request names none)."""


def _error_text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def header_length(value: str | None, body_size: int) -> int | None:
    """The ``Inference-Header-Content-Length`` header checked against the body's size."""
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        raise ProtocolError(f"{HEADER_LENGTH} must be a whole number, got {_error_text(value)}") from None
    if not 0 <= length <= body_size:
        raise ProtocolError(f"{HEADER_LENGTH} is {length}, the body has {body_size} bytes")
    return length


def parse_infer_request(body: bytes, json_length: int | None, model_name: str,
                        inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> InferRequest:
    """Parse and check a REST inference request for a model with these inputs and outputs.

    ``json_length`` is the ``Inference-Header-Content-Length`` (None: the body is all
    JSON). Raises :class:`ProtocolError` (400) for anything that does not fit the model.
    """
    header_end = len(body) if json_length is None else json_length
    try:
        message = json.loads(bytes(body[:header_end]))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"the request is not valid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("the request must be a JSON object")
    request_id = message.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(f"'id' must be a string, got {_error_text(request_id)}")
    parameters = _parameters(message, "the request")
    given = message.get("inputs")
    if not isinstance(given, list):
        raise ProtocolError("the request must have a non-empty list of 'inputs'")

    specs = {spec.name: spec for spec in inputs}
    arrays: dict[str, np.ndarray] = {}
    binary = memoryview(body)[header_end:]
    offset = 0
    for tensor in given:
        if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
            raise ProtocolError("each input must be an object with a 'name'")
        spec = input_spec(tensor["name"], specs, arrays, model_name)
        shape = checked_shape(tensor.get("datatype"), tensor.get("shape"), spec, model_name)
        array, used = _tensor_data(tensor, spec, shape, binary[offset:])
        offset += used
        arrays[spec.name] = array
    if offset != len(binary):
        raise ProtocolError(f"the body has {len(binary)} bytes of binary tensor data, the inputs' "
                            f"binary_data_size add up to {offset}")
    binary_default = _flag(parameters, "binary_data_output", "the request")
    requested = message.get("outputs")
    if requested is not None:
        if not isinstance(requested, list):
            raise ProtocolError("'outputs' must be a list")
        for entry in requested:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ProtocolError("each requested output must be an object with a 'name'")
        requested = [(entry["name"], _parameters(entry, f"output {entry['name']!r}")) for entry in requested]
    return InferRequest(request_id, model_inputs(arrays, inputs, model_name),
                        requested_outputs(requested, outputs, model_name, binary_default))


def input_spec(name: str, specs: Mapping[str, TensorSpec], seen: Mapping[str, Any], model_name: str) -> TensorSpec:
    """The model's input ``name``, which the request has not given before."""
    if name not in specs:
        raise ProtocolError(f"unexpected inference input {name!r} for model {model_name!r}; "
                            f"its inputs are {list(specs)}")
    if name in seen:
        raise ProtocolError(f"input {name!r} is given twice")
    return specs[name]


def model_inputs(arrays: Mapping[str, np.ndarray], inputs: Sequence[TensorSpec],
                 model_name: str) -> tuple[np.ndarray, ...]:
    """The request's arrays in the model's order, once every input is there and they agree
    on the batch (their first dimension)."""
    if not arrays:
        raise ProtocolError("the request must have a non-empty list of 'inputs'")
    missing = [spec.name for spec in inputs if spec.name not in arrays]
    if missing:
        raise ProtocolError(f"model {model_name!r} expects inputs {[spec.name for spec in inputs]}; "
                            f"missing {missing}")
    batches = {array.shape[0] for array in arrays.values()}
    if len(batches) > 1:
        raise ProtocolError(f"the inputs' first dimensions, the batch, differ: {sorted(batches)}")
    return tuple(arrays[spec.name] for spec in inputs)


def _parameters(message: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    parameters = message.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError(f"'parameters' of {where} must be an object")
    return parameters


def _flag(parameters: Mapping[str, Any], key: str, where: str) -> bool:
    value = parameters.get(key, False)
    if not isinstance(value, bool):
        raise ProtocolError(f"parameter {key!r} of {where} must be true or false, got {_error_text(value)}")
    return value


def checked_shape(datatype: Any, shape: Any, spec: TensorSpec, model_name: str) -> tuple[int, ...]:
    """An input's ``datatype`` and ``shape`` as the request gives them, checked against the model's."""
    if datatype not in DATATYPES:
        raise ProtocolError(f"input {spec.name!r} has unknown datatype {_error_text(datatype)}; "
                            f"the protocol's are {', '.join(DATATYPES)}")
    if datatype != spec.datatype:
        raise ProtocolError(f"input {spec.name!r} has datatype {datatype}, model {model_name!r} "
                            f"expects {spec.datatype}")
    if (not isinstance(shape, list) or
            not all(isinstance(d, int) and not isinstance(d, bool) for d in shape)):
        raise ProtocolError(f"input {spec.name!r} needs a 'shape', a list of whole numbers")
    fits = len(shape) == len(spec.shape) and all(e in (-1, d) for e, d in zip(spec.shape, shape))
    if not fits or min(shape, default=1) < 1:
        raise ProtocolError(f"input {spec.name!r} has shape {shape}, model {model_name!r} expects "
                            f"{list(spec.shape)} (-1: any size from 1)")
    return tuple(shape)


def _tensor_data(tensor: Mapping[str, Any], spec: TensorSpec, shape: tuple[int, ...],
                 binary: memoryview) -> tuple[np.ndarray, int]:
    """The input's values as an array of its shape, and how many binary bytes they took."""
    parameters = _parameters(tensor, f"input {spec.name!r}")
    size = parameters.get("binary_data_size")
    if size is not None:
        if "data" in tensor:
            raise ProtocolError(f"input {spec.name!r} has both 'data' and binary_data_size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ProtocolError(f"binary_data_size of input {spec.name!r} must be a whole number")
        expected = raw_size(spec, shape)
        if size != expected:
            raise ProtocolError(f"input {spec.name!r} of shape {list(shape)} and datatype "
                                f"{spec.datatype} takes {expected} bytes, binary_data_size says {size}")
        if size > len(binary):
            raise ProtocolError(f"input {spec.name!r} needs {size} bytes of binary data, "
                                f"{len(binary)} are left in the body")
        return array_from_raw(binary[:size], spec, shape, "binary_data_size says"), size
    if "data" not in tensor:
        raise ProtocolError(f"input {spec.name!r} has no 'data' and no binary_data_size")
    data = tensor["data"]
    if not isinstance(data, list):
        raise ProtocolError(f"'data' of input {spec.name!r} must be a list of values")
    try:
        values = np.array(data)
    except (ValueError, OverflowError, RecursionError):
        raise ProtocolError(f"'data' of input {spec.name!r} is not a regular array of numbers") from None
    return array_from_values(values, spec, shape, "'data'"), 0


def raw_size(spec: TensorSpec, shape: tuple[int, ...]) -> int:
    """Bytes the raw values of an input of this shape take."""
    dtype = DATATYPES[spec.datatype]
    assert dtype is not None, "models only declare numeric inputs"
    return math.prod(shape) * dtype.itemsize


def array_from_raw(raw: memoryview | bytes, spec: TensorSpec, shape: tuple[int, ...], given: str) -> np.ndarray:
    """An input's raw little-endian values (binary tensor data, gRPC's raw contents) as an
    array of its shape; ``given`` names where the size came from, for the error."""
    expected = raw_size(spec, shape)
    if len(raw) != expected:
        raise ProtocolError(f"input {spec.name!r} of shape {list(shape)} and datatype "
                            f"{spec.datatype} takes {expected} bytes, {given} {len(raw)}")
    dtype = DATATYPES[spec.datatype]
    array = np.frombuffer(raw, dtype=dtype).reshape(shape)
    if dtype.kind == "b":
        return array != 0
    if not array.flags.aligned:  # the JSON header's length decides where the values start
        return array.copy()
    return array


def array_from_values(values: np.ndarray, spec: TensorSpec, shape: tuple[int, ...], given: str) -> np.ndarray:
    """An input's values listed one by one (JSON's ``data``, gRPC's typed contents; ``given``
    names which) as an array of its shape and datatype, refused unless they fit it."""
    dtype = DATATYPES[spec.datatype]
    assert dtype is not None, "models only declare numeric inputs"
    count = math.prod(shape)
    if values.size != count:
        raise ProtocolError(f"input {spec.name!r} of shape {list(shape)} needs {count} values, "
                            f"{given} has {values.size}")
    if values.dtype.kind not in _VALUE_KINDS[dtype.kind]:
        raise ProtocolError(f"{given} of input {spec.name!r} does not hold {spec.datatype} values")
    if dtype.kind in "iu" and values.size:
        limits = np.iinfo(dtype)
        if values.min() < limits.min or values.max() > limits.max:
            raise ProtocolError(f"{given} of input {spec.name!r} has values outside {spec.datatype}")
    return values.astype(dtype).reshape(shape)


def requested_outputs(requested: Sequence[tuple[str, Mapping[str, Any]]] | None, outputs: Sequence[TensorSpec],
                      model_name: str, binary_default: bool = False) -> tuple[RequestedOutput, ...]:
    """The outputs a request asks for, each a name and its parameters (None: every output)."""
    if requested is None:
        return tuple(RequestedOutput(spec.name, binary_default) for spec in outputs)
    known = [spec.name for spec in outputs]
    chosen: list[RequestedOutput] = []
    for name, parameters in requested:
        if name not in known:
            raise ProtocolError(f"unexpected inference output {name!r} for model {model_name!r}; "
                                f"its outputs are {known}")
        if "classification" in parameters:
            raise ProtocolError("the classification extension is not supported; request the "
                                "output's values")
        binary = parameters.get("binary_data", binary_default)
        if not isinstance(binary, bool):
            raise ProtocolError(f"binary_data of output {name!r} must be true or false")
        chosen.append(RequestedOutput(name, binary))
    return tuple(chosen)


def output_tensor(array: np.ndarray) -> tuple[str, list[int], np.ndarray]:
    """An output's datatype, shape and values in the protocol's little-endian layout."""
    array = np.asarray(array)
    datatype = datatype_of(array.dtype)
    return datatype, list(array.shape), np.ascontiguousarray(array, dtype=DATATYPES[datatype])


def encode_infer_response(model_name: str, request: InferRequest,
                          outputs: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers: JSON, or JSON then binary tensors when any is binary."""
    described: list[dict[str, Any]] = []
    binaries: list[bytes] = []
    for wanted in request.outputs:
        datatype, shape, values = output_tensor(outputs[wanted.name])
        entry: dict[str, Any] = {"name": wanted.name, "datatype": datatype, "shape": shape}
        if wanted.binary:
            raw = values.tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            binaries.append(raw)
        else:
            entry["data"] = values.ravel().tolist()
        described.append(entry)
    response: dict[str, Any] = {"model_name": model_name, "model_version": "1"}
    if request.id is not None:
        response["id"] = request.id
    response["outputs"] = described
    header = json.dumps(response, separators=(",", ":")).encode()
    if not binaries:
        return header, {"Content-Type": "application/json"}
    return b"".join([header, *binaries]), {"Content-Type": "application/octet-stream",
                                            HEADER_LENGTH: str(len(header))}
