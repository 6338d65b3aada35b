"""The engine's threads: a :class:`ThreadPool` a graph owns, whose threads take a large
operator's parts, or a batch's chunks, as they come free.

Who waits on what (docs/design.md draws it):

* A **caller** (any thread calling ``graph.run``) enters its graph's pool for the run
  (:meth:`ThreadPool.running`): kernels then find the pool (:func:`run_parts`,
  :func:`threads_for`). BLAS runs on one thread while any pool exists (:func:`blas_threads`,
  held from a pool's creation to its end, not set and restored on every run).
* A kernel cuts a large operator into independent parts (more of them than threads) and
  calls :func:`run_parts`. The pool hands a :class:`Task` to up to ``threads - 1``
  **helpers**, and the caller and the helpers take the parts one at a time, each the next
  one left: a thread the operating system has descheduled takes fewer parts instead of
  holding the others up. Out of parts, the caller counts its own off the task and waits
  for the count to reach zero: it waits only for parts already under way.
* A helper waits for its next task by spinning without the GIL (:mod:`.compiled.spin`) for
  as long as a run of its pool is under way (:attr:`ThreadPool.runs`: within a run the next
  shared operator comes for sure, however long the ones between take), and for
  ``Timing.helper_spin_us`` after its last task or the run's end, then blocks on its queue,
  unless a compiled task reached its mailbox while it waited for the GIL to block (callers
  count it as awake until it blocks).
  Handed a Python task, it waits ``Timing.settle_us`` for the caller to let go of the GIL,
  takes parts until none is left, and counts them off the task *inside its next wait*,
  after letting go of the GIL, so that the caller, spinning on that count, can take the GIL
  at once.
* An operator whose parts are one compiled kernel (:class:`CompiledParts`) is handed over
  from compiled code, once the caller has let go of the GIL: the caller writes it into the
  mailboxes of the helpers (one each, in :attr:`ThreadPool.mailboxes`), and a spinning helper
  runs it from there without going back to Python. No thread waits for the GIL between the
  hand-off and the last part; the caller returns once every mailbox it wrote is empty.
* A pool with a thread for every CPU the process may use **pins** them (:class:`Affinity`,
  as onnxruntime pins its threads when it picks their number): each helper to a CPU of its
  own, and a run's caller, for the run, to the CPUs left. Unpinned, a caller waking after
  an idle spell was often placed on the CPU of the helper it then waited for, and the two
  shared one CPU for the whole run: ResNet-18's first run after 150 ms idle took 44-48 ms
  on two threads instead of 26-28 (one thread: 42). While other processes want the cores a
  run's caller stays where the operating system puts it.

Compiled kernels release the GIL, as do NumPy and BLAS inside their loops, so the parts run
at once. A hand-off by spinning takes microseconds where waking a thread that sleeps on a
lock takes tens, so operators from ``Timing.min_work`` multiply-adds up are shared. On a
busy machine a spinning helper is kept off its core now and then, and spinning takes time
the others want: ``spin="auto"`` watches the machine (:class:`MachineLoad`, sampled once per
run), and while other processes want the cores helpers block instead of spinning and only
operators of ``Timing.min_work_busy`` and more are shared.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence, Set
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np

from kuiperinfer.kernels.compiled import spin
from kuiperinfer.kernels.compiled.spin import MAILBOX_WORDS
from kuiperinfer.kernels.jit import NumbaType, type_fingerprint

Part = TypeVar("Part")
SPIN = ("auto", "always", "never")
"""How a pool's helpers wait between tasks: ``auto`` spins while the machine is quiet and
blocks while it is busy, ``always`` spins (as onnxruntime's threads do), ``never`` blocks, as
on a busy machine (and shares only operators of ``Timing.min_work_busy`` and more)."""
PIN = ("auto", "always", "never")
"""Whether a pool pins its threads to CPUs (:class:`Affinity`): ``auto`` when it has a
thread for every CPU the process may use, ``always``, ``never``."""


PART_WORK = 1 << 18
"""Multiply-adds (or their equivalent) a part of a shared operator holds at least: several
times a compiled part's hand-off (5-8 us) at a product's 30-40 GMAC/s on one core."""


@dataclass(frozen=True)
class Timing:
    """A pool's tuning, measured on 2-core virtual machines (docs/performance.md)."""

    min_work: int = 1 << 19
    """Fewest multiply-adds an operator shares on a quiet machine. Below it a share costs more
    than it gives back: the hand-offs (5-8 us for compiled parts), and the next operator
    reading an input half of which the other core wrote."""
    min_work_busy: int = 24 << 20
    """The fewest while other processes want the cores: a helper they keep off its core makes
    the caller wait for the parts it took."""
    helper_spin_us: float = 200.0
    """How long a helper spins for its next task, outside a run (and after one ends), before it
    blocks: long enough for a caller running its graph again at once, short enough to leave the
    core to other processes soon after a run."""
    settle_us: float = 15.0
    """How long a helper handed a task waits before it takes the GIL, for the caller to have
    let go of it by starting its own part (else the helper sleeps until the caller does)."""
    caller_spin_us: float = 200.0
    """How long a caller spins for its helpers' parts before it lets other threads run once."""


class MachineLoad:
    """Whether other processes want the cores: from the number of threads running at this
    moment, which Linux keeps in ``/proc/loadavg`` (its fourth field, running/existing),
    minus the engine's own, sampled at most every :attr:`SAMPLE_S` and averaged, since a
    kernel thread may run at any one moment. Where that file does not exist the machine
    counts as quiet."""

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
        self.busy = self._others + own_threads > cores() + 0.5
        return self.busy


class QuietMachine(MachineLoad):
    """A machine that is never busy: for ``spin="always"``, and tests."""

    def update(self, own_running: int, own_threads: int) -> bool:
        return False


class BusyMachine(MachineLoad):
    """A machine that is always busy: for ``spin="never"``, and tests."""

    def __init__(self) -> None:
        super().__init__()
        self.busy = True

    def update(self, own_running: int, own_threads: int) -> bool:
        return True


class Affinity:
    """The CPUs a pool's threads are pinned to (:data:`PIN`): helper ``i`` to
    ``helpers[i]``, a run's caller to :attr:`callers`, the CPUs left; Linux only. A thread
    made by a caller during its run inherits the caller's pin, as Linux makes threads."""

    def __init__(self, threads: int, cpus: Sequence[int]):
        cpus = sorted(cpus)
        self.cpus = frozenset(cpus)
        self.helpers = cpus[::-1][:threads - 1]
        self.callers = frozenset(cpus[:len(cpus) - len(self.helpers)])
        self._caller = threading.Lock()   # held by the run whose caller is pinned

    @classmethod
    def of(cls, threads: int, pin: str) -> Affinity | None:
        """The affinity a pool of ``threads`` threads pins by ``pin``; None where it does not pin."""
        if pin == "never" or threads < 2 or not hasattr(os, "sched_setaffinity"):
            return None
        cpus = _process_cpus()
        return cls(threads, cpus) if pin == "always" or len(cpus) == threads else None

    def pin_helper(self, index: int) -> None:
        """Pin the calling thread, the pool's helper ``index``, to its CPU (one past the CPUs
        to all of them: a thread inherits the mask of the thread that made it, maybe a
        pinned caller's). Where the CPU was taken from the process since, it stays unpinned."""
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {self.helpers[index]} if index < len(self.helpers) else self.cpus)

    @contextlib.contextmanager
    def caller(self) -> Iterator[None]:
        """A run whose caller is pinned to :attr:`callers` until it ends, unless another run
        of the pool has its caller pinned already (concurrent callers stay free to spread)."""
        if not self._caller.acquire(blocking=False):
            yield
            return
        try:
            current = os.sched_getaffinity(0)
            with thread_on(self.callers & current or current) as before:
                _PINNED.before = before
                try:
                    yield
                finally:
                    _PINNED.before = None
        finally:
            self._caller.release()


