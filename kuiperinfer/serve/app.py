"""The HTTP server: an ASGI application (Starlette) speaking the Open Inference Protocol.

Endpoints (``{name}`` a model; each model endpoint also under ``/versions/1``):

    GET  /v2                         server metadata
    GET  /v2/health/live             200 while the server runs
    GET  /v2/health/ready            200 when every model takes requests
    GET  /v2/models/{name}           model metadata: inputs and outputs, datatype and shape
    GET  /v2/models/{name}/ready     200 when the model takes requests
    GET  /v2/models/{name}/config    Triton's model configuration (max_batch_size, ...)
    GET  /v2/models/{name}/stats     Triton's statistics: requests, inferences, executions, times
    POST /v2/models/{name}/infer     inference, JSON or binary tensors
    POST /v2/repository/index                  the models, their states and reasons
    POST /v2/repository/models/{name}/load     load a model (again) from the repository
    POST /v2/repository/models/{name}/unload   unload a model, its requests in flight answered

Every error answer has the protocol's body ``{"error": "..."}``: 400 for a request that
does not fit the model (or a body over the size limit), 404 for an unknown model or
path, 503 when a model is not available or its queue is full, 500 when the model itself fails.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kuiperinfer.errors import KuiperError
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.protocol import (
    HEADER_LENGTH,
    ProtocolError,
    encode_infer_response,
    header_length,
    parse_infer_request,
)
from kuiperinfer.serve.server import ModelServer, ServeSettings

log = logging.getLogger("kuiperinfer.serve")


def create_app(models: Sequence[ServedModel] | ModelServer, settings: ServeSettings | None = None) -> Starlette:
    """The ASGI application serving ``models`` (each under its ``name``), or the models of a
    :class:`ModelServer`; its lifespan starts and stops the server."""
    server = models if isinstance(models, ModelServer) else ModelServer(models, settings)
    settings = server.settings

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await server.start()
        yield
        await server.stop()

    def model(request: Request) -> tuple[str, str]:
        return request.path_params["name"], request.path_params.get("version", "1")

    async def server_metadata(request: Request) -> Response:
        return JSONResponse(server.server_metadata())

    async def live(request: Request) -> Response:
        return Response(status_code=200 if server.live else 503)

    async def ready(request: Request) -> Response:
        return Response(status_code=200 if server.ready else 503)

    async def model_metadata(request: Request) -> Response:
        return JSONResponse(server.model_metadata(*model(request)))

    async def model_ready(request: Request) -> Response:
        return Response(status_code=200 if server.model_ready(*model(request)) else 503)

    async def model_config(request: Request) -> Response:
        return JSONResponse(server.model_config(*model(request)))

    async def model_stats(request: Request) -> Response:
        return JSONResponse(server.statistics(*model(request)))

    async def infer(request: Request) -> Response:
        name, version = model(request)
        server.batcher(name, version, inferring=True)   # refused before its body is read, if it is to be
        body = await read_body(request, settings.max_body_bytes)
        json_length = header_length(request.headers.get(HEADER_LENGTH), len(body))

        def parse(served: ServedModel) -> Any:
            return parse_infer_request(body, json_length, served.name, served.inputs, served.outputs)

        def encode(served: ServedModel, parsed: Any, outputs: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
            return encode_infer_response(served.name, parsed, outputs)

        content, headers = await server.infer(name, version, parse, encode)
        return Response(content, headers=headers)

    async def repository_index(request: Request) -> Response:
        options = await _json_options(request, settings.max_body_bytes)
        ready_only = options.get("ready", False)
        if not isinstance(ready_only, bool):
            raise ProtocolError(f"'ready' must be true or false, got {ready_only!r}")
        return JSONResponse(server.index(ready_only))

    async def repository_load(request: Request) -> Response:
        options = await _json_options(request, settings.max_body_bytes)
        if options.get("parameters"):
            raise ProtocolError("loading with parameters (a configuration or files in the request) is "
                                "not supported; change the model's folder, then load it")
        await server.load(request.path_params["name"])
        return Response(status_code=200)

    async def repository_unload(request: Request) -> Response:
        await _json_options(request, settings.max_body_bytes)
        await server.unload(request.path_params["name"])
        return Response(status_code=200)

    model_routes = [
        ("", model_metadata, ["GET"]), ("/ready", model_ready, ["GET"]),
        ("/config", model_config, ["GET"]), ("/stats", model_stats, ["GET"]),
        ("/infer", infer, ["POST"]),
    ]
    routes = [Route("/v2", server_metadata, methods=["GET"]),
              Route("/v2/health/live", live, methods=["GET"]),
              Route("/v2/health/ready", ready, methods=["GET"]),
              Route("/v2/repository/index", repository_index, methods=["POST"]),
              Route("/v2/repository/models/{name}/load", repository_load, methods=["POST"]),
              Route("/v2/repository/models/{name}/unload", repository_unload, methods=["POST"])]
    for suffix, endpoint, methods in model_routes:
        routes.append(Route("/v2/models/{name}" + suffix, endpoint, methods=methods))
        routes.append(Route("/v2/models/{name}/versions/{version}" + suffix, endpoint, methods=methods))

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        ProtocolError: protocol_error, HTTPException: http_error, KuiperError: model_error,
        Exception: internal_error})
    app.state.server = server
    return app


async def _json_options(request: Request, limit: int) -> dict[str, Any]:
    """The JSON object a repository request may carry (an empty body: none)."""
    body = await read_body(request, limit)
    if not body.strip():
        return {}
    try:
        options = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"the request is not valid JSON: {exc}") from None
    if not isinstance(options, dict):
        raise ProtocolError("the request must be a JSON object")
    return options


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
