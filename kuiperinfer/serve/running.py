"""Running a :class:`~kuiperinfer.serve.server.ModelServer` as ``kuiper serve`` does: HTTP on
uvicorn, gRPC and the Prometheus metrics beside it, started and stopped as one.

>>> from kuiperinfer.serve import ModelServer, ServedModel
>>> from kuiperinfer.serve.running import listen, run
>>> server = ModelServer([ServedModel.load("model.pnnx.param")])
>>> run(server, listen("127.0.0.1", 8000), grpc_port=8001, metrics_port=8002)

HTTP and gRPC share one event loop, so the models' batchers join requests whichever way they
came. SIGINT or SIGTERM stops both from taking new requests at once; the requests in flight
are answered (for at most ``drain_timeout`` seconds), then the batchers stop.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable
from typing import Any

import uvicorn

from kuiperinfer.serve.app import create_app
from kuiperinfer.serve.server import ModelServer


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, calling ``on_exit`` (in the event loop) as soon as a signal asks it to stop."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None] | None):
        super().__init__(config)
        self.on_exit = on_exit
        self.loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        if self.on_exit is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.on_exit)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket, bound here so that a busy port is one clear OSError and port 0 works."""
    family, kind, protocol = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][:3]
    # The protocol must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on such sockets.
    listener = socket.socket(family, kind, protocol or socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError:
        listener.close()
        raise
    listener.set_inheritable(True)
    return listener


def run(server: ModelServer, listener: socket.socket, *, grpc_port: int | None = None,
        metrics_port: int | None = None, drain_timeout: float = 30.0, access_log: bool = False,
        announce: Callable[[list[str]], None] | None = None) -> bool:
    """Serve HTTP on ``listener``, gRPC on ``grpc_port`` and the metrics on ``metrics_port``
    (None: not served; 0: a free port) of the listener's address, until SIGINT or SIGTERM.

    ``announce`` is called with the addresses once every port is bound. Returns whether the
    server started. Raises OSError when a port cannot be had, ImportError when gRPC's or the
    metrics' packages are missing.
    """
    host = listener.getsockname()[0]
    shown = f"[{host}]" if ":" in host else host
    grpc_service = None
    if grpc_port is not None:
        from kuiperinfer.serve.rpc import GrpcService

        grpc_service = GrpcService(server, host, grpc_port, grace=drain_timeout)
        server.frontends.append(grpc_service)
    metrics_http = None
    if metrics_port is not None:
        from kuiperinfer.serve.metrics import serve_metrics

        try:
            metrics_http = serve_metrics(server, host, metrics_port)
        except OSError as exc:
            raise OSError(f"cannot listen on {host}:{metrics_port} for the metrics: {exc.strerror or exc}") from None
    config = uvicorn.Config(create_app(server), log_level="warning", access_log=access_log, lifespan="on",
                            timeout_graceful_shutdown=drain_timeout)
    http = _Uvicorn(config, grpc_service.begin_stop if grpc_service is not None else None)

    async def serve() -> None:
        http.loop = asyncio.get_running_loop()
        where = [f"http://{shown}:{listener.getsockname()[1]}/v2"]
        if grpc_service is not None:
            where.append(f"gRPC {shown}:{grpc_service.bind()}")
        if metrics_http is not None:
            where.append(f"metrics http://{shown}:{metrics_http.server_port}/metrics")
        if announce is not None:
            announce(where)
        await http.serve(sockets=[listener])

    # uvicorn raises the stopping signal again once it has drained; ignoring it then lets us return.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        asyncio.run(serve())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if metrics_http is not None:
            metrics_http.shutdown()
            metrics_http.server_close()
        if grpc_service is not None:
            server.frontends.remove(grpc_service)
    return http.started