_PINNED = threading.local()
"""``before``: the CPUs a pinned caller may use outside its run (what :func:`cores` counts)."""


@contextlib.contextmanager
def thread_on(cpus: Set[int]) -> Iterator[set[int] | None]:
    """The calling thread runs on ``cpus`` until the block ends, then on the CPUs it had,
    which it yields; None, and the thread left as it was, where ``cpus`` were taken from
    the process since."""
    before: set[int] | None = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        before = None
    try:
        yield before
    finally:
        if before is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, before)


class Task:
    """One :func:`run_parts` call: its parts, the next one to take, and how many are not yet
    counted off as run (an int64 array the threads count off atomically, :mod:`.compiled.spin`)."""

    kind = spin.PYTHON_TASK
    """What handing it to a helper adds to the helper's count of tasks."""

    def __init__(self, parts: Sequence[Any], run: Callable[[Any], object]):
        self.parts, self.run = parts, run
        self._next = itertools.count()   # next() on it is atomic under the GIL
        self.left = np.array([len(parts)], np.int64)
        self.error: BaseException | None = None

    def work(self, thread: int = 0) -> int:
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


class CompiledTask:
    """One :meth:`CompiledParts.run` call's parts: taken and run in compiled code by the caller
    (:func:`.compiled.spin.take_parts`) and the helpers whose mailboxes it writes them into
    (:func:`.compiled.spin.serve_tasks`), and counted off as a :class:`Task`'s are."""

    def __init__(self, count: int, made: _Made, head: tuple[Any, ...], tail: tuple[Any, ...]):
        self.state = self.left = np.array([count, 0, count], np.int64)
        """How many parts are not yet counted off (:attr:`left` is its first item), the next
        part to take and how many there are."""
        self.made, self.head, self.tail = made, head, tail

    def run(self, mailboxes: np.ndarray, helpers: int, ticks: int) -> int:
        """The caller's share: hand the parts to the first ``helpers`` helpers' mailboxes that are
        free, take parts until none is left, then wait up to ``ticks`` for the helpers; the bit
        mask of the helpers still running (:func:`.compiled.spin.take_parts`)."""
        made = self.made
        return made.take(self.state, mailboxes, helpers, max(1, ticks), made.trampoline, made.address, made.type,
                         self.head, self.tail)


