"""``python -m benchmarks``: time kuiperinfer, onnxruntime and PyTorch eager as users run them.

First the kernel rates (:mod:`benchmarks.kernels`), so that a slower kernel shows on its own.
Then, for each model and batch: export (cached), start each engine in its own spawned
process with its default settings (``--threads`` pins them all to one count instead), check
that their outputs agree, and time them in alternating blocks, one engine computing at a
time (:mod:`benchmarks.alternate`). The memory each engine adds to its process, by loading
the model and at its peak while inferring, is measured in a fresh spawned process per engine
(in a process that already ran the model the allocator would keep what the runs freed and
hide the peak). kuiperinfer's loading ends with a warm-up run on zeros when the model
declares its input shapes (a dynamic batch taken as 1, as for the transformers), so what
its first inference would allocate then counts as loaded; compare the sum of the two columns.

``--busy N`` times the same table on a shared machine: N single-threaded CPU-bound
processes (:mod:`benchmarks.busy`) run beside it for the whole of the models' timing.

Writes ``latest.md`` (the tables) and ``latest.json`` (everything) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import shlex
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import kernels
from benchmarks.alternate import EngineFailed, EngineProcess, time_alternating
from benchmarks.busy import BusyProcesses
from benchmarks.engines import ENGINES, memory_use, onnx_file, pnnx_file
from benchmarks.models import MODELS, BenchModel

MB = 1 << 20
SHORT = {"kuiperinfer": "kuiper", "onnxruntime": "ort", "torch": "torch"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, from {', '.join(MODELS)} (default: all)")
    parser.add_argument("--batches", default="",
                        help="comma-separated batch sizes (default: each model's own, 1 and 8 or 1)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per engine (default 20)")
    parser.add_argument("--block", type=int, default=5,
                        help="runs an engine makes before the next one takes over (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per engine after loading (default 2)")
    parser.add_argument("--threads", type=int, default=None,
                        help="pin every engine to this many threads (default: each engine's own default)")
    parser.add_argument("--busy", type=int, default=0,
                        help="CPU-bound processes running beside the timing, each in its own session (default 0)")
    parser.add_argument("--memory-runs", type=int, default=2,
                        help="inferences per memory probe; 0 skips the memory probes (default 2)")
    parser.add_argument("--no-kernels", action="store_true", help="skip the kernel rates")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="output folder")
    parser.add_argument("--cache", type=Path, default=None,
                        help="exported models (default: OUT/cache)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    if args.runs < 1 or args.block < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--runs, --block and --threads must be positive")
    if args.warmup < 0 or args.memory_runs < 0 or args.busy < 0:
        parser.error("--warmup, --memory-runs and --busy must not be negative")
    return args


def cases(args: argparse.Namespace) -> list[tuple[BenchModel, int]]:
    """(model, batch) in the order they are timed."""
    return [(MODELS[name], batch) for name in args.models.split(",")
            for batch in ([int(b) for b in args.batches.split(",")] if args.batches else MODELS[name].batches)]


def export(model: BenchModel, cache: Path) -> dict[str, Path | str]:
    """Each engine's model file, or why it could not be made (pnnx or torch.onnx failed)."""
    files: dict[str, Path | str] = {}
    for engine, make in (("kuiperinfer", pnnx_file), ("onnxruntime", onnx_file)):
        try:
            files[engine] = make(model, cache)
        except Exception as exc:   # reported in the table for this engine; the others still run
            files[engine] = f"export failed: {type(exc).__name__}: {exc}"
    return files


def _paths(files: dict[str, Path | str]) -> tuple[Path | None, Path | None]:
    """The .pnnx.param and the .onnx, None for one whose export failed."""
    return tuple(files[e] if isinstance(files.get(e), Path) else None for e in ("kuiperinfer", "onnxruntime"))


def memory_uses(model: str, batch: int, files: dict[str, Path | str], engines: list[str],
                threads: int | None, runs: int) -> dict[str, dict[str, int | None]]:
    """:func:`~benchmarks.engines.memory_use` per engine, each in a fresh spawned process,
    one after another."""
    context = multiprocessing.get_context("spawn")
    param, onnx_path = (None if path is None else str(path) for path in _paths(files))
    result = {}
    for engine in engines:
        with context.Pool(1) as pool:
            result[engine] = pool.apply(memory_use, (engine, model, batch, param, onnx_path, threads, runs))
    return result


