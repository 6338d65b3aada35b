"""Measure a model's latency, throughput and peak memory.

The model loads (loading ends with one run on zeros, so that the first call pays no
one-off costs), runs --warmup times untimed, then --runs timed forward passes on random
inputs of the declared shapes (--batch replaces the first dimension). Reported: how
long loading took and how far it grew the resident set, the latency of one forward pass
(min, median, 90th percentile, mean), the throughput in items (batch elements) per
second, and the peak memory: how far the resident set size grew during the runs,
warm-up included, above its size after loading the model (the output says how it was
measured).
--threads T runs with T threads in all: a batch is split over T worker threads (each
with one BLAS thread), a single image uses T BLAS threads (through threadpoolctl).
Compare --threads 1 with the default to see what the threads bring.

Examples:
  kuiper bench                                    (the bundled model)
  kuiper bench resnet18.pnnx.param --batch 8 --runs 20
  kuiper bench model.pnnx.param --threads 1 --json
"""

from __future__ import annotations

import argparse
import contextlib
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
    model_path,
    positive_int,
    print_result,
    progress_bar,
    size_text,
    tell_precision,
    timing_header,
    timing_inputs,
)
from kuiperinfer.kernels.parallel import blas_threads


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_timing_arguments(parser, runs=20, warmup=3)
    parser.add_argument("--threads", type=positive_int, metavar="T",
                        help="threads: batch workers and BLAS threads (default: one per CPU)")
    add_json_argument(parser, "the measurements")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    path = model_path(args.model)
    threads = blas_threads(args.threads) if args.threads else contextlib.nullcontext()
    with threads:
        load = measure_load(path, args.threads, precision=args.precision, calibration=args.calibration)
        inputs = timing_inputs(load.graph, args)
        with progress_bar(args, "benchmarking", "runs") as bar:
            blas = blas_description()
            result = benchmark(load.graph, inputs, args.runs, args.warmup, bar)
    print_result(args, {"model": str(path), "blas": blas, "load_ms": load.seconds * 1e3,
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


def measure_load(path: Path, workers: int | None, **options: Any) -> Load:
    """Load the model as ``kuiperinfer.load`` does (its warm-up run included), timed."""
    before = resident_bytes()
    start = time.perf_counter()
    graph = kuiperinfer.load(path, workers=workers, **options)
    tell_precision(graph)
    seconds = time.perf_counter() - start
    after = resident_bytes()
    return Load(graph, seconds, None if before is None or after is None else after - before)


def report(name: str, result: BenchmarkResult, blas: str, load: Load) -> str:
    """Six lines: the setting, loading, latency, throughput and peak memory."""
    grown = "?" if load.rss_growth is None else size_text(max(load.rss_growth, 0))
    return "\n".join([
        timing_header(name, result.batch, len(result.latencies_s), result.warmup),
        f"BLAS:        {blas}",
        f"load:        {load.seconds * 1e3:.1f} ms, +{grown} resident set (its warm-up run included)",
        f"latency:     min {result.min_s * 1e3:.3f} ms  median {result.median_s * 1e3:.3f} ms  "
        f"p90 {result.p90_s * 1e3:.3f} ms  mean {result.mean_s * 1e3:.3f} ms",
        f"throughput:  {result.throughput:.1f} items/s",
        f"peak memory: +{size_text(result.peak_rss_growth)} resident set growth during the runs "
        f"({result.memory_method})",
    ])
