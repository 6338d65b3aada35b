"""Per-operator timing through the graph's ``run_node`` hook, and Chrome/Perfetto traces.

:class:`ProfilingGraph` is a :class:`RuntimeGraph` whose :meth:`run_node` notes the
wall time of each operator around the normal computation, so the execution loop
itself is the one every graph uses::

    graph = kuiperinfer.load("resnet18.pnnx.param", graph_class=ProfilingGraph)
    report = profile(graph, [images], runs=20, warmup_runs=3)
    report.operators[0]                  # the slowest operator, averaged over 20 runs
    write_chrome_trace(graph.runs[-1], "trace.json")   # open in ui.perfetto.dev

An operator's time is its own: from the call of its layer to the return, with the
engine's bookkeeping between operators counted only in the run's wall time. When a batch
is split over worker threads, each thread's operators are recorded (with the thread), so
the time inside operators adds up the threads and can exceed the wall time.
"""

from __future__ import annotations

import contextvars
import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kuiperinfer.runtime.graph import RuntimeGraph
from kuiperinfer.runtime.operator import RuntimeOperator

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each run."""


@dataclass(frozen=True)
class NodeEvent:
    """One operator's execution: monotonic clock times in nanoseconds, and the value shapes."""

    name: str
    type: str
    start_ns: int
    end_ns: int
    input_shapes: tuple[Any, ...]
    output_shapes: tuple[Any, ...]
    thread: int = 0
    """The thread that ran it (``threading.get_ident()``)."""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class RunRecord:
    """One forward pass: its wall-clock span and the operators it ran, in order."""

    start_ns: int
    end_ns: int = 0
    events: list[NodeEvent] = field(default_factory=list)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class ProfilingGraph(RuntimeGraph):
    """A RuntimeGraph that records every run (:attr:`runs`) while :attr:`recording` is on.

    Runs in several threads at once are recorded separately (each thread has its own
    current run), but their times then include the waits of sharing the machine.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.recording = True
        self.runs: list[RunRecord] = []
        self._record: contextvars.ContextVar[RunRecord | None] = contextvars.ContextVar(
            f"profiled-run-{id(self)}", default=None)

    def run(self, *args: Any, **kwargs: Any) -> list[Any]:
        if not self.recording:
            return super().run(*args, **kwargs)
        record = RunRecord(time.perf_counter_ns())
        token = self._record.set(record)
        try:
            return super().run(*args, **kwargs)
        finally:
            record.end_ns = time.perf_counter_ns()
            self._record.reset(token)
            self.runs.append(record)

    def run_node(self, op: RuntimeOperator, inputs: list[Any]) -> list[Any]:
        record = self._record.get()
        if record is None:
            return super().run_node(op, inputs)
        start = time.perf_counter_ns()
        outputs = super().run_node(op, inputs)
        end = time.perf_counter_ns()
        record.events.append(NodeEvent(op.name, op.type, start, end, tuple(map(_shape_of, inputs)),
                                       tuple(map(_shape_of, outputs)), threading.get_ident()))
        return outputs

    def clear(self) -> None:
        """Forget the recorded runs."""
        self.runs = []


def _shape_of(value: Any) -> Any:
    """An array's shape as a tuple; for other values (shapes, scalars, tuples) their type name."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(int(d) for d in shape)
    if isinstance(value, tuple):
        return tuple(_shape_of(v) for v in value)
    return type(value).__name__


# -- aggregation ---------------------------------------------------------------------

@dataclass(frozen=True)
class OperatorTime:
    """One operator's time over the profiled runs (seconds)."""

    name: str
    type: str
    calls: int
    total_s: float
    median_s: float
    """The median of one call, robust to the odd slow call on a busy machine."""
    output_shapes: tuple[Any, ...]

    @property
    def mean_s(self) -> float:
        return self.total_s / self.calls


@dataclass(frozen=True)
class TypeTime:
    """The operators of one type together (seconds over all profiled runs)."""

    type: str
    operators: int
    total_s: float


