"""Waits that spin without the GIL, so that the engine's threads hand an operator's parts
to each other in microseconds.

A thread that sleeps on a lock leaves its core idle, and on a virtual machine an idle core
halts: waking it again costs tens of microseconds, as much as a small operator's part. So
the engine's threads wait by spinning, as onnxruntime's do, but in compiled code, which
runs without the GIL: a helper waiting for its next task, and a caller waiting for the parts
its helpers took, spin on counters in small int64 arrays, read and written atomically. Each
returns to Python, and takes the GIL, only once the other thread no longer holds it: a
helper counts its finished parts off after it let go of the GIL, and gives a caller that
just handed it a task a moment to get into its own part before it takes the GIL.

Each wait lasts as long as it is told, in ticks of the CPU's time-stamp counter (x86's
``rdtsc``, which ticks at a constant rate: :func:`~kuiperinfer.kernels.parallel.tick_rate`
says how fast), not in turns of its loop: a loop's turns take as long as the CPU makes them,
and a loop that only reads turned five times faster than one that also compares, so that a
wait timed by the one was a fifth as long in the other.

Without Numba the waits do not spin: a helper blocks on its lock, a caller polls.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from kuiperinfer.kernels.jit import AVAILABLE, kernel

if AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def _element_pointer(context, builder, array_type, array, index):  # noqa: ANN001, ANN202
        """The address of ``array[index]`` in the generated code."""
        ary = context.make_array(array_type)(context, builder, array)
        return cgutils.get_item_pointer(context, builder, array_type, ary, [index])

    @intrinsic
    def load_acquire(typingctx, array, index):  # noqa: ANN001, ANN201
        """``array[index]`` (int64), read atomically: a loop rereads it on every turn."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
            return builder.load_atomic(pointer, "acquire", 8)
        return types.int64(array, types.intp), codegen

    @intrinsic
    def add_and_fetch(typingctx, array, index, value):  # noqa: ANN001, ANN201
        """``array[index] += value`` (int64) atomically; the new value."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
            old = builder.atomic_rmw("add", pointer, args[2], "acq_rel")
            return builder.add(old, args[2])
        return types.int64(array, types.intp, types.int64), codegen

    @intrinsic
    def cycle_counter(typingctx):  # noqa: ANN001, ANN201
        """The CPU's time-stamp counter (``llvm.readcyclecounter``: ``rdtsc`` on x86)."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            read = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                                  "llvm.readcyclecounter")
            return builder.call(read, [])
        return types.int64(), codegen

    @kernel
    def counter() -> int:
        """The time-stamp counter now (for :func:`~kuiperinfer.kernels.parallel.tick_rate`)."""
        return cycle_counter()

    @kernel
    def wait_for_task(posted: np.ndarray, seen: int, left: np.ndarray, ran: int, ticks: int, settle: int) -> bool:
        """A helper's wait: count its ``ran`` finished parts off the last task's ``left``, then
        spin until ``posted[0]`` differs from ``seen`` (True) or for ``ticks`` ticks (False).
        A new task is followed by ``settle`` more ticks, for the caller to get into its part."""
        add_and_fetch(left, 0, -ran)
        start = cycle_counter()
        while True:
            if load_acquire(posted, 0) != seen:
                seen_at = cycle_counter()
                while cycle_counter() - seen_at < settle:
                    pass
                return True
            if cycle_counter() - start >= ticks:
                return False

    @kernel
    def finish_and_wait(left: np.ndarray, ran: int, ticks: int) -> bool:
        """A caller's wait: count its ``ran`` parts off ``left``, then spin until none is left
        (True) or for ``ticks`` ticks (False)."""
        if add_and_fetch(left, 0, -ran) == 0:
            return True
        start = cycle_counter()
        while cycle_counter() - start < ticks:
            if load_acquire(left, 0) == 0:
                return True
        return False

else:
    _counting = threading.Lock()

    def _count_off(left: np.ndarray, ran: int) -> int:
        with _counting:
            left[0] -= ran
            return int(left[0])

    def counter() -> int:
        """Without Numba: nanoseconds of the monotonic clock, for the waits that do not spin."""
        return time.perf_counter_ns()

    def wait_for_task(posted: np.ndarray, seen: int, left: np.ndarray, ran: int, ticks: int, settle: int) -> bool:
        """A helper's wait without Numba: count its parts off and return False (block)."""
        _count_off(left, ran)
        return False

    def finish_and_wait(left: np.ndarray, ran: int, ticks: int) -> bool:
        """A caller's wait without Numba: count its parts off; whether none is left."""
        return _count_off(left, ran) == 0
