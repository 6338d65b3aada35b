"""What every test gets: the engine's threads sharing work as on a quiet machine."""

import pytest

from kuiperinfer.kernels import parallel


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """Whatever else runs beside the tests, a test that has operators shared must find them
    shared: the pools that graphs make adapt to a machine that never turns busy
    (MachineLoad's own tests give it a file of their own)."""
    monkeypatch.setattr(parallel.ThreadPool, "auto_load", parallel.QuietMachine)