def summary(times_s: list[float]) -> dict[str, Any]:
    """Median, 90th percentile (linear between ranks) and minimum, in milliseconds."""
    ms = [t * 1e3 for t in times_s]
    return {"median_ms": statistics.median(ms), "p90_ms": float(np.percentile(ms, 90)), "min_ms": min(ms),
            "runs_ms": ms}


def bench_case(model: BenchModel, batch: int, files: dict[str, Path | str], args: argparse.Namespace
               ) -> dict[str, Any]:
    """Time one model at one batch in every engine; an engine that fails is reported, not fatal."""
    inputs = model.sample_inputs(batch)
    case: dict[str, Any] = {"model": model.name, "batch": batch,
                            "inputs": {name: [list(x.shape), str(x.dtype)] for name, x in inputs.items()}}
    param, onnx_path = _paths(files)
    processes: dict[str, EngineProcess] = {}
    outputs: dict[str, np.ndarray] = {}
    try:
        for engine in ENGINES:
            if isinstance(files.get(engine), str):   # its export failed
                case[engine] = {"error": files[engine]}
                continue
            processes[engine] = EngineProcess(engine, model.name, param, onnx_path, args.threads, inputs,
                                              args.warmup).start()
        for engine, process in list(processes.items()):
            try:
                outputs[engine] = process.ready()
            except EngineFailed as exc:
                case[engine] = {"error": str(exc)}
                del processes[engine]
        times, settled = time_alternating(processes, args.runs, args.block) if processes else ({}, {})
    finally:
        for process in processes.values():
            process.close()
    memory = memory_uses(model.name, batch, files, list(processes), args.threads, args.memory_runs) \
        if args.memory_runs and processes else {}
    for engine, process in processes.items():
        case[engine] = {**summary(times[engine]), "threads": process.thread_text,
                        "settle_max_s": settled[engine],
                        "loaded_memory_bytes": memory.get(engine, {}).get("loaded"),
                        "peak_memory_added_bytes": memory.get(engine, {}).get("peak_added")}
    for other in ("onnxruntime", "torch"):
        both = all("median_ms" in case[e] for e in ("kuiperinfer", other))
        case[f"ratio_vs_{other}"] = case["kuiperinfer"]["median_ms"] / case[other]["median_ms"] if both else None
    case["max_abs_diff"] = {f"{a}_vs_{b}": _max_diff(outputs[a], outputs[b])
                            for a, b in (("kuiperinfer", "onnxruntime"), ("kuiperinfer", "torch"),
                                         ("onnxruntime", "torch")) if a in outputs and b in outputs}
    return case


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b))) if a.shape == b.shape else float("inf")


def machine() -> dict[str, Any]:
    import onnxruntime
    import torch

    import kuiperinfer
    from kuiperinfer.benchmark import blas_description

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cpus": multiprocessing.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "blas": blas_description(), "kuiperinfer": kuiperinfer.__version__,
            "onnxruntime": onnxruntime.__version__, "torch": torch.__version__}


def mode_text(busy: int) -> str:
    if not busy:
        return "quiet machine (no load started beside the benchmark)"
    return (f"shared machine, {busy} CPU-bound process{'es' if busy != 1 else ''} running beside the timing "
            f"(each single-threaded, in its own session)")


