"""The kernel rates: work over time, the registry, and every registered case running."""

import itertools

import pytest

from benchmarks import kernels
from benchmarks.kernels import CASES, KernelCase, KernelResult, best_seconds, kernel, markdown, measure


def test_rates_come_from_the_work_and_the_time():
    gemm = KernelResult(KernelCase("gemm", lambda: None, macs=3 * 10**9), seconds=0.5)
    assert gemm.gmacs == 6.0 and gemm.ns_per_value is None
    softmax = KernelResult(KernelCase("softmax", lambda: None, values=2000), seconds=1e-6)
    assert softmax.gmacs is None and softmax.ns_per_value == pytest.approx(0.5)
    assert markdown([gemm.to_dict(), softmax.to_dict()]).splitlines()[2:] == [
        "| gemm | 6.00 GMAC/s | 500000.0 |", "| softmax | 0.500 ns/value | 1.0 |"]


def test_the_best_round_counts_and_a_round_fills_its_time():
    ticks = itertools.count()
    clock = lambda: next(ticks) * 0.001          # noqa: E731  (every reading 1 ms later)
    calls = []
    seconds = best_seconds(lambda: calls.append(1), rounds=3, round_seconds=0.004, clock=clock)
    assert len(calls) == 1 + 3 * 4               # a first call, then rounds of 4 calls
    assert seconds == pytest.approx(0.001 / 4)


def test_a_case_gives_its_work_in_one_unit(monkeypatch):
    monkeypatch.setattr(kernels, "CASES", [])
    kernel("a", macs=5)(lambda: None)
    assert kernels.CASES == [KernelCase("a", kernels.CASES[0].setup, macs=5)]
    with pytest.raises(ValueError):
        kernel("b", macs=5, values=5)
    with pytest.raises(ValueError):
        kernel("c")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_every_case_sets_up_and_runs(case):
    result = measure(case, rounds=1)
    assert 0 < result.seconds < 1
