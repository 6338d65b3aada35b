"""Serve models over HTTP with the Open Inference Protocol (KServe v2, Triton's REST API).

Each MODEL is a .pnnx.param (or an ONNX/TorchScript file whose inputs need no shape;
convert others first with kuiper convert), served under its file name without the
suffix, or under NAME with NAME=PATH. Without a MODEL the bundled EfficientNet-Lite0
is served. Any Open Inference Protocol client works, for example tritonclient.http:

  GET  /v2/health/ready                       200 once every model takes requests
  GET  /v2/models/NAME                        inputs and outputs: datatype, shape (-1: any size)
  POST /v2/models/NAME/infer                  JSON tensors, or binary ones (binary tensor data
                                              extension, Inference-Header-Content-Length)

Requests for one model that arrive within --batch-window-ms of the oldest waiting one
are joined into one run of up to --max-batch-size samples and split back
(--max-batch-size 1 turns this off); while a model runs, new requests queue, up to
--max-queue each, and join the next run.
Ctrl-C or SIGTERM stops taking connections, answers the requests in flight, then exits.

Examples:
  kuiper serve                                  (the bundled model on 127.0.0.1:8000)
  kuiper serve resnet18.pnnx.param det=models/ch_PP-OCRv4_det.pnnx.param --port 8080
  kuiper serve model.pnnx.param --max-batch-size 16 --batch-window-ms 5
"""

from __future__ import annotations

import argparse
import signal
import socket
from pathlib import Path

from kuiperinfer.cli import CommandError
from kuiperinfer.cli._common import (
    add_deprecated_alias,
    add_load_arguments,
    load_options,
    non_negative_int,
    positive_int,
    tell_precision,
)
from kuiperinfer.models import default_model_path

SERVE_INSTALL = "pip install starlette uvicorn"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help="[NAME=]PATH of a model to serve (default: the bundled model)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=non_negative_int, default=8000,
                        help="port to listen on; 0 picks a free one (default: 8000)")
    parser.add_argument("--max-batch-size", type=positive_int, default=8, metavar="N",
                        help="samples that joined requests may add up to; 1 turns joining off (default: 8)")
    parser.add_argument("--batch-window-ms", type=_non_negative_float, default=2.0, metavar="MS",
                        help="how long the oldest queued request waits for others to join it "
                             "(default: 2)")
    parser.add_argument("--max-queue", type=positive_int, default=64, metavar="N",
                        help="requests a model may have waiting; more are answered 503 (default: 64)")
    parser.add_argument("--max-body-mb", type=_positive_float, default=64.0, metavar="MB",
                        help="largest request body accepted, in MiB (default: 64)")
    parser.add_argument("--drain-timeout", type=_non_negative_float, default=30.0, metavar="S",
                        help="seconds to wait for requests in flight when stopping (default: 30)")
    parser.add_argument("--access-log", action="store_true", help="log every request")
    add_load_arguments(parser)   # its --threads: the threads the models' runs share
    add_deprecated_alias(parser, "--workers", "--threads", "threads", type=positive_int)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = _non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def model_arguments(values: list[str]) -> list[tuple[str | None, Path]]:
    """``NAME=PATH`` or ``PATH`` -> (name or None, path); the bundled model when none."""
    models: list[tuple[str | None, Path]] = []
    for value in values or [str(default_model_path())]:
        name, separator, path = value.partition("=")
        if not separator or "/" in name or not name:
            name, path = "", value
        if not Path(path).is_file():
            raise CommandError(f"no such model file: {path}")
        models.append((name or None, Path(path)))
    return models


def main(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from kuiperinfer.serve import ServedModel, ServeSettings, create_app
    except ImportError as exc:
        raise CommandError(f"serving needs Starlette and uvicorn ({exc}); install them with: "
                           f"{SERVE_INSTALL}") from None

    settings = ServeSettings(max_batch_size=args.max_batch_size,
                             batch_window=args.batch_window_ms / 1000, max_queue=args.max_queue,
                             max_body_bytes=int(args.max_body_mb * 1024 * 1024))
    from kuiperinfer.kernels.parallel import ThreadPool
    from kuiperinfer.runtime.options import LoadOptions

    options = LoadOptions(**load_options(args))
    options = LoadOptions.of(options, pool=ThreadPool(options.threads))   # one for all the models: they share the cores
    models = [ServedModel.load(path, name, options=options) for name, path in model_arguments(args.models)]
    app = create_app(models, settings)
    listener = _listen(args.host, args.port)
    host, port = listener.getsockname()[:2]
    for model in models:
        inputs = ", ".join(f"{s.name} {s.datatype} {list(s.shape)}" for s in model.inputs)
        outputs = ", ".join(f"{s.name} {s.datatype} {list(s.shape)}" for s in model.outputs)
        print(f"model {model.name} ({model.path}): {inputs} -> {outputs}")
        tell_precision(model.graph)
        if not model.joins_requests:
            print(f"  requests run one at a time: {model.graph.batching.describe()}")
    joining = (f"requests joined up to {settings.max_batch_size} samples within "
               f"{args.batch_window_ms:g} ms" if settings.max_batch_size > 1 else "no batching")
    url_host = f"[{host}]" if ":" in host else host
    print(f"serving on http://{url_host}:{port}/v2 ({joining}); Ctrl-C stops", flush=True)

    config = uvicorn.Config(app, log_level="warning", access_log=args.access_log, lifespan="on",
                            timeout_graceful_shutdown=args.drain_timeout)
    server = uvicorn.Server(config)
    # uvicorn raises the stopping signal again once it has drained; ignoring it then lets us exit 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[listener])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        listener.close()
    print("stopped", flush=True)
    return 0 if server.started else 1


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound here so that a busy port is one clear error and port 0 works."""
    listener = None
    try:
        family, kind, protocol = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][:3]
        # The protocol must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on such sockets.
        listener = socket.socket(family, kind, protocol or socket.IPPROTO_TCP)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        if listener is not None:
            listener.close()
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    listener.set_inheritable(True)
    return listener
