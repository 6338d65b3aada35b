"""Dynamic batching: requests for one model that arrive close together share one run.

Each model has one :class:`Batcher`, which runs the model in its own worker thread, one
run at a time, as a Triton model instance does. While the model is busy requests queue;
when it is free the batcher takes the oldest request and every queued request that can
join it (the same input shapes after the batch dimension), up to ``max_batch_size``
samples, waiting up to ``window`` seconds after the oldest arrived for more to come. The
joined inputs are concatenated along the batch, run in one ``graph.run`` and the outputs
split back. A request larger than ``max_batch_size`` runs alone; ``max_batch_size=1``
turns joining off.

Requests are joined only for a model whose samples are independent and that runs at any
batch size (:attr:`RuntimeGraph.batching <kuiperinfer.runtime.graph.RuntimeGraph.batching>`):
otherwise one client would receive numbers computed from another's data. The others run
each request alone, and say so with a ``max_batch_size`` of 0, as Triton does.

Each run and each request's wait are counted in the batcher's :class:`ModelStats`. Stopping
either refuses the requests still queued (the server is going away) or, to unload the
model, drains: new requests are refused while the queued ones still run.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from kuiperinfer.errors import KuiperError
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.protocol import ProtocolError
from kuiperinfer.serve.stats import ModelStats


@dataclass
class _Pending:
    inputs: tuple[np.ndarray, ...]
    future: asyncio.Future
    arrived: int = field(default_factory=time.monotonic_ns)

    @property
    def batch(self) -> int:
        return self.inputs[0].shape[0] if self.inputs and self.inputs[0].ndim else 1

    @property
    def kind(self) -> tuple | None:
        """Requests of the same kind can be concatenated along the batch (None: cannot be)."""
        if any(a.ndim == 0 for a in self.inputs):
            return None
        return tuple((a.shape[1:], a.dtype.str) for a in self.inputs)


_Run = tuple[int, int, list[int]]
"""A run that succeeded: its samples, its nanoseconds, and the requests (by position) it answered."""


class Batcher:
    """Queues one model's requests and runs them, joined into batches, in a worker thread."""

    def __init__(self, model: ServedModel, max_batch_size: int = 8, window: float = 0.002,
                 max_queue: int = 64, stats: ModelStats | None = None):
        if max_batch_size < 1 or window < 0 or max_queue < 1:
            raise ValueError("max_batch_size and max_queue must be at least 1, window 0 or more")
        self.model = model
        self.max_batch_size = max_batch_size if model.joins_requests and max_batch_size > 1 else 0
        """The most samples requests are joined into; 0 when they never are."""
        self.window = window
        self.max_queue = max_queue
        self.stats = stats or ModelStats()
        """The runs, batch sizes, waits and run times counted so far."""
        self._queue: collections.deque[_Pending] = collections.deque()
        self._arrival = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"kuiper-serve-{model.name}")
        self._task: asyncio.Task | None = None
        self._closing: str | None = None

    @property
    def running(self) -> bool:
        """Whether the batcher takes requests."""
        return self._task is not None and not self._task.done() and self._closing is None

    @property
    def pending(self) -> int:
        """Requests queued, waiting for a run."""
        return len(self._queue)

    @property
    def executions(self) -> int:
        """Runs of the model that succeeded (requests joined into one batch count once)."""
        return self.stats.snapshot().execution_count

    def start(self) -> None:
        """Start taking requests (call from the event loop that will submit them)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve())

    async def stop(self, drain: bool = False, why: str = "the server is shutting down") -> None:
        """Stop taking requests, refusing new ones (503) with ``why``. With ``drain`` the
        requests queued still run; without, they are refused too. The run in progress
        finishes either way."""
        self._closing = why
        if not drain:
            self._refuse_queued()
        if self._task is not None:
            self._arrival.set()
            await asyncio.shield(self._task)
        self._refuse_queued()
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    def _refuse_queued(self) -> None:
        while self._queue:
            pending = self._queue.popleft()
            if not pending.future.done():
                pending.future.set_exception(ProtocolError(self._closing or "stopped", 503))

    async def infer(self, inputs: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        """Run the model on one request's inputs (model order); its outputs, in order."""
        if self._closing is not None:
            raise ProtocolError(self._closing, 503)
        if not self.running:
            raise ProtocolError(f"model {self.model.name!r} is not ready", 503)
        if len(self._queue) >= self.max_queue:
            raise ProtocolError(f"model {self.model.name!r} has {len(self._queue)} requests "
                                f"queued, the most it takes; try again later", 503)
        pending = _Pending(inputs, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        self._arrival.set()
        return await pending.future

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                if self._closing is not None:
                    return   # drained
                self._arrival.clear()
                await self._arrival.wait()
            batch = await self._next_batch()
            if not batch:
                continue
            started = time.monotonic_ns()
            try:
                results, runs = await loop.run_in_executor(self._executor, self._run, batch)
            except Exception as exc:  # noqa: BLE001  (whatever it is, the waiting clients must hear it)
                results, runs = [exc] * len(batch), []
            for samples, ns, answered in runs:
                self.stats.executed(samples, ns, [started - batch[i].arrived for i in answered])
            for pending, result in zip(batch, results):
                if pending.future.done():  # the client went away
                    continue
                if isinstance(result, Exception):
                    pending.future.set_exception(result)
                else:
                    pending.future.set_result(result)

    async def _next_batch(self) -> list[_Pending]:
        """The oldest request and those that can join it, once full or its window is over."""
        while True:
            while self._queue and self._queue[0].future.done():
                self._queue.popleft()
            if not self._queue:
                return []
            first = self._queue[0]
            chosen = self._to_join(first)
            samples = sum(p.batch for p in chosen)
            remaining = (first.arrived - time.monotonic_ns()) / 1e9 + self.window
            if samples >= self.max_batch_size or remaining <= 0 or first.kind is None or self._closing:
                break
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), remaining)
            except asyncio.TimeoutError:
                pass
        for pending in chosen:
            self._queue.remove(pending)
        return chosen

    def _to_join(self, first: _Pending) -> list[_Pending]:
        """``first`` and the queued requests of its kind that fit in one batch with it."""
        chosen, samples = [first], first.batch
        if not self.max_batch_size or first.kind is None:
            return chosen
        for pending in list(self._queue)[1:]:
            if pending.future.done() or pending.kind != first.kind:
                continue
            if samples + pending.batch > self.max_batch_size:
                break
            chosen.append(pending)
            samples += pending.batch
        return chosen

    def _run(self, batch: list[_Pending]) -> tuple[list[list[np.ndarray] | KuiperError], list[_Run]]:
        """In the worker thread: one run for the batch, split back; each alone if that fails.
        The outcome of each request, and each run that succeeded with the requests it answered."""
        graph = self.model.graph
        if len(batch) > 1:
            joined = [np.concatenate(arrays) for arrays in zip(*(p.inputs for p in batch))]
            started = time.monotonic_ns()
            try:
                outputs = graph.run(*joined)
            except KuiperError:  # let each request fail or succeed on its own below
                outputs = None
            total = sum(p.batch for p in batch)
            if outputs is not None and all(o.ndim and o.shape[0] == total for o in outputs):
                run = (total, time.monotonic_ns() - started, list(range(len(batch))))
                bounds = np.cumsum([0] + [p.batch for p in batch])
                return [[o[start:end] for o in outputs] for start, end in itertools.pairwise(bounds)], [run]
        results: list[list[np.ndarray] | KuiperError] = []
        runs: list[_Run] = []
        for i, pending in enumerate(batch):
            started = time.monotonic_ns()
            try:
                results.append(graph.run(*pending.inputs))
            except KuiperError as exc:
                results.append(exc)
                continue
            runs.append((pending.batch, time.monotonic_ns() - started, [i]))
        return results, runs
