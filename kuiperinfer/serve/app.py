"""The HTTP server: an ASGI application (Starlette) speaking the Open Inference Protocol.

Endpoints (``{name}`` a model; each model endpoint also under ``/versions/1``):

    GET  /v2                         server metadata
    GET  /v2/health/live             200 while the server runs
    GET  /v2/health/ready            200 when every model takes requests
    GET  /v2/models/{name}           model metadata: inputs and outputs, datatype and shape
    GET  /v2/models/{name}/ready     200 when the model takes requests
    GET  /v2/models/{name}/config    Triton's model configuration (max_batch_size, ...)
    GET  /v2/models/{name}/stats     Triton's statistics: inferences and executions
    POST /v2/models/{name}/infer     inference, JSON or binary tensors

Every error answer has the protocol's body ``{"error": "..."}``: 400 for a request that
does not fit the model (or a body over the size limit), 404 for an unknown model or
path, 503 when a model's queue is full, 500 when the model itself fails.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import kuiperinfer
from kuiperinfer.errors import InputError, KuiperError
from kuiperinfer.serve.batcher import Batcher
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.protocol import (
    DATATYPES,
    HEADER_LENGTH,
    ProtocolError,
    encode_infer_response,
    header_length,
    parse_infer_request,
)

log = logging.getLogger("kuiperinfer.serve")

_TRITON_TYPES = {datatype: f"TYPE_{datatype}" for datatype, dtype in DATATYPES.items() if dtype is not None}
"""Triton's names of the numeric datatypes in a model configuration."""


@dataclass(frozen=True)
class ServeSettings:
    """How the server batches and what it accepts."""

    max_batch_size: int = 8
    """Samples that requests joined into one run may add up to (1: no joining)."""
    batch_window: float = 0.002
    """Seconds the oldest queued request waits for others to join it."""
    max_queue: int = 64
    """Requests a model may have waiting; more are answered 503."""
    max_body_bytes: int = 64 * 1024 * 1024
    """The largest request body accepted; larger ones are answered 400 unread."""


