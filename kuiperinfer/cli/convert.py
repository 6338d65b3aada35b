"""Convert an ONNX or TorchScript model to a .pnnx.param/.pnnx.bin pair with pnnx.

Runs the pnnx converter (pip install --no-deps pnnx) and writes MODEL_NAME.pnnx.param and
MODEL_NAME.pnnx.bin into the output directory (default: beside the model), then
reports the inputs pnnx recorded (static, or dynamic where dimensions stay open),
the operators, and whether kuiperinfer will run them (kuiper check's answer).

Give one --input-shape per model input, in the model's input order. An ONNX file
needs them only for dimensions it leaves open other than the batch (the first), and
its own element types are used; for TorchScript, pnnx uses the example inputs that
torch.jit.trace saved when no shape is given, and a type may follow a shape
(1,77:i64). A --dynamic-shape per input keeps the dimensions in which it differs
from --input-shape open, so that the converted model takes any size there.

Exit code: 0 when the model was converted and will run, 1 when it was converted but
kuiperinfer refuses some of its operators, 2 when it could not be converted.

Examples:
  kuiper convert model.onnx
  kuiper convert det.onnx --input-shape 1,3,640,640 --dynamic-shape 1,3,320,480 -o models/
  kuiper convert traced.pt --input-shape 1,3,224,224
  kuiper convert bert.pt --input-shape 1,128:i64 --input-shape 1,128:i64 --json
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

from kuiperinfer.cli import CommandError
from kuiperinfer.cli._common import add_json_argument, print_result
from kuiperinfer.cli.check import text as check_text
from kuiperinfer.convert import (
    CONVERTIBLE_SUFFIXES,
    Conversion,
    convert,
    parse_input_shape,
)
from kuiperinfer.inspect import (
    ModelSummary,
    SupportReport,
    check_support,
    shape_text,
    summarize,
)
from kuiperinfer.pnnx.ir import INPUT_TYPE, OUTPUT_TYPE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help=f"the model to convert ({', '.join(CONVERTIBLE_SUFFIXES)})")
    parser.add_argument("--input-shape", action="append", type=_shape, metavar="SHAPE",
                        help="an input's shape, sizes separated by commas (1,3,224,224), optionally "
                             "with a type (1,77:i64); once per input, in order")
    parser.add_argument("--dynamic-shape", action="append", type=_shape, metavar="SHAPE",
                        help="a second shape per input: dimensions where it differs from "
                             "--input-shape stay dynamic")
    parser.add_argument("-o", "--output-dir", type=Path, metavar="DIR",
                        help="where to write the .pnnx.param/.pnnx.bin (default: beside the model)")
    add_json_argument(parser, "the report")


def _shape(text: str) -> tuple[tuple[int, ...], str | None]:
    try:
        return parse_input_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(args: argparse.Namespace) -> int:
    model = Path(args.model)
    if not model.is_file():
        raise CommandError(f"no such model file: {model}")
    shapes = [shape for shape, _ in args.input_shape] if args.input_shape else None
    types = [t for _, t in args.input_shape] if args.input_shape else None
    dynamic = [shape for shape, _ in args.dynamic_shape] if args.dynamic_shape else None
    conversion = convert(model, args.output_dir, input_shapes=shapes, dynamic_shapes=dynamic,
                         input_types=types if types and any(types) else None)
    summary = summarize(conversion.param_path)
    support = check_support(conversion.param_path)
    print_result(args, report_data(conversion, summary, support), text(conversion, summary, support))
    return 0 if support.runnable else 1


def _operator_counts(summary: ModelSummary) -> dict[str, int]:
    """Operators per type, most frequent first, without the graph's inputs and outputs."""
    return {t: n for t, n in summary.type_counts.items() if t not in (INPUT_TYPE, OUTPUT_TYPE)}


def report_data(conversion: Conversion, summary: ModelSummary, support: SupportReport) -> dict[str, Any]:
    """Plain data about a conversion for JSON: files, inputs, operators by type, the check."""
    sources = conversion.source_input_names or (None,) * len(conversion.input_names)
    return {
        "source": str(conversion.source),
        "param": str(conversion.param_path),
        "bin": str(conversion.bin_path),
        "pnnx_version": conversion.pnnx_version,
        "dynamic": conversion.dynamic,
        "inputs": [{"name": name, "source_name": source, "shape": list(shape)}
                   for name, source, shape in zip(conversion.input_names, sources,
                                                  conversion.input_shapes)],
        "operator_types": _operator_counts(summary),
        "check": support.to_dict(),
    }


def text(conversion: Conversion, summary: ModelSummary, support: SupportReport) -> str:
    """The report for people: files, inputs, static or dynamic, operators, the check's verdict."""
    lines = [f"converted {conversion.source} with pnnx {conversion.pnnx_version}:",
             f"  {conversion.param_path}", f"  {conversion.bin_path}", ""]
    sources = conversion.source_input_names or ("",) * len(conversion.input_names)
    for name, source, shape in zip(conversion.input_names, sources, conversion.input_shapes):
        called = f" (ONNX input {source!r})" if source else ""
        lines.append(f"input {name}{called}: {shape_text(shape)}")
    if conversion.dynamic:
        lines.append("dynamic: the dimensions shown as ? take any size, and so does the batch")
    else:
        lines.append("static: only the batch (the first dimension) may differ from these shapes")
    counts = _operator_counts(summary)
    listed = ", ".join(f"{n} {t}" for t, n in counts.items())
    lines += ["", textwrap.fill(f"operators: {sum(counts.values())} ({listed})", width=100,
                                subsequent_indent="  ", break_on_hyphens=False), "",
              check_text(support)]
    return "\n".join(lines)