_STOP = Task((), lambda part: None)
"""Handed to a helper, ends its thread."""


class _Helper:
    """A thread of a pool that works on the tasks it is handed, in turn (see the module's
    docstring for how it waits). Callers in several threads may hand it tasks at once: a
    compiled task only where its mailbox is free, and of the Python tasks that wait for it, it
    takes the newest (the callers of the others run their parts themselves, none waits for a
    part not taken)."""

    def __init__(self, pool: ThreadPool, index: int) -> None:
        self._affinity = pool.affinity
        self._tasks: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._posted, self._index = pool.posted, index   # its count of Python tasks handed over: posted[index]
        self._mailboxes, self._runs = pool.mailboxes, pool.runs
        self._seen = int(pool.posted[index])
        self.awake = True                       # spinning or working, not blocked
        self._pool = weakref.ref(pool)
        threading.Thread(target=self._serve, name="kuiper-intra-op", daemon=True).start()

    def start(self, task: Task) -> None:
        """Hand it a Python task."""
        self._tasks.put(task)
        spin.add(self._posted, self._index, task.kind)

    def wake(self) -> None:
        """Wake it if it blocks, for a compiled task its caller writes into its mailbox."""
        if not self.awake:
            self._tasks.put(None)

    def _serve(self) -> None:
        if self._affinity is not None:
            self._affinity.pin_helper(self._index)
        left, taken, handed = np.zeros(1, np.int64), 0, self._seen
        stashed = spin.STASHED
        while True:
            pool = self._pool()
            if pool is None:
                spin.serve_tasks(self._posted, self._mailboxes, self._index, handed, left, taken, 0, 0, stashed,
                                 self._runs)
                return
            ticks = _ticks(pool.timing.helper_spin_us) if pool.spins() else 0
            settle = _ticks(pool.timing.settle_us)
            del pool
            # counts the last Python task's parts off, runs compiled tasks, waits for a Python one
            self.awake = spin.serve_tasks(self._posted, self._mailboxes, self._index, handed, left, taken, ticks,
                                          settle, stashed, self._runs)
            taken, mailbox = 0, self._mailboxes[self._index * MAILBOX_WORDS + spin.STATE]
            if not self.awake and mailbox in (spin.CLAIMED, spin.READY):
                # its spin ran out while a caller held the GIL, which handed a compiled task meanwhile,
                # taking this thread for awake: serve it instead of blocking
                self.awake = True
                continue
            task = self._tasks.get()   # a Python task, or None: a wake-up for a compiled one
            self.awake = True
            handed += task.kind if task is not None else 0
            while not self._tasks.empty():         # behind: the callers of the older tasks ran their parts
                newer = self._tasks.get()
                if newer is not None:
                    task, handed = newer, handed + newer.kind
                del newer
            if task is _STOP:
                spin.serve_tasks(self._posted, self._mailboxes, self._index, handed, left, 0, 0, 0, stashed, self._runs)
                return
            if task is not None:
                taken, left = task.work(self._index + 1), task.left
            del task   # its parts' closures may hold a graph


