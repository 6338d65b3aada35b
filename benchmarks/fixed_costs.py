"""``python -m benchmarks.fixed_costs``: what kuiperinfer spends around the arithmetic.

A run of a model costs its kernels plus a fixed cost per run (binding and checking the
inputs, entering the thread pool) and per operator (the run loop, the layer's Python before
and after its kernel). Both are measured on models whose arithmetic is negligible: chains of
:data:`LENGTH` operators of one kind on a (1, 8, 8, 8) input (512 values), each timed as the
calling thread's CPU time per run (:func:`benchmarks.kernels.best_seconds`), loaded with one
thread; the cost per operator is the chain's time per run over its length. Another
process's load shows in wall time, much less in this one's CPU time.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.kernels import Operator, best_seconds, conv_operator, model

SHAPE = (1, 8, 8, 8)
LENGTH = 40
"""Operators in a chain."""


def chain(kind: str, length: int = LENGTH) -> list[Operator]:
    """``length`` operators of ``kind``, each reading the one before."""
    ops: list[Operator] = []
    source = "x"
    for i in range(length):
        name = f"op{i}"
        if kind == "add":
            ops.append((name, "pnnx.Expression", "expr=add(@0,@1)", [source, source], SHAPE, {}))
        elif kind in ("conv1x1", "conv3x3"):
            ops.append(conv_operator(name, source, SHAPE[1], SHAPE[1], SHAPE[2], 1 if kind == "conv1x1" else 3))
        else:
            ops.append((name, kind, "", [source], SHAPE, {}))
        source = name
    return ops


CASES: dict[str, Callable[[], list[Operator]]] = {
    "one ReLU (the cost of a run)": lambda: chain("nn.ReLU", 1),
    "nn.ReLU": lambda: chain("nn.ReLU"),
    "nn.Hardswish": lambda: chain("nn.Hardswish"),
    "nn.Sigmoid": lambda: chain("nn.Sigmoid"),
    "pnnx.Expression add(@0,@1)": lambda: chain("add"),
    "nn.Conv2d 1x1, 8 channels": lambda: chain("conv1x1"),
    "nn.Conv2d 3x3, 8 channels": lambda: chain("conv3x3"),
}


def measure(rounds: int = 7) -> list[dict[str, Any]]:
    """Each case's CPU time per run and per operator, in microseconds."""
    rows = []
    for name, make in CASES.items():
        ops = make()
        seconds = best_seconds(model(SHAPE, ops), rounds)
        rows.append({"case": name, "operators": len(ops), "us_per_run": seconds * 1e6,
                     "us_per_operator": seconds * 1e6 / len(ops)})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| chain on (1, 8, 8, 8), one thread | operators | µs per run | µs per operator |", "|---|---:|---:|---:|"]
    lines += [f"| {r['case']} | {r['operators']} | {r['us_per_run']:.1f} | {r['us_per_operator']:.2f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fixed_costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds per case, the best counts (default 7)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    np.random.seed(0)
    rows = measure(args.rounds)
    print(json.dumps(rows, indent=2) if args.json else markdown(rows), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
