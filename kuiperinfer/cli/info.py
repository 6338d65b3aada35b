"""Show a model's operators with their shapes, parameters and estimated compute.

Only the .pnnx.param is read: nothing is built or run, so this also works for models
with operators kuiperinfer cannot run yet, and without the .pnnx.bin. The table lists
every operator with the input and output shapes pnnx recorded at export, its number
of weights and, for convolutions, linear layers and matrix products, its
multiply-accumulates (MACs). Below it come the totals: operators by type, weights,
and MACs and FLOPs (2 per MAC, plus bias additions) at the recorded input shapes.

Examples:
  kuiper info                                 (the bundled model)
  kuiper info resnet18.pnnx.param
  kuiper info model.pnnx.param --json > summary.json
"""

from __future__ import annotations

import argparse
import textwrap

from kuiperinfer.cli._common import (
    add_json_argument,
    add_model_argument,
    model_path,
    print_result,
    si,
    size_text,
    table,
)
from kuiperinfer.inspect import ModelSummary, shape_text, summarize
from kuiperinfer.pnnx.ir import INPUT_TYPE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_json_argument(parser, "the summary")


def main(args: argparse.Namespace) -> int:
    summary = summarize(model_path(args.model))
    print_result(args, summary.to_dict(), report(summary))
    return 0


def report(summary: ModelSummary) -> str:
    """The operator table and the totals."""
    rows = [(op.name, op.type, _shapes(op.input_shapes), _shapes(op.output_shapes),
             f"{op.parameters:,}" if op.parameters else "", si(op.macs) if op.macs is not None else "")
            for op in summary.operators]
    lines = [table(("operator", "type", "inputs", "outputs", "params", "MACs"), rows, right=(4, 5)), ""]
    counts = ", ".join(f"{n} {t}" for t, n in summary.type_counts.items())
    lines.append(textwrap.fill(f"operators:  {len(summary.operators)} ({counts})", width=100,
                               subsequent_indent=" " * 12, break_on_hyphens=False))
    lines.append(f"parameters: {summary.parameters:,} ({size_text(summary.weight_bytes)} of weights)")
    inputs = " ".join(shape_text(op.output_shapes[0]) for op in summary.operators
                      if op.type == INPUT_TYPE and op.output_shapes)
    lines.append(f"compute:    {si(summary.macs)} MACs, {si(summary.flops)} FLOPs "
                 f"(convolution, linear, matmul and recurrent operators, at the input shapes {inputs or '-'})")
    return "\n".join(lines)


def _shapes(shapes: tuple[tuple[int, ...], ...]) -> str:
    return " ".join(shape_text(s) for s in shapes)
