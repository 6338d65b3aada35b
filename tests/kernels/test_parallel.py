"""run_parts: parts shared among the caller and helper threads, failures, many callers, fork;
even_step: blocks that the threads share evenly."""

import os
import threading
import time

import pytest

from kuiperinfer.kernels import parallel


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_WORK", 0)
    token = parallel.INTRA_OP_THREADS.set(2)
    yield
    parallel.INTRA_OP_THREADS.reset(token)


def run_recording(parts, threads=None):
    """run_parts over ``parts``; the thread each part ran in."""
    ran = {}

    def run(part):
        time.sleep(0.001)               # long enough for the helper to take its share
        ran[part] = threading.get_ident()
    parallel.run_parts(parts, 1, run)
    return ran


def test_every_part_runs_once_shared_between_the_caller_and_a_helper(two_threads):
    ran = run_recording(list(range(7)))
    assert sorted(ran) == list(range(7))
    assert ran[0] == threading.get_ident()            # the caller takes the first group
    assert len(set(ran.values())) == 2
    assert {ran[p] for p in range(4, 7)} != {threading.get_ident()}


def test_a_failing_part_raises_in_the_caller_once_every_part_has_finished(two_threads):
    finished = []

    def run(part):
        if part == 3:                                  # in the helper's group
            raise ValueError("part 3 failed")
        time.sleep(0.01)
        finished.append(part)

    with pytest.raises(ValueError, match="part 3 failed"):
        parallel.run_parts([0, 1, 2, 3], 1, run)
    assert sorted(finished) == [0, 1, 2]
    assert sorted(run_recording([0, 1, 2, 3])) == [0, 1, 2, 3]     # the helper serves again


def test_callers_in_many_threads_at_once_each_get_all_their_parts_done(two_threads):
    results, errors = {}, []

    def caller(index):
        token = parallel.INTRA_OP_THREADS.set(2)
        try:
            for _ in range(30):
                squares = [None] * 6
                parallel.run_parts(range(6), 1, lambda p, squares=squares: squares.__setitem__(p, p * p + index))
                assert squares == [p * p + index for p in range(6)]
            results[index] = True
        except BaseException as error:
            errors.append(error)
        finally:
            parallel.INTRA_OP_THREADS.reset(token)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 8
    assert parallel._helper_count <= parallel.MAX_HELPERS


def test_with_every_helper_busy_the_caller_runs_all_parts_itself(two_threads, monkeypatch):
    monkeypatch.setattr(parallel, "_idle_helpers", [])
    monkeypatch.setattr(parallel, "_helper_count", parallel.MAX_HELPERS)
    ran = run_recording([0, 1, 2])
    assert sorted(ran) == [0, 1, 2] and set(ran.values()) == {threading.get_ident()}


def test_a_forked_child_starts_helpers_of_its_own(two_threads):
    run_recording([0, 1])                              # the parent has an idle helper now
    pid = os.fork()
    if pid == 0:                                       # the child: its copy of that helper has no thread
        try:
            ran = run_recording([0, 1])
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