def threads_text(report: dict[str, Any]) -> str:
    """What threads each engine ran on, as the first case that ran it says."""
    pinned = "default threads" if report["threads"] is None else f"pinned to {report['threads']} threads"
    seen = {}
    for case in report["cases"]:
        for engine in ENGINES:
            if "threads" in case[engine]:
                seen.setdefault(engine, case[engine]["threads"])
    return f"Each engine with its {pinned}" + "".join(f"; {e}: {seen[e]}" for e in ENGINES if e in seen)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(report: dict[str, Any]) -> str:
    """The model table (and the kernel rates before it, when measured), with a header saying
    how it was measured and a footnote for every engine that failed."""
    m = report["machine"]
    lines = [f"`{report['command']}` on {m['cpu']} ({m['cpus']} CPUs).", "",
             f"**Mode: {mode_text(report['busy'])}.** {threads_text(report)}. Each engine in its own process, "
             f"loaded once, timed in alternating blocks of {report['block']} runs (order rotating, one engine "
             f"computing at a time), {report['runs']} timed runs each after {report['warmup']} warm-up runs. "
             f"numpy {m['numpy']} ({m['blas']}), onnxruntime {m['onnxruntime']}, torch {m['torch']}.", ""]
    if report["kernels"]:
        lines += ["Kernel rates, measured before the models" + (" and before the busy processes started"
                                                            if report["busy"] else "") + ":", "",
                  kernels.markdown(report["kernels"])]
    columns = [c for e in ENGINES for c in (f"{e} ms median (min)", f"{e} ms p90")]
    lines += ["| model | batch | " + " | ".join(columns) + " | kuiper/ort | kuiper/torch "
              "| MB loaded (kuiper / ort / torch) | peak MB added (kuiper / ort / torch) "
              "| max abs diff kuiper vs (ort / torch) |",
              "|---|---:|" + "---:|" * (len(columns) + 5)]
    notes = []
    for c in report["cases"]:
        cells = [c["model"], str(c["batch"])]
        for engine in ENGINES:
            result = c[engine]
            if "error" in result:
                notes.append(f"{c['model']} batch {c['batch']}, {engine}: {' '.join(result['error'].split())}")
                cells += [f"failed ({len(notes)})", "-"]
            else:
                cells += [f"{result['median_ms']:.1f} ({result['min_ms']:.1f})", f"{result['p90_ms']:.1f}"]
        cells += [_ratio(c["ratio_vs_onnxruntime"]), _ratio(c["ratio_vs_torch"])]
        for key in ("loaded_memory_bytes", "peak_memory_added_bytes"):
            cells.append(" / ".join("-" if c[e].get(key) is None else f"{c[e][key] / MB:.0f}" for e in ENGINES))
        diffs = c["max_abs_diff"]
        cells.append(" / ".join(f"{diffs[k]:.1e}" if k in diffs else "-"
                                for k in ("kuiperinfer_vs_onnxruntime", "kuiperinfer_vs_torch")))
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "Failed (numbered as in the table):", *(f"{i}. {n}" for i, n in enumerate(notes, 1))]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.cache = args.cache or args.out / "cache"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))   # unwinds: busy processes end too
    report: dict[str, Any] = {
        "command": "python -m benchmarks " + shlex.join(sys.argv[1:] if argv is None else argv),
        "threads": args.threads, "busy": args.busy, "runs": args.runs, "block": args.block, "warmup": args.warmup,
        "machine": machine(), "kernels": [], "cases": []}
    todo = cases(args)
    files = {}
    for model in dict.fromkeys(model for model, _ in todo):   # exports first: not timed, not beside busy loops
        print(f"exporting {model.name} ...", file=sys.stderr, flush=True)
        files[model.name] = export(model, args.cache)
    if not args.no_kernels:
        print("kernel rates ...", file=sys.stderr, flush=True)
        results = kernels.measure_all()
        report["kernels"] = [r.to_dict() for r in results]
        print(kernels.markdown(report["kernels"]), file=sys.stderr, flush=True)
    with BusyProcesses(args.busy):
        for model, batch in todo:
            print(f"{model.name} batch {batch} ...", file=sys.stderr, flush=True)
            try:
                report["cases"].append(bench_case(model, batch, files[model.name], args))
            except Exception as exc:   # the case is reported as failed; the others still run
                error = {"error": f"{type(exc).__name__}: {exc}"}
                report["cases"].append({"model": model.name, "batch": batch, "ratio_vs_onnxruntime": None,
                                        "ratio_vs_torch": None, "max_abs_diff": {}, **dict.fromkeys(ENGINES, error)})
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(report)
    (args.out / "latest.md").write_text(table, encoding="utf-8")
    (args.out / "latest.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
