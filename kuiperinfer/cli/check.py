"""Check that kuiperinfer can run a model, and say what is in the way if it cannot.

Every operator's layer is created as loading the model would, without stopping at the
first failure. The report lists every operator type that has no layer (with the
closest registered types, often a spelling pnnx writes differently) and every
operator whose parameters or weights its layer does not support, with the reason.
Nothing is run.

Exit code: 0 when the model will run, 1 when it will not, 2 when the files are missing
or malformed.

Examples:
  kuiper check resnet18.pnnx.param
  kuiper check model.pnnx.param --json
"""

from __future__ import annotations

import argparse

from kuiperinfer.cli._common import add_json_argument, add_model_argument, model_path, print_result
from kuiperinfer.inspect import SupportReport, check_support


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_json_argument(parser, "the report")


def main(args: argparse.Namespace) -> int:
    report = check_support(model_path(args.model))
    print_result(args, report.to_dict(), text(report))
    return 0 if report.runnable else 1


def text(report: SupportReport) -> str:
    """The report for people: a verdict line, then what blocks the model."""
    if report.runnable:
        return f"{report.path}: all {report.operators} operators are supported; the model will run."
    lines = [f"{report.path}: {report.failing_operators} of {report.operators} operators cannot be "
             f"built; the model will not run."]
    if report.unsupported_types:
        lines += ["", "operator types with no layer:"]
        for unsupported in report.unsupported_types:
            names = unsupported.operators
            shown = ", ".join(names[:5]) + (f", ... ({len(names) - 5} more)" if len(names) > 5 else "")
            lines.append(f"  {unsupported.type}: {len(names)} operator{'s' if len(names) > 1 else ''} "
                         f"({shown})")
            if unsupported.suggestions:
                lines.append(f"    closest registered types: {', '.join(unsupported.suggestions)}")
    if report.problems:
        lines += ["", "operators whose parameters or weights are not supported:"]
        for problem in report.problems:
            where = f", line {problem.line}" if problem.line else ""
            status = f" [{problem.status}]" if problem.status else ""
            lines.append(f"  {problem.name} ({problem.type}{where}): {problem.reason}{status}")
    return "\n".join(lines)
