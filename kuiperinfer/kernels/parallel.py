"""Intra-operator parallelism: a kernel's independent blocks of work shared among threads.

A batch of several samples keeps every core busy by itself: the graph's workers each run
a slice of it through the whole graph, with BLAS limited to one thread. A single sample
runs whole in one thread, where only the matrix products would use every core. For a
graph whose work is mostly in large operators (:func:`sharing_pays`) the graph then sets
:data:`INTRA_OP_THREADS` and limits BLAS to one thread, and the kernels (im2col, Winograd,
depthwise convolution, pooling) hand their blocks to :func:`run_parts`, which runs a large
operator's blocks on that many threads at once: the column copies, transforms and
epilogues in parallel as well as the products. NumPy and BLAS release the GIL inside
their loops. Graphs of small operators leave the parallelism to BLAS: their hand-offs
would cost more than they save, and BLAS's idle threads, which spin for a while after
each product, would take the cores the shared blocks need.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

INTRA_OP_THREADS: ContextVar[int] = ContextVar("kuiper_intra_op_threads", default=1)
"""Threads a kernel may share its blocks among in the current context (1: one thread)."""
MIN_PARALLEL_WORK = 1 << 24
"""Fewest multiply-adds an operator shares among threads: the hand-off to another thread
and back (:class:`_Helper`) then costs a few percent of the operator's time."""

LARGE_WORK_SHARE = 0.5
"""Share of a graph's multiply-adds in operators of at least ``MIN_PARALLEL_WORK`` from
which it shares them among threads: graphs of large convolutions gain from it, graphs of
small depthwise operators lose to the hand-offs."""

Part = TypeVar("Part")


def sharing_pays(operator_macs: Iterable[int]) -> bool:
    """Whether a graph whose operators do ``operator_macs`` multiply-adds (per sample) runs
    faster sharing its large operators' blocks among threads than leaving it to BLAS."""
    macs = list(operator_macs)
    return sum(m for m in macs if m >= MIN_PARALLEL_WORK) >= LARGE_WORK_SHARE * max(1, sum(macs))


class BlasLimit:
    """BLAS limited to one thread while any user needs it, in the whole process.

    The BLAS thread count is process-global: the first user to enter limits it and the
    last to leave restores it (counted under a lock, so overlapping users in several
    threads cannot restore it too early or leave it limited). Other BLAS calls in the
    process meanwhile also get one thread.
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
                self._limit = self._controller.limit(limits=1, user_api="blas")
            self._users += 1

    def __exit__(self, *exc_info: Any) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self._limit.restore_original_limits()
                self._limit = None


ONE_BLAS_THREAD = BlasLimit()


def threads_for(work: int) -> int:
    """How many threads an operator of ``work`` multiply-adds shares its blocks among."""
    threads = INTRA_OP_THREADS.get()
    return threads if threads > 1 and work >= MIN_PARALLEL_WORK else 1


def even_step(length: int, step: int, threads: int, images: int = 1) -> int:
    """A block length of at most ``step`` that cuts ``length`` rows of each of ``images``
    images into blocks ``threads`` threads can share evenly (their number a multiple of
    ``threads`` where the rows allow): :func:`run_parts` gives each thread as many blocks,
    and 8 blocks of 15, 15, ..., 7 rows gave one thread 60 of 112 rows, 14 each gives 56."""
    blocks = -(-length // max(1, step))
    while (images * blocks) % threads and blocks < length:
        blocks += 1
    return -(-length // blocks)


class _Helper:
    """A thread that runs one task at a time for :func:`run_parts`, handed over through two
    locks: releasing ``_go`` starts the task, ``_done`` is released when it has finished.

    A hand-off costs a lock release and a wake-up each way, less than a
    ThreadPoolExecutor's future, queue and waiter.
    """

    def __init__(self) -> None:
        self._go, self._done = threading.Lock(), threading.Lock()
        self._go.acquire()
        self._done.acquire()
        self._task: Callable[[], object] | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._serve, name="kuiper-intra-op", daemon=True).start()

    def start(self, task: Callable[[], object]) -> None:
        self._task = task
        self._go.release()

    def join(self) -> BaseException | None:
        """Wait for the task; what it raised, if anything."""
        self._done.acquire()
        error, self._error = self._error, None
        return error

    def _serve(self) -> None:
        while True:
            self._go.acquire()
            try:
                self._task()
            except BaseException as error:   # handed to the caller by join
                self._error = error
            finally:
                self._task = None
                self._done.release()


MAX_HELPERS = 4 * (os.cpu_count() or 1)
"""Helper threads kept at most: callers in many threads at once beyond that run their
parts themselves rather than start more threads."""

_idle_helpers: list[_Helper] = []
_helper_count = 0
_helpers_lock = threading.Lock()


def _take_helpers(count: int) -> list[_Helper]:
    """Up to ``count`` idle helpers, started as needed (fewer when MAX_HELPERS are busy)."""
    global _helper_count
    with _helpers_lock:
        taken = [_idle_helpers.pop() for _ in range(min(count, len(_idle_helpers)))]
        new = min(count - len(taken), MAX_HELPERS - _helper_count)
        _helper_count += new
    return taken + [_Helper() for _ in range(new)]


def _forget_helpers() -> None:
    """In a forked child: the helpers' threads did not survive the fork."""
    global _helper_count
    _idle_helpers.clear()
    _helper_count = 0


os.register_at_fork(after_in_child=_forget_helpers)


def run_parts(parts: Sequence[Part], work: int, run: Callable[[Part], object]) -> None:
    """``run(part)`` for every part. The parts (which must write disjoint outputs) are shared
    in contiguous groups among :func:`threads_for` ``work`` threads, the caller's included."""
    threads = min(threads_for(work), len(parts))
    if threads < 2:
        for part in parts:
            run(part)
        return
    bounds = [len(parts) * i // threads for i in range(threads + 1)]
    groups = [parts[start:stop] for start, stop in zip(bounds, bounds[1:])]

    def group_task(group: Sequence[Part]) -> Callable[[], None]:
        def task() -> None:
            for part in group:
                run(part)
        return task

    with ONE_BLAS_THREAD:
        helpers = _take_helpers(threads - 1)
        for helper, group in zip(helpers, groups[1:]):
            helper.start(group_task(group))
        errors = []
        try:
            for group in [groups[0], *groups[1 + len(helpers):]]:   # the caller's, and any no helper took
                group_task(group)()
        finally:
            for helper in helpers:   # no part outlives the call, even when one fails
                errors.append(helper.join())
                with _helpers_lock:
                    _idle_helpers.append(helper)
    for error in errors:
        if error is not None:
            raise error