def create_app(models: Sequence[ServedModel], settings: ServeSettings | None = None) -> Starlette:
    """The ASGI application serving ``models`` (each under its ``name``)."""
    settings = settings or ServeSettings()
    names = [model.name for model in models]
    if len(set(names)) != len(names):
        raise ValueError(f"two models have the same name: {names}")
    batchers = {model.name: Batcher(model, settings.max_batch_size, settings.batch_window,
                                    settings.max_queue) for model in models}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for batcher in batchers.values():
            batcher.start()
        yield
        for batcher in batchers.values():
            await batcher.stop()

    def batcher_for(request: Request) -> Batcher:
        name = request.path_params["name"]
        version = request.path_params.get("version", "1")
        if name not in batchers:
            raise ProtocolError(f"unknown model {name!r}; this server has {names}", 404)
        if version != "1":
            raise ProtocolError(f"model {name!r} has version 1 only, not {version!r}", 404)
        return batchers[name]

    async def server_metadata(request: Request) -> Response:
        return JSONResponse({"name": "kuiperinfer", "version": kuiperinfer.__version__,
                             "extensions": ["binary_tensor_data", "model_configuration",
                                            "statistics"]})

    async def live(request: Request) -> Response:
        return Response(status_code=200)

    async def ready(request: Request) -> Response:
        every = all(batcher.running for batcher in batchers.values())
        return Response(status_code=200 if every else 503)

    async def model_metadata(request: Request) -> Response:
        batcher = batcher_for(request)
        return JSONResponse(batcher.model.metadata(batcher.max_batch_size))

    async def model_ready(request: Request) -> Response:
        return Response(status_code=200 if batcher_for(request).running else 503)

    async def model_config(request: Request) -> Response:
        batcher = batcher_for(request)
        return JSONResponse(triton_config(batcher, settings))

    async def model_stats(request: Request) -> Response:
        batcher = batcher_for(request)
        return JSONResponse({"model_stats": [{
            "name": batcher.model.name, "version": "1",
            "inference_count": batcher.inferences, "execution_count": batcher.executions}]})

    async def infer(request: Request) -> Response:
        batcher = batcher_for(request)
        model = batcher.model
        body = await read_body(request, settings.max_body_bytes)
        json_length = header_length(request.headers.get(HEADER_LENGTH), len(body))
        parsed = await run_in_threadpool(parse_infer_request, body, json_length, model.name,
                                         model.inputs, model.outputs)
        try:
            outputs = await batcher.infer(parsed.inputs)
        except InputError as exc:
            raise ProtocolError(str(exc)) from exc
        named = dict(zip(model.graph.output_names, outputs))
        content, headers = await run_in_threadpool(encode_infer_response, model.name, parsed, named)
        return Response(content, headers=headers)

    model_routes = [
        ("", model_metadata, ["GET"]), ("/ready", model_ready, ["GET"]),
        ("/config", model_config, ["GET"]), ("/stats", model_stats, ["GET"]),
        ("/infer", infer, ["POST"]),
    ]
    routes = [Route("/v2", server_metadata, methods=["GET"]),
              Route("/v2/health/live", live, methods=["GET"]),
              Route("/v2/health/ready", ready, methods=["GET"])]
    for suffix, endpoint, methods in model_routes:
        routes.append(Route("/v2/models/{name}" + suffix, endpoint, methods=methods))
        routes.append(Route("/v2/models/{name}/versions/{version}" + suffix, endpoint, methods=methods))

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        ProtocolError: protocol_error, HTTPException: http_error, KuiperError: model_error,
        Exception: internal_error})
    app.state.batchers = batchers
    return app


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (400) as soon as it is known to be over ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProtocolError(f"the request body of {int(declared)} bytes is over the limit of "
                            f"{limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ProtocolError(f"the request body is over the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ProtocolError("the client closed the connection before the body ended") from None
    return b"".join(chunks)


def triton_config(batcher: Batcher, settings: ServeSettings) -> dict[str, Any]:
    """The model's configuration as Triton describes it: with a ``max_batch_size`` above 0
    the dims leave out the batch and requests are joined (``dynamic_batching``); with 0 the
    dims are the whole shapes and each request runs alone."""
    model, joins = batcher.model, batcher.max_batch_size > 0

    def tensors(specs: Sequence[Any]) -> list[dict[str, Any]]:
        return [{"name": spec.name, "data_type": _TRITON_TYPES.get(spec.datatype, "TYPE_INVALID"),
                 "dims": list(spec.shape[1:] if joins else spec.shape)} for spec in specs]

    config = {"name": model.name, "platform": "kuiperinfer_pnnx", "backend": "kuiperinfer",
              "max_batch_size": batcher.max_batch_size,
              "input": tensors(model.inputs), "output": tensors(model.outputs)}
    if joins:
        config["dynamic_batching"] = {"max_queue_delay_microseconds": round(settings.batch_window * 1e6)}
    return config


def _error(message: str, status: int) -> Response:
    return JSONResponse({"error": message}, status_code=status)


async def protocol_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProtocolError)
    return _error(str(exc), exc.status)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _error(f"no such endpoint: {request.method} {request.url.path}", 404)
    if exc.status_code == 405:
        return _error(f"{request.method} is not allowed on {request.url.path}", 405)
    return _error(str(exc.detail), exc.status_code)


async def model_error(request: Request, exc: Exception) -> Response:
    log.error("the model failed on %s: %s", request.url.path, exc)
    return _error(f"the model failed: {exc}", 500)


async def internal_error(request: Request, exc: Exception) -> Response:
    """Answers the client; Starlette then re-raises the exception for the server to log."""
    return _error(f"internal error: {type(exc).__name__}: {exc}", 500)