@dataclass(frozen=True)
class ProfileReport:
    """Operators and types sorted by time, slowest first, over ``runs`` runs."""

    runs: int
    wall_s: float
    """Wall time of all runs, operators and the engine's work between them."""
    operators: tuple[OperatorTime, ...]
    types: tuple[TypeTime, ...]
    threads: int = 1
    """Threads the operators of one run ran on (worker threads splitting a batch)."""

    @property
    def operator_s(self) -> float:
        """Time inside operators, all runs."""
        return sum(op.total_s for op in self.operators)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON, times in milliseconds per run."""
        per_run = 1e3 / self.runs
        return {"runs": self.runs, "threads": self.threads, "wall_ms_per_run": self.wall_s * per_run,
                "operator_ms_per_run": self.operator_s * per_run,
                "operators": [{"name": op.name, "type": op.type, "calls": op.calls,
                               "ms_per_run": op.total_s * per_run, "median_ms": op.median_s * 1e3,
                               "output_shapes": op.output_shapes} for op in self.operators],
                "types": [{"type": t.type, "operators": t.operators, "ms_per_run": t.total_s * per_run}
                          for t in self.types]}


def summarize_runs(runs: Sequence[RunRecord]) -> ProfileReport:
    """Add up the operators' times over ``runs``."""
    if not runs:
        raise ValueError("no runs to summarise")
    by_name: dict[str, list[NodeEvent]] = {}
    for run in runs:
        for event in run.events:
            by_name.setdefault(event.name, []).append(event)
    operators = sorted((OperatorTime(name, events[0].type, len(events),
                                     sum(e.duration_ns for e in events) / 1e9,
                                     statistics.median(e.duration_ns for e in events) / 1e9,
                                     events[-1].output_shapes)
                        for name, events in by_name.items()),
                       key=lambda op: (-op.total_s, op.name))
    by_type: dict[str, list[OperatorTime]] = {}
    for op in operators:
        by_type.setdefault(op.type, []).append(op)
    types = sorted((TypeTime(t, len(ops), sum(op.total_s for op in ops)) for t, ops in by_type.items()),
                   key=lambda t: (-t.total_s, t.type))
    wall = sum(run.duration_ns for run in runs) / 1e9
    threads = max(len({event.thread for event in run.events}) for run in runs) or 1
    return ProfileReport(len(runs), wall, tuple(operators), tuple(types), threads)


def profile(graph: ProfilingGraph, inputs: Sequence[Any], runs: int = 10, warmup_runs: int = 2,
            progress: Progress | None = None) -> ProfileReport:
    """Run ``graph`` on ``inputs`` ``warmup_runs`` times unrecorded, then ``runs`` times recorded.

    The graph's :attr:`~ProfilingGraph.runs` then holds exactly the recorded runs.
    """
    if runs < 1 or warmup_runs < 0:
        raise ValueError(f"need runs >= 1 and warmup_runs >= 0, got runs={runs} warmup_runs={warmup_runs}")
    graph.recording = False
    for _ in range(warmup_runs):
        graph.run(*inputs)
    graph.clear()
    graph.recording = True
    for done in range(1, runs + 1):
        graph.run(*inputs)
        if progress is not None:
            progress(done, runs)
    return summarize_runs(graph.runs)


# -- Chrome trace --------------------------------------------------------------------

def chrome_trace(run: RunRecord, process_name: str = "kuiperinfer") -> dict[str, Any]:
    """One run in the Trace Event Format that chrome://tracing and Perfetto open.

    The run is a complete event (``ph: "X"``) of category ``graph``; each operator one
    inside it, named after the operator, of its type's category, with its shapes in
    ``args``. Times are microseconds from the start of the run.
    """
    def micros(ns: int) -> float:
        return (ns - run.start_ns) / 1e3

    threads = {thread: tid for tid, thread in enumerate(dict.fromkeys(e.thread for e in run.events), 2)}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": process_name}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "forward"}},
        {"name": "forward", "cat": "graph", "ph": "X", "pid": 1, "tid": 1,
         "ts": 0.0, "dur": run.duration_ns / 1e3, "args": {"operators": len(run.events)}},
    ]
    for _thread, tid in threads.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                       "args": {"name": f"operators, thread {tid - 1}"}})
    for event in run.events:
        events.append({"name": event.name, "cat": event.type, "ph": "X", "pid": 1, "tid": threads[event.thread],
                       "ts": micros(event.start_ns), "dur": event.duration_ns / 1e3,
                       "args": {"inputs": event.input_shapes, "outputs": event.output_shapes}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(run: RunRecord, path: str | os.PathLike, process_name: str = "kuiperinfer") -> None:
    """Write :func:`chrome_trace` of ``run`` to ``path`` as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(chrome_trace(run, process_name), f)

