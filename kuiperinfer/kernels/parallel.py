"""The engine's own threads: a large operator's parts shared among them, taken as they come free.

A run limits BLAS to one thread and sets :data:`INTRA_OP_THREADS` to the graph's thread
count; kernels cut a large operator's work into independent parts (more of them than
threads) and hand them to :func:`run_parts`. The caller and helper threads then take the
parts one at a time, each the next one left, until none is left: a thread the operating
system has descheduled takes fewer parts instead of holding the others up, and the
caller waits only for parts already under way. Compiled kernels release the GIL, as do
NumPy and BLAS inside their loops, so the parts run at once.

The threads wait for each other by spinning without the GIL (:mod:`.compiled.spin`): a
helper between tasks, a caller for the parts its helpers took. A hand-off then takes
microseconds, where waking a thread that sleeps on a lock takes tens, so operators from
:data:`MIN_PARALLEL_WORK` multiply-adds up are shared. On a busy machine a spinning helper
is kept off its core now and then, and spinning takes time the others want; so while other
processes want the cores (:class:`MachineLoad`) helpers block instead of spinning and only
operators of :data:`MIN_PARALLEL_WORK_BUSY` and more are shared.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

import numpy as np

from kuiperinfer.kernels.compiled import spin

INTRA_OP_THREADS: ContextVar[int] = ContextVar("kuiper_intra_op_threads", default=1)
"""Threads a kernel may share its parts among in the current context (1: one thread)."""
MIN_PARALLEL_WORK = 4 << 20
"""Fewest multiply-adds an operator shares among threads on a quiet machine. Below it a share
costs more than it gives back: the hand-offs, and the next operator, run by one thread,
reading an input half of which the other core wrote (measured in docs/performance.md)."""
MIN_PARALLEL_WORK_BUSY = 24 << 20
"""The fewest while other processes want the cores (:class:`MachineLoad`): a helper they keep
off its core makes the caller wait for the parts it took."""


class MachineLoad:
    """Whether other processes want the cores: from the number of threads running at this
    moment, which Linux keeps in ``/proc/loadavg`` (its fourth field, running/existing),
    minus the engine's own, sampled at most every :attr:`SAMPLE_S` and averaged, since a
    kernel thread may run at any one moment. Where that file does not exist the machine
    counts as quiet, and the helpers always spin between tasks, as onnxruntime's do."""

    SAMPLE_S = 0.01
    WEIGHT = 0.25
    """The weight of each new sample in the average."""

    def __init__(self, path: str = "/proc/loadavg") -> None:
        self.path = path
        self.busy = False
        self._others = 0.0
        self._sampled_at = 0.0

    def update(self, own_running: int, own_threads: int) -> bool:
        """Sample (at most every SAMPLE_S) while ``own_running`` of the engine's threads run, the
        caller among them; busy when the others and ``own_threads`` would not fit on the cores."""
        now = time.monotonic()
        if now - self._sampled_at < self.SAMPLE_S:
            return self.busy
        self._sampled_at = now
        try:
            with open(self.path, "rb") as loadavg:
                running = int(loadavg.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            return self.busy
        self._others += self.WEIGHT * (running - own_running - self._others)
        self.busy = self._others + own_threads > _cores() + 0.5
        return self.busy


LOAD = MachineLoad()
"""The load the engine's threads adapt to."""

Part = TypeVar("Part")


class BlasLimit:
    """BLAS limited to one thread while any user needs it, in the whole process.

    The BLAS thread count is process-global: the first user to enter limits it and the
    last to leave restores it (counted under a lock, so overlapping users in several
    threads cannot restore it too early or leave it limited). Other BLAS calls in the
    process meanwhile also get one thread. threadpoolctl lets only the thread that last set
    OpenBLAS's thread count set it again until that thread lets go, and the first and last
    users may be different threads, so the limit lets go each time, under its lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._controller: Any = None
        self._limit: Any = None

    def __enter__(self) -> None:
        with self._lock:
            if self._users == 0:
                if self._controller is None:
                    from threadpoolctl import ThreadpoolController
                    self._controller = ThreadpoolController()
                _let_go_of_openblas()
                self._limit = self._controller.limit(limits=1, user_api="blas")
                _let_go_of_openblas()
            self._users += 1

    def __exit__(self, *exc_info: Any) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self._limit.restore_original_limits()
                _let_go_of_openblas()
                self._limit = None


def _let_go_of_openblas() -> None:
    """Let any thread set OpenBLAS's thread count next (threadpoolctl 3.8 and later)."""
    from threadpoolctl import OpenBLASController

    clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


ONE_BLAS_THREAD = BlasLimit()


def threads_for(work: int) -> int:
    """How many threads an operator of ``work`` multiply-adds shares its parts among."""
    threads = INTRA_OP_THREADS.get()
    if threads < 2 or work < MIN_PARALLEL_WORK:
        return 1
    if work >= MIN_PARALLEL_WORK_BUSY:
        return threads
    awake = sum(helper.awake for helper in _helpers)
    return 1 if LOAD.update(1 + awake, min(threads, _cores())) else threads


def even_step(length: int, step: int, threads: int, images: int = 1) -> int:
    """A block length of at most ``step`` that cuts ``length`` rows of each of ``images``
    images into blocks ``threads`` threads can share evenly (their number a multiple of
    ``threads`` where the rows allow), so that no thread is left with one block more."""
    blocks = -(-length // max(1, step))
    while (images * blocks) % threads and blocks < length:
        blocks += 1
    return -(-length // blocks)


class _Task:
    """One :func:`run_parts` call: its parts, the next one to take, and how many are not yet
    counted off as run (an int64 array the threads count off atomically, :mod:`spin`)."""

    def __init__(self, parts: Sequence[Any], run: Callable[[Any], object]):
        self.parts, self.run = parts, run
        self._next = itertools.count()   # next() on it is atomic under the GIL
        self.left = np.array([len(parts)], np.int64)
        self.error: BaseException | None = None

    def work(self) -> int:
        """Take and run parts until none is left (after a failure, take them without running);
        how many this thread took."""
        taken = 0
        while (index := next(self._next)) < len(self.parts):
            taken += 1
            if self.error is None:
                try:
                    self.run(self.parts[index])
                except BaseException as error:   # raised by the caller once every part is done
                    self.error = self.error or error
        return taken


class _Helper:
    """A thread that works on the :class:`_Task` objects it is handed, in turn. Between tasks
    it spins a while (:data:`HELPER_SPIN_US`) for the next one, then blocks on its queue;
    while other processes want the cores (:data:`LOAD`) it blocks at once. Callers in several
    threads may hand it tasks at once; of the tasks that wait for it, it takes the newest (the
    callers of the others run their parts themselves, none waits for a part not taken)."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._posted = np.zeros(1, np.int64)   # how many tasks it was handed, read while spinning
        self._posting = threading.Lock()        # callers in several threads count them one at a time
        self.awake = True                       # spinning or working, not blocked
        threading.Thread(target=self._serve, name="kuiper-intra-op", daemon=True).start()

    def start(self, task: _Task) -> None:
        self._tasks.put(task)
        with self._posting:
            self._posted[0] += 1

    def _serve(self) -> None:
        left, taken, handed = np.zeros(1, np.int64), 0, 0
        while True:
            turns = 0 if LOAD.busy else _turns(HELPER_SPIN_US)
            self.awake = spin.wait_for_task(self._posted, handed, left, taken, turns, _turns(SETTLE_US))
            task = self._tasks.get()
            self.awake = True
            handed += 1
            while not self._tasks.empty():     # behind: the callers of the older tasks ran their parts
                task = self._tasks.get()
                handed += 1
            taken, left = task.work(), task.left


HELPER_SPIN_US = 200.0
"""How long a helper spins for its next task before it blocks: long enough to span an
operator or two run whole between shared ones, short enough to leave the core to other
processes soon after a run."""
SETTLE_US = 15.0
"""How long a helper handed a task waits before it takes the GIL, for the caller to have
let go of it by starting its own part (else the helper sleeps until the caller does)."""
CALLER_SPIN_US = 200.0
"""How long a caller spins for its helpers' parts before it lets other threads run once."""
_turns_per_us = 0.0


def _turns(microseconds: float) -> int:
    """Turns of a spinning wait that take about ``microseconds``, at the fastest rate measured
    in a few tries once per process (a try the machine slowed down or interrupted turns slower)."""
    global _turns_per_us
    if not _turns_per_us:
        never = np.ones(1, np.int64)
        spin.wait_for_task(never, 1, never, 0, 0, 0)     # both waits compiled or loaded first
        spin.finish_and_wait(never, 0, 1000)
        rates = []
        for _ in range(5):
            started = time.perf_counter()
            spin.finish_and_wait(never, 0, 200_000)
            rates.append(200_000 / max(1e-3, (time.perf_counter() - started) * 1e6))
        _turns_per_us = max(rates)
    return int(microseconds * _turns_per_us)


_helpers: list[_Helper] = []
_helpers_lock = threading.Lock()


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _take_helpers(count: int) -> list[_Helper]:
    """The first ``count`` helpers, started as needed; at most one fewer than the cores, since
    more threads than cores only take turns (and a spinning helper holds its core)."""
    count = min(count, _cores() - 1)
    if len(_helpers) < count:
        _turns(0)              # the spinning waits loaded and timed here, not as a new helper starts
        with _helpers_lock:
            _helpers.extend(_Helper() for _ in range(count - len(_helpers)))
    return _helpers[:count]


def _forget_helpers() -> None:
    """In a forked child: the helpers' threads did not survive the fork."""
    _helpers.clear()


os.register_at_fork(after_in_child=_forget_helpers)


def run_parts(parts: Sequence[Part], work: int, run: Callable[[Part], object]) -> None:
    """``run(part)`` for every part of an operator of ``work`` multiply-adds, shared among
    :func:`threads_for` ``work`` threads (:func:`share_parts`)."""
    share_parts(parts, run, threads_for(work))


def share_parts(parts: Sequence[Part], run: Callable[[Part], object], threads: int) -> None:
    """``run(part)`` for every part (the parts must write disjoint outputs), taken one at a
    time by the caller and up to ``threads`` - 1 helpers as each comes free. Returns when
    every part has run; raises what the first failing part raised."""
    threads = min(threads, len(parts))
    if threads < 2:
        for part in parts:
            run(part)
        return
    task = _Task(parts, run)
    for helper in _take_helpers(threads - 1):
        helper.start(task)
    taken, turns = task.work(), _turns(CALLER_SPIN_US)
    while not spin.finish_and_wait(task.left, taken, turns):
        taken = 0
        time.sleep(0)
    if task.error is not None:
        raise task.error
