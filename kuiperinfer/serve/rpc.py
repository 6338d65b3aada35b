"""The gRPC front end: the Open Inference Protocol's ``inference.GRPCInferenceService``.

The same :class:`~kuiperinfer.serve.server.ModelServer` answers as over HTTP, on the same
event loop, through the same batchers and the same checks of a request
(:mod:`kuiperinfer.serve.protocol`); its refusals become gRPC status codes with the same
messages: INVALID_ARGUMENT (HTTP's 400), NOT_FOUND (404), UNAVAILABLE (503: a model
unavailable or its queue full, the server stopping), INTERNAL (500: the model failed).

The messages come from ``grpc_service.proto`` beside this module, compiled with
grpcio-tools' protoc when this module first needs them (some tens of milliseconds) into a
descriptor pool of their own: nothing generated is stored, the classes always match the
installed protobuf, and they cannot clash with another copy of the protocol in the same
process (tritonclient's). The service is served through grpcio's generic handlers, so the
request bytes are parsed here and a message that does not parse is INVALID_ARGUMENT too.

Tensors travel as ``raw_input_contents`` (each input's little-endian bytes, in the order of
the inputs) or in the typed ``contents`` field of their datatype; outputs always come back as
``raw_output_contents``, as Triton answers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message
from grpc_tools import protoc

from kuiperinfer.errors import KuiperError
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.protocol import (
    InferRequest,
    ProtocolError,
    array_from_raw,
    array_from_values,
    checked_shape,
    input_spec,
    model_inputs,
    output_tensor,
    requested_outputs,
)
from kuiperinfer.serve.server import VERSION, ModelServer

log = logging.getLogger("kuiperinfer.serve")

PROTO = Path(__file__).with_name("grpc_service.proto")
SERVICE = "inference.GRPCInferenceService"

STATUS_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND,
                500: grpc.StatusCode.INTERNAL, 503: grpc.StatusCode.UNAVAILABLE}
"""The gRPC code of each HTTP status a :class:`ProtocolError` carries."""

CONTENTS = {"BOOL": ("bool_contents", np.bool_), "INT8": ("int_contents", np.int32),
            "INT16": ("int_contents", np.int32), "INT32": ("int_contents", np.int32),
            "INT64": ("int64_contents", np.int64), "UINT8": ("uint_contents", np.uint32),
            "UINT16": ("uint_contents", np.uint32), "UINT32": ("uint_contents", np.uint32),
            "UINT64": ("uint64_contents", np.uint64), "FP32": ("fp32_contents", np.float32),
            "FP64": ("fp64_contents", np.float64)}
"""The field of ``InferTensorContents`` holding each numeric datatype's values, and its type
(FP16 and BF16 have none: they travel raw)."""


@functools.cache
def messages() -> dict[str, type[Message]]:
    """The protocol's message classes by name (``ModelInferRequest``), compiled from
    ``grpc_service.proto`` now into a descriptor pool of their own."""
    with tempfile.TemporaryDirectory(prefix="kuiperinfer-grpc-") as folder:
        compiled = Path(folder) / "grpc_service.pb"
        code = protoc.main(["protoc", f"--proto_path={PROTO.parent}", f"--descriptor_set_out={compiled}",
                            PROTO.name])
        if code != 0:
            raise RuntimeError(f"grpcio-tools' protoc could not compile {PROTO} (exit status {code})")
        files = descriptor_pb2.FileDescriptorSet.FromString(compiled.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    [proto] = files.file
    return {message.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{message.name}"))
            for message in proto.message_type}


# -- ModelInfer's messages --------------------------------------------------------------------

def parse_infer_request(message: Any, model: ServedModel) -> InferRequest:
    """A ``ModelInferRequest`` checked against the model, as a REST request is."""
    specs = {spec.name: spec for spec in model.inputs}
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise ProtocolError(f"the request has {len(raw)} raw_input_contents for {len(message.inputs)} inputs; "
                            f"give one per input, in the order of the inputs")
    arrays: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(message.inputs):
        spec = input_spec(tensor.name, specs, arrays, model.name)
        shape = checked_shape(tensor.datatype, list(tensor.shape), spec, model.name)
        given = [field.name for field, _ in tensor.contents.ListFields()]
        if raw:
            if given:
                raise ProtocolError(f"input {spec.name!r} has contents and the request has raw_input_contents; "
                                    f"give the values one way")
            arrays[spec.name] = array_from_raw(raw[i], spec, shape, f"raw_input_contents[{i}] has")
            continue
        if spec.datatype not in CONTENTS:
            raise ProtocolError(f"input {spec.name!r} of datatype {spec.datatype} travels in raw_input_contents only")
        field, dtype = CONTENTS[spec.datatype]
        others = [name for name in given if name != field]
        if others:
            raise ProtocolError(f"input {spec.name!r} of datatype {spec.datatype} takes its values in "
                                f"contents.{field}, not {', '.join(others)}")
        values = np.array(getattr(tensor.contents, field), dtype=dtype)
        arrays[spec.name] = array_from_values(values, spec, shape, f"contents.{field}")
    requested = [(output.name, _parameters(output.parameters)) for output in message.outputs]
    return InferRequest(message.id or None, model_inputs(arrays, model.inputs, model.name),
                        requested_outputs(requested or None, model.outputs, model.name))


def _parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {key: getattr(value, value.WhichOneof("parameter_choice") or "bool_param")
            for key, value in parameters.items()}


def encode_infer_response(model: ServedModel, request: InferRequest, outputs: Mapping[str, np.ndarray]) -> bytes:
    """The serialized ``ModelInferResponse``: the outputs asked for, as raw contents."""
    response = messages()["ModelInferResponse"](model_name=model.name, model_version=VERSION, id=request.id or "")
    for wanted in request.outputs:
        datatype, shape, values = output_tensor(outputs[wanted.name])
        response.outputs.add(name=wanted.name, datatype=datatype, shape=shape)
        response.raw_output_contents.append(values.tobytes())
    return response.SerializeToString()


# -- the service ------------------------------------------------------------------------------

class GrpcService:
    """``inference.GRPCInferenceService`` over a :class:`ModelServer`, on ``host:port``.

    :meth:`bind` creates the server and takes the port (in the serving event loop), the
    ModelServer starts and stops it as one of its front ends; :meth:`begin_stop` stops
    taking calls at once (on SIGTERM, while HTTP drains too), waiting up to ``grace``
    seconds for those in flight.
    """

    def __init__(self, server: ModelServer, host: str = "127.0.0.1", port: int = 8001, grace: float = 30.0):
        self.server = server
        self.host, self.port, self.grace = host, port, grace
        self._grpc: grpc.aio.Server | None = None
        self._stopping: asyncio.Future | None = None

    def bind(self) -> int:
        """Create the gRPC server and bind its port; the port (0 picks a free one).
        Raises OSError when the port cannot be had."""
        classes = messages()
        limit = self.server.settings.max_body_bytes
        self._grpc = grpc.aio.server(options=[
            ("grpc.so_reuseport", 0),   # a port in use is an error, not shared with another server
            ("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", -1)])
        methods = {
            "ServerLive": (self.server_live, "ServerLiveRequest"),
            "ServerReady": (self.server_ready, "ServerReadyRequest"),
            "ModelReady": (self.model_ready, "ModelReadyRequest"),
            "ServerMetadata": (self.server_metadata, "ServerMetadataRequest"),
            "ModelMetadata": (self.model_metadata, "ModelMetadataRequest"),
            "ModelInfer": (self.model_infer, "ModelInferRequest"),
            "ModelConfig": (self.model_config, "ModelConfigRequest"),
            "ModelStatistics": (self.model_statistics, "ModelStatisticsRequest"),
            "RepositoryIndex": (self.repository_index, "RepositoryIndexRequest"),
            "RepositoryModelLoad": (self.repository_load, "RepositoryModelLoadRequest"),
            "RepositoryModelUnload": (self.repository_unload, "RepositoryModelUnloadRequest"),
        }
        handlers = {name: grpc.unary_unary_rpc_method_handler(_answering(method, classes[request]))
                    for name, (method, request) in methods.items()}
        self._grpc.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            self.port = self._grpc.add_insecure_port(f"{host}:{self.port}")
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self.host}:{self.port} for gRPC: {exc}") from None
        if not self.port:
            raise OSError(f"cannot listen on {self.host}:{self.port} for gRPC")
        return self.port

    async def start(self) -> None:
        if self._grpc is None:
            self.bind()
        await self._grpc.start()

    def begin_stop(self) -> None:
        """Stop taking calls now; those in flight have ``grace`` seconds to finish."""
        if self._stopping is None and self._grpc is not None:
            self._stopping = asyncio.ensure_future(self._grpc.stop(self.grace))

    async def stop(self) -> None:
        self.begin_stop()
        if self._stopping is not None:
            await self._stopping

    # -- the RPCs, each a request message in, a response (message or bytes) out --------------

    def _answer(self, name: str, fields: Mapping[str, Any]) -> Message:
        return json_format.ParseDict(fields, messages()[name](), ignore_unknown_fields=True)

    async def server_live(self, request: Any) -> Message:
        return messages()["ServerLiveResponse"](live=self.server.live)

    async def server_ready(self, request: Any) -> Message:
        return messages()["ServerReadyResponse"](ready=self.server.ready)

    async def model_ready(self, request: Any) -> Message:
        try:
            ready = self.server.model_ready(request.name, request.version)
        except ProtocolError:   # an unknown model is not ready
            ready = False
        return messages()["ModelReadyResponse"](ready=ready)

    async def server_metadata(self, request: Any) -> Message:
        return self._answer("ServerMetadataResponse", self.server.server_metadata())

    async def model_metadata(self, request: Any) -> Message:
        return self._answer("ModelMetadataResponse", self.server.model_metadata(request.name, request.version))

    async def model_infer(self, request: Any) -> bytes:
        return await self.server.infer(request.model_name, request.model_version,
                                       functools.partial(parse_infer_request, request), encode_infer_response)

    async def model_config(self, request: Any) -> Message:
        return self._answer("ModelConfigResponse", {"config": self.server.model_config(request.name, request.version)})

    async def model_statistics(self, request: Any) -> Message:
        return self._answer("ModelStatisticsResponse", self.server.statistics(request.name, request.version))

    async def repository_index(self, request: Any) -> Message:
        return self._answer("RepositoryIndexResponse", {"models": self.server.index(request.ready)})

    async def repository_load(self, request: Any) -> Message:
        if request.parameters:
            raise ProtocolError("loading with parameters (a configuration or files in the request) is "
                                "not supported; change the model's folder, then load it")
        await self.server.load(request.model_name)
        return messages()["RepositoryModelLoadResponse"]()

    async def repository_unload(self, request: Any) -> Message:
        await self.server.unload(request.model_name)
        return messages()["RepositoryModelUnloadResponse"]()


def _answering(method: Callable[[Any], Awaitable[Message | bytes]],
               request_class: type[Message]) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
    """An RPC's handler: the request's bytes parsed, ``method`` called, its refusal or
    failure turned into a status code and message, its answer serialized."""
    async def handle(data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            request = request_class.FromString(data)
            answer = await method(request)
            return answer if isinstance(answer, bytes) else answer.SerializeToString()
        except DecodeError as exc:
            code, message = grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a {request_class.__name__}: {exc}"
        except ProtocolError as exc:
            code, message = STATUS_CODES.get(exc.status, grpc.StatusCode.UNKNOWN), str(exc)
        except KuiperError as exc:
            log.error("the model failed on %s: %s", request_class.__name__, exc)
            code, message = grpc.StatusCode.INTERNAL, f"the model failed: {exc}"
        except Exception as exc:  # noqa: BLE001  (answered, and logged for the operator)
            log.exception("internal error on %s", request_class.__name__)
            code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
        await context.abort(code, message)

    return handle
