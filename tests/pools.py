"""Kernels run as in a graph's run on a pool of threads, for the kernel tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kuiperinfer.kernels.parallel import QuietMachine, ThreadPool, Timing


@contextlib.contextmanager
def intra_op(threads: int, min_work: int = 0, **timing) -> Iterator[ThreadPool]:
    """Kernels called inside share their parts among ``threads`` threads of a fresh pool on a
    quiet machine, from ``min_work`` multiply-adds up (0: every operator)."""
    pool = ThreadPool(threads, load=QuietMachine(), timing=Timing(min_work=min_work, **timing))
    try:
        with pool.running():
            yield pool
    finally:
        pool.close()
