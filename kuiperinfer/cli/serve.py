"""Serve models with the Open Inference Protocol (KServe v2, Triton) over HTTP and gRPC.

Each MODEL is a .pnnx.param (or an ONNX/TorchScript file whose inputs need no shape;
convert others first with kuiper convert), served under its file name without the
suffix, or under NAME with NAME=PATH. --model-repository DIR serves every model folder in
DIR (DIR/NAME/ holding one model file and, optionally, config.json) and lets clients load
and unload them while the server runs. Without either, the bundled EfficientNet-Lite0 is
served. Any Open Inference Protocol client works, for example tritonclient:

  GET  /v2/health/ready                       200 once every model takes requests
  GET  /v2/models/NAME                        inputs and outputs: datatype, shape (-1: any size)
  POST /v2/models/NAME/infer                  JSON tensors, or binary ones (binary tensor data
                                              extension, Inference-Header-Content-Length)
  POST /v2/repository/index                   the models, their states and why
  POST /v2/repository/models/NAME/load        load NAME (again) from the repository; /unload

gRPC (inference.GRPCInferenceService, port 8001) serves the same models, and Prometheus
metrics with Triton's names are on port 8002 (/metrics); --grpc-port off and --metrics-port
off leave them out.

Requests for one model that arrive within --batch-window-ms of the oldest waiting one
are joined into one run of up to --max-batch-size samples and split back
(--max-batch-size 1 turns this off); while a model runs, new requests queue, up to
--max-queue each, and join the next run.
Ctrl-C or SIGTERM stops taking connections, answers the requests in flight, then exits.

With --ray the same server runs as a Ray Serve application of --replicas replicas, each
with its own models and batchers, behind Ray Serve's HTTP proxy on --host and --port.

Examples:
  kuiper serve                                  (the bundled model: HTTP 8000, gRPC 8001, metrics 8002)
  kuiper serve resnet18.pnnx.param det=models/ch_PP-OCRv4_det.pnnx.param --port 8080 --grpc-port 8081
  kuiper serve --model-repository models/ --metrics-port off
  kuiper serve model.pnnx.param --max-batch-size 16 --batch-window-ms 5
  kuiper serve model.pnnx.param --ray --replicas 2
"""

from __future__ import annotations

import argparse
import importlib
import socket
from pathlib import Path
from typing import Any

from kuiperinfer.cli import CommandError
from kuiperinfer.cli._common import (
    add_deprecated_alias,
    add_load_arguments,
    non_negative_int,
    positive_int,
    tell_precision,
)
from kuiperinfer.cli._serving import RAY_SERVE_INSTALL, model_arguments, serve_settings

