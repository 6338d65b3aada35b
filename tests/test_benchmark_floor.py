"""The benchmark's floor: multiply-adds by kernel kind, their time at given rates, measured rates."""

import math

import torch
from oracle import export

from benchmarks.floor import KernelRates, ModelWork, measure_rates, model_work


class Kinds(torch.nn.Module):
    """One operator of each kind on a 16 x 16 RGB input."""

    def __init__(self):
        super().__init__()
        self.strided = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)       # dense: 8x8x8 outputs x 27
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)     # depthwise: 512 x 9
        self.three = torch.nn.Conv2d(8, 16, 3, padding=1)                  # Winograd: 1024 x 72
        self.pointwise = torch.nn.Conv2d(16, 16, 1)                        # dense: 1024 x 16
        self.linear = torch.nn.Linear(16 * 8 * 8, 10)                      # dense: 10 x 1024

    def forward(self, x):
        x = self.pointwise(self.three(self.depthwise(self.strided(x))))
        return self.linear(torch.flatten(x, 1))


def test_model_work_sorts_multiply_adds_by_kernel(tmp_path):
    param = export(Kinds(), [torch.rand(1, 3, 16, 16)], tmp_path)
    assert model_work(param) == ModelWork(dense=512 * 27 + 1024 * 16 + 10 * 1024, winograd=1024 * 72,
                                          depthwise=512 * 9)


def test_floor_shares_the_batch_among_threads():
    work = ModelWork(dense=2_000_000, winograd=8_000_000, depthwise=500_000)
    rates = KernelRates(gemm=1e9, depthwise=1e8)
    # per sample: (2e6 + 8e6 / 4) / 1e9 + 5e5 / 1e8 = 4 ms + 5 ms
    assert math.isclose(work.floor_ms(rates, batch=1, threads=1), 9.0)
    assert math.isclose(work.floor_ms(rates, batch=8, threads=2), 36.0)


def test_measured_rates_are_positive_and_finite():
    rates = measure_rates()
    for rate in (rates.gemm, rates.depthwise):
        assert 0 < rate < math.inf
