"""This thread's CPU time for one piece of work, for the tests that guard against work growing
too fast with hostile input (a hang, a quadratic parse).

A hang shows; what the guard must not see does not: a busy machine, the pool's spinning helpers
(other threads) and a full collection of the garbage the whole test suite left behind, which
can take this thread a second or more: the collector is paused while the clock runs."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class CpuTime:
    seconds: float = 0.0


@contextlib.contextmanager
def cpu_time() -> Iterator[CpuTime]:
    """``with cpu_time() as spent: ...`` then ``spent.seconds``: this thread's CPU seconds inside."""
    spent = CpuTime()
    enabled = gc.isenabled()
    gc.disable()
    started = time.thread_time()
    try:
        yield spent
    finally:
        spent.seconds = time.thread_time() - started
        if enabled:
            gc.enable()
