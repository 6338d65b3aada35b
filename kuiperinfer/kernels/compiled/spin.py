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

An operator whose parts are one compiled kernel never goes back to Python on a helper
(:func:`take_parts`, :func:`serve_tasks`). Each helper has a mailbox, a row of int64 words:
the caller, in compiled code and without the GIL, takes a free one, writes the task's
arguments into it as the compiled code holds them (:func:`stash`: the arrays' structs, the
numbers) with the address of a :func:`serve_stashed` compiled for their types, and marks it
ready; the helper, spinning in compiled code, sees it, calls that function through its address
(every one has the same signature: the type arguments it is compiled for take no value), which
reads the arguments back (:func:`unstash`), runs parts and counts them off, and spins for the
next task. A helper leaving compiled code for a task's arguments and unboxing them took 3-4 us
of Python per hand-off, most of a small operator's part. The caller keeps the arguments alive:
once its own parts are done it takes back a task no helper took and waits for the others to
empty their mailboxes before it returns.

Without Numba the waits do not spin: a helper blocks on its lock, a caller polls.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from kuiperinfer.kernels.jit import AVAILABLE, inline, kernel

PYTHON_TASK = 1
"""What handing a helper a Python task adds to its count of tasks (``posted``); compiled
tasks go through its mailbox instead."""

FREE, CLAIMED, READY, RUNNING = 0, 1, 2, 3
"""A helper's mailbox's states: empty; taken by a caller writing a task into it; holding the
task; the helper running it. Only the helper empties a mailbox it took a task from, and only
the caller one whose task the helper has not taken (once the caller's own parts are done)."""
STATE, TRAMPOLINE, PAYLOAD = 0, 1, 4
"""Where a mailbox holds its state, the address of the :func:`serve_stashed` its task needs,
and from where the task's arguments (in words)."""
PAYLOAD_BYTES = 4096
"""Room for a task's arguments in a mailbox, as the compiled code holds them (an array is a
dozen words)."""
MAILBOX_WORDS = PAYLOAD + PAYLOAD_BYTES // 8
"""The int64 words of one helper's mailbox; a pool holds one per helper, end to end."""

if AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.core.errors import NumbaValueError
    from numba.extending import intrinsic

    from kuiperinfer.kernels.jit import function_at

    STASHED = types.FunctionType(types.void(types.int64, types.int64, types.int64))
    """How a helper calls any task's :func:`serve_stashed`: the arguments' address, then the two
    type arguments it was compiled for, which take no value (0; they are opaque pointers)."""

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
    def store_release(typingctx, array, index, value):  # noqa: ANN001, ANN201
        """``array[index] = value`` (int64), atomically, after every write before it."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
            builder.store_atomic(args[2], pointer, "release", 8)
            return context.get_dummy_value()
        return types.void(array, types.intp, types.int64), codegen

    @intrinsic
    def add_and_fetch(typingctx, array, index, value):  # noqa: ANN001, ANN201
        """``array[index] += value`` (int64) atomically; the new value."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
            old = builder.atomic_rmw("add", pointer, args[2], "acq_rel")
            return builder.add(old, args[2])
        return types.int64(array, types.intp, types.int64), codegen

    @intrinsic
    def compare_and_swap(typingctx, array, index, expected, new):  # noqa: ANN001, ANN201
        """``array[index] = new`` (int64) atomically if it holds ``expected``; whether it did."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
            swapped = builder.cmpxchg(pointer, args[2], args[3], "acq_rel", "acquire")
            return builder.extract_value(swapped, 1)
        return types.boolean(array, types.intp, types.int64, types.int64), codegen

    @intrinsic
    def cycle_counter(typingctx):  # noqa: ANN001, ANN201
        """The CPU's time-stamp counter (``llvm.readcyclecounter``: ``rdtsc`` on x86)."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            read = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                                  "llvm.readcyclecounter")
            return builder.call(read, [])
        return types.int64(), codegen

    def _unowned(context, builder, kind, value):  # noqa: ANN001, ANN202
        """``value`` of Numba type ``kind`` with no array's reference counted: each array's
        memory info set to null, which Numba's reference counting passes over."""
        if isinstance(kind, types.Array):
            array = context.make_array(kind)(context, builder, value)
            array.meminfo = ir.Constant(array.meminfo.type, None)
            return array._getvalue()
        if isinstance(kind, types.BaseTuple):
            for index, item in enumerate(kind):
                element = _unowned(context, builder, item, builder.extract_value(value, index))
                value = builder.insert_value(value, element, index)
            return value
        if context.data_model_manager[kind].has_nrt_meminfo():
            raise NumbaValueError(f"a task's arguments are arrays, numbers and tuples of them, not {kind}")
        return value

    @intrinsic
    def stash(typingctx, mailboxes, at, value):  # noqa: ANN001, ANN201
        """Write ``value`` (a task's arrays and numbers, in tuples) into the payload of the
        mailbox at word ``at`` of ``mailboxes``, as the compiled code holds it, without its
        arrays' references: the caller keeps them alive until the mailbox is empty again, so
        that the helper reading them counts no reference (an atomic operation on a line the
        caller's core holds)."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            kind = context.get_value_type(signature.args[2])
            if context.get_abi_sizeof(kind) > PAYLOAD_BYTES:
                raise NumbaValueError(f"a task's arguments take more than a mailbox's {PAYLOAD_BYTES} bytes")
            where = builder.add(args[1], ir.Constant(args[1].type, PAYLOAD))
            pointer = _element_pointer(context, builder, signature.args[0], args[0], where)
            value = _unowned(context, builder, signature.args[2], args[2])
            builder.store(value, builder.bitcast(pointer, kind.as_pointer()), align=8)
            return context.get_dummy_value()
        return types.void(mailboxes, types.intp, value), codegen

    @intrinsic
    def unstash(typingctx, address, kind):  # noqa: ANN001, ANN201
        """The value of type ``kind`` that :func:`stash` wrote at ``address`` (its arrays
        reference-free, kept alive by the caller that wrote it)."""
        value_type = kind.instance_type

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            pointer = builder.inttoptr(args[0], context.get_value_type(value_type).as_pointer())
            return builder.load(pointer, align=8)
        return value_type(types.int64, kind), codegen

    @intrinsic
    def payload_address(typingctx, mailboxes, at):  # noqa: ANN001, ANN201
        """The address of the payload of the mailbox at word ``at`` of ``mailboxes``."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            where = builder.add(args[1], ir.Constant(args[1].type, PAYLOAD))
            pointer = _element_pointer(context, builder, signature.args[0], args[0], where)
            return builder.ptrtoint(pointer, ir.IntType(64))
        return types.int64(mailboxes, types.intp), codegen

    @kernel
    def counter() -> int:
        """The time-stamp counter now (for :func:`~kuiperinfer.kernels.parallel.tick_rate`)."""
        return cycle_counter()

    @kernel
    def add(counts: np.ndarray, index: int, by: int) -> None:
        """Add ``by`` to ``counts[index]`` atomically: hand a helper a Python task (``posted``,
        by :data:`PYTHON_TASK`), or count a pool's runs under way in or out."""
        add_and_fetch(counts, index, by)

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
    def serve_stashed(address: int, kind: object, function_kind: object) -> None:
        """A helper's share of the compiled task whose arguments :func:`stash` wrote at
        ``address`` (``kind`` their type, ``function_kind`` the kernel's): take and run parts,
        then count them off. One is compiled per kind of task and called through its address
        as :data:`STASHED`."""
        state, run_at, head, tail = unstash(address, kind)
        add_and_fetch(state, 0, -_run_parts(state, run_at, function_kind, head, tail))

    @inline
    def _as_given(head: tuple, thread: int) -> tuple:
        return head

    @inline
    def _numbered(head: tuple, thread: int) -> tuple:
        return head[:-1] + (thread,)

    @inline
    def wait_released(mailboxes: np.ndarray, pending: int, ticks: int) -> int:
        """Spin up to ``ticks`` for the mailboxes of the helpers in the bit mask ``pending`` to be
        emptied; those still running."""
        start = cycle_counter()
        while True:
            for helper in range(63):
                if pending & (1 << helper) and load_acquire(mailboxes, helper * MAILBOX_WORDS + STATE) == FREE:
                    pending &= ~(1 << helper)
            if pending == 0 or cycle_counter() - start >= ticks:
                return pending

    @inline
    def _take(state, mailboxes, helpers, ticks, trampoline, address, kind, head, tail, for_helper):  # noqa: ANN001, ANN202
        """:func:`take_parts`, each helper's copy of ``head`` made by ``for_helper(head, thread)``."""
        pending = 0
        for helper in range(helpers):
            at = helper * MAILBOX_WORDS
            if compare_and_swap(mailboxes, at + STATE, FREE, CLAIMED):
                stash(mailboxes, at, (state, address, for_helper(head, helper + 1), tail))
                mailboxes[at + TRAMPOLINE] = trampoline
                store_release(mailboxes, at + STATE, READY)
                pending |= 1 << helper
        add_and_fetch(state, 0, -_run_parts(state, address, kind, head, tail))
        for helper in range(helpers):       # take back what no helper took
            at = helper * MAILBOX_WORDS
            if pending & (1 << helper) and compare_and_swap(mailboxes, at + STATE, READY, FREE):
                pending &= ~(1 << helper)
        return wait_released(mailboxes, pending, ticks)

    @kernel
    def take_parts(state, mailboxes, helpers, ticks, trampoline, address, kind, head, tail):  # noqa: ANN001, ANN201
        """A caller's share of a compiled task whose ``state`` holds how many parts are not yet
        counted off, the next part to take and how many there are: write it into the mailboxes
        of the first ``helpers`` helpers that are free (with the address of its ``trampoline``,
        :func:`serve_stashed`), take and run parts (:func:`_run_parts`), count them off, then
        take back what no helper took and spin up to ``ticks`` for the helpers still running
        (:func:`wait_released`); the bit mask of those, 0 when all are done."""
        return _take(state, mailboxes, helpers, ticks, trampoline, address, kind, head, tail, _as_given)

    @kernel
    def take_numbered_parts(state, mailboxes, helpers, ticks, trampoline, address, kind, head, tail):  # noqa: ANN001, ANN201
        """:func:`take_parts` where the last argument of ``head`` is the number of the thread that
        runs the parts: each helper's copy gets its own."""
        return _take(state, mailboxes, helpers, ticks, trampoline, address, kind, head, tail, _numbered)

    @kernel
    def wait_for_helpers(mailboxes: np.ndarray, pending: int, ticks: int) -> int:
        """A caller's further wait for the helpers of the bit mask ``pending`` (:func:`wait_released`)."""
        return wait_released(mailboxes, pending, ticks)

    @kernel
    def serve_tasks(posted: np.ndarray, mailboxes: np.ndarray, helper: int, seen: int, left: np.ndarray, ran: int,
                    ticks: int, settle: int, stashed: object, runs: np.ndarray) -> bool:
        """A helper's wait: count its ``ran`` parts of the last Python task off ``left``, then spin,
        running each compiled task that arrives in its mailbox in place (its
        :func:`serve_stashed`, of type ``stashed``, without going back to Python), until a Python
        task is posted (``posted[helper]`` passes ``seen``: True, after ``settle`` more ticks for
        its caller to let go of the GIL) or for ``ticks`` ticks since the last task (False), and
        while ``runs[0]`` (the pool's runs under way) is not 0, up to ``ticks`` since it was
        (where ``ticks`` is 0 it does not spin at all)."""
        add_and_fetch(left, 0, -ran)
        at = helper * MAILBOX_WORDS
        start = cycle_counter()
        while True:
            if load_acquire(mailboxes, at + STATE) == READY and compare_and_swap(mailboxes, at + STATE, READY, RUNNING):
                function_at(mailboxes[at + TRAMPOLINE], stashed)(payload_address(mailboxes, at), 0, 0)
                store_release(mailboxes, at + STATE, FREE)
                start = cycle_counter()
            if load_acquire(posted, helper) > seen:
                seen_at = cycle_counter()
                while cycle_counter() - seen_at < settle:
                    pass
                return True
            if cycle_counter() - start >= ticks:
                if ticks == 0 or load_acquire(runs, 0) == 0:
                    return False
                start = cycle_counter()

else:
    STASHED = None
    _counting = threading.Lock()

    def _count_off(left: np.ndarray, ran: int) -> int:
        with _counting:
            left[0] -= ran
            return int(left[0])

    def counter() -> int:
        """Without Numba: nanoseconds of the monotonic clock, for the waits that do not spin."""
        return time.perf_counter_ns()

    def add(counts: np.ndarray, index: int, by: int) -> None:
        """Add ``by`` to ``counts[index]``, without Numba."""
        with _counting:
            counts[index] += by

    def serve_tasks(posted: np.ndarray, mailboxes: np.ndarray, helper: int, seen: int, left: np.ndarray, ran: int,
                    ticks: int, settle: int, stashed: object, runs: np.ndarray) -> bool:
        """A helper's wait without Numba (which has no compiled tasks): count its parts off and
        return False (block)."""
        _count_off(left, ran)
        return False

    def finish_and_wait(left: np.ndarray, ran: int, ticks: int) -> bool:
        """A caller's wait without Numba: count its parts off; whether none is left."""
        return _count_off(left, ran) == 0

    def wait_for_helpers(mailboxes: np.ndarray, pending: int, ticks: int) -> int:
        """Without Numba no helper holds a compiled task: none is still running."""
        return 0