class ThreadPool:
    """The threads a graph's runs use: the caller's and up to ``threads - 1`` helpers, started
    when a task first needs them (at most one fewer than the cores, since more threads than
    cores only take turns and a spinning helper holds its core).

    A graph owns one (``kuiperinfer.load(..., threads=N)``), or several graphs are given
    the same one (``load(..., pool=pool)``), as onnxruntime's sessions have their own
    intra-op pools unless told to share a global one. ``spin`` (:data:`SPIN`) says how the
    helpers wait between tasks, ``pin`` (:data:`PIN`) whether the threads are pinned to
    CPUs; ``load`` is the machine load that ``spin="auto"`` adapts to (default
    :class:`MachineLoad`); ``timing`` the tuning (:class:`Timing`).
    """

    auto_load: ClassVar[type[MachineLoad]] = MachineLoad
    """The machine load ``spin="auto"`` adapts to when no ``load`` is given (tests put
    :class:`QuietMachine` here, so that their operators are shared whatever runs beside them)."""

    def __init__(self, threads: int, spin: str = "auto", load: MachineLoad | None = None,
                 timing: Timing | None = None, pin: str = "auto"):
        if threads < 1:
            raise ValueError(f"a pool needs at least 1 thread, got {threads}")
        if spin not in SPIN:
            raise ValueError(f"spin must be one of {SPIN}, got {spin!r}")
        if pin not in PIN:
            raise ValueError(f"pin must be one of {PIN}, got {pin!r}")
        self.threads, self.spin, self.pin, self.timing = threads, spin, pin, timing or Timing()
        self.affinity = Affinity.of(threads, pin)
        """The CPUs its threads are pinned to; None where they are not."""
        self.load = load or {"auto": self.auto_load, "always": QuietMachine, "never": BusyMachine}[spin]()
        self._helpers: list[_Helper] = []
        self._helpers_lock = threading.Lock()
        self.posted = np.zeros(max(1, threads - 1), np.int64)
        """How many Python tasks each helper was handed, read while it spins."""
        self.mailboxes = np.zeros(max(1, threads - 1) * MAILBOX_WORDS, np.int64)
        """Each helper's mailbox, where a caller's compiled code writes a compiled task for it."""
        self.runs = np.zeros(1, np.int64)
        """How many runs are under way (those begun while helpers spin, :meth:`spins`): while any
        is, a spinning helper spins on from task to task, however long it waits."""
        blas_threads.hold(1)
        weakref.finalize(self, _end, self._helpers, self.affinity)
        _POOLS.add(self)

    def spins(self) -> bool:
        """Whether helpers spin between tasks now."""
        return self.spin == "always" or (self.spin == "auto" and not self.load.busy)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """A run of a graph in this thread: kernels share their parts among the pool's threads,
        and the machine's load is sampled once, for the whole run."""
        if self.spin == "auto" and self.threads > 1:
            self.load.update(1 + sum(helper.awake for helper in self._helpers), min(self.threads, cores()))
        pinned = self.affinity.caller() if self.affinity is not None and not self.load.busy else \
            contextlib.nullcontext()
        spinning = self.threads > 1 and self.spins()   # a one-thread pool counts nothing
        token = _POOL.set(self)
        if spinning:
            spin.add(self.runs, 0, 1)
        try:
            with pinned:
                yield
        finally:
            if spinning:
                spin.add(self.runs, 0, -1)
            _POOL.reset(token)

    def threads_for(self, work: int) -> int:
        """How many threads an operator of ``work`` multiply-adds shares its parts among."""
        if self.threads < 2 or work < self.timing.min_work:
            return 1
        if work >= self.timing.min_work_busy or not self.load.busy:
            return self.threads
        return 1

    def share(self, parts: Sequence[Part], run: Callable[[Part], object], threads: int) -> None:
        """``run(part)`` for every part (the parts must write disjoint outputs), taken one at a
        time by the caller and up to ``threads`` - 1 helpers as each comes free. Returns when
        every part has run; raises what the first failing part raised."""
        threads = min(threads, len(parts))
        if threads < 2:
            for part in parts:
                run(part)
            return
        task = Task(parts, run)
        for helper in self._take_helpers(threads - 1):
            helper.start(task)
        taken, ticks = task.work(), _ticks(self.timing.caller_spin_us)
        while not spin.finish_and_wait(task.left, taken, ticks):
            taken = 0
            time.sleep(0)
        if task.error is not None:
            raise task.error

    def share_compiled(self, task: CompiledTask, threads: int) -> None:
        """A compiled task's parts, taken and run in compiled code by the caller and up to
        ``threads`` - 1 helpers (:meth:`CompiledParts.run`)."""
        helpers = self._take_helpers(threads - 1)
        for helper in helpers:
            helper.wake()
        ticks = _ticks(self.timing.caller_spin_us)
        pending = task.run(self.mailboxes, len(helpers), ticks)
        while pending:
            time.sleep(0)
            pending = spin.wait_for_helpers(self.mailboxes, pending, ticks)

    def _take_helpers(self, count: int) -> list[_Helper]:
        if len(self._helpers) >= count:
            return self._helpers[:count]
        cpus = len(self.affinity.cpus) if self.affinity is not None else cores()   # not a pinned caller's
        count = min(count, self.threads - 1, cpus - 1)
        if len(self._helpers) < count:
            _ticks(0)              # the spinning waits loaded and timed here, not as a new helper starts
            with self._helpers_lock:
                self._helpers.extend(_Helper(self, index) for index in range(len(self._helpers), count))
        return self._helpers[:count]

    def close(self) -> None:
        """Stop the helper threads (a later task starts new ones)."""
        with self._helpers_lock:
            _stop(self._helpers)

    def __repr__(self) -> str:
        return f"ThreadPool({self.threads}, spin={self.spin!r}, pin={self.pin!r})"


