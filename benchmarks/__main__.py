"""``python -m benchmarks``: time kuiperinfer, onnxruntime, OpenVINO and PyTorch eager as users run them.

First the kernel rates (:mod:`benchmarks.kernels`), so that a slower kernel shows on its own.
Then, for each model and batch: export (cached), start each engine in each of its precisions
(kuiperinfer's from ``--precisions``; OpenVINO, when installed, in fp32 and in its own
default; onnxruntime and OpenVINO in int8 too when ``--precisions`` holds it) in its own
spawned process with its default settings (``--threads`` pins them all to one count
instead), and time them in alternating blocks, one engine computing at a time
(:mod:`benchmarks.alternate`). Each row's error is its largest distance from PyTorch fp32's
output on the same inputs, relative to that output's largest magnitude. The memory each
engine adds to its process, by loading the model and at its peak while inferring, is
measured in a fresh spawned process per engine and precision (in a process that already
ran the model the allocator would keep what the runs freed and hide the peak).
kuiperinfer's loading ends with a warm-up run on zeros when the model declares its input
shapes (a dynamic batch taken as 1, as for the transformers), so what its first inference
would allocate then counts as loaded; compare the sum of the two columns.

The int8 rows are calibrated on the same inputs, made once per run before the timing
(:mod:`benchmarks.int8`): kuiperinfer loads its calibration table, onnxruntime the model its
own static quantization wrote, which OpenVINO reads too. ``--precisions fp32,bf16`` leaves
them, and the calibration, out.

For the trained classifier, each engine and precision then runs once over the bundled photos
and variants of them (:mod:`benchmarks.agreement`): its top-1 agreement with fp32.

``--busy N`` times the same table on a shared machine: N single-threaded CPU-bound
processes (:mod:`benchmarks.busy`) run beside it for the whole of the models' timing.

Writes ``latest.md`` (the tables) and ``latest.json`` (everything) into ``--out``.
"""

from __future__ import annotations

import argparse
import importlib
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

from benchmarks import agreement, int8, kernels
from benchmarks.alternate import Row, start_all, time_alternating
from benchmarks.busy import BusyProcesses
from benchmarks.engines import (
    ENGINE_MODULES,
    ENGINES,
    PRECISIONS,
    memory_use,
    missing,
    model_files,
    precision_label,
    row_paths,
)
from benchmarks.models import MODELS, BenchModel

