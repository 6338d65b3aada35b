"""Intra-operator parallelism: a kernel's independent blocks of work shared among threads.

A batch of several samples keeps every core busy by itself: the graph's workers each run
a slice of it through the whole graph, with BLAS limited to one thread. A single sample
runs whole in one thread, where only the matrix products would use every core; the graph
then sets :data:`INTRA_OP_THREADS`, and the kernels (im2col, Winograd, depthwise
convolution) hand their blocks of output rows to :func:`run_parts`. For a large enough
operator it runs them on that many threads at once, BLAS limited to one thread meanwhile,
so that the column copies, transforms and epilogues run in parallel as well as the
products. NumPy and BLAS release the GIL inside their loops.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from contextvars import ContextVar
from typing import Any, Callable, Sequence, TypeVar

INTRA_OP_THREADS: ContextVar[int] = ContextVar("kuiper_intra_op_threads", default=1)
"""Threads a kernel may share its blocks among in the current context (1: one thread)."""
MIN_PARALLEL_WORK = 1 << 24
"""Fewest multiply-adds an operator shares among threads. A hand-off to another thread
and back costs 50-100 us here, and smaller operators' products already use every core
through BLAS: measured on YOLOv5s, ResNet-18, MobileNetV3 and EfficientNet-Lite0 at
batch 1, 2**20 lost on the small networks and 2**24 did not."""

Part = TypeVar("Part")


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

_helpers: ThreadPoolExecutor | None = None
_helpers_lock = threading.Lock()


def threads_for(work: int) -> int:
    """How many threads an operator of ``work`` multiply-adds shares its blocks among."""
    threads = INTRA_OP_THREADS.get()
    return threads if threads > 1 and work >= MIN_PARALLEL_WORK else 1


def _helper_pool(count: int) -> ThreadPoolExecutor:
    global _helpers
    with _helpers_lock:
        if _helpers is None or _helpers._max_workers < count:
            _helpers = ThreadPoolExecutor(count, thread_name_prefix="kuiper-intra-op")
        return _helpers


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

    def run_group(group: Sequence[Part]) -> None:
        for part in group:
            run(part)

    with ONE_BLAS_THREAD:
        futures = [_helper_pool(threads - 1).submit(run_group, group) for group in groups[1:]]
        try:
            run_group(groups[0])
        finally:
            wait(futures)   # no part outlives the call, even when one fails
    for future in futures:
        future.result()
