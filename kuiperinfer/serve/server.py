"""The server's models and what can be asked of them, whichever protocol asks.

:class:`ModelServer` holds each model's state (Triton's READY, LOADING, UNLOADING,
UNAVAILABLE, with the reason), its batcher and its statistics; the HTTP application
(:mod:`kuiperinfer.serve.app`) and the gRPC service (:mod:`kuiperinfer.serve.rpc`) are two
front ends to it. Each answer is a plain dict in the form of the protocol's REST messages,
which the gRPC service turns into its messages; each refusal is a
:class:`~kuiperinfer.serve.protocol.ProtocolError` with the HTTP status that gRPC maps to its
codes. A request is parsed and its answer encoded by the front end's functions, in a worker
thread, inside :meth:`ModelServer.infer`, which counts it.

Loading and unloading (the repository extension) go one model at a time: a model loaded again
keeps serving while its new files load and then hands its queue over; a model unloaded takes no
new requests, answers those in flight, then lets go of its graph. A model that fails to load is
UNAVAILABLE with the error as its reason while the others serve on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import kuiperinfer
from kuiperinfer.errors import InputError, KuiperError
from kuiperinfer.serve.batcher import Batcher
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.protocol import DATATYPES, InferRequest, ProtocolError, TensorSpec
from kuiperinfer.serve.repository import ModelRepository, ModelSource, RepositoryError
from kuiperinfer.serve.stats import ModelStats

log = logging.getLogger("kuiperinfer.serve")

READY, LOADING, UNLOADING, UNAVAILABLE = "READY", "LOADING", "UNLOADING", "UNAVAILABLE"
"""A model's states, as Triton's repository index names them."""

UNLOADED = "unloaded"
"""The reason of a model unloaded on request."""

VERSION = "1"
"""Every model's one version."""

_TRITON_TYPES = {datatype: f"TYPE_{datatype}" for datatype, dtype in DATATYPES.items() if dtype is not None}
"""Triton's names of the numeric datatypes in a model configuration."""

T = TypeVar("T")


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
    """The largest request accepted (HTTP body, gRPC message); larger ones are refused unread."""


class Frontend(Protocol):
    """A way in to the server that starts after its models and stops before them (gRPC)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class _Model:
    """One model name's state; the stats outlive its graphs."""

    name: str
    source: ModelSource | None
    stats: ModelStats = field(default_factory=ModelStats)
    batcher: Batcher | None = None
    state: str = UNAVAILABLE
    reason: str = ""
    wanted: bool = True
    """Whether it should be serving (False once unloaded on request): readiness counts these."""
    in_flight: collections.Counter[Batcher] = field(default_factory=collections.Counter)
    """Requests on their way through each batcher, from the lookup to the encoded answer."""
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a batcher's requests in flight fall to none."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while the model loads or unloads."""

    async def drain(self, batcher: Batcher, why: str) -> None:
        """Wait for the requests in flight through ``batcher`` (new ones no longer reach it),
        then stop it."""
        while self.in_flight[batcher]:
            self.settled.clear()
            await self.settled.wait()
        await batcher.stop(drain=True, why=why)


