"""Measure a model's latency, throughput and peak memory.

The model loads (loading ends with one run on zeros, so that the first call pays no
one-off costs), runs --warmup-runs times untimed, then --runs timed forward passes on random
inputs of the declared shapes (--batch replaces the first dimension). Reported: how
long loading took and how far it grew the resident set, the latency of one forward pass
(min, median, 90th percentile, mean), the throughput in items (batch elements) per
second, and the peak memory: how far the resident set size grew during the runs,
warm-up included, above its size after loading the model (the output says how it was
measured).
--threads T loads the model to run on T threads, the caller's included: a batch is cut
into a chunk per thread, a single image shares its large operators among them; BLAS runs
on one thread in every run. Compare --threads 1 with the default to see what the threads
bring.

Examples:
  kuiper bench                                    (the bundled model)
  kuiper bench resnet18.pnnx.param --batch 8 --runs 20
  kuiper bench model.pnnx.param --threads 1 --json
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kuiperinfer
from kuiperinfer import RuntimeGraph
from kuiperinfer.benchmark import BenchmarkResult, benchmark, blas_description, resident_bytes
from kuiperinfer.cli._common import (
    add_json_argument,
    add_progress_argument,
    add_timing_arguments,
    load_options,
    model_path,
    print_result,
    progress_bar,
    size_text,
    tell_precision,
    timing_header,
    timing_inputs,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_timing_arguments(parser, runs=20, warmup_runs=3)
    add_json_argument(parser, "the measurements")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    path = model_path(args.model)
    load = measure_load(path, **load_options(args))
    inputs = timing_inputs(load.graph, args)
    with load.graph.pool.running():   # BLAS as the runs have it
        blas = blas_description()
    with progress_bar(args, "benchmarking", "runs") as bar:
        result = benchmark(load.graph, inputs, args.runs, args.warmup_runs, bar)
    print_result(args, {"model": str(path), "threads": load.graph.threads, "blas": blas, "load_ms": load.seconds * 1e3,
                        "load_rss_growth_bytes": load.rss_growth, **result.to_dict()},
                 report(path.name, result, blas, load))
    return 0


@dataclass(frozen=True)
class Load:
    """A loaded model, how long loading took and how far it grew the resident set."""

    graph: RuntimeGraph
    seconds: float
    rss_growth: int | None
    """Bytes; None where the system does not say."""


def measure_load(path: Path, **options: Any) -> Load:
    """Load the model with ``options`` as ``kuiperinfer.load`` does (its warm-up run included), timed."""
    before = resident_bytes()
    start = time.perf_counter()
    graph = kuiperinfer.load(path, **options)
    tell_precision(graph)
    seconds = time.perf_counter() - start
    after = resident_bytes()
    return Load(graph, seconds, None if before is None or after is None else after - before)


def report(name: str, result: BenchmarkResult, blas: str, load: Load) -> str:
    """Six lines: the setting, the threads, loading, latency, throughput and peak memory."""
    grown = "?" if load.rss_growth is None else size_text(max(load.rss_growth, 0))
    return "\n".join([
        timing_header(name, result.batch, len(result.latencies_s), result.warmup_runs),
        f"threads:     {load.graph.threads}, BLAS {blas} in a run",
        f"load:        {load.seconds * 1e3:.1f} ms, +{grown} resident set (its warm-up run included)",
        f"latency:     min {result.min_s * 1e3:.3f} ms  median {result.median_s * 1e3:.3f} ms  "
        f"p90 {result.p90_s * 1e3:.3f} ms  mean {result.mean_s * 1e3:.3f} ms",
        f"throughput:  {result.throughput:.1f} items/s",
        f"peak memory: +{size_text(result.peak_rss_growth)} resident set growth during the runs "
        f"({result.memory_method})",
    ])
