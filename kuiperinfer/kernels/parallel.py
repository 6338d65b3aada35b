"""The engine's own threads: a large operator's parts shared among them, taken as they come free.

A run limits BLAS to one thread and sets :data:`INTRA_OP_THREADS` to the graph's thread
count; kernels cut a large operator's work into independent parts (more of them than
threads) and hand them to :func:`run_parts`. The caller and helper threads then take the
parts one at a time, each the next one left, until none is left: a thread the operating
system has descheduled takes fewer parts instead of holding the others up, and the
caller waits only for parts already under way. Compiled kernels release the GIL, as do
NumPy and BLAS inside their loops, so the parts run at once.

Operators below :data:`MIN_PARALLEL_WORK` run whole in the calling thread: for them a
hand-off to a helper costs more than it saves.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

INTRA_OP_THREADS: ContextVar[int] = ContextVar("kuiper_intra_op_threads", default=1)
"""Threads a kernel may share its parts among in the current context (1: one thread)."""
MIN_PARALLEL_WORK = 24 << 20
"""Fewest multiply-adds an operator shares among threads. A share costs more than its
hand-offs (the threads pass the GIL back and forth as each starts its part): the next
operator, run by one thread, then reads an input half of which the other core wrote, so
smaller operators run faster whole (measured in docs/performance.md)."""

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
    return threads if threads > 1 and work >= MIN_PARALLEL_WORK else 1


def even_step(length: int, step: int, threads: int, images: int = 1) -> int:
    """A block length of at most ``step`` that cuts ``length`` rows of each of ``images``
    images into blocks ``threads`` threads can share evenly (their number a multiple of
    ``threads`` where the rows allow), so that no thread is left with one block more."""
    blocks = -(-length // max(1, step))
    while (images * blocks) % threads and blocks < length:
        blocks += 1
    return -(-length // blocks)


class _Task:
    """One :func:`run_parts` call: its parts, the next one to take, and how many are left.

    Its signals are plain locks, not Events or Semaphores: those run Python code around a
    lock on every call, which a hand-off between threads pays for several times."""

    def __init__(self, parts: Sequence[Any], run: Callable[[Any], object]):
        self.parts, self.run = parts, run
        self._next = itertools.count()   # next() on it is atomic under the GIL
        self._lock = threading.Lock()
        self._left = len(parts)
        self._done = threading.Lock()
        self._done.acquire()             # released by whichever thread finishes the last part
        self.error: BaseException | None = None

    def work(self) -> None:
        """Take and run parts until none is left (after a failure, take them without running)."""
        while (index := next(self._next)) < len(self.parts):
            if self.error is None:
                try:
                    self.run(self.parts[index])
                except BaseException as error:   # raised by the caller once every part is done
                    self.error = self.error or error
            with self._lock:
                self._left -= 1
                last = self._left == 0
            if last:
                self._done.release()

    def wait(self) -> None:
        """Return once every part has run."""
        self._done.acquire()


class _Helper:
    """A thread that works on the :class:`_Task` it is handed, then offers itself again."""

    def __init__(self) -> None:
        self._wake = threading.Lock()    # released once per task handed over
        self._wake.acquire()
        self._task: _Task | None = None
        threading.Thread(target=self._serve, name="kuiper-intra-op", daemon=True).start()

    def start(self, task: _Task) -> None:
        self._task = task
        self._wake.release()

    def _serve(self) -> None:
        while True:
            self._wake.acquire()
            task, self._task = self._task, None
            task.work()
            with _helpers_lock:
                _idle_helpers.append(self)


MAX_HELPERS = 4 * (os.cpu_count() or 1)
"""Helper threads kept at most: callers in many threads at once beyond that run their
parts with fewer helpers rather than start more threads."""

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
    task.work()
    task.wait()
    if task.error is not None:
        raise task.error
