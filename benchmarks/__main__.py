"""``python -m benchmarks``: time kuiperinfer, onnxruntime and PyTorch eager side by side.

For each model and batch, in one process: export (cached), load the three engines with
the same thread count (kuiperinfer's workers and BLAS, onnxruntime's intra-op threads,
``torch.set_num_threads``), check that their outputs agree, warm each up, then time them
round-robin -- one run of each engine per round, the order rotating -- so that drifts in
the machine's load hit all three alike. The memory each engine adds to its process, by
loading the model and at its peak while inferring, is measured in a fresh spawned process
per engine (in one shared process the allocator would keep what one engine freed and hide
the next one's peak). kuiperinfer's loading ends with a warm-up run on zeros, so what its
first inference would allocate counts as loaded; compare the sum of the two columns.

Idle threads sleep instead of spinning in every engine (PyTorch's OpenMP threads through
``OMP_WAIT_POLICY=PASSIVE``, onnxruntime's through ``session.intra_op.allow_spinning=0``,
the OpenBLAS threads of kuiperinfer's NumPy through ``OPENBLAS_THREAD_TIMEOUT=4``): in
interleaved rounds on a small machine one engine's spinning threads would otherwise steal
the cores of the engine timed next.

Beside the three times the table shows kuiperinfer's floor (:mod:`benchmarks.floor`): the
model's multiply-adds at the best rates of kuiperinfer's kernels on this machine, shared
perfectly among the threads, and its ratio to onnxruntime's time. Where that ratio is above
a target, no work around the kernels reaches the target; only faster kernels would.

Writes ``latest.md`` (the table) and ``latest.json`` (everything) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.engines import ENGINES, make_engine, memory_use, model_files, sample_batch
from benchmarks.floor import KernelRates, measure_rates, model_work
from benchmarks.models import MODELS
from kuiperinfer.benchmark import blas_description, blas_threads
from kuiperinfer.errors import KuiperError

MB = 1 << 20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, from {', '.join(MODELS)} (default: all)")
    parser.add_argument("--batches", default="",
                        help="comma-separated batch sizes (default: each model's own, 1 and 8 or 1)")
    parser.add_argument("--threads", type=int, default=2, help="threads per engine (default 2)")
    parser.add_argument("--runs", type=int, default=10, help="timed rounds (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per engine (default 2)")
    parser.add_argument("--memory-runs", type=int, default=2,
                        help="inferences per memory probe; 0 skips the memory probes (default 2)")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="output folder")
    parser.add_argument("--cache", type=Path, default=None,
                        help="exported models (default: OUT/cache)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    if args.threads < 1 or args.runs < 1 or args.warmup < 0 or args.memory_runs < 0:
        parser.error("--threads and --runs must be positive, --warmup and --memory-runs not negative")
    return args


def time_round_robin(engines: dict[str, Any], x: np.ndarray, runs: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per run of each engine, one run of each per round, the order rotating."""
    names = list(engines)
    for name in names:
        for _ in range(warmup):
            engines[name](x)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(runs):
        for name in names[i % len(names):] + names[:i % len(names)]:
            start = time.perf_counter()
            engines[name](x)
            times[name].append(time.perf_counter() - start)
    return times


def memory_uses(model: str, batch: int, param: Path, onnx_path: Path, threads: int,
                runs: int) -> dict[str, dict[str, int | None]]:
    """:func:`~benchmarks.engines.memory_use` per engine, each in a fresh spawned process,
    one after another."""
    context = multiprocessing.get_context("spawn")
    result = {}
    for engine in ENGINES:
        with context.Pool(1) as pool:
            result[engine] = pool.apply(memory_use, (engine, model, batch, str(param), str(onnx_path), threads, runs))
    return result


