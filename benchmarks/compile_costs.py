"""``python -m benchmarks.compile_costs``: what the compiled kernels cost a user, cold and warm.

Each model of the suite runs in three fresh processes, as a user's first and later
processes would: with an empty kernel cache (``KUIPERINFER_CACHE_DIR``, one per model), so
that every kernel the model uses compiles; again with that cache, now warm; and without
Numba (the reference kernels, nothing to compile or load). Each times importing kuiperinfer,
loading the model (which ends with a warm-up run when the model declares its input shapes)
and the first inference at each of the model's batch sizes; the cold process also lists each
kernel with the seconds compiling it took (a kernel's seconds include those of the kernels it
calls that compiled with it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.engines import pnnx_file
from benchmarks.models import MODELS

WITHOUT_NUMBA = "import sys; sys.modules['numba'] = None"
"""Run first in a process that must not import Numba (as if it were not installed)."""


def measure(name: str, param: str, batches: list[int]) -> dict[str, Any]:
    """In this process: import kuiperinfer, load the model, run it once per batch size."""
    started = time.perf_counter()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # the warning that Numba is missing
        import kuiperinfer
        from kuiperinfer.kernels import jit
    imported = time.perf_counter() - started
    started = time.perf_counter()
    graph = kuiperinfer.load(param)
    load = time.perf_counter() - started
    first_runs = {}
    for batch in batches:
        inputs = MODELS[name].sample_inputs(batch)
        started = time.perf_counter()
        graph.run(*inputs.values())
        first_runs[str(batch)] = time.perf_counter() - started
    kernels = [{"kernel": stats.name, "cache_hits": stats.cache_hits, "compiled": stats.compiled,
                "seconds": stats.seconds} for stats in jit.kernel_stats()]
    return {"import_s": imported, "load_s": load, "first_run_s": first_runs, "kernels": kernels}


def run_child(name: str, param: str, batches: list[int], cache: Path, numba: bool = True) -> dict[str, Any]:
    """:func:`measure` in a fresh Python process whose kernel cache is ``cache``."""
    environment = {**os.environ, "KUIPERINFER_CACHE_DIR": str(cache)}
    code = (f"{'' if numba else WITHOUT_NUMBA + chr(10)}import json\n"
            f"from benchmarks.compile_costs import measure\n"
            f"print(json.dumps(measure({name!r}, {param!r}, {batches!r})))")
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_model(name: str, param: str, batches: list[int]) -> dict[str, dict[str, Any]]:
    """The three processes for one model: cold and warm kernel cache, and without Numba."""
    with tempfile.TemporaryDirectory(prefix="kuiperinfer-cache-") as cache:
        cold = run_child(name, param, batches, Path(cache))
        warm = run_child(name, param, batches, Path(cache))
        reference = run_child(name, param, batches, Path(cache), numba=False)
    return {"cold": cold, "warm": warm, "without_numba": reference}


def report(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Markdown: per model the three processes' times, then per kernel its compile time."""
    def runs(process: dict[str, Any]) -> str:
        return ", ".join(f"b{batch} {seconds:.2f}" for batch, seconds in process["first_run_s"].items())

    lines = ["| model | kernels | import + load cold (s) | warm (s) | without Numba (s) | first runs cold (s) | "
             "warm (s) | without Numba (s) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    compile_seconds: dict[str, list[float]] = {}
    for name, model in results.items():
        cold, warm, reference = model["cold"], model["warm"], model["without_numba"]
        startup = [process["import_s"] + process["load_s"] for process in (cold, warm, reference)]
        lines.append(f"| {name} | {len(cold['kernels'])} | {startup[0]:.2f} | {startup[1]:.2f} | {startup[2]:.2f} | "
                     f"{runs(cold)} | {runs(warm)} | {runs(reference)} |")
        for kernel in cold["kernels"]:
            compile_seconds.setdefault(kernel["kernel"], []).append(kernel["seconds"])
    lines += ["", "| kernel | models using it | compiling (s, median over them) |", "|---|---:|---:|"]
    medians = {kernel: statistics.median(seconds) for kernel, seconds in compile_seconds.items()}
    for kernel, seconds in sorted(medians.items(), key=lambda item: -item[1]):
        lines.append(f"| `{kernel.removeprefix('kuiperinfer.kernels.compiled.')}` | "
                     f"{len(compile_seconds[kernel])} | {seconds:.2f} |")
    lines.append(f"| all | | {sum(medians.values()):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_costs", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--cache", type=Path, default=Path("bench-results/cache"), help="exported models")
    args = parser.parse_args(argv)
    names = args.models.split(",")
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    results = {}
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        results[name] = measure_model(name, str(pnnx_file(MODELS[name], args.cache)), list(MODELS[name].batches))
    print(report(results))


if __name__ == "__main__":
    main()
