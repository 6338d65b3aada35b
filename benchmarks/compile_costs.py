"""``python -m benchmarks.compile_costs``: what the compiled kernels cost to make, cold and warm.

Runs the suite's models twice, each time in a fresh process with the same, initially empty
kernel cache (``KUIPERINFER_CACHE_DIR``): the first process compiles every kernel the models
use, the second loads them from the cache. For each it times importing kuiperinfer, and per
model the load (which ends with a warm-up run when the model declares its input shapes) and
the first inference at each of the model's batch sizes; for the cold process it lists every
kernel with its signatures and the seconds compiling it took (a kernel's seconds include those
of the kernels it calls that compiled with it). A kernel compiled for one model is not
compiled again for the next, so a model's cold time counts only the kernels new to it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.engines import pnnx_file
from benchmarks.models import MODELS


def measure(models: list[tuple[str, str, list[int]]]) -> dict[str, Any]:
    """In this process: import kuiperinfer, then load and run each (name, param, batches)."""
    started = time.perf_counter()
    import kuiperinfer
    from kuiperinfer.kernels import jit
    imported = time.perf_counter() - started
    rows = []
    for name, param, batches in models:
        compiled_before = sum(stats.compiled for stats in jit.kernel_stats())
        started = time.perf_counter()
        graph = kuiperinfer.load(param)
        load = time.perf_counter() - started
        first_runs = {}
        for batch in batches:
            inputs = MODELS[name].sample_inputs(batch)
            started = time.perf_counter()
            graph.run(*inputs.values())
            first_runs[batch] = time.perf_counter() - started
        compiled = sum(stats.compiled for stats in jit.kernel_stats()) - compiled_before
        rows.append({"model": name, "load_s": load, "first_run_s": first_runs, "compiled": compiled})
    kernels = [{"kernel": stats.name, "signatures": stats.signatures, "cache_hits": stats.cache_hits,
                "compiled": stats.compiled, "seconds": stats.seconds} for stats in jit.kernel_stats()]
    return {"import_s": imported, "models": rows, "kernels": kernels}


def run_child(models: list[tuple[str, str, list[int]]], cache: Path) -> dict[str, Any]:
    """:func:`measure` in a fresh Python process whose kernel cache is ``cache``."""
    environment = {**os.environ, "KUIPERINFER_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-m", "benchmarks.compile_costs", "--child", json.dumps(models)],
                          env=environment, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(cold: dict[str, Any], warm: dict[str, Any]) -> str:
    """The two markdown tables: per model cold and warm, per kernel."""
    lines = [f"Importing kuiperinfer: {cold['import_s']:.2f} s cold, {warm['import_s']:.2f} s warm.", "",
             "| model | kernels compiled | load cold (s) | load warm (s) | first runs cold (s) | first runs warm (s) |",
             "|---|---:|---:|---:|---:|---:|"]
    for cold_row, warm_row in zip(cold["models"], warm["models"], strict=True):
        def runs(row: dict[str, Any]) -> str:
            return ", ".join(f"b{batch} {seconds:.2f}" for batch, seconds in row["first_run_s"].items())
        lines.append(f"| {cold_row['model']} | {cold_row['compiled']} | {cold_row['load_s']:.2f} | "
                     f"{warm_row['load_s']:.2f} | {runs(cold_row)} | {runs(warm_row)} |")
    lines += ["", "| kernel | signatures | compiling (s) |", "|---|---:|---:|"]
    for kernel in sorted(cold["kernels"], key=lambda k: -k["seconds"]):
        lines.append(f"| `{kernel['kernel'].removeprefix('kuiperinfer.kernels.compiled.')}` | "
                     f"{kernel['signatures']} | {kernel['seconds']:.2f} |")
    total = sum(kernel["seconds"] for kernel in cold["kernels"])
    lines.append(f"| all (a kernel's time includes those it calls) | "
                 f"{sum(k['signatures'] for k in cold['kernels'])} | {total:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_costs", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--cache", type=Path, default=Path("bench-results/cache"), help="exported models")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return
    names = args.models.split(",")
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    models = [(name, str(pnnx_file(MODELS[name], args.cache)), list(MODELS[name].batches)) for name in names]
    with tempfile.TemporaryDirectory(prefix="kuiperinfer-cache-") as cache:
        cold = run_child(models, Path(cache))
        warm = run_child(models, Path(cache))
    print(report(cold, warm))


if __name__ == "__main__":
    main()