def bench_case(name: str, batch: int, args: argparse.Namespace, rates: KernelRates) -> dict[str, Any]:
    model = MODELS[name]
    param, onnx_path = model_files(model, args.cache)
    engines = {engine: make_engine(engine, model, param, onnx_path, args.threads) for engine in ENGINES}
    x = sample_batch(model, batch)
    outputs = {engine: np.asarray(run(x)) for engine, run in engines.items()}
    times = time_round_robin(engines, x, args.runs, args.warmup)
    del engines
    memory = (memory_uses(name, batch, param, onnx_path, args.threads, args.memory_runs)
              if args.memory_runs else {})
    case: dict[str, Any] = {"model": name, "batch": batch, "input_shape": [batch, *model.input_shape]}
    for engine in ENGINES:
        case[engine] = {"median_ms": statistics.median(times[engine]) * 1e3,
                        "min_ms": min(times[engine]) * 1e3,
                        "runs_ms": [t * 1e3 for t in times[engine]],
                        "loaded_memory_bytes": memory.get(engine, {}).get("loaded"),
                        "peak_memory_added_bytes": memory.get(engine, {}).get("peak_added")}
    kuiper = case["kuiperinfer"]["median_ms"]
    case["floor_ms"] = model_work(param).floor_ms(rates, batch, args.threads)
    case["floor_vs_onnxruntime"] = case["floor_ms"] / case["onnxruntime"]["median_ms"]
    case["ratio_vs_onnxruntime"] = kuiper / case["onnxruntime"]["median_ms"]
    case["ratio_vs_torch"] = kuiper / case["torch"]["median_ms"]
    case["max_abs_diff_vs_onnxruntime"] = _max_diff(outputs["kuiperinfer"], outputs["onnxruntime"])
    case["max_abs_diff_vs_torch"] = _max_diff(outputs["kuiperinfer"], outputs["torch"])
    return case


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b))) if a.shape == b.shape else float("inf")


def machine() -> dict[str, Any]:
    import onnxruntime
    import torch

    import kuiperinfer

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cpus": multiprocessing.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "blas": blas_description(), "kuiperinfer": kuiperinfer.__version__,
            "onnxruntime": onnxruntime.__version__, "torch": torch.__version__}


def markdown(report: dict[str, Any]) -> str:
    m, rates = report["machine"], report["kernel_rates"]
    lines = [f"`{report['command']}` on {m['cpu']} ({m['cpus']} CPUs), {report['threads']} threads per "
             f"engine, median of {report['runs']} interleaved runs (min in brackets), "
             f"numpy {m['numpy']} ({m['blas']}), onnxruntime {m['onnxruntime']}, torch {m['torch']}. "
             f"Floor: the model's multiply-adds at kuiperinfer's best kernel rates here (one thread: "
             f"matrix products {rates['gemm'] / 1e9:.1f} GMAC/s, depthwise {rates['depthwise'] / 1e9:.1f} "
             f"GMAC/s; 3x3 convolutions at a quarter of their multiply-adds, for Winograd) over "
             f"{report['threads']} threads.",
             "",
             "| model | batch | kuiperinfer ms | onnxruntime ms | torch ms | floor ms | kuiper/ort | floor/ort "
             "| kuiper/torch | MB loaded (kuiper / ort / torch) | peak MB added (kuiper / ort / torch) "
             "| max abs diff (ort / torch) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in report["cases"]:
        if "error" in c:
            lines.append(f"| {c['model']} | {c['batch']} | failed: {c['error'][:120]} ||||||||||")
            continue
        cells = [f"{c[e]['median_ms']:.1f} ({c[e]['min_ms']:.1f})" for e in ENGINES]
        loaded, peak = (" / ".join("-" if c[e][key] is None else f"{c[e][key] / MB:.0f}" for e in ENGINES)
                        for key in ("loaded_memory_bytes", "peak_memory_added_bytes"))
        lines.append(f"| {c['model']} | {c['batch']} | {' | '.join(cells)} | {c['floor_ms']:.1f} "
                     f"| {c['ratio_vs_onnxruntime']:.2f} | {c['floor_vs_onnxruntime']:.2f} "
                     f"| {c['ratio_vs_torch']:.2f} | {loaded} | {peak} | {c['max_abs_diff_vs_onnxruntime']:.1e} / "
                     f"{c['max_abs_diff_vs_torch']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.cache = args.cache or args.out / "cache"
    report: dict[str, Any] = {
        "command": "python -m benchmarks " + shlex.join(sys.argv[1:] if argv is None else argv),
        "threads": args.threads, "runs": args.runs, "warmup": args.warmup, "machine": machine(), "cases": []}
    rates = measure_rates()
    report["kernel_rates"] = {"gemm": rates.gemm, "depthwise": rates.depthwise}
    with blas_threads(args.threads):
        for name in args.models.split(","):
            batches = [int(b) for b in args.batches.split(",")] if args.batches else MODELS[name].batches
            for batch in batches:
                print(f"{name} batch {batch} ...", file=sys.stderr, flush=True)
                try:
                    report["cases"].append(bench_case(name, batch, args, rates))
                except KuiperError as exc:   # e.g. an operator not supported yet: report, go on
                    print(f"  {name} batch {batch} failed: {exc}", file=sys.stderr)
                    report["cases"].append({"model": name, "batch": batch, "error": str(exc)})
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(report)
    (args.out / "latest.md").write_text(table, encoding="utf-8")
    (args.out / "latest.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
