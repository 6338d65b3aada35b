"""The floor under kuiperinfer's time: a model's multiply-adds at its kernels' best rates.

kuiperinfer computes nearly all of a network's work in two kinds of kernel: matrix
products in NumPy's BLAS (im2col and 1x1 convolutions, Winograd's products, linear
layers) and ``np.einsum`` over strided windows (depthwise convolutions). Measured on
this machine at their best (one thread, warm caches, a large square product and a
depthwise stripe that fits in cache), their rates turn a model's multiply-adds into a
floor: the time it would take if every multiply-add ran at those rates, on every thread,
and nothing else took any time:

    floor = batch * (dense / gemm_rate + winograd / 4 / gemm_rate + depthwise / depthwise_rate) / threads

``winograd`` are the multiply-adds of 3x3 stride-1 convolutions, which Winograd F(4x4, 3x3)
computes with a quarter of them (36 products per 4x4 output tile instead of 144); the
transforms, column copies, epilogues and hand-offs between threads are left out. Set
beside onnxruntime's time, the floor tells the targets that work around the kernels can
still reach from those that need faster kernels than NumPy's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kuiperinfer.inspect.summary import CONV_TYPES, summarize
from kuiperinfer.kernels.depthwise import DepthwiseWeight, phased_rows
from kuiperinfer.kernels.parallel import ONE_BLAS_THREAD
from kuiperinfer.pnnx.ir import Operator
from kuiperinfer.pnnx.param_file import read_param

WINOGRAD_SAVING = 4
"""F(4x4, 3x3) multiplies 36 times per 4x4 output tile and channel pair, direct 3x3 144 times."""


@dataclass(frozen=True)
class KernelRates:
    """Multiply-adds per second of one thread in kuiperinfer's two kinds of kernel."""

    gemm: float
    """np.matmul of two 1024 x 1024 float32 matrices."""
    depthwise: float
    """The depthwise kernel's einsum on a cache-sized stripe (8 rows of 56 x 144, 3x3)."""


@dataclass(frozen=True)
class ModelWork:
    """A model's multiply-adds per sample, by the kernel that computes them."""

    dense: int
    """Matrix products: convolutions other than the two kinds below, linear layers, matmuls."""
    winograd: int
    """3x3 stride-1 undilated convolutions of one group, counted as computed directly."""
    depthwise: int
    """Convolutions with one input channel per group."""

    def floor_ms(self, rates: KernelRates, batch: int, threads: int) -> float:
        """Milliseconds for ``batch`` samples at ``rates``, shared perfectly among ``threads``."""
        seconds = (self.dense + self.winograd / WINOGRAD_SAVING) / rates.gemm + self.depthwise / rates.depthwise
        return batch * seconds / threads * 1e3


def _best_seconds(run: Callable[[], object], repeats: int, rounds: int = 5) -> float:
    """Seconds per call of ``run``, the best of ``rounds`` rounds of ``repeats`` calls."""
    run()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def measure_rates() -> KernelRates:
    """:class:`KernelRates` on this machine (about a second)."""
    rng = np.random.default_rng(0)
    square = rng.random((1024, 1024), dtype=np.float32)
    product = np.empty_like(square)
    rows, width, channels = 8, 56, 144
    stripe = rng.random((1, rows + 2, 1, width + 2, channels), dtype=np.float32)   # one phase
    weight = DepthwiseWeight(rng.random((channels, 1, 3, 3), dtype=np.float32), width, in_rows=True)
    out = np.empty((1, rows, width, channels), dtype=np.float32)
    depthwise = phased_rows(stripe, weight, 1, 1, out)
    with ONE_BLAS_THREAD:
        gemm = 1024 ** 3 / _best_seconds(lambda: np.matmul(square, square, out=product), 10)
        depthwise_rate = rows * width * channels * 9 / _best_seconds(lambda: depthwise(slice(None)), 50)
    return KernelRates(gemm, depthwise_rate)


def model_work(param: str | Path) -> ModelWork:
    """The multiply-adds of a .pnnx.param model per sample, from the shapes pnnx recorded
    (see :mod:`kuiperinfer.inspect.summary`)."""
    graph = read_param(param)
    work = {"dense": 0, "winograd": 0, "depthwise": 0}
    for op, summary in zip(graph.ops, summarize(graph).operators):
        if summary.macs:
            work[_kernel_kind(op)] += summary.macs
    return ModelWork(**work)


def _kernel_kind(op: Operator) -> str:
    if op.type not in CONV_TYPES:
        return "dense"

    def param(key: str, default: object) -> object:
        return op.params[key].value if key in op.params else default

    groups = param("groups", 1)
    if groups > 1 and param("in_channels", 0) == groups:
        return "depthwise"
    ones = [1] * len(param("kernel_size", []))
    if (groups == 1 and param("kernel_size", None) == [3, 3] and param("stride", ones) == ones
            and param("dilation", ones) == ones):
        return "winograd"
    return "dense"
