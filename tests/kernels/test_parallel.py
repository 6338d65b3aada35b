"""ThreadPool: parts taken by the caller and helper threads as they come free, failures, a
descheduled helper, many callers, fork, the machine's load, pools of their own; even_step:
blocks that the threads share evenly; the convolution kernels' blocks shared among a pool's
threads; the one BLAS limit."""

import os
import sys
import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pools import intra_op

from kuiperinfer.kernels import parallel
from kuiperinfer.kernels.depthwise import PIXELS_MIN_CHANNELS
from kuiperinfer.kernels.layout import nchw
from kuiperinfer.layers.convolution import ConvGeometry, PackedWeight, conv2d

RNG = np.random.default_rng(0)
NO_RUN = np.zeros(1, np.int64)
"""A pool's count of runs under way (``ThreadPool.runs``) with none."""


@pytest.fixture
def two_threads():
    with intra_op(2) as pool:
        yield pool


def run_recording(parts, together=False):
    """run_parts over ``parts``; the thread each part ran in. ``together``: the first two parts
    wait (up to 5 s) for each other, so that a helper slow to wake on a loaded machine still
    takes one (the caller alone would wait out the 5 s, and take both)."""
    ran = {}
    both = threading.Barrier(2, timeout=5)

    def run(part):
        if together and part < 2:
            try:
                both.wait()
            except threading.BrokenBarrierError:
                pass
        else:
            time.sleep(0.001)               # long enough for the helper to take its share
        ran[part] = threading.get_ident()
    parallel.run_parts(parts, 1, run)
    return ran


def test_every_part_runs_once_shared_between_the_caller_and_a_helper(two_threads):
    ran = run_recording(list(range(7)), together=True)
    assert sorted(ran) == list(range(7))
    assert threading.get_ident() in ran.values() and len(set(ran.values())) == 2


def test_a_helper_that_starts_late_holds_nobody_up(two_threads, monkeypatch):
    """As when the operating system deschedules the helper: the caller takes every part."""
    start = parallel._Helper.start
    monkeypatch.setattr(parallel._Helper, "start",
                        lambda helper, task: threading.Timer(1.5, start, (helper, task)).start())
    began = time.perf_counter()
    ran = run_recording(list(range(6)))
    assert time.perf_counter() - began < 1.0
    assert sorted(ran) == list(range(6)) and set(ran.values()) == {threading.get_ident()}


def test_a_failing_part_raises_in_the_caller_once_every_part_has_finished(two_threads):
    finished = []

    def run(part):
        if part == 3:                                  # taken last
            raise ValueError("part 3 failed")
        time.sleep(0.01)
        finished.append(part)

    with pytest.raises(ValueError, match="part 3 failed"):
        parallel.run_parts([0, 1, 2, 3], 1, run)
    assert sorted(finished) == [0, 1, 2]                # the parts under way finished first
    assert sorted(run_recording([0, 1, 2, 3])) == [0, 1, 2, 3]     # the helper serves again


def test_callers_in_many_threads_at_once_each_get_all_their_parts_done(two_threads):
    results, errors = {}, []
    pool = two_threads

    def caller(index):
        try:
            with pool.running():
                for _ in range(30):
                    squares = [None] * 6
                    parallel.run_parts(range(6), 1, lambda p, squares=squares: squares.__setitem__(p, p * p + index))
                    assert squares == [p * p + index for p in range(6)]
            results[index] = True
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 8
    assert len(pool._helpers) <= max(0, parallel.cores() - 1)


def test_with_the_helper_busy_the_caller_runs_all_parts_itself(two_threads):
    """Another caller's long part holds the helper: this caller does not wait for it."""
    if parallel.cores() < 2:
        pytest.skip("one core: no helper to be busy")
    pool = two_threads
    helper_busy, release = threading.Event(), threading.Event()
    others = []

    def long_part(part):
        if threading.current_thread().name == "kuiper-intra-op":
            helper_busy.set()
            release.wait(5)
        else:                              # the other caller keeps part 0 until the helper has part 1
            helper_busy.wait(5)
        others.append(part)

    other = threading.Thread(target=lambda: pool.share(range(2), long_part, 2))
    other.start()
    assert helper_busy.wait(5)
    began = time.perf_counter()
    ran = run_recording([0, 1, 2])
    elapsed = time.perf_counter() - began
    release.set()
    other.join()
    assert sorted(ran) == [0, 1, 2] and set(ran.values()) == {threading.get_ident()}
    assert elapsed < 1 and sorted(others) == [0, 1]