class ModelServer:
    """Models served by name, each with its batcher; what the protocol's endpoints ask.

    ``models`` are loaded already; ``repository`` is the folder :meth:`load` and
    :meth:`load_repository` read; ``loader`` loads a :class:`ModelSource` (default:
    :meth:`ServedModel.load` with the source's precision and calibration).
    ``model_control`` False refuses load and unload requests (the Ray Serve replicas, where
    one replica would answer for all).
    """

    def __init__(self, models: Sequence[ServedModel] = (), settings: ServeSettings | None = None, *,
                 repository: ModelRepository | None = None,
                 loader: Callable[[ModelSource], ServedModel] | None = None, model_control: bool = True):
        names = [model.name for model in models]
        if len(set(names)) != len(names):
            raise ValueError(f"two models have the same name: {names}")
        self.settings = settings or ServeSettings()
        self.repository = repository
        self.loader = loader or _load
        self.model_control = model_control
        self.frontends: list[Frontend] = []
        self._models: dict[str, _Model] = {}
        self._started = False
        self._stopping = False
        for model in models:
            self._serve(self._entry_for(model.name, ModelSource(model.name, model.path)), model)

    # -- the server's life ---------------------------------------------------------------

    def add(self, source: ModelSource) -> ServedModel:
        """Load a model to serve, before :meth:`start` (its errors raised), keeping its source
        to load it again on request."""
        if source.name in self._models:
            raise ValueError(f"two models have the same name: {source.name}")
        model = self.loader(source)
        self._serve(self._entry_for(source.name, source), model)
        return model

    def load_repository(self) -> dict[str, ServedModel | str]:
        """Load every model of the repository, before :meth:`start`: each model loaded, or the
        reason it failed (it is then UNAVAILABLE and the others serve), by name."""
        loaded: dict[str, ServedModel | str] = {}
        for name in self.repository.names() if self.repository else []:
            if name in self._models:
                raise ValueError(f"two models have the same name: {name} (given, and in the model repository)")
            entry = self._entry_for(name, None)
            try:
                entry.source = self.repository.source(name)
                loaded[name] = self.loader(entry.source)
            except Exception as exc:  # noqa: BLE001  (any failure is the model's reason; the others serve)
                entry.state, entry.reason = UNAVAILABLE, _reason(exc)
                loaded[name] = entry.reason
            else:
                self._serve(entry, loaded[name])
        return loaded

    async def start(self) -> None:
        """Start the models' batchers, then the front ends (call in the serving event loop)."""
        self._started = True
        for entry in self._models.values():
            if entry.batcher is not None:
                entry.batcher.start()
        for frontend in self.frontends:
            await frontend.start()

    async def stop(self) -> None:
        """Stop the front ends (each answers what it has in flight), then the batchers."""
        self._stopping = True
        for frontend in self.frontends:
            await frontend.stop()
        for entry in self._models.values():
            if entry.batcher is not None:
                await entry.batcher.stop()

    @property
    def names(self) -> list[str]:
        return list(self._models)

    def stats(self) -> dict[str, tuple[ModelStats, int]]:
        """Each model's statistics and its requests queued now, by name (for the metrics)."""
        return {name: (e.stats, e.batcher.pending if e.batcher is not None else 0)
                for name, e in list(self._models.items())}   # a copy: another thread may ask

    # -- health and metadata --------------------------------------------------------------

    def server_metadata(self) -> dict[str, Any]:
        extensions = ["binary_tensor_data", "model_configuration", "statistics"]
        if self.model_control:
            extensions.append("model_repository")
        return {"name": "kuiperinfer", "version": kuiperinfer.__version__, "extensions": extensions}

    @property
    def live(self) -> bool:
        return not self._stopping

    @property
    def ready(self) -> bool:
        """Live, started, and every model not unloaded on request is READY (Triton's strict
        readiness)."""
        return (self._started and not self._stopping and
                all(e.state == READY for e in self._models.values() if e.wanted))

    def model_ready(self, name: str, version: str = "") -> bool:
        """Whether the model takes requests; ProtocolError 404 for an unknown model or version."""
        return self._entry(name, version).state == READY

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        batcher = self.batcher(name, version)
        return batcher.model.metadata(batcher.max_batch_size)

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        """The model's configuration as Triton describes it: with a ``max_batch_size`` above 0
        the dims leave out the batch and requests are joined (``dynamic_batching``); with 0 the
        dims are the whole shapes and each request runs alone."""
        batcher = self.batcher(name, version)
        model, joins = batcher.model, batcher.max_batch_size > 0

        def tensors(specs: Sequence[TensorSpec]) -> list[dict[str, Any]]:
            return [{"name": spec.name, "data_type": _TRITON_TYPES.get(spec.datatype, "TYPE_INVALID"),
                     "dims": list(spec.shape[1:] if joins else spec.shape)} for spec in specs]

        config = {"name": model.name, "platform": "kuiperinfer_pnnx", "backend": "kuiperinfer",
                  "max_batch_size": batcher.max_batch_size,
                  "input": tensors(model.inputs), "output": tensors(model.outputs)}
        if joins:
            config["dynamic_batching"] = {"max_queue_delay_microseconds": round(batcher.window * 1e6)}
        return config

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """Triton's statistics of one model, or of every model when ``name`` is empty."""
        entries = [self._entry(name, version)] if name else list(self._models.values())
        return {"model_stats": [_statistics(entry) for entry in entries]}

    # -- inference ------------------------------------------------------------------------

    def batcher(self, name: str, version: str = "", inferring: bool = False) -> Batcher:
        """The batcher of a model that takes requests; ProtocolError 404 for an unknown model
        or version, 503 for one that is not available (an inference request ``inferring``
        counted as REJECTED)."""
        entry = self._entry(name, version)
        if entry.state != READY or entry.batcher is None:
            if inferring:
                entry.stats.failed("REJECTED", 0)
            raise ProtocolError(_not_available(entry), 503)
        return entry.batcher

    async def infer(self, name: str, version: str, parse: Callable[[ServedModel], InferRequest],
                    encode: Callable[[ServedModel, InferRequest, dict[str, Any]], T]) -> T:
        """Parse a request for the model, run it through the batcher, encode the answer;
        counted as answered or failed (and why) in the model's statistics."""
        batcher = self.batcher(name, version, inferring=True)
        entry = self._models[name]
        entry.in_flight[batcher] += 1
        started = time.monotonic_ns()
        model = batcher.model
        try:
            request = await _in_thread(parse, model)
            outputs = await batcher.infer(request.inputs)
            answer = await _in_thread(encode, model, request, dict(zip(model.graph.output_names, outputs)))
        except ProtocolError as exc:
            entry.stats.failed("REJECTED" if exc.status == 503 else "OTHER", time.monotonic_ns() - started)
            raise
        except InputError as exc:
            entry.stats.failed("OTHER", time.monotonic_ns() - started)
            raise ProtocolError(str(exc)) from exc
        except KuiperError:
            entry.stats.failed("BACKEND", time.monotonic_ns() - started)
            raise
        except BaseException:
            entry.stats.failed("OTHER", time.monotonic_ns() - started)
            raise
        finally:
            entry.in_flight[batcher] -= 1
            if not entry.in_flight[batcher]:
                del entry.in_flight[batcher]
                entry.settled.set()
        entry.stats.answered(time.monotonic_ns() - started)
        return answer

    # -- the repository -------------------------------------------------------------------

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Triton's repository index: each model with its state, and the reason when it is
        not READY; a folder of the repository never loaded has its name only."""
        listed = []
        names = sorted(set(self._models) | set(self.repository.names() if self.repository else []))
        for name in names:
            entry = self._models.get(name)
            if entry is None:
                if not ready_only:
                    listed.append({"name": name})
                continue
            if ready_only and entry.state != READY:
                continue
            item = {"name": name, "version": VERSION, "state": entry.state}
            if entry.state != READY and entry.reason:
                item["reason"] = entry.reason
            listed.append(item)
        return listed

    async def load(self, name: str) -> None:
        """Load (or load again) the model from its folder in the repository, or from where it
        was first loaded; it serves once loaded. A model loaded already serves on while the new
        one loads and, if that fails, stays as it was. ProtocolError 404 when there is no such
        model, 400 when it fails to load (its reason in the index)."""
        self._check_control()
        if self.repository is not None and name in self.repository:
            entry = self._entry_for(name, None)
            try:
                entry.source = self.repository.source(name)
            except RepositoryError as exc:
                if entry.state != READY:
                    entry.state, entry.reason = UNAVAILABLE, str(exc)
                raise ProtocolError(f"failed to load model {name!r}: {exc}") from None
        elif name in self._models and self._models[name].source is not None:
            entry = self._models[name]
        else:
            where = f" nor in the model repository {self.repository.root}" if self.repository else ""
            raise ProtocolError(f"no model {name!r} on this server{where}", 404)
        async with entry.lock:
            entry.wanted = True
            if entry.state != READY:
                entry.state, entry.reason = LOADING, ""
            try:
                model = await _in_thread(self.loader, entry.source)
            except Exception as exc:  # noqa: BLE001  (whatever failed, it is the model's reason)
                if entry.batcher is None:
                    entry.state, entry.reason = UNAVAILABLE, _reason(exc)
                log.warning("model %s failed to load: %s", name, _reason(exc))
                raise ProtocolError(f"failed to load model {name!r}: {_reason(exc)}") from None
            previous = entry.batcher
            self._serve(entry, model)
            if self._started:
                entry.batcher.start()
            if previous is not None:   # its requests in flight still run on the graph they came for
                await entry.drain(previous, f"model {name!r} was loaded again")

    async def unload(self, name: str) -> None:
        """Take no new requests for the model, answer those in flight, then let it go.
        ProtocolError 404 for an unknown model; unloading one not loaded does nothing."""
        self._check_control()
        entry = self._entry(name, "")
        async with entry.lock:
            entry.wanted = False
            if entry.batcher is None:
                entry.state, entry.reason = UNAVAILABLE, UNLOADED
                return
            entry.state = UNLOADING
            await entry.drain(entry.batcher, f"model {name!r} is unloading")
            entry.batcher = None
            entry.state, entry.reason = UNAVAILABLE, UNLOADED

    # -- helpers --------------------------------------------------------------------------

    def _check_control(self) -> None:
        if not self.model_control:
            raise ProtocolError("this server does not load or unload models while it runs; "
                                "deploy the models anew instead")

    def _entry_for(self, name: str, source: ModelSource | None) -> _Model:
        if name not in self._models:
            self._models[name] = _Model(name, source)
        return self._models[name]

    def _serve(self, entry: _Model, model: ServedModel) -> None:
        source = entry.source
        max_batch_size = (source.max_batch_size if source is not None and source.max_batch_size
                          else self.settings.max_batch_size)
        entry.batcher = Batcher(model, max_batch_size, self.settings.batch_window, self.settings.max_queue,
                                entry.stats)
        entry.state, entry.reason = READY, ""

    def _entry(self, name: str, version: str) -> _Model:
        entry = self._models.get(name)
        if entry is None:
            raise ProtocolError(f"unknown model {name!r}; this server has {self.names}", 404)
        if version not in ("", VERSION):
            raise ProtocolError(f"model {name!r} has version {VERSION} only, not {version!r}", 404)
        return entry


def _load(source: ModelSource) -> ServedModel:
    return ServedModel.load(source.path, source.name, precision=source.precision,
                            calibration=source.calibration)


async def _in_thread(function: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, (KuiperError, RepositoryError)) else f"{type(exc).__name__}: {exc}"


def _not_available(entry: _Model) -> str:
    if entry.state == LOADING:
        return f"model {entry.name!r} is loading"
    if entry.state == UNLOADING:
        return f"model {entry.name!r} is unloading"
    return f"model {entry.name!r} is not available: {entry.reason or 'not loaded'}"


def _statistics(entry: _Model) -> dict[str, Any]:
    numbers = entry.stats.snapshot()

    def duration(d: Any) -> dict[str, int]:
        return {"count": d.count, "ns": d.ns}

    fail = sum(d.count for d in numbers.failure.values()), sum(d.ns for d in numbers.failure.values())
    return {"name": entry.name, "version": VERSION, "last_inference": numbers.last_inference_ms,
            "inference_count": numbers.inference_count, "execution_count": numbers.execution_count,
            "inference_stats": {"success": duration(numbers.success), "fail": {"count": fail[0], "ns": fail[1]},
                                "queue": duration(numbers.queue), "compute_infer": duration(numbers.compute)},
            "batch_stats": [{"batch_size": size, "compute_infer": duration(d)}
                            for size, d in numbers.batches.items()]}
