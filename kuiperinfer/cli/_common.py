"""What the sub-commands share: the model argument, option types, random inputs, tables."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import kuiperinfer
from kuiperinfer.cli import CommandError
from kuiperinfer.cli._progress import ProgressBar
from kuiperinfer.inspect import shape_text
from kuiperinfer.kernels.matrix.precision import PRECISIONS
from kuiperinfer.models import default_model_path
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.runtime.graph import RuntimeGraph

# -- arguments -----------------------------------------------------------------------

def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", metavar="MODEL",
                        help="the model's .pnnx.param, with its .pnnx.bin beside it "
                             "(default: the bundled model)")


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load options a command that runs a model takes: precision, calibration, threads."""
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="what the products of convolutions and linear layers compute: fp32 (the "
                             "default); bf16, their inputs rounded to bfloat16; int8, with --calibration")
    parser.add_argument("--calibration", metavar="TABLE",
                        help="the calibration table of --precision int8 (made by kuiper quantize)")
    parser.add_argument("--threads", type=positive_int, metavar="T",
                        help="threads a run uses, the caller's included (default: one per CPU this process "
                             "may use): a batch is cut into a chunk per thread, a single sample shares its "
                             "large operators among them; BLAS runs on one thread in a run")


def load_options(args: argparse.Namespace) -> dict[str, Any]:
    """The load options of ``add_load_arguments``, for :func:`kuiperinfer.load`."""
    return {"precision": args.precision, "calibration": args.calibration, "threads": args.threads}


def load_model(path: Path, args: argparse.Namespace, **options: Any) -> RuntimeGraph:
    """``kuiperinfer.load`` with the command's load options (and ``options``), saying on
    stderr how this machine computes a reduced precision."""
    graph = kuiperinfer.load(path, **load_options(args), **options)
    tell_precision(graph)
    return graph


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, dest: str, **kwargs: Any) -> None:
    """``old``, an earlier spelling of the option ``new``: accepted, with a warning on stderr."""

    class Alias(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            print(f"kuiper: {old} is deprecated: use {new}", file=sys.stderr)
            setattr(namespace, self.dest, values)

    parser.add_argument(old, dest=dest, action=Alias, help=argparse.SUPPRESS, **kwargs)


def add_input_seed_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-seed", type=int, default=0, metavar="S",
                        help="seed of the random inputs (default: 0)")
    add_deprecated_alias(parser, "--seed", "--input-seed", "input_seed", type=int)


def tell_precision(graph: RuntimeGraph) -> None:
    """A line on stderr saying how this machine computes a reduced precision."""
    if graph.precision.name != "fp32":
        print(f"precision {graph.precision.name}: {graph.precision.products}", file=sys.stderr)


def add_timing_arguments(parser: argparse.ArgumentParser, runs: int, warmup_runs: int) -> None:
    """The arguments of commands that time a model on random inputs: the model, load options,
    batch, runs, warm-up runs, input seed."""
    add_model_argument(parser)
    add_load_arguments(parser)
    parser.add_argument("--batch", type=positive_int, metavar="N",
                        help="batch size of the random inputs (default: the one pnnx recorded)")
    parser.add_argument("--runs", type=positive_int, default=runs, metavar="R",
                        help=f"timed runs (default: {runs})")
    parser.add_argument("--warmup-runs", type=non_negative_int, default=warmup_runs, metavar="W",
                        help=f"untimed runs before them (default: {warmup_runs}), after the one loading makes")
    add_deprecated_alias(parser, "--warmup", "--warmup-runs", "warmup_runs", type=non_negative_int)
    add_input_seed_argument(parser)


def add_json_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def model_path(value: str | None) -> Path:
    """The MODEL argument, or the bundled model; CommandError when the file does not exist."""
    path = Path(value) if value else default_model_path()
    if not path.is_file():
        raise CommandError(f"no such model file: {path}")
    return path


def positive_int(text: str) -> int:
    """argparse type: a whole number from 1 up."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: a whole number from 0 up."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: when stderr is a terminal)")


def progress_bar(args: argparse.Namespace, label: str,
                 unit: str) -> contextlib.AbstractContextManager[ProgressBar | None]:
    """A ProgressBar when ``--progress`` asks for one (or stderr is a terminal), else None."""
    show = sys.stderr.isatty() if args.progress is None else args.progress
    return ProgressBar(label, unit) if show else contextlib.nullcontext()


def print_result(args: argparse.Namespace, data: Any, text: str) -> None:
    """``data`` as JSON with ``--json``, else ``text``."""
    print(json.dumps(data, indent=2) if args.json else text)


# -- inputs --------------------------------------------------------------------------

def random_inputs(graph: RuntimeGraph, batch: int | None = None, seed: int = 0,
                  only: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Random values of the declared shape and dtype for the inputs (those named in ``only``).

    ``batch`` replaces the first dimension. Floats are standard normal; integers 0 or 1
    (valid as indices into any table); booleans either.
    """
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for name, shape, operand in zip(graph.input_names, graph.input_shapes, graph.graph_input_operands()):
        if only is not None and name not in only:
            continue
        if not shape or any(d < 0 for d in shape[1:]):
            raise CommandError(f"input {name!r} has no fixed shape {shape_text(shape)}: give it with "
                               f"--input {name}=FILE.npy")
        shape = (batch or max(shape[0], 1),) + tuple(shape[1:])
        dtype = numpy_dtype(operand.type) or np.dtype(np.float32)
        if dtype.kind == "f":
            arrays[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            arrays[name] = rng.random(shape) < 0.5
        else:
            arrays[name] = rng.integers(0, 2, shape).astype(dtype)
    return arrays


def timing_inputs(graph: RuntimeGraph, args: argparse.Namespace) -> list[np.ndarray]:
    """The random inputs the commands that time a model run on (``--batch``, ``--input-seed``)."""
    return list(random_inputs(graph, args.batch, args.input_seed).values())


# -- text ----------------------------------------------------------------------------

def timing_header(name: str, batch: int, runs: int, warmup: int) -> str:
    """The first line of what a command that times a model prints."""
    return f"{name}: batch {batch}, {runs} timed runs after {warmup} warm-up runs"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """Columns two spaces apart; the columns listed in ``right`` aligned right."""
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [str(cell).rjust(width) if i in right else str(cell).ljust(width)
                 for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def si(value: float) -> str:
    """A count with a metric prefix: ``950``, ``12.3K``, ``1.82G``."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{prefix}"
    return f"{value:.3g}"


def size_text(nbytes: float) -> str:
    """Bytes in binary units: ``512 B``, ``11.8 KiB``, ``44.6 MiB``."""
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"