@pytest.fixture(scope="module")
def mark_parts():
    """A compiled part kernel: ``log[part] += 1000 * (thread + 1) + 1`` for its parts, each
    taking ``ticks`` of the CPU's counter (long enough for a helper to take some)."""
    from numba import njit

    from kuiperinfer.kernels.compiled import spin

    @njit(nogil=True)
    def mark(log, offset, thread, first, last, ticks):
        for part in range(first, last):
            start = spin.cycle_counter()
            while spin.cycle_counter() - start < ticks:
                pass
            log[part] += 1000 * (thread + 1) + offset

    return mark


def mark_all(mark_parts, count, offset=1, microseconds=300):
    log = np.zeros(count, np.int64)
    parallel.CompiledParts(mark_parts, per_thread=True).run(count, 1, (log, offset, 0), (parallel._ticks(microseconds),))
    return log


def test_compiled_parts_each_run_once_by_the_caller_and_a_helper_with_their_thread_numbers(two_threads, mark_parts):
    mark_all(mark_parts, 2)         # the helper started (on a busy machine a new thread may take longer than 8 parts)
    log = mark_all(mark_parts, 8)
    assert sorted(set(log % 1000)) == [1]                       # every part once
    assert sorted(set(log // 1000)) == [1, 2]                   # the caller (0) and helper 1, each with its number


def test_compiled_parts_reach_helpers_that_block_between_tasks(mark_parts):
    """On a busy machine helpers block on their queues instead of spinning: a compiled task
    still wakes one (the hand-off from compiled code only bumps a counter it is not watching).
    Tasks come until the helper takes parts of one, for up to 5 s: in the whole suite, threads
    other tests leave may hold the GIL or a core longer than a task's 16 ms."""
    pool = parallel.ThreadPool(2, spin="never", timing=parallel.Timing(min_work=0, min_work_busy=0))
    helped, deadline = False, time.perf_counter() + 5
    try:
        with pool.running():
            while not helped and time.perf_counter() < deadline:
                log = mark_all(mark_parts, 8, microseconds=2000)
                assert sorted(set(log % 1000)) == [1]
                helped = 2 in {int(value) // 1000 for value in log}
    finally:
        pool.close()
    assert helped


def test_a_helper_whose_spin_ran_out_while_the_caller_held_the_gil_takes_the_next_compiled_task(mark_parts):
    """A helper's spin runs out while the caller runs Python (the operators between shared
    ones): the helper returns to Python and waits for the GIL, still counted as awake, so the
    caller writes the next compiled task into its mailbox without waking it. Once the caller
    lets go of the GIL (running its own parts), the helper serves that task instead of
    blocking on its queue (before, it blocked, and the caller ran every part itself)."""
    pool = parallel.ThreadPool(2, spin="always", timing=parallel.Timing(min_work=0, helper_spin_us=500))
    helped = 0
    try:
        for _ in range(6):
            with pool.running():
                mark_all(mark_parts, 2, microseconds=2000)     # a part each: the two end together
            busy_until = time.perf_counter() + 0.0025          # Python, holding the GIL past the helper's spin
            while time.perf_counter() < busy_until:            # (between runs: within one it spins on)
                pass
            with pool.running():
                log = mark_all(mark_parts, 8, microseconds=1000)
            assert sorted(set(log % 1000)) == [1]
            helped += 2 in {int(value) // 1000 for value in log}
    finally:
        pool.close()
    assert helped >= 4


def test_a_helper_spins_from_task_to_task_until_its_pools_run_ends(mark_parts):
    """Within a run the next shared operator comes for sure: a helper keeps spinning however
    long the operators between shared ones take (waking one that blocked costs tens of
    microseconds), and after the run ends it spins ``helper_spin_us`` more, then blocks."""
    pool = parallel.ThreadPool(2, spin="always", timing=parallel.Timing(min_work=0, helper_spin_us=100))
    try:
        with pool.running():
            mark_all(mark_parts, 2)                  # the helper started
            time.sleep(0.01)                         # 100 times its spin, the GIL let go
            awake_in_run = pool._helpers[0].awake
        time.sleep(0.01)
        awake_after = pool._helpers[0].awake
    finally:
        pool.close()
    assert (awake_in_run, awake_after) == (True, False)


def test_a_helper_runs_compiled_tasks_from_its_mailbox_without_going_back_to_python(mark_parts):
    """A helper spinning in ``serve_tasks`` runs each compiled task its caller writes into its
    mailbox (its thread number given to the parts), counts the parts off and empties the
    mailbox, all in the one call, which returns only when a Python task is posted; a task no
    helper takes, the caller takes back after running every part itself."""
    from kuiperinfer.kernels.compiled import spin
    if not spin_compiled():
        pytest.skip("without Numba there are no compiled tasks")
    mailboxes, posted, left = np.zeros(spin.MAILBOX_WORDS, np.int64), np.array([7], np.int64), np.zeros(1, np.int64)
    made, logs = {}, []

    def task(count):
        log = np.zeros(count, np.int64)
        head, tail = (log, 1, 0), (parallel._ticks(300),)
        parts = parallel.CompiledParts(mark_parts, per_thread=True)
        made.setdefault("made", parts._make(parallel.kinds_of(head + tail), head, tail))
        logs.append(log)
        return parallel.CompiledTask(count, made["made"], head, tail)

    alone = task(4)                                     # no helper yet: the caller runs every part
    assert alone.run(mailboxes, 1, parallel._ticks(10**6)) == 0
    assert list(logs[0]) == [1001] * 4 and mailboxes[spin.STATE] == spin.FREE and alone.left[0] == 0
    returned = []
    helper = threading.Thread(target=lambda: returned.append(
        spin.serve_tasks(posted, mailboxes, 0, 7, left, 0, parallel._ticks(10**7), 0, spin.STASHED, NO_RUN)))
    helper.start()
    tasks = [task(8) for _ in range(3)]
    for shared in tasks:
        assert shared.run(mailboxes, 1, parallel._ticks(10**6)) == 0      # the helper's parts counted off
        assert shared.left[0] == 0 and mailboxes[spin.STATE] == spin.FREE
    posted[0] += spin.PYTHON_TASK                       # a Python task: the helper goes back to Python
    helper.join(10)
    assert returned == [True]
    for log in logs[1:]:
        assert sorted(set(log % 1000)) == [1]           # every part once
    assert {int(value) // 1000 for log in logs[1:] for value in log} == {1, 2}   # the caller's and the helper's
    del alone, tasks, shared, log
    held = [sys.getrefcount(log) - sys.getrefcount(np.zeros(1)) for log in logs]   # beyond a new array's
    assert held == [2] * 4          # the list's and the loop's: each reference a mailbox or part held let go of


def test_compiled_parts_outside_a_run_stay_in_the_calling_thread(mark_parts):
    assert set(mark_all(mark_parts, 5)) == {1001}


def test_compiled_and_python_tasks_from_many_callers_each_get_all_their_parts_done(two_threads, mark_parts):
    """A helper handed both kinds of task, by callers in several threads at once, loses none."""
    errors = []

    def caller(index):
        try:
            with two_threads.running():
                for round_ in range(40):
                    if round_ % 2:
                        log = mark_all(mark_parts, 6, offset=index + 1, microseconds=20)
                        assert sorted(set(log % 1000)) == [index + 1], log
                    else:
                        squares = [None] * 4
                        parallel.run_parts(range(4), 1, lambda p, squares=squares: squares.__setitem__(p, p + index))
                        assert squares == [p + index for p in range(4)]
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and not any(thread.is_alive() for thread in threads)


def test_the_machine_is_busy_while_other_threads_want_the_cores(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("1.02 0.80 0.51 3/118 4242\n")     # ours two, and one more thread running
    load = parallel.MachineLoad(str(loadavg))
    load.SAMPLE_S = 0.0
    assert [load.update(2, 2) for _ in range(4)] == [False, False, True, True]   # an average of samples
    loadavg.write_text("1.02 0.80 0.51 2/118 4242\n")     # only ours
    assert [load.update(2, 2) for _ in range(6)][-1] is False
    assert [load.update(1, 1) for _ in range(6)][-1] is False   # one thread of ours fits beside one other
    assert parallel.MachineLoad(str(tmp_path / "missing")).update(2, 2) is False


def test_while_the_machine_is_busy_only_large_operators_are_shared():
    with intra_op(2, min_work_busy=1000) as pool:
        assert parallel.threads_for(100) == 2 and pool.spins()
        pool.load = parallel.BusyMachine()
        assert parallel.threads_for(100) == 1 and parallel.threads_for(1000) == 2 and not pool.spins()
        ran = run_recording(list(range(3)))             # helpers block instead of spinning, and still help
        assert sorted(ran) == [0, 1, 2]


@pytest.mark.parametrize("spin, spins, shared_small", [("auto", True, True), ("always", True, True),
                                                       ("never", False, False)])
def test_spin_says_how_helpers_wait(spin, spins, shared_small):
    pool = parallel.ThreadPool(2, spin=spin, load=None if spin != "auto" else parallel.QuietMachine())
    assert pool.spins() is spins
    assert (pool.threads_for(pool.timing.min_work) == 2) is shared_small
    assert pool.threads_for(pool.timing.min_work_busy) == 2
    with pytest.raises(ValueError, match="spin must be one of"):
        parallel.ThreadPool(2, spin="sometimes")


def test_affinity_gives_each_helper_a_cpu_and_the_callers_the_rest():
    affinity = parallel.Affinity(3, [2, 0, 3, 1])
    assert affinity.helpers == [3, 2] and affinity.callers == {0, 1}
    assert parallel.Affinity(2, [0, 1]).helpers == [1]
    assert parallel.Affinity.of(2, "never") is None and parallel.Affinity.of(1, "always") is None
    if hasattr(os, "sched_setaffinity"):
        assert (parallel.Affinity.of(parallel.cores(), "auto") is None) is (parallel.cores() < 2)
        assert parallel.Affinity.of(parallel.cores() + 1, "auto") is None   # more threads than CPUs: not pinned
    with pytest.raises(ValueError, match="pin must be one of"):
        parallel.ThreadPool(2, pin="sometimes")


def refuse(pid, cpus):
    raise OSError(22, "Invalid argument")


def test_a_pool_with_a_thread_per_cpu_pins_its_helpers_and_a_quiet_runs_caller_for_the_run(monkeypatch):
    if parallel.cores() < 2 or not hasattr(os, "sched_setaffinity"):
        pytest.skip("pinning needs two CPUs and Linux")
    before, cpus = os.sched_getaffinity(0), parallel.cores()
    pool = parallel.ThreadPool(cpus, load=parallel.QuietMachine())
    seen: dict[str, set] = {}
    first_running, other_done = threading.Event(), threading.Event()

    def other_caller() -> None:       # a second caller of the pool while the first's run goes on
        assert first_running.wait(10)
        with pool.running():
            seen["other"] = os.sched_getaffinity(0)
            other_done.set()

    def part(index: int) -> None:
        time.sleep(0.02)               # long enough for the helpers to take parts too
        seen.setdefault(threading.current_thread().name, os.sched_getaffinity(0))

    other = threading.Thread(target=other_caller)
    other.start()
    try:
        with pool.running():
            seen["caller"] = os.sched_getaffinity(0)
            assert parallel.cores() == cpus          # the process's CPUs, not the pinned caller's
            parallel.run_parts(list(range(4 * cpus)), 1 << 30, part)
            first_running.set()
            assert other_done.wait(10)
        assert os.sched_getaffinity(0) == before     # the caller is free again after the run
        assert seen["caller"] == pool.affinity.callers and seen["other"] == before
        assert seen["kuiper-intra-op"] == {pool.affinity.helpers[0]}
        with monkeypatch.context() as patch:          # CPUs taken from the process: runs go unpinned
            patch.setattr(os, "sched_setaffinity", refuse)
            with pool.running():
                parallel.run_parts(list(range(2 * cpus)), 1 << 30, part)
                assert parallel.cores() == cpus
        busy = parallel.ThreadPool(cpus, load=parallel.BusyMachine())
        with busy.running():                         # other processes want the cores: the caller stays free
            assert os.sched_getaffinity(0) == before
        busy.close()
    finally:
        pool.close()
        os.sched_setaffinity(0, before)
        first_running.set()
        other.join()


def test_each_pool_has_helpers_of_its_own_and_stops_them():
    if parallel.cores() < 2:
        pytest.skip("one core: no helpers")
    with intra_op(2) as first:
        run_recording(list(range(4)))
    with intra_op(2) as second:
        run_recording(list(range(4)))
    assert len(first._helpers) == 0 and len(second._helpers) == 0   # closed
    names = [t.name for t in threading.enumerate()]
    deadline = time.monotonic() + 5
    while names.count("kuiper-intra-op") > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
        names = [t.name for t in threading.enumerate()]
    assert names.count("kuiper-intra-op") == 0


def test_outside_a_run_kernels_stay_in_the_calling_thread():
    ran = run_recording(list(range(4)))
    assert set(ran.values()) == {threading.get_ident()} and parallel.threads_for(10**12) == 1


def spin_compiled():
    from kuiperinfer.kernels import jit
    return jit.AVAILABLE


def test_the_waits_count_parts_off_and_stop_when_told():
    from kuiperinfer.kernels.compiled import spin
    left = np.array([5], np.int64)
    mailbox = np.zeros(spin.MAILBOX_WORDS, np.int64)
    assert not spin.finish_and_wait(left, 2, 1000)       # 3 parts still under way
    assert spin.serve_tasks(np.array([7], np.int64), mailbox, 0, 7, left, 3, 1000, 0, spin.STASHED, NO_RUN) is False
    assert left[0] == 0 and spin.finish_and_wait(left, 0, 0)   # nothing new, the helper's 3 counted off
    if spin_compiled():
        assert spin.serve_tasks(np.array([8], np.int64), mailbox, 0, 7, left, 0, 10, 10, spin.STASHED, NO_RUN) is True


def test_the_waits_last_as_long_as_they_are_told():
    """Each spinning wait, whatever its loop does, lasts the microseconds asked for (a wait
    counted in turns of its loop once settled in a fifth of the time)."""
    from kuiperinfer.kernels.compiled import spin
    if not spin_compiled():
        assert not spin.finish_and_wait(np.ones(1, np.int64), 0, parallel._ticks(2000))   # polls once
        return
    left, never, mailbox = np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(spin.MAILBOX_WORDS, np.int64)
    waits = {"caller's": lambda ticks: spin.finish_and_wait(never, 0, ticks),
             "helper's": lambda ticks: spin.serve_tasks(never, mailbox, 0, 1, left, 0, ticks, 0, spin.STASHED, NO_RUN),
             "settling": lambda ticks: spin.serve_tasks(never, mailbox, 0, 0, left, 0, 0, ticks, spin.STASHED, NO_RUN),
             "for helpers": lambda ticks: spin.wait_for_helpers(mailbox + spin.RUNNING, 1, ticks)}
    for name, wait in waits.items():
        started = time.perf_counter()
        wait(parallel._ticks(2000))
        assert time.perf_counter() - started >= 0.0019, name


def test_a_forked_child_starts_helpers_of_its_own(two_threads):
    run_recording([0, 1])                              # the parent has an idle helper now
    pid = os.fork()
    if pid == 0:                                       # the child: its copy of that helper has no thread
        try:
            ran = run_recording([0, 1], together=True)
            os._exit(0 if sorted(ran) == [0, 1] and len(set(ran.values())) == 2 else 1)
        finally:
            os._exit(2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.01)
    os.kill(pid, 9)
    pytest.fail("the forked child hung waiting for a helper that did not survive the fork")


def test_kinds_tell_apart_the_argument_types_compiled_code_is_made_for():
    """The key a compiled task's code is looked up by: the same for arguments of one type
    whatever their values and shapes, another for every change of layout, writability,
    dtype, dimensions, or a scalar's type (else one task would run code made for another's)."""
    a = np.zeros((4, 3), np.float32)
    readonly = a.copy()
    readonly.flags.writeable = False
    same = [(a, 1, np.float32(2), (0, 3)), (np.ones((9, 2), np.float32), 5, np.float32(0), (4, 5))]
    changed = [(a.T, 1, np.float32(2), (0, 3)), (readonly, 1, np.float32(2), (0, 3)),
               (a.astype(np.float64), 1, np.float32(2), (0, 3)), (a[None], 1, np.float32(2), (0, 3)),
               (a, 1.0, np.float32(2), (0, 3)), (a, 1, 2.0, (0, 3)), (a, 1, np.float32(2), (0, 3, 6)),
               (a[:, ::2], 1, np.float32(2), (0, 3))]
    assert parallel.kinds_of(same[0]) == parallel.kinds_of(same[1])
    keys = [parallel.kinds_of(arguments) for arguments in [same[0], *changed]]
    assert len(set(keys)) == len(keys)
    assert parallel.kinds_of((object(), a)) == parallel.kinds_of((object(), a.copy()))   # no fingerprint: read in Python


@pytest.mark.parametrize("length, step, threads, images, expected", [
    (112, 15, 2, 1, 14),    # 8 blocks of 14 rows instead of 7 of 15 and one of 7
    (112, 200, 2, 1, 56),   # one block would leave a thread idle
    (320, 7, 2, 1, 7),      # 46 blocks already share evenly
    (10, 10, 2, 3, 5),      # 3 images: 2 blocks each, 3 per thread
    (1, 4, 2, 1, 1),        # too few rows to share
    (9, 0, 1, 1, 1),
])
def test_even_step_cuts_rows_into_blocks_the_threads_share_evenly(length, step, threads, images, expected):
    assert parallel.even_step(length, step, threads, images) == expected


class ThreadRecorder:
    """An epilogue that records which threads ran it on which channels (and applies nothing)."""

    def __init__(self):
        self.threads = set()
        self.channels = set()
        self.lock = threading.Lock()

    def __call__(self, block, channels=slice(None)):
        time.sleep(0.02)   # long enough for the helper to wake and take a part too
        with self.lock:
            self.threads.add(threading.get_ident())
            self.channels.add((channels.start, channels.stop))


@pytest.mark.parametrize("kind", ["im2col", "pointwise", "winograd", "winograd few tiles", "depthwise",
                                  "depthwise strided", "depthwise dilated rows", "depthwise dilated pixels",
                                  "few pixels"])
def test_kernels_share_their_blocks_among_intra_op_threads(kind):
    c, stride = (PIXELS_MIN_CHANNELS, 2) if kind in ("depthwise strided", "depthwise dilated pixels") else (16, 1)
    c = 64 if kind == "winograd few tiles" else c   # 16 tiles, 64 output channels
    dilation = 2 if "dilated" in kind else 1    # dilated: depthwise_conv2d, else stripes
    kernel = (1, 1) if kind == "pointwise" else (3, 3)   # "few pixels", "few tiles": output channels shared
    groups = c if kind.startswith("depthwise") else 1
    size = (7, 7) if kind == "few pixels" else (16, 16) if kind == "winograd few tiles" else (40, 36)
    x = RNG.standard_normal((1, c, *size), dtype=np.float32)
    weight = RNG.standard_normal((c, c // groups, *kernel), dtype=np.float32) / np.float32(4 * c)
    padding = dilation if kernel == (3, 3) else 0
    geometry = ConvGeometry(kernel, (stride, stride), (dilation, dilation), ((padding, padding), (padding, padding)),
                            "zeros", groups)
    recorder = ThreadRecorder()
    with intra_op(2):
        ours = conv2d(x, PackedWeight(weight, groups, winograd=kind.startswith("winograd")), geometry, recorder)
    expected = F.conv2d(torch.from_numpy(x), torch.from_numpy(weight), stride=stride, padding=padding,
                        dilation=dilation, groups=groups).numpy()
    np.testing.assert_allclose(nchw(ours), expected, atol=1e-5, rtol=1e-4)
    assert len(recorder.threads) == 2
    if kind in ("few pixels", "winograd few tiles"):
        assert recorder.channels == {(0, c // 2), (c // 2, c)}


def test_small_kernels_stay_in_the_calling_thread():
    recorder = ThreadRecorder()
    with intra_op(2, min_work=parallel.Timing().min_work):
        x = RNG.standard_normal((1, 8, 10, 10), dtype=np.float32)
        weight = RNG.standard_normal((8, 8, 3, 3), dtype=np.float32)
        conv2d(x, PackedWeight(weight, 1), ConvGeometry((3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), "zeros", 1),
               recorder)
    assert recorder.threads == {threading.get_ident()}


def blas_threads_now() -> list[int]:
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_the_blas_limit_holds_in_whichever_thread_enters_it():
    """threadpoolctl lets only one thread at a time set OpenBLAS's thread count."""
    from concurrent.futures import ThreadPoolExecutor

    def blas_threads_inside() -> list[int]:
        with parallel.blas_threads(1):
            return blas_threads_now()

    assert blas_threads_inside() == [1]
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(blas_threads_inside).result() == [1]
    assert blas_threads_inside() == [1]


def test_the_blas_limit_is_the_fewest_threads_any_user_asks_for_and_restored_after():
    before = blas_threads_now()
    with parallel.blas_threads(2):
        assert blas_threads_now() == [min(2, n) for n in before]
        with parallel.blas_threads(1):
            assert blas_threads_now() == [1] * len(before)
        assert blas_threads_now() == [min(2, n) for n in before]
    assert blas_threads_now() == before