MB = 1 << 20
BASELINE: Row = ("onnxruntime", "fp32")
REFERENCE: Row = ("torch", "fp32")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, from {', '.join(MODELS)} (default: all)")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help=f"comma-separated, from {', '.join(ENGINES)} (default: all)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS["kuiperinfer"]),
                        help=f"kuiperinfer's, comma-separated; int8 also runs onnxruntime's and OpenVINO's "
                             f"(default: {','.join(PRECISIONS['kuiperinfer'])})")
    parser.add_argument("--batches", default="",
                        help="comma-separated batch sizes (default: each model's own, 1 and 8 or 1)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per engine (default 20)")
    parser.add_argument("--block", type=int, default=5,
                        help="runs an engine makes before the next one takes over (default 5)")
    parser.add_argument("--warmup-runs", type=int, default=2, help="untimed runs per engine after loading (default 2)")
    parser.add_argument("--threads", type=int, default=None,
                        help="pin every engine to this many threads (default: each engine's own default)")
    parser.add_argument("--busy", type=int, default=0,
                        help="CPU-bound processes running beside the timing, each in its own session (default 0)")
    parser.add_argument("--memory-runs", type=int, default=2,
                        help="inferences per memory probe; 0 skips the memory probes (default 2)")
    parser.add_argument("--no-kernels", action="store_true", help="skip the kernel rates")
    parser.add_argument("--no-agreement", action="store_true", help="skip the classifiers' top-1 agreement on photos")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="output folder")
    parser.add_argument("--cache", type=Path, default=None,
                        help="exported models (default: OUT/cache)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    from kuiperinfer.kernels.matrix.precision import PRECISIONS as KUIPER_PRECISIONS

    if not set(args.engines.split(",")) <= set(ENGINES):
        parser.error(f"--engines: choose from {', '.join(ENGINES)}")
    if not set(args.precisions.split(",")) <= set(KUIPER_PRECISIONS):
        parser.error(f"--precisions: choose from {', '.join(KUIPER_PRECISIONS)}")
    if args.runs < 1 or args.block < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--runs, --block and --threads must be positive")
    if args.warmup_runs < 0 or args.memory_runs < 0 or args.busy < 0:
        parser.error("--warmup-runs, --memory-runs and --busy must not be negative")
    return args


def cases(args: argparse.Namespace) -> list[tuple[BenchModel, int]]:
    """(model, batch) in the order they are timed."""
    return [(MODELS[name], batch) for name in args.models.split(",")
            for batch in ([int(b) for b in args.batches.split(",")] if args.batches else MODELS[name].batches)]


def engine_rows(args: argparse.Namespace) -> tuple[list[Row], list[str]]:
    """The (engine, precision) rows to run, and a note for each chosen engine whose library
    cannot be imported here (it is left out)."""
    rows, skipped = [], []
    chosen = args.precisions.split(",")
    for engine in args.engines.split(","):
        why = missing(engine)
        if why:
            skipped.append(f"{engine} not run: {why} (pip install {ENGINE_MODULES[engine]})")
        else:
            rows += [(engine, p) for p in (chosen if engine == "kuiperinfer" else PRECISIONS[engine])
                     if p != "int8" or "int8" in chosen]
    return rows, skipped


def memory_uses(model: str, batch: int, files: dict[str, Path | str], rows: list[Row],
                threads: int | None, runs: int) -> dict[Row, dict[str, int | None]]:
    """:func:`~benchmarks.engines.memory_use` per row (each one that started, so its files
    exist), each in a fresh spawned process, one after another."""
    context = multiprocessing.get_context("spawn")
    result = {}
    for engine, precision in rows:
        param, onnx_path, calibration = (path and str(path) for path in row_paths(files, engine, precision))
        with context.Pool(1) as pool:
            result[engine, precision] = pool.apply(memory_use, (engine, precision, model, batch, param, onnx_path,
                                                                threads, runs, calibration))
    return result


def summary(times_s: list[float]) -> dict[str, Any]:
    """Median, 90th percentile (linear between ranks) and minimum, in milliseconds."""
    ms = [t * 1e3 for t in times_s]
    return {"median_ms": statistics.median(ms), "p90_ms": float(np.percentile(ms, 90)), "min_ms": min(ms),
            "runs_ms": ms}


def bench_case(model: BenchModel, batch: int, files: dict[str, Path | str], rows: list[Row],
               args: argparse.Namespace) -> dict[str, Any]:
    """Time one model at one batch in every row; a row that fails is reported, not fatal."""
    inputs = model.sample_inputs(batch)
    processes, failed = start_all(rows, model.name, files, args.threads, inputs, args.warmup_runs)
    try:
        times, settled = time_alternating(processes, args.runs, args.block) if processes else ({}, {})
    finally:
        for process in processes.values():
            process.close()
    memory = memory_uses(model.name, batch, files, list(processes), args.threads, args.memory_runs) \
        if args.memory_runs and processes else {}
    reference = processes[REFERENCE].output if REFERENCE in processes else None
    baseline = statistics.median(times[BASELINE]) if BASELINE in times else None
    results = []
    for row in rows:
        result: dict[str, Any] = {"engine": row[0], "precision": row[1]}
        if row in failed:
            result["failed"] = failed[row]
        else:
            process = processes[row]
            result.update({"computes": process.computes, **summary(times[row]), "threads": process.thread_text,
                           "settle_max_s": settled[row],
                           "loaded_memory_bytes": memory.get(row, {}).get("loaded"),
                           "peak_memory_added_bytes": memory.get(row, {}).get("peak_added"),
                           "ratio_vs_onnxruntime": baseline and statistics.median(times[row]) / baseline,
                           "error_vs_torch": None if reference is None else relative_error(process.output, reference)})
        results.append(result)
    return {"model": model.name, "batch": batch,
            "inputs": {name: [list(x.shape), str(x.dtype)] for name, x in inputs.items()}, "rows": results}


def relative_error(output: np.ndarray, reference: np.ndarray) -> float:
    """max |output - reference| / max |reference| (absolute when the reference is all zeros,
    infinite when the shapes differ)."""
    if output.shape != reference.shape:
        return float("inf")
    scale = float(np.max(np.abs(reference))) or 1.0
    return float(np.max(np.abs(output.astype(np.float64) - reference))) / scale


def machine() -> dict[str, Any]:
    import kuiperinfer
    from kuiperinfer.benchmark import blas_description
    from kuiperinfer.kernels.matrix.precision import precision

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = {engine: importlib.import_module(ENGINE_MODULES[engine]).__version__.split("-")[0]
                for engine in ENGINES if engine != "kuiperinfer" and not missing(engine)}
    return {"cpu": cpu, "cpus": multiprocessing.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "blas": blas_description(), "kuiperinfer": kuiperinfer.__version__,
            "kuiperinfer_bf16": precision("bf16").products, "kuiperinfer_int8": precision("int8").products,
            **versions}


def mode_text(busy: int) -> str:
    if not busy:
        return "quiet machine (no load started beside the benchmark)"
    return (f"shared machine, {busy} CPU-bound process{'es' if busy != 1 else ''} running beside the timing "
            f"(each single-threaded, in its own session)")


def threads_text(report: dict[str, Any]) -> str:
    """What threads each engine ran on, as the first row that ran it says."""
    pinned = "default threads" if report["threads"] is None else f"pinned to {report['threads']} threads"
    seen: dict[str, str] = {}
    for case in report["cases"]:
        for row in case["rows"]:
            if "threads" in row:
                seen.setdefault(row["engine"], row["threads"])
    return f"Each engine with its {pinned}" + "".join(f"; {e}: {t}" for e, t in seen.items())


def _cell(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def calibration_text(calibration: dict[str, str]) -> str:
    """What the int8 rows were calibrated on (``calibration``: the inputs by model)."""
    models: dict[str, list[str]] = {}
    for model, inputs in calibration.items():
        models.setdefault(inputs, []).append(model)
    sources = "; ".join(f"for {', '.join(names)}, {inputs}" for inputs, names in models.items())
    return (f"Every engine's int8 is calibrated on the same inputs: {sources}. kuiperinfer's table by {int8.METHOD}; "
            f"onnxruntime's quantize_static model (QDQ, uint8 activations, int8 weights per channel, MinMax ranges), "
            f"which OpenVINO runs too.")


def markdown(report: dict[str, Any]) -> str:
    """The model table (and the kernel rates before it, when measured; the photos' top-1
    agreement after it), with a header saying how it was measured, a note for every engine
    left out and a footnote for every row that failed."""
    m = report["machine"]
    versions = ", ".join(f"{e} {m[e]}" for e in ENGINES if e in m and e != "kuiperinfer")
    lines = [f"`{report['command']}` on {m['cpu']} ({m['cpus']} CPUs).", "",
             f"**Mode: {mode_text(report['busy'])}.** {threads_text(report)}. Each engine and precision in its own "
             f"process, loaded once, timed in alternating blocks of {report['block']} runs (order rotating, one "
             f"engine computing at a time), {report['runs']} timed runs each after {report['warmup_runs']} "
             f"warm-up runs. "
             f"numpy {m['numpy']} ({m['blas']}), {versions}.", ""]
    ran = {(row["engine"], row["precision"]) for case in report["cases"] for row in case["rows"]}
    precisions = [f"kuiperinfer's {p} here: {m[f'kuiperinfer_{p}']}." for p in ("bf16", "int8")
                  if ("kuiperinfer", p) in ran]
    if ("openvino", "default") in ran:
        precisions.append("OpenVINO's default precision is its own choice (bf16 on a CPU with AMX), in brackets.")
    if report["calibration"]:
        precisions.append(calibration_text(report["calibration"]))
    lines += [" ".join([*precisions, "The error is max |output - torch fp32| / max |torch fp32| on the timed "
                                     "inputs."]), ""]
    lines += [f"Skipped: {note}." for note in report["skipped"]] + ([""] if report["skipped"] else [])
    if report["kernels"]:
        lines += ["Kernel rates, measured before the models" + (" and before the busy processes started"
                                                            if report["busy"] else "") + ":", "",
                  kernels.markdown(report["kernels"])]
    lines += ["| model | batch | engine | precision | ms median (min) | ms p90 | / ort fp32 | MB loaded "
              "| peak MB added | error vs torch fp32 |",
              "|---|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for c in report["cases"]:
        for row in c["rows"]:
            cells = [c["model"], str(c["batch"]), row["engine"], precision_label(row)]
            if "failed" in row:
                notes.append(f"{c['model']} batch {c['batch']}, {row['engine']} {row['precision']}: "
                             f"{' '.join(row['failed'].split())}")
                cells += [f"failed ({len(notes)})", *["-"] * 5]
            else:
                cells += [f"{row['median_ms']:.1f} ({row['min_ms']:.1f})", f"{row['p90_ms']:.1f}",
                          _cell(row["ratio_vs_onnxruntime"], ".2f")]
                cells += [_cell(row[key] and row[key] / MB, ".0f")
                          for key in ("loaded_memory_bytes", "peak_memory_added_bytes")]
                cells.append(_cell(row["error_vs_torch"], ".1e"))
            lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "Failed (numbered as in the table):", *(f"{i}. {n}" for i, n in enumerate(notes, 1))]
    if report["agreement"]:
        lines += ["", agreement.markdown(report["agreement"])]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.cache = args.cache or args.out / "cache"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))   # unwinds: busy processes end too
    rows, skipped = engine_rows(args)
    report: dict[str, Any] = {
        "command": "python -m benchmarks " + shlex.join(sys.argv[1:] if argv is None else argv),
        "threads": args.threads, "busy": args.busy, "runs": args.runs, "block": args.block,
        "warmup_runs": args.warmup_runs,
        "machine": machine(), "skipped": skipped, "calibration": {}, "kernels": [], "cases": [], "agreement": []}
    todo = cases(args)
    models = list(dict.fromkeys(model for model, _ in todo))
    files = {}
    quantized = {engine for engine, precision in rows if precision == "int8"}
    for model in models:   # exports and calibration first: not timed, not beside busy loops
        print(f"exporting {model.name} ...", file=sys.stderr, flush=True)
        files[model.name] = model_files(model, args.cache)
        if quantized:
            print(f"calibrating {model.name} for int8 ...", file=sys.stderr, flush=True)
            files[model.name].update(int8.int8_files(model, files[model.name], args.cache, quantized))
            report["calibration"][model.name] = int8.describe(model)
    if not args.no_kernels:
        print("kernel rates ...", file=sys.stderr, flush=True)
        results = kernels.measure_all()
        report["kernels"] = [r.to_dict() for r in results]
        print(kernels.markdown(report["kernels"]), file=sys.stderr, flush=True)
    with BusyProcesses(args.busy):
        for model, batch in todo:
            print(f"{model.name} batch {batch} ...", file=sys.stderr, flush=True)
            try:
                report["cases"].append(bench_case(model, batch, files[model.name], rows, args))
            except Exception as exc:   # the case is reported as failed; the others still run
                report["cases"].append({"model": model.name, "batch": batch, "rows": [
                    {"engine": e, "precision": p, "failed": f"{type(exc).__name__}: {exc}"} for e, p in rows]})
    for model in [] if args.no_agreement else [m for m in models if m.photo_preprocess]:
        print(f"{model.name} top-1 agreement on photos ...", file=sys.stderr, flush=True)
        report["agreement"].append(agreement.agreement(model, files[model.name], rows, args.threads))
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(report)
    (args.out / "latest.md").write_text(table, encoding="utf-8")
    (args.out / "latest.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