SERVE_INSTALL = "pip install starlette uvicorn"
GRPC_INSTALL = "pip install grpcio grpcio-tools"
METRICS_INSTALL = "pip install prometheus-client"
GRPC_PORT, METRICS_PORT = 8001, 8002
"""Triton's ports, the defaults of --grpc-port and --metrics-port."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help="[NAME=]PATH of a model to serve (default: the bundled model, unless "
                             "--model-repository is given)")
    parser.add_argument("--model-repository", metavar="DIR",
                        help="serve each model folder in DIR (DIR/NAME/ with one model file and an "
                             "optional config.json); clients may load and unload them")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=non_negative_int, default=8000,
                        help="HTTP port; 0 picks a free one (default: 8000)")
    parser.add_argument("--grpc-port", type=_port_or_off, metavar="PORT|off",
                        help=f"gRPC port; 0 picks a free one, off serves no gRPC (default: {GRPC_PORT})")
    parser.add_argument("--metrics-port", type=_port_or_off, metavar="PORT|off",
                        help=f"port of the Prometheus metrics (/metrics); 0 picks a free one, off "
                             f"serves none (default: {METRICS_PORT})")
    parser.add_argument("--max-batch-size", type=positive_int, default=8, metavar="N",
                        help="samples that joined requests may add up to; 1 turns joining off (default: 8)")
    parser.add_argument("--batch-window-ms", type=_non_negative_float, default=2.0, metavar="MS",
                        help="how long the oldest queued request waits for others to join it "
                             "(default: 2)")
    parser.add_argument("--max-queue", type=positive_int, default=64, metavar="N",
                        help="requests a model may have waiting; more are answered 503 (default: 64)")
    parser.add_argument("--max-body-mb", type=_positive_float, default=64.0, metavar="MB",
                        help="largest request body (or gRPC message) accepted, in MiB (default: 64)")
    parser.add_argument("--drain-timeout", type=_non_negative_float, default=30.0, metavar="S",
                        help="seconds to wait for requests in flight when stopping (default: 30)")
    parser.add_argument("--access-log", action="store_true", help="log every HTTP request")
    add_load_arguments(parser)   # its --threads: the threads the models' runs share
    add_deprecated_alias(parser, "--workers", "--threads", "threads", type=positive_int)
    ray = parser.add_argument_group(f"on Ray Serve (needs: {RAY_SERVE_INSTALL})")
    ray.add_argument("--ray", action="store_true",
                     help="serve as a Ray Serve application, on the cluster --address names or as "
                          "ray.init() finds one (else a new local one that ends with the command)")
    ray.add_argument("--replicas", type=positive_int, metavar="N",
                     help="replicas, each with its models and batchers (default: one per node)")
    ray.add_argument("--address", metavar="auto|ray://HOST:PORT", help="the Ray cluster")


def _port_or_off(text: str) -> int | str:
    if text == "off":
        return text
    try:
        return non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a port number or off, got {text!r}") from None


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


def main(args: argparse.Namespace) -> int:
    if args.ray:
        from kuiperinfer.cli._serve_ray import serve_on_ray

        return serve_on_ray(args)
    if args.replicas is not None or args.address is not None:
        raise CommandError("--replicas and --address only with --ray")
    grpc_port = endpoint_port(args.grpc_port, GRPC_PORT)
    metrics_port = endpoint_port(args.metrics_port, METRICS_PORT)
    try:
        import starlette  # noqa: F401  (asked by name: the modules below may be imported already)
        import uvicorn  # noqa: F401

        from kuiperinfer.serve import ModelServer, ModelSource, ServedModel, running
    except ImportError as exc:
        raise CommandError(f"serving needs Starlette and uvicorn ({exc}); install them with: "
                           f"{SERVE_INSTALL}") from None
    _require("kuiperinfer.serve.rpc", grpc_port, "gRPC needs grpcio and grpcio-tools",
             GRPC_INSTALL, "--grpc-port off")
    _require("kuiperinfer.serve.metrics", metrics_port, "metrics need prometheus-client",
             METRICS_INSTALL, "--metrics-port off")
    from kuiperinfer.kernels.parallel import ThreadPool
    from kuiperinfer.runtime.options import LoadOptions

    pool = ThreadPool(LoadOptions(threads=args.threads).threads)   # one for all the models: they share the cores

    def loader(source: ModelSource) -> ServedModel:
        return ServedModel.load(source.path, source.name, pool=pool, precision=source.precision,
                                calibration=source.calibration)

    server = ModelServer(settings=serve_settings(args), repository=_repository(args.model_repository),
                         loader=loader)
    for name, path in model_arguments(args.models, args.model_repository):
        model = server.add(ModelSource(name or _model_name(path), path, args.precision,
                                       Path(args.calibration) if args.calibration else None))
        _describe(model, path)
    try:
        loaded = server.load_repository()
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    for name, model in loaded.items():
        if isinstance(model, str):
            print(f"model {name} is unavailable: {model}")
        else:
            _describe(model, model.path)

    joining = (f"requests joined up to {server.settings.max_batch_size} samples within "
               f"{args.batch_window_ms:g} ms" if server.settings.max_batch_size > 1 else "no batching")

    def announce(where: list[str]) -> None:
        print(f"serving on {', '.join(where)} ({joining}); Ctrl-C stops", flush=True)

    listener = _listen(args.host, args.port)
    try:
        started = running.run(server, listener, grpc_port=grpc_port, metrics_port=metrics_port,
                              drain_timeout=args.drain_timeout, access_log=args.access_log, announce=announce)
    except OSError as exc:
        raise CommandError(str(exc)) from None
    finally:
        listener.close()
    print("stopped", flush=True)
    return 0 if started else 1


def endpoint_port(value: int | str | None, default: int) -> int | None:
    """The port of an endpoint from its option: None when off."""
    return default if value is None else None if value == "off" else int(value)


def _require(module: str, port: int | None, needs: str, install: str, off: str) -> None:
    """CommandError saying what to install, or how to turn it off, when an endpoint that is on
    (a port given) misses its packages."""
    if port is None:
        return
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise CommandError(f"{needs} ({exc}); install them with: {install}, or serve without: {off}") from None


def _repository(folder: str | None) -> Any:
    if folder is None:
        return None
    from kuiperinfer.serve.repository import ModelRepository, RepositoryError

    try:
        return ModelRepository(folder)
    except RepositoryError as exc:
        raise CommandError(str(exc)) from None


def _model_name(path: Path) -> str:
    from kuiperinfer.serve.model import model_name

    return model_name(path)


def _describe(model: Any, path: Path) -> None:
    inputs = ", ".join(f"{s.name} {s.datatype} {list(s.shape)}" for s in model.inputs)
    outputs = ", ".join(f"{s.name} {s.datatype} {list(s.shape)}" for s in model.outputs)
    print(f"model {model.name} ({path}): {inputs} -> {outputs}")
    tell_precision(model.graph)
    if not model.joins_requests:
        print(f"  requests run one at a time: {model.graph.batching.describe()}")


def _listen(host: str, port: int) -> socket.socket:
    """The HTTP listening socket; CommandError when the port cannot be had."""
    from kuiperinfer.serve.running import listen

    try:
        return listen(host, port)
    except OSError as exc:
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
