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

An operator whose parts are one compiled kernel goes further (:func:`take_parts`,
:func:`serve_parts`): the caller hands the parts over from compiled code, after letting go of
the GIL, and every thread takes parts and runs them there, so that no thread waits for the GIL
between a hand-off and the last part; a helper then counts its parts off and waits for its
next task in the same call. It returns to Python once per task, to find the task's arguments.

Without Numba the waits do not spin: a helper blocks on its lock, a caller polls.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from kuiperinfer.kernels.jit import AVAILABLE, inline, kernel

PYTHON_TASK = 1
COMPILED_TASK = 1 << 32
"""What handing a helper a task adds to its count of tasks: a task of Python parts, or one
of compiled parts (:func:`take_parts`), counted apart, since only before a Python task does a
helper give its caller a moment to let go of the GIL."""

if AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from kuiperinfer.kernels.jit import function_at

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
    def post(posted: np.ndarray, helper: int, kind: int) -> None:
        """Hand ``helper`` a task of ``kind`` (:data:`PYTHON_TASK` or :data:`COMPILED_TASK`)."""
        add_and_fetch(posted, helper, kind)

    @kernel
    def wait_for_task(posted: np.ndarray, helper: int, seen: int, left: np.ndarray, ran: int, ticks: int,
                      settle: int) -> bool:
        """A helper's wait: count its ``ran`` finished parts off the last task's ``left``, then
        spin until ``posted[helper]`` passes ``seen`` (True) or for ``ticks`` ticks (False).
        A new Python task is followed by ``settle`` more ticks, for the caller to get into its part."""
        add_and_fetch(left, 0, -ran)
        start = cycle_counter()
        while True:
            now = load_acquire(posted, helper)
            if now > seen:
                if (now - seen) % COMPILED_TASK:
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

    @inline
    def _run_parts(state: np.ndarray, address: int, kind: object, head: tuple, tail: tuple) -> int:
        """Take the parts of ``state`` one at a time and run each, ``first``, through the kernel at
        ``address`` (of type ``kind``) as ``kernel(*head, first, first + 1, *tail)``, until none is
        left; how many this thread ran."""
        run = function_at(address, kind)
        ran = 0
        while True:
            part = add_and_fetch(state, 1, 1) - 1
            if part >= state[2]:
                return ran
            run(*head, part, part + 1, *tail)
            ran += 1

    @kernel
    def take_parts(state: np.ndarray, posted: np.ndarray, helpers: int, ticks: int, address: int, kind: object,
                   head: tuple, tail: tuple) -> bool:
        """A caller's share of a compiled task whose ``state`` holds how many parts are not yet
        counted off, the next part to take and how many there are: hand it to the first
        ``helpers`` helpers, take and run parts (:func:`_run_parts`), count them off and wait up
        to ``ticks`` for the helpers' (:func:`finish_and_wait`), so that the caller returns to
        Python, and takes the GIL, once they have let go of it; whether they were done."""
        for helper in range(helpers):
            add_and_fetch(posted, helper, COMPILED_TASK)
        return finish_and_wait(state, _run_parts(state, address, kind, head, tail), ticks)

    @kernel
    def serve_parts(state: np.ndarray, address: int, kind: object, head: tuple, tail: tuple, posted: np.ndarray,
                    helper: int, seen: int, ticks: int, settle: int) -> bool:
        """A helper's share of a compiled task (``state`` as :func:`take_parts` has it): take and
        run parts, then count them off and wait for its next task (:func:`wait_for_task`) in the
        same call, without going back to Python between its last part and the count; whether
        the next task came."""
        ran = _run_parts(state, address, kind, head, tail)
        return wait_for_task(posted, helper, seen, state, ran, ticks, settle)

else:
    _counting = threading.Lock()

    def _count_off(left: np.ndarray, ran: int) -> int:
        with _counting:
            left[0] -= ran
            return int(left[0])

    def counter() -> int:
        """Without Numba: nanoseconds of the monotonic clock, for the waits that do not spin."""
        return time.perf_counter_ns()

    def post(posted: np.ndarray, helper: int, kind: int) -> None:
        """Hand ``helper`` a task of ``kind``, without Numba."""
        with _counting:
            posted[helper] += kind

    def wait_for_task(posted: np.ndarray, helper: int, seen: int, left: np.ndarray, ran: int, ticks: int,
                      settle: int) -> bool:
        """A helper's wait without Numba: count its parts off and return False (block)."""
        _count_off(left, ran)
        return False

    def finish_and_wait(left: np.ndarray, ran: int, ticks: int) -> bool:
        """A caller's wait without Numba: count its parts off; whether none is left."""
        return _count_off(left, ran) == 0
