"""What the server counts for each model: the numbers behind Triton's statistics and metrics.

One :class:`ModelStats` per model name lives as long as the server (a model unloaded and
loaded again keeps counting), so that its counters only ever grow, as Prometheus expects.
The batcher records each run of the model and the time each request waited and ran; the
server records each request's outcome. Both write on the event loop's thread; the metrics
endpoint reads from its own thread, through :meth:`ModelStats.snapshot`.

Durations are nanoseconds, as in Triton's statistics. A request's queue and compute
durations are its own wait and the whole run it took part in, so a run of 4 joined requests
adds its time four times to ``compute`` and once to the batch size's entry, as Triton counts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

FAILURE_REASONS = ("REJECTED", "BACKEND", "OTHER")
"""Why a request failed, as Triton's ``reason`` label says it: refused without running (the
queue was full, the model unavailable), the model failed, or anything else (a request that
does not fit the model)."""


@dataclass
class Duration:
    """How many times something happened and the nanoseconds it took in all."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass
class StatsSnapshot:
    """A copy of one model's numbers at one moment."""

    success: Duration = field(default_factory=Duration)
    """Requests answered, and their durations from arrival to answer."""
    failure: dict[str, Duration] = field(default_factory=lambda: {reason: Duration() for reason in FAILURE_REASONS})
    """Requests refused or failed, by reason, and their durations."""
    queue: Duration = field(default_factory=Duration)
    """Time answered requests waited for a run."""
    compute: Duration = field(default_factory=Duration)
    """Time the runs of answered requests took (each request counts its whole run)."""
    inference_count: int = 0
    """Samples run for answered requests (a request of batch 4 counts 4)."""
    execution_count: int = 0
    """Runs of the model that succeeded (joined requests share one)."""
    batches: dict[int, Duration] = field(default_factory=dict)
    """For each batch size the batcher formed, the runs of that size and their time."""
    last_inference_ms: int = 0
    """When the last run ended, in milliseconds since the epoch (0: never)."""


class ModelStats:
    """One model's counters, written by the server and its batcher, read by any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers = StatsSnapshot()

    def executed(self, batch: int, ns: int, waits_ns: list[int]) -> None:
        """A run of ``batch`` samples took ``ns``; its requests had waited ``waits_ns``."""
        with self._lock:
            numbers = self._numbers
            numbers.execution_count += 1
            numbers.inference_count += batch
            numbers.batches.setdefault(batch, Duration()).add(ns)
            numbers.queue.add(sum(waits_ns), len(waits_ns))
            numbers.compute.add(ns * len(waits_ns), len(waits_ns))
            numbers.last_inference_ms = time.time_ns() // 1_000_000

    def answered(self, ns: int) -> None:
        """A request was answered ``ns`` after it arrived."""
        with self._lock:
            self._numbers.success.add(ns)

    def failed(self, reason: str, ns: int) -> None:
        """A request failed for ``reason`` (one of :data:`FAILURE_REASONS`) after ``ns``."""
        with self._lock:
            self._numbers.failure[reason].add(ns)

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            numbers = self._numbers
            return StatsSnapshot(
                Duration(numbers.success.count, numbers.success.ns),
                {reason: Duration(d.count, d.ns) for reason, d in numbers.failure.items()},
                Duration(numbers.queue.count, numbers.queue.ns),
                Duration(numbers.compute.count, numbers.compute.ns),
                numbers.inference_count, numbers.execution_count,
                {size: Duration(d.count, d.ns) for size, d in sorted(numbers.batches.items())},
                numbers.last_inference_ms)
