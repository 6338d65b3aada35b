"""Latency, throughput and peak memory of a model's forward pass.

:func:`benchmark` times ``runs`` forward passes after ``warmup_runs`` untimed ones, while
:class:`PeakMemory` notes the peak of the resident set size.

    result = benchmark(graph, [images], runs=50, warmup_runs=5)
    result.median_s, result.throughput, result.peak_rss_growth
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info

from kuiperinfer.runtime.graph import RuntimeGraph

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each timed run."""

PROC_STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"


class PeakMemory:
    """How far the resident set size (RSS) peaked above its size at the start of a ``with``.

    On Linux the kernel keeps the peak RSS exactly (``VmHWM``): it is reset to the
    current size on entry (by writing 5 to ``/proc/self/clear_refs``) and read on exit,
    with no sampling and nothing running beside the measured code. Where that cannot
    be done, the growth of ``resource.getrusage``'s ``ru_maxrss`` is used, which counts
    only growth past every earlier peak of the process. :attr:`method` says which.
    """

    def __init__(self) -> None:
        self.method = ""
        self.baseline = 0
        self.peak = 0

    @property
    def growth(self) -> int:
        """Bytes the RSS grew by at its peak (0 if it never grew)."""
        return max(self.peak - self.baseline, 0)

    def __enter__(self) -> PeakMemory:
        self._exact = _reset_peak_rss()
        if self._exact:
            self.method = "kernel peak RSS (VmHWM), reset before the runs"
            self.baseline = _proc_status_bytes("VmRSS")
        else:
            self.method = "growth of ru_maxrss from resource.getrusage"
            self.baseline = _max_rss()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.peak = _proc_status_bytes("VmHWM") if self._exact else _max_rss()


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak RSS to the current RSS (Linux); False where that is not possible."""
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
        _proc_status_bytes("VmHWM")
    except (OSError, ValueError):
        return False
    return True


def _proc_status_bytes(field: str) -> int:
    """A ``kB`` field of /proc/self/status (``VmRSS``, ``VmHWM``) in bytes."""
    with open(PROC_STATUS, encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == field:
                return int(value.split()[0]) * 1024
    raise ValueError(f"{PROC_STATUS} has no {field}")


def resident_bytes() -> int | None:
    """The process's resident set size (RSS) now, in bytes; None where the system does not
    say (no ``/proc``)."""
    try:
        return _proc_status_bytes("VmRSS")
    except (OSError, ValueError):
        return None


def _max_rss() -> int:
    """The peak RSS of the process so far, in bytes."""
    import resource

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024   # bytes on macOS, KiB elsewhere


@dataclass(frozen=True)
class BenchmarkResult:
    """Timed runs of one batch size (seconds, bytes)."""

    batch: int
    warmup_runs: int
    latencies_s: tuple[float, ...]
    peak_rss_growth: int
    """How far the resident set size rose during the runs above its size before them."""
    memory_method: str

    @property
    def min_s(self) -> float:
        return min(self.latencies_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.latencies_s)

    @property
    def p90_s(self) -> float:
        """The 90th percentile, by linear interpolation between the closest ranks."""
        return float(np.percentile(self.latencies_s, 90))

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.latencies_s)

    @property
    def throughput(self) -> float:
        """Items (batch elements) per second over all timed runs."""
        return self.batch * len(self.latencies_s) / math.fsum(self.latencies_s)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON, times in milliseconds."""
        return {"batch": self.batch, "runs": len(self.latencies_s), "warmup_runs": self.warmup_runs,
                "latency_ms": {"min": self.min_s * 1e3, "median": self.median_s * 1e3,
                               "p90": self.p90_s * 1e3, "mean": self.mean_s * 1e3},
                "throughput_items_per_s": self.throughput,
                "peak_rss_growth_bytes": self.peak_rss_growth, "memory_method": self.memory_method}


def benchmark(graph: RuntimeGraph, inputs: Sequence[Any], runs: int = 20, warmup_runs: int = 3,
              progress: Progress | None = None) -> BenchmarkResult:
    """Time ``runs`` forward passes of ``graph`` on ``inputs`` after ``warmup_runs`` untimed ones.

    The batch size (for the throughput) is the first dimension of the first input. The
    memory is watched from before the first warm-up run: the allocator keeps much of
    what a forward pass touched for the next one, so the timed runs alone would hide it.
    """
    if runs < 1 or warmup_runs < 0:
        raise ValueError(f"need runs >= 1 and warmup_runs >= 0, got runs={runs} warmup_runs={warmup_runs}")
    latencies = []
    with PeakMemory() as memory:
        for _ in range(warmup_runs):
            graph.run(*inputs)
        for done in range(1, runs + 1):
            start = time.perf_counter()
            graph.run(*inputs)
            latencies.append(time.perf_counter() - start)
            if progress is not None:
                progress(done, runs)
    shape = np.shape(inputs[0]) if inputs else ()
    return BenchmarkResult(int(shape[0]) if shape else 1, warmup_runs, tuple(latencies),
                           memory.growth, memory.method)


def blas_description() -> str:
    """NumPy's BLAS and its thread count, e.g. ``openblas 0.3.27, 2 threads``."""
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    if not pools:
        return "none found"
    return "; ".join(f"{p['internal_api']} {p.get('version') or ''}".rstrip() +
                     f", {p['num_threads']} thread{'s' if p['num_threads'] != 1 else ''}" for p in pools)
