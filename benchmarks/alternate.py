"""Each engine in its own long-lived process, timed in alternating blocks.

An :class:`EngineProcess` is spawned per engine and precision (:func:`start_all`): it loads
the model once (as its users would, :func:`~benchmarks.engines.make_engine`), runs it on the
inputs (the output goes back to be compared), warms it up, and then waits on its pipe.
:func:`time_alternating` asks one engine at a time for a block of runs
(:func:`block_schedule`), the order rotating from round to round, so that drifts in the
machine's load hit every engine alike. While one engine runs, the others are blocked in a
read of their pipe, not spinning; before the next block the parent waits until the last
engine's process has gone quiet (:func:`wait_idle`: its threads may spin for a while after
a run, as onnxruntime's and OpenBLAS's do by default), so no two engines ever compute at
once. Each block opens with one untimed run, so that its times are those of an engine
running in a loop, not waking up after another one ran.
"""

from __future__ import annotations

import contextlib
import glob
import math
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.engines import engine_threads, make_engine, row_paths
from benchmarks.models import MODELS, Inputs

IDLE_POLL_S = 0.01
IDLE_SHARE = 0.05
"""A process is quiet when its threads used less than this share of one core over a poll."""
IDLE_TIMEOUT_S = 2.0
SETTLE_WITHOUT_PROC_S = 0.2
"""How long to wait after a block where the process's CPU time cannot be read (no /proc)."""

Row = tuple[str, str]
"""An engine and the precision it runs in, as ``("kuiperinfer", "bf16")``."""


class EngineFailed(Exception):
    """The engine could not load or run the model (the message says why)."""


def block_schedule(engines: Sequence[str], runs: int, block: int) -> list[tuple[str, int]]:
    """The blocks to time, in order: (engine, runs in the block). Every engine gets ``runs``
    runs in blocks of ``block``; each round has one block per engine, and the order rotates
    by one engine from round to round."""
    schedule = []
    for round_ in range(math.ceil(runs / block)):
        count = min(block, runs - round_ * block)
        shift = round_ % len(engines)
        schedule += [(engine, count) for engine in [*engines[shift:], *engines[:shift]]]
    return schedule


def cpu_seconds(pid: int) -> float | None:
    """CPU time used so far by all threads of process ``pid`` (Linux's schedstat, in
    nanoseconds), or None where it cannot be read."""
    total = 0
    found = False
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):   # a thread may end meanwhile
            total += int(Path(path).read_text().split()[0])
            found = True
    return total / 1e9 if found else None


def wait_idle(pid: int, poll: float = IDLE_POLL_S, share: float = IDLE_SHARE,
              timeout: float = IDLE_TIMEOUT_S) -> float:
    """Wait until process ``pid``'s threads stop computing (e.g. spinning after a run);
    returns the seconds waited."""
    start = last = time.perf_counter()
    used = cpu_seconds(pid)
    if used is None:
        time.sleep(SETTLE_WITHOUT_PROC_S)
        return SETTLE_WITHOUT_PROC_S
    while last - start < timeout:
        time.sleep(poll)
        now, now_used = time.perf_counter(), cpu_seconds(pid)
        if now_used is None or now_used - used < share * (now - last):
            break
        last, used = now, now_used
    return time.perf_counter() - start


def serve(conn: Any, engine: str, precision: str, model_name: str, param: str | None, onnx_path: str | None,
          threads: int | None, inputs: Inputs, warmup: int, calibration: str | None = None) -> None:
    """The engine process: load, answer ``("ready", output, threads, precision)`` or
    ``("error", text)``, then time a block of runs for each request (an int) until it reads None."""
    with engine_threads(threads):
        try:
            run = make_engine(engine, MODELS[model_name], param and Path(param), onnx_path and Path(onnx_path),
                              threads, precision, calibration and Path(calibration))
            output = np.asarray(run(inputs))
            for _ in range(warmup):
                run(inputs)
        except Exception as exc:   # an unsupported operator, a failed load: reported in the table
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            return
        conn.send(("ready", output, run.threads, run.precision))
        while (count := _next_request(conn)) is not None:
            run(inputs)
            times = []
            for _ in range(count):
                start = time.perf_counter()
                run(inputs)
                times.append(time.perf_counter() - start)
            conn.send(times)


