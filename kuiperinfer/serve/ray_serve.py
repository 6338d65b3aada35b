"""The server on Ray Serve: the same HTTP application in replicas across a Ray cluster.

Each replica is a Ray actor that loads its own models, with its own batchers, and answers
the Open Inference Protocol exactly as ``kuiper serve`` does; Ray Serve's HTTP proxy on
each node spreads the requests over the replicas, and Ray Serve restarts, scales and
places them. Every answer says which replica gave it in its ``Kuiper-Replica`` header.

>>> import ray
>>> from ray import serve
>>> from kuiperinfer.serve import ModelSource
>>> from kuiperinfer.serve.ray_serve import application
>>> ray.init()
>>> serve.start(http_options={"host": "0.0.0.0", "port": 8000})
>>> serve.run(application([ModelSource("resnet18", "/shared/resnet18.pnnx.param")], replicas=4),
...           name="kuiperinfer", route_prefix="/")

``kuiper serve --ray`` does this from the command line. The model files (and a repository)
must be at paths every node can read. Threads are as for :mod:`kuiperinfer.ray`'s actors: a
replica runs its models on as many threads as the CPUs it reserves (``cpus``), BLAS on one.
The replicas serve HTTP only: gRPC and the metrics endpoint are not served through Ray
Serve's proxy (Ray exports its own metrics of the replicas and the proxy), and models are
not loaded or unloaded by request, which would reach one replica only: deploy anew instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray import serve
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kuiperinfer.kernels.parallel import ThreadPool
from kuiperinfer.ray import model_threads
from kuiperinfer.serve.app import create_app
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.repository import ModelRepository, ModelSource
from kuiperinfer.serve.server import ModelServer, ServeSettings

REPLICA_HEADER = "Kuiper-Replica"
"""The answer's header naming the replica that gave it."""


class ReplicaHeader:
    """ASGI middleware: every HTTP answer carries ``Kuiper-Replica: <replica id>``."""

    def __init__(self, app: ASGIApp, replica: str):
        self.app = app
        self.header = (REPLICA_HEADER.lower().encode(), replica.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, send_with_header)


class Replica:
    """One replica: its models loaded on the CPUs Ray reserved for it, served by the HTTP
    application of :func:`kuiperinfer.serve.create_app`."""

    def __init__(self, sources: Sequence[ModelSource], settings: ServeSettings, repository: str | None = None):
        pool = ThreadPool(model_threads())   # the CPUs Ray reserved for the replica; BLAS on one thread

        def loader(source: ModelSource) -> ServedModel:
            return ServedModel.load(source.path, source.name, pool=pool, precision=source.precision,
                                    calibration=source.calibration)

        self.server = ModelServer(settings=settings, repository=ModelRepository(repository) if repository else None,
                                  loader=loader, model_control=False)
        for source in sources:
            self.server.add(source)
        self.server.load_repository()
        self.replica = serve.get_replica_context().replica_id.unique_id

    def __serve_build_asgi_app__(self) -> ASGIApp:   # noqa: PLW3201  (Ray Serve's name for it)
        app = create_app(self.server)
        app.add_middleware(ReplicaHeader, replica=self.replica)
        return app


def application(sources: Sequence[ModelSource], settings: ServeSettings | None = None, *,
                repository: str | Path | None = None, replicas: int = 1, cpus: float = 1,
                name: str = "kuiperinfer") -> Any:
    """The Ray Serve application (``serve.run`` it): ``replicas`` replicas of the deployment
    ``name``, each reserving ``cpus`` CPUs and serving the models of ``sources`` and of
    ``repository`` (absolute paths every node can read) with ``settings``."""
    deployment = serve.deployment(serve.ingress()(Replica), name=name, num_replicas=replicas,
                                  ray_actor_options={"num_cpus": cpus}, max_ongoing_requests=256)
    return deployment.bind(list(sources), settings or ServeSettings(), str(repository) if repository else None)
