"""``kuiper serve --ray``: the server as a Ray Serve application of ``--replicas`` replicas.

Ray is imported only once ``--ray`` is given, so that ``kuiper serve`` works without the extra.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
from pathlib import Path

from kuiperinfer.cli import CommandError
from kuiperinfer.cli._serving import RAY_SERVE_INSTALL, model_arguments, serve_settings

APPLICATION = "kuiperinfer"
"""The name of the Ray Serve application (and its deployment)."""


def serve_on_ray(args: argparse.Namespace) -> int:
    """Deploy the models on Ray Serve behind its HTTP proxy on ``--host:--port``, until SIGINT
    or SIGTERM; then delete the application (its replicas answer the requests in flight), and
    stop the cluster if this command started it."""
    try:
        import ray
        from ray import serve

        import kuiperinfer.ray as kray
        from kuiperinfer.serve.model import model_name
        from kuiperinfer.serve.ray_serve import application
        from kuiperinfer.serve.repository import ModelRepository, ModelSource, RepositoryError
    except ImportError as exc:
        raise CommandError(f"--ray needs Ray Serve ({exc}): {RAY_SERVE_INSTALL}") from None
    given = [f"--{name.replace('_', '-')}" for name in ("grpc_port", "metrics_port", "threads")
             if getattr(args, name) is not None]
    if given:
        raise CommandError(f"{', '.join(given)}: not with --ray, whose replicas serve HTTP through Ray Serve's "
                           f"proxy, each on the CPUs it reserves")
    sources = [ModelSource(name or model_name(path), path.resolve(), args.precision,
                           Path(args.calibration).resolve() if args.calibration else None)
               for name, path in model_arguments(args.models, args.model_repository)]
    repository = None
    if args.model_repository:
        try:
            repository = ModelRepository(Path(args.model_repository).resolve()).root
        except RepositoryError as exc:
            raise CommandError(str(exc)) from None

    connected_here = not ray.is_initialized()
    address = args.address or os.environ.get("RAY_ADDRESS", "")
    options = {} if address.startswith("ray://") else {"include_dashboard": False, "logging_level": "WARNING"}
    if connected_here:
        try:
            ray.init(address=args.address, **options)
        except ConnectionError as exc:
            raise CommandError(f"cannot connect to Ray: {exc}") from None
    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        replicas = args.replicas or kray.default_actors()
        try:
            cpus = kray.actor_cpus(replicas)
        except ValueError as exc:
            raise CommandError(f"--replicas {replicas}: {exc}") from None
        port = args.port or _free_port(args.host)
        serve.start(http_options={"host": args.host, "port": port}, logging_config={"log_level": "WARNING"})
        serve.run(application(sources, serve_settings(args), repository=repository, replicas=replicas, cpus=cpus,
                              name=APPLICATION),
                  name=APPLICATION, route_prefix="/", logging_config={"log_level": "WARNING"})
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"serving on http://{host}:{port}/v2 (Ray Serve, {replicas} replica{'s' * (replicas > 1)} of "
              f"{cpus} CPU{'s' * (cpus > 1)}); Ctrl-C stops", flush=True)
        stopping.wait()
        serve.delete(APPLICATION)
        if connected_here and not address:   # the local cluster started here: Serve goes with it
            serve.shutdown()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if connected_here:
            ray.shutdown()
    print("stopped", flush=True)
    return 0


def _free_port(host: str) -> int:
    """A port free on ``host`` now (Ray Serve's proxy takes a port number, not 0)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]
