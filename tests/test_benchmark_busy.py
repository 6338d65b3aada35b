"""The shared-machine mode's busy processes: each in its own session, all gone afterwards."""

import os

import pytest

from benchmarks.busy import BusyProcesses


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_busy_processes_run_in_their_own_sessions_and_are_killed_afterwards():
    with BusyProcesses(2) as busy:
        pids = busy.pids
        assert len(set(pids)) == 2
        for pid in pids:
            assert os.getsid(pid) == pid != os.getsid(0)     # session leader, not ours
            assert os.getpgid(pid) == pid
            assert not gone(pid)
    assert all(gone(pid) for pid in pids)
    assert busy.processes == []


def test_busy_processes_are_killed_when_the_benchmark_fails():
    with pytest.raises(KeyboardInterrupt), BusyProcesses(1) as busy:
        pids = busy.pids
        raise KeyboardInterrupt
    assert all(gone(pid) for pid in pids)


def test_no_busy_processes_start_nothing():
    with BusyProcesses(0) as busy:
        assert busy.pids == []
