"""``python -m benchmarks.onnxruntime_profile MODEL``: onnxruntime's time per node.

The counterpart of ``kuiper profile`` for the benchmark's other engine, to compare the two
operator by operator: it loads the model's ONNX export (from the benchmark's cache, made
if missing) into onnxruntime on ``--threads`` threads, idle threads sleeping, profiling on, runs
it, and prints each node's median kernel time over the timed runs, largest first, then
the total per operator type. onnxruntime's node names differ from pnnx's; the output
shapes say which layer is which.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.engines import onnx_file, onnxruntime_session
from benchmarks.models import MODELS


@dataclass(frozen=True)
class NodeTime:
    """One node's median kernel time over the timed runs."""

    name: str
    op_type: str
    output_shape: tuple[int, ...]
    median_ms: float


def node_times(events: Iterable[dict[str, Any]], runs: int) -> list[NodeTime]:
    """The median time of each node over its last ``runs`` kernel events (onnxruntime's
    profile also holds the warm-up runs before them), largest first."""
    durations: dict[tuple[str, str, tuple[int, ...]], list[float]] = defaultdict(list)
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        args = event.get("args", {})
        outputs = args.get("output_type_shape") or [{}]
        shape = tuple(next(iter(outputs[0].values()), ()))
        key = (event["name"][:-len("_kernel_time")], args.get("op_name", "?"), shape)
        durations[key].append(event["dur"] / 1e3)
    nodes = [NodeTime(name, op_type, shape, statistics.median(times[-runs:]))
             for (name, op_type, shape), times in durations.items()]
    return sorted(nodes, key=lambda node: node.median_ms, reverse=True)


def report(nodes: list[NodeTime], top: int) -> str:
    """The table ``kuiper profile`` prints, for onnxruntime's nodes."""
    total = sum(node.median_ms for node in nodes) or 1.0
    lines = [f"{total:.3f} ms per run in nodes (sum of medians)", "",
             f"{'#':>3}  {'node':<48} {'type':<14} {'output':<18} {'median':>8}  share"]
    shown = nodes if top <= 0 else nodes[:top]
    for rank, node in enumerate(shown, 1):
        shape = "(" + ",".join(map(str, node.output_shape)) + ")"
        lines.append(f"{rank:>3}  {node.name[:48]:<48} {node.op_type:<14} {shape:<18} "
                     f"{node.median_ms:>8.3f}  {node.median_ms / total:6.1%}")
    if len(shown) < len(nodes):
        rest = nodes[len(shown):]
        noun = "node" if len(rest) == 1 else "nodes"
        lines.append(f"... {len(rest)} more {noun}, {sum(n.median_ms for n in rest) / total:.1%} of the time")
    by_type: dict[str, list[float]] = defaultdict(list)
    for node in nodes:
        by_type[node.op_type].append(node.median_ms)
    lines += ["", f"{'type':<20} {'nodes':>6} {'ms/run':>8}  share"]
    for op_type, times in sorted(by_type.items(), key=lambda item: -sum(item[1])):
        lines.append(f"{op_type:<20} {len(times):>6} {sum(times):>8.3f}  {sum(times) / total:6.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.onnxruntime_profile",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=list(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=30, help="nodes to list (0: all)")
    parser.add_argument("--cache", type=Path, default=Path("bench-results/cache"))
    args = parser.parse_args(argv)
    if args.batch < 1 or args.threads < 1 or args.runs < 1:
        parser.error("--batch, --threads and --runs must be positive")
    model = MODELS[args.model]
    session = onnxruntime_session(onnx_file(model, args.cache), args.threads, profile=True)
    inputs = model.sample_inputs(args.batch)
    for _ in range(args.runs + 3):
        session.run(None, inputs)
    profile = Path(session.end_profiling())
    try:
        events = json.loads(profile.read_text())
    finally:
        profile.unlink()
    print(f"{args.model} in onnxruntime: batch {args.batch}, {args.threads} threads, {args.runs} timed runs "
          f"after 3 warm-up runs")
    print(report(node_times(events, args.runs), args.top))


if __name__ == "__main__":
    main()
