"""Time every operator of a model and show where the time goes.

The model runs --warmup-runs times untimed, then --runs times on random inputs of the
declared shapes (--batch replaces the first dimension). Each operator's own wall time
(its layer's forward, not the engine's bookkeeping around it) is added up over the
runs. The table lists the operators, slowest first, with the milliseconds per run
(the mean), the median of one call (robust to the odd slow call on a busy machine) and
the share of the time spent in operators; then the same by operator type. --trace
writes the last run as a Chrome/Perfetto trace: open it at https://ui.perfetto.dev or
in chrome://tracing to see every operator on a time line.

Examples:
  kuiper profile                                  (the bundled model)
  kuiper profile resnet18.pnnx.param --batch 8 --runs 20 --warmup-runs 3
  kuiper profile model.pnnx.param --trace trace.json --top 0
"""

from __future__ import annotations

import argparse

from kuiperinfer.cli._common import (
    add_json_argument,
    add_progress_argument,
    add_timing_arguments,
    load_model,
    model_path,
    non_negative_int,
    print_result,
    progress_bar,
    table,
    timing_header,
    timing_inputs,
)
from kuiperinfer.inspect import shape_text
from kuiperinfer.profiler import ProfileReport, ProfilingGraph, profile, write_chrome_trace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_timing_arguments(parser, runs=10, warmup_runs=2)
    parser.add_argument("--trace", metavar="FILE.json",
                        help="write the last run as a Chrome/Perfetto trace (Trace Event Format)")
    parser.add_argument("--top", type=non_negative_int, default=20, metavar="K",
                        help="operators to list, slowest first; 0 for all (default: 20)")
    add_json_argument(parser, "the times")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    path = model_path(args.model)
    graph = load_model(path, args, graph_class=ProfilingGraph)
    inputs = timing_inputs(graph, args)
    with progress_bar(args, "profiling", "runs") as bar:
        result = profile(graph, inputs, args.runs, args.warmup_runs, bar)
    if args.trace:
        write_chrome_trace(graph.runs[-1], args.trace, process_name=path.name)
    batch = inputs[0].shape[0] if inputs and inputs[0].ndim else 1
    lines = [timing_header(path.name, batch, result.runs, args.warmup_runs), report(result, args.top)]
    if args.trace:
        lines.append(f"wrote one run as a trace to {args.trace} (open it at https://ui.perfetto.dev)")
    print_result(args, {"model": str(path), "batch": batch, "warmup_runs": args.warmup_runs, **result.to_dict()},
                 "\n".join(lines))
    return 0


def report(result: ProfileReport, top: int) -> str:
    """The time line, the operator table (``top`` rows, 0 for all) and the table by type."""
    per_run = 1e3 / result.runs
    inside = result.operator_s
    wall = result.wall_s * per_run
    threads = f", added up over {result.threads} threads" if result.threads > 1 else ""
    lines = [f"{wall:.3f} ms per run, {inside * per_run:.3f} ms "
             f"({100 * inside / result.wall_s:.1f}%) inside operators{threads}", ""]
    shown = result.operators if top == 0 else result.operators[:top]
    rows = [(str(rank), op.name, op.type, " ".join(_shape(s) for s in op.output_shapes),
             f"{op.total_s * per_run:.3f}", f"{op.median_s * 1e3:.3f}", _share(op.total_s, inside))
            for rank, op in enumerate(shown, 1)]
    lines.append(table(("#", "operator", "type", "output", "ms/run", "median", "share"), rows,
                       right=(0, 4, 5, 6)))
    if len(shown) < len(result.operators):
        rest = result.operators[len(shown):]
        lines.append(f"... {len(rest)} more operators, {_share(sum(op.total_s for op in rest), inside)} "
                     f"of the time (--top 0 lists all)")
    rows = [(t.type, str(t.operators), f"{t.total_s * per_run:.3f}", _share(t.total_s, inside))
            for t in result.types]
    lines += ["", table(("type", "operators", "ms/run", "share"), rows, right=(1, 2, 3))]
    return "\n".join(lines)


def _share(seconds: float, total: float) -> str:
    return f"{100 * seconds / total:.1f}%" if total > 0 else "-"


def _shape(shape: object) -> str:
    """A run-time shape (a tuple), or the type name the profiler noted for a non-array value."""
    return shape_text(shape) if isinstance(shape, tuple) else str(shape)
