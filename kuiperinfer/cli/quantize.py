"""Calibrate a model for int8: write its calibration table and measure int8 against fp32.

The model runs in float32 over the calibration inputs (images through its preprocessing,
or the rows of .npy/.npz arrays for other models); the range of the input of every
convolution and linear layer is recorded and chosen by --method, and the table is written
(default: MODEL.table in the current folder). Load it with
`--precision int8 --calibration TABLE` on any command that runs a model, or
`kuiperinfer.load(..., precision="int8", calibration=TABLE)`. With --evaluate, int8 runs
beside fp32 on held-out inputs: top-1/top-5 agreement for classifiers, the largest output
error otherwise, and with --report each quantized operator's error, to choose those to
leave in fp32 (--keep-fp32).

Examples:
  kuiper quantize --calibrate photos/ --evaluate held_out/
  kuiper quantize yolo.pnnx.param --calibrate frames/ --method entropy -o yolo.table
  kuiper quantize encoder.pnnx.param --calibrate tokens.npz --evaluate test.npz --report
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kuiperinfer.cli._common import (
    add_json_argument,
    add_model_argument,
    add_progress_argument,
    model_path,
    positive_int,
    print_result,
    progress_bar,
    table,
)
from kuiperinfer.quantization import METHODS, Quantized, quantize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--calibrate", nargs="+", required=True, metavar="IMAGES|FILE.npz",
                        help="calibration inputs: image files and folders, or one .npy/.npz")
    parser.add_argument("--method", choices=METHODS, default="percentile",
                        help="how a range is chosen from what was seen (default: percentile)")
    parser.add_argument("--samples", type=positive_int, default=100, metavar="N",
                        help="calibration inputs used, at most (default: 100)")
    parser.add_argument("--evaluate", nargs="+", metavar="IMAGES|FILE.npz",
                        help="held-out inputs to measure int8 against fp32 on")
    parser.add_argument("--report", action="store_true", help="with --evaluate: each quantized operator's error")
    parser.add_argument("--keep-fp32", nargs="+", default=[], metavar="OPERATOR",
                        help="operators to leave in float32 (names as --report lists them)")
    parser.add_argument("--output", "-o", metavar="TABLE", help="the table to write (default: MODEL.table here)")
    add_json_argument(parser, "the table's summary and the agreement")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    path = model_path(args.model)
    output = Path(args.output or path.name.removesuffix(".param").removesuffix(".pnnx") + ".table")
    with progress_bar(args, "calibrating", "samples") as bar:
        result = quantize(args.model and path, args.calibrate, method=args.method, samples=args.samples,
                          output=output, evaluate_on=args.evaluate, keep_fp32=args.keep_fp32,
                          report=args.report, progress=bar)
    print_result(args, _data(result), _text(result))
    return 0


def _data(result: Quantized) -> dict:
    data = {"table": str(result.path), "method": result.table.method, "samples": result.table.samples,
            "int8_operators": len(result.table.ranges), "fp32_operators": sorted(result.table.fp32)}
    if result.agreement is not None:
        a = result.agreement
        data["agreement"] = {"samples": a.samples, "top1": a.top1, "top5": a.top5,
                             "relative_error": a.relative_error, "operators": a.operators}
    return data


def _text(result: Quantized) -> str:
    t = result.table
    lines = [f"wrote {result.path}: {len(t.ranges)} operator(s) in int8, {len(t.fp32)} kept in fp32, "
             f"ranges by {t.method} over {t.samples} sample(s)"]
    if result.agreement is not None:
        lines.append(result.agreement.describe())
        if result.agreement.operators:
            worst = sorted(result.agreement.operators.items(), key=lambda item: -item[1])
            lines.append(table(("operator", "output error (rms)"), [(name, f"{error:.2e}") for name, error in worst],
                               right=(1,)))
    return "\n".join(lines)
