"""CPU-bound processes beside the benchmark, as another user's jobs on a shared machine.

``python -m benchmarks --busy N`` starts N of them before timing and stops them after.
Each is a single-threaded pure-Python loop in its own session (``start_new_session``), as
jobs started from another login would be: no terminal signal meant for the benchmark
reaches them, so :class:`BusyProcesses` kills each one's whole process group when the
``with`` ends, by error or Ctrl-C too. A loop also ends by itself when its parent goes
(it is then adopted by another process), so a benchmark killed outright leaves none behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

BUSY_LOOP = """\
import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(200_000):
        pass
"""


class BusyProcesses:
    """``count`` busy loops running for the duration of a ``with``."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> BusyProcesses:
        try:
            for _ in range(self.count):
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-c", BUSY_LOOP], start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def stop(self) -> None:
        """Kill every loop's process group and reap the loops."""
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes:
            process.wait()
        self.processes = []
