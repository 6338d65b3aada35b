"""``python -m benchmarks.precisions``: kuiperinfer's fp32, bf16 and int8 on the zoo's models,
timed in one process, and the memory each precision's weights take.

For each model, batch and thread count the model is loaded once in each precision (int8 with
the table :mod:`benchmarks.int8` makes, on the same calibration inputs as the benchmark's) and
run in rounds, each precision once per round in turn, so that a slow phase of a shared machine
falls on all of them alike; the table gives the medians (and minimums) and their ratios to
fp32. The weights' memory is what the layers hold in arrays of their own (packed operands,
Winograd's transforms, the products' int8 or bfloat16 weights; not the memory-mapped model
file, whose pages the operating system keeps) and what loading adds to the resident set in a
fresh process (the benchmark's "MB loaded": the compiled kernels' code and the warm-up run's
buffers too).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kuiperinfer.kernels.resident import in_arena

PRECISIONS = ("fp32", "bf16", "int8")
MODELS = ("resnet18", "yolov5s", "unet", "efficientnet_lite0", "mobilenetv3")


def load(name: str, precision: str, cache: Path, threads: int | None = None, warmup: bool = True) -> Any:
    """The zoo's ``name`` loaded in ``precision`` (exported and calibrated into ``cache`` first)."""
    import kuiperinfer
    from benchmarks.engines import pnnx_file
    from benchmarks.int8 import int8_files
    from benchmarks.models import MODELS as ZOO

    param = pnnx_file(ZOO[name], cache)
    options: dict[str, Any] = {"precision": precision, "threads": threads, "warmup": warmup}
    if precision == "int8":
        table = cache / name / f"{name}.int8.table"
        if not table.exists():
            int8_files(ZOO[name], {"kuiperinfer": param}, cache, ["kuiperinfer"])
        options["calibration"] = table
    return kuiperinfer.load(param, **options)


def times(name: str, batch: int, threads: int, rounds: int, cache: Path) -> dict[str, list[float]]:
    """Seconds per run of each precision, ``rounds`` rounds alternating."""
    from benchmarks.models import MODELS as ZOO

    inputs = list(ZOO[name].sample_inputs(batch).values())
    graphs = {precision: load(name, precision, cache, threads) for precision in PRECISIONS}
    taken: dict[str, list[float]] = {precision: [] for precision in PRECISIONS}
    for graph in graphs.values():
        graph.run(*inputs)
    for _ in range(rounds):
        for precision, graph in graphs.items():
            start = time.perf_counter()
            graph.run(*inputs)
            taken[precision].append(time.perf_counter() - start)
    return taken


def held_bytes(graph: Any) -> int:
    """Bytes of the arrays the graph's layers hold, each once, but views of the model file:
    the arrays they own, and their packed weights' spans of the weights' arena."""
    seen, total = set(), 0
    for array in _arrays([op.layer for op in graph.operators if op.layer is not None], set()):
        owner = array
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        if in_arena(owner):
            key: object = (array.ctypes.data, array.nbytes)
            size = array.nbytes
        elif owner.base is None:
            key, size = id(owner), owner.nbytes
        else:
            continue
        if key not in seen:
            seen.add(key)
            total += size
    return total


def _arrays(objects: list[Any], visited: set[int]) -> Iterator[np.ndarray]:
    """The arrays reachable from ``objects`` through attributes, containers and closures."""
    while objects:
        obj = objects.pop()
        if id(obj) in visited or isinstance(obj, (str, bytes, int, float, type, Path)) or obj is None:
            continue
        visited.add(id(obj))
        if isinstance(obj, np.ndarray):
            yield obj
        elif isinstance(obj, dict):
            objects.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            objects.extend(obj)
        elif callable(obj) and getattr(obj, "__closure__", None):
            objects.extend(cell.cell_contents for cell in obj.__closure__)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("kuiperinfer"):
            objects.extend(vars(obj).values())
        elif hasattr(obj, "__slots__") and type(obj).__module__.startswith("kuiperinfer"):
            objects.extend(getattr(obj, slot) for slot in obj.__slots__ if hasattr(obj, slot))


def memory(name: str, precision: str, cache: Path) -> tuple[int, int]:
    """(bytes the layers hold, bytes loading added to a fresh process's resident set)."""
    load(name, "int8", cache, warmup=False)   # exported and calibrated before the fresh process measures
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_memory_in_this_process, (name, precision, cache))


def _memory_in_this_process(name: str, precision: str, cache: Path) -> tuple[int, int]:
    import kuiperinfer.layers  # noqa: F401  (the library, imported before the model is)
    from kuiperinfer.benchmark import resident_bytes

    before = resident_bytes()
    graph = load(name, precision, cache)
    return held_bytes(graph), resident_bytes() - before


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.precisions", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=15, help="runs of each precision, alternating (default 15)")
    parser.add_argument("--memory", action="store_true", help="the weights' memory per precision, not the times")
    parser.add_argument("--cache", type=Path, default=Path("zoo"), help="exported models (default: zoo)")
    args = parser.parse_args(argv)
    if args.memory:
        print("| model | precision | MB the layers hold | / fp32 | MB loaded (fresh process) | / fp32 |")
        print("|---|---|---:|---:|---:|---:|")
        for name in args.models:
            found = {precision: memory(name, precision, args.cache) for precision in PRECISIONS}
            for precision, (held, loaded) in found.items():
                print(f"| {name} | {precision} | {held / 1e6:.1f} | {held / found['fp32'][0]:.2f} | "
                      f"{loaded / 1e6:.0f} | {loaded / found['fp32'][1]:.2f} |", flush=True)
        return
    print("| model | batch | threads | fp32 ms median (min) | bf16 ms | / fp32 | int8 ms | / fp32 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        for batch in args.batches:
            for threads in args.threads:
                taken = times(name, batch, threads, args.rounds, args.cache)
                median = {p: statistics.median(t) * 1e3 for p, t in taken.items()}
                fp32, bf16, int8 = (f"{median[p]:.1f} ({min(taken[p]) * 1e3:.1f})" for p in PRECISIONS)
                print(f"| {name} | {batch} | {threads} | {fp32} | {bf16} | {median['bf16'] / median['fp32']:.2f} | "
                      f"{int8} | {median['int8'] / median['fp32']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