def _next_request(conn: Any) -> int | None:
    """The next block's run count; None to stop (also when the parent has gone)."""
    try:
        return conn.recv()
    except EOFError:
        return None


@dataclass
class EngineProcess:
    """One engine's spawned process in one precision (see :func:`serve`)."""

    engine: str
    precision: str
    model: str
    param: Path | None
    onnx_path: Path | None
    threads: int | None
    inputs: Inputs
    warmup: int
    calibration: Path | None = None
    """kuiperinfer's calibration table, in int8."""
    output: np.ndarray | None = field(default=None, init=False)
    thread_text: str = field(default="", init=False)
    computes: str = field(default="", init=False)
    """The precision the engine says it computes in (its own choice for ``default``)."""

    def start(self) -> EngineProcess:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=serve, daemon=True, name=f"bench-{self.engine}-{self.precision}",
            args=(child, self.engine, self.precision, self.model, self.param and str(self.param),
                  self.onnx_path and str(self.onnx_path), self.threads, self.inputs, self.warmup,
                  self.calibration and str(self.calibration)))
        self.process.start()
        child.close()
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def ready(self) -> np.ndarray:
        """Wait for the load and warm-up; the first output. Raises EngineFailed."""
        reply = self._receive()
        if reply[0] == "error":
            self.close()
            raise EngineFailed(reply[1])
        _, self.output, self.thread_text, self.computes = reply
        return self.output

    def run_block(self, count: int) -> list[float]:
        """Seconds of each of ``count`` timed runs (after one untimed run)."""
        self.conn.send(count)
        return self._receive()

    def _receive(self) -> Any:
        try:
            return self.conn.recv()
        except EOFError:
            self.process.join(5)
            raise EngineFailed(f"the {self.engine} process ended (exit code {self.process.exitcode})") from None

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        self.conn.close()


def start_all(rows: Sequence[Row], model: str, files: dict[str, Path | str], threads: int | None, inputs: Inputs,
              warmup: int) -> tuple[dict[Row, EngineProcess], dict[Row, str]]:
    """A process per row, all loading at once (``files``: :func:`~benchmarks.engines.row_paths`
    finds each row's): those that became ready, and why each of the others did not."""
    processes: dict[Row, EngineProcess] = {}
    failed: dict[Row, str] = {}
    try:
        for engine, precision in rows:
            paths = row_paths(files, engine, precision)
            if isinstance(paths, str):   # its export, or its calibration, failed
                failed[engine, precision] = paths
                continue
            processes[engine, precision] = EngineProcess(engine, precision, model, paths[0], paths[1], threads,
                                                         inputs, warmup, paths[2]).start()
        for row, process in list(processes.items()):
            try:
                process.ready()
            except EngineFailed as exc:
                failed[row] = str(exc)
                del processes[row]
    except BaseException:
        for process in processes.values():
            process.close()
        raise
    return processes, failed


def time_alternating(processes: dict[str, Any], runs: int, block: int,
                     settle: Callable[[int], float] = wait_idle) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds per run of each engine, timed in alternating blocks (:func:`block_schedule`),
    and the longest wait for each engine's process to go quiet after its block."""
    for process in processes.values():   # loaded and warmed up, possibly all at once
        settle(process.pid)
    times: dict[str, list[float]] = {name: [] for name in processes}
    settled = dict.fromkeys(processes, 0.0)
    for name, count in block_schedule(list(processes), runs, block):
        times[name] += processes[name].run_block(count)
        settled[name] = max(settled[name], settle(processes[name].pid))
    return times, settled