def _stop(helpers: list[_Helper]) -> None:
    for helper in helpers:
        helper.start(_STOP)
    helpers.clear()


def _end(helpers: list[_Helper], affinity: Affinity | None) -> None:
    """A pool's end: its helpers stop and it lets go of the BLAS limit, from every CPU: the
    thread that drops the pool may be its pinned helper, and OpenBLAS takes no more threads
    than the CPUs of the thread that sets their number."""
    _stop(helpers)
    with thread_on(affinity.cpus) if affinity is not None else contextlib.nullcontext():
        blas_threads.release(1)


_POOL: ContextVar[ThreadPool | None] = ContextVar("kuiper_pool", default=None)
"""The pool of the run in the current context (None: everything in the calling thread)."""
_POOLS: weakref.WeakSet[ThreadPool] = weakref.WeakSet()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Kernels in this context run in the calling thread (a batch chunk's run, say)."""
    token = _POOL.set(None)
    try:
        yield
    finally:
        _POOL.reset(token)


def threads_for(work: int) -> int:
    """How many threads an operator of ``work`` multiply-adds shares its parts among in the
    current run (1 outside a pool's run)."""
    pool = _POOL.get()
    return 1 if pool is None else pool.threads_for(work)


def run_parts(parts: Sequence[Part], work: int, run: Callable[[Part], object]) -> None:
    """``run(part)`` for every part of an operator of ``work`` multiply-adds, shared among
    :func:`threads_for` ``work`` threads of the current run's pool."""
    threads = threads_for(work)
    if threads < 2:
        for part in parts:
            run(part)
    else:
        _POOL.get().share(parts, run, threads)


class CompiledParts:
    """An operator's parts as one compiled kernel, called ``kernel(*head, first, last, *tail)``
    for its parts ``first:last`` (indices into a table its arguments hold). Shared among the
    run's threads (:meth:`run`), each thread takes parts and runs them in compiled code
    (:func:`.compiled.spin.take_parts`), so none waits for the GIL from the hand-off to the
    last part. Where ``per_thread``, the last item of ``head`` is the number of the pool's
    thread that runs the parts (0 the caller's, 1 on its helpers'), for memory of its own.
    The kernel's address and the compiled loop over its parts are made on the first call for
    each kind of arguments: make one per kernel (:func:`compiled_parts`)."""

    def __init__(self, dispatcher: Any, per_thread: bool = False):
        self.dispatcher, self.per_thread = dispatcher, per_thread
        self._made: dict[tuple[Any, ...], _Made] = {}
        self._making = threading.Lock()

    def run(self, count: int, work: int, head: tuple[Any, ...], tail: tuple[Any, ...],
            kinds: tuple[Any, ...] | None = None) -> None:
        """Parts ``0:count`` of an operator of ``work`` multiply-adds, shared among
        :func:`threads_for` ``work`` threads of the current run's pool. ``kinds`` is
        :func:`kinds_of` the arguments where the caller knows it already; without it, a
        call on one thread goes through Numba's dispatch, which costs less than finding it."""
        threads = min(threads_for(work), count)
        if threads < 2 and kinds is None:
            self.dispatcher(*head, 0, count, *tail)
            return
        kinds = kinds or kinds_of(head + tail)
        made = self._made.get(kinds)
        if made is None:
            with self._making:
                made = self._made.get(kinds) or self._make(kinds, head, tail)
        if threads < 2:
            made.whole(*head, 0, count, *tail)
        else:
            _POOL.get().share_compiled(CompiledTask(count, made, head, tail), threads)

    def _make(self, kinds: tuple[Any, ...], head: tuple[Any, ...], tail: tuple[Any, ...]) -> _Made:
        import numba

        from kuiperinfer.kernels.jit import KernelAddress, compiled_for

        kernel = KernelAddress(self.dispatcher, *head, 0, 0, *tail)
        state = np.zeros(3, np.int64)
        take = spin.take_numbered_parts if self.per_thread else spin.take_parts
        stashed = numba.typeof((state, kernel.address, head, tail))     # what a helper's mailbox holds
        made = self._made[kinds] = _Made(
            compiled_for(take, state, state, 0, 0, 0, kernel.address, kernel.type, head, tail),
            KernelAddress(spin.serve_stashed, 0, stashed, kernel.type).address,
            compiled_for(self.dispatcher, *head, 0, 0, *tail), kernel.address, kernel.type)
        return made


class _Made(NamedTuple):
    """What :class:`CompiledParts` makes once per kind of arguments: the compiled loop of the
    caller's share, the address of the helpers' (:func:`.compiled.spin.serve_stashed`), every
    part in one call (on one thread), and the kernel's address and type."""

    take: Callable[..., int]
    trampoline: int
    whole: Callable[..., None]
    address: int
    type: Any


@cache
def compiled_parts(dispatcher: Any, per_thread: bool = False) -> CompiledParts:
    """The :class:`CompiledParts` of a compiled kernel, one per kernel in the process."""
    return CompiledParts(dispatcher, per_thread)


def kinds_of(value: Any) -> Any:
    """What of ``value`` (a tuple of a kernel's arguments, say) its compiled type depends on,
    quickly (on every shared call): a key, not the type. Numba's fingerprint of the type,
    which its own dispatch looks compiled code up by (0.6 us for a product's 13 arguments,
    where reading every array's flags in Python took 4; an array's alignment is not in it,
    and the engine's arrays are aligned), or for a value it has none for, :func:`_kinds`."""
    try:
        return type_fingerprint(value)
    except NotImplementedError:
        return _kinds(value)


def _kinds(value: Any) -> Any:
    """:func:`kinds_of` read in Python: each array's dtype, dimensions and flags, and a
    kernel's type (:class:`~.jit.KernelAddress`) itself, since its signature counts."""
    kind = type(value)
    if kind is np.ndarray:
        return value.dtype, value.ndim, value.flags.num   # the flags: layout, writeable, aligned
    if kind is tuple:
        return tuple(map(_kinds, value))
    return value if isinstance(value, NumbaType) else kind


def even_step(length: int, step: int, threads: int, images: int = 1) -> int:
    """A block length of at most ``step`` that cuts ``length`` rows of each of ``images``
    images into blocks ``threads`` threads can share evenly (their number a multiple of
    ``threads`` where the rows allow), so that no thread is left with one block more."""
    blocks = -(-length // max(1, step))
    while (images * blocks) % threads and blocks < length:
        blocks += 1
    return -(-length // blocks)


def cores() -> int:
    """The cores this process may run on."""
    return len(_process_cpus())


def _process_cpus() -> set[int]:
    """The CPUs the calling thread may run on, outside a run that pinned it."""
    if not hasattr(os, "sched_getaffinity"):
        return set(range(os.cpu_count() or 1))
    before = getattr(_PINNED, "before", None)
    return before if before is not None else os.sched_getaffinity(0)


def _ticks(microseconds: float) -> int:
    """Ticks of the time-stamp counter the spinning waits count that take ``microseconds``."""
    return int(microseconds * tick_rate())


@cache
def tick_rate() -> float:
    """Ticks per microsecond of the time-stamp counter the spinning waits count
    (:mod:`.compiled.spin`), measured once per process against the monotonic clock."""
    never = np.ones(1, np.int64)
    spin.serve_tasks(never, np.zeros(spin.MAILBOX_WORDS, np.int64), 0, 1, never, 0, 0, 0, spin.STASHED, never)
    # the waits compiled or loaded first, not in the middle of a run that happens to need one
    spin.finish_and_wait(never, 0, 0)
    spin.wait_for_helpers(np.zeros(spin.MAILBOX_WORDS, np.int64), 0, 0)
    spin.counter()
    started, ticks = time.perf_counter_ns(), spin.counter()
    time.sleep(0.002)
    return max(1e-3, (spin.counter() - ticks) / max(1, time.perf_counter_ns() - started) * 1e3)


def _forget_helpers() -> None:
    """In a forked child: the helpers' threads did not survive the fork."""
    for pool in list(_POOLS):
        pool._helpers.clear()
        pool.mailboxes[:] = spin.FREE   # a task written while the parent forked went with its helpers


os.register_at_fork(after_in_child=_forget_helpers)


# -- BLAS ----------------------------------------------------------------------------------

class _BlasLimit:
    """NumPy's BLAS limited while any user needs it, in the whole process: to the fewest
    threads any user asks for. The BLAS thread count is process-global: the first user to
    enter limits it and the last to leave restores it (counted under a lock, so overlapping
    users in several threads cannot restore it too early or leave it limited). threadpoolctl
    lets only the thread that last set OpenBLAS's thread count set it again until that
    thread lets go, and the first and last users may be different threads, so the limit
    lets go each time, under its lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: list[int] = []
        self._controller: Any = None
        self._limit: Any = None
        self._applied: int | None = None

    @contextlib.contextmanager
    def __call__(self, threads: int) -> Iterator[None]:
        with self._lock:
            self._users.append(threads)
            self._apply()
        try:
            yield
        finally:
            with self._lock:
                self._users.remove(threads)
                self._apply()

    def hold(self, threads: int) -> None:
        """Limit BLAS to ``threads`` until :meth:`release` (a pool's life; a Ray actor's
        process, which is the model's alone, never releases it)."""
        with self._lock:
            self._users.append(threads)
            self._apply()

    def release(self, threads: int) -> None:
        """End a :meth:`hold` of ``threads``."""
        with self._lock:
            if threads in self._users:
                self._users.remove(threads)
                self._apply()

    def _apply(self) -> None:
        from threadpoolctl import ThreadpoolController

        wanted = min(self._users, default=None)
        if wanted == self._applied:
            return
        self._applied = wanted
        if self._limit is not None:
            self._limit.restore_original_limits()
            self._limit = None
        if self._users:
            self._controller = self._controller or ThreadpoolController()
            _let_go_of_openblas()
            self._limit = self._controller.limit(limits=min(self._users), user_api="blas")
        _let_go_of_openblas()


def _let_go_of_openblas() -> None:
    """Let any thread set OpenBLAS's thread count next (threadpoolctl 3.8 and later)."""
    from threadpoolctl import OpenBLASController

    clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


blas_threads = _BlasLimit()
"""``with blas_threads(n):`` NumPy's BLAS runs on at most ``n`` threads meanwhile, in the
whole process (the fewest any user in any thread asks for). Every :class:`ThreadPool` holds
it at 1 while it exists, since the pool's threads are the parallelism (setting it takes tens
of microseconds, too much to pay on every run); the benchmark and Ray actors use it too."""
