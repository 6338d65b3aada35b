"""Run a model on .npy inputs (or random ones) and print or save the outputs.

Inputs come from .npy files (--input NAME=FILE.npy, NAME being the input's name or
its position 0, 1, ...; a single input may omit NAME=). Inputs not given are random,
of the shape and dtype pnnx recorded, with --batch replacing the first dimension;
--random asks for that explicitly when some inputs come from files. Without --output
each output is printed: its shape, dtype, a summary of its values and the first few
values. With --output they are written to an .npz file, one array per output name.

With --ray it runs as a Ray Data job over the rows of --input: parquet (a file, a folder
of them or a URI) with a column per model input named after it, each row an array of the
input's shape without the batch dimension (nested lists, or Ray's tensor type), or .npy
files for a model with one input (a row per first-dimension entry). --output gets a row
per input row in .parquet or .jsonl: the input's other columns and a column per model
output, named after it.

Examples:
  kuiper run                                    (the bundled model on a random input)
  kuiper run model.pnnx.param --input pnnx_input_0=image.npy --output out.npz
  kuiper run model.pnnx.param --batch 4 --input-seed 1
  kuiper run two_inputs.pnnx.param --input 0=a.npy --random
  kuiper run model.pnnx.param --ray --input rows.parquet --output outputs.parquet
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import kuiperinfer
from kuiperinfer.cli import CommandError
from kuiperinfer.cli._common import (
    add_input_seed_argument,
    add_load_arguments,
    add_model_argument,
    load_model,
    model_path,
    positive_int,
    random_inputs,
)
from kuiperinfer.cli._ray import add_ray_arguments, check_ray_arguments, run_on_ray


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input array; NAME is the input's name, or its position (0, 1, ...); "
                             "with --ray, a file of rows (parquet or .npy, as above)")
    parser.add_argument("--random", action="store_true",
                        help="random values for the inputs not given with --input "
                             "(the default when no --input is given)")
    parser.add_argument("--batch", "--batch-size", type=positive_int, metavar="N",
                        help="batch size of the random inputs (default: the one pnnx recorded); "
                             "with --ray, rows per forward pass (default: 8)")
    add_input_seed_argument(parser)
    parser.add_argument("--output", "-o", metavar="FILE.npz",
                        help="write the outputs to this .npz file instead of printing them "
                             "(with --ray: FILE.parquet or FILE.jsonl)")
    add_load_arguments(parser)
    add_ray_arguments(parser)


def main(args: argparse.Namespace) -> int:
    check_ray_arguments(args)
    if args.ray:
        return run_on_ray(args)
    graph = load_model(model_path(args.model), args)
    inputs = read_inputs(graph, args.input)
    missing = [name for name in graph.input_names if name not in inputs]
    fill_randomly = bool(missing) and (args.random or not inputs)
    if args.batch is not None and not fill_randomly:
        raise CommandError("--batch sets the batch size of random inputs, and no input is random "
                           "here (add --random to fill the inputs not given)")
    if fill_randomly:
        inputs.update(random_inputs(graph, args.batch, args.input_seed, only=missing))
    outputs = graph.run(inputs)
    if args.output:
        with open(args.output, "wb") as f:
            np.savez(f, **dict(zip(graph.output_names, outputs)))
        print(f"wrote {len(outputs)} output(s) to {args.output}: {', '.join(graph.output_names)}")
    else:
        for name, value in zip(graph.output_names, outputs):
            print(describe(name, np.asarray(value)))
    return 0


def read_inputs(graph: kuiperinfer.RuntimeGraph, specs: list[str]) -> dict[str, np.ndarray]:
    """The ``--input`` arrays by input name."""
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            if len(graph.input_names) != 1:
                raise CommandError(f"--input {spec!r}: write NAME=FILE.npy, the model has the inputs "
                                   f"{graph.input_names}")
            name, path = graph.input_names[0], spec
        if name.isdigit() and int(name) < len(graph.input_names):
            name = graph.input_names[int(name)]
        if name not in graph.input_names:
            raise CommandError(f"--input {spec!r}: the model has no input {name!r}; "
                               f"its inputs are {graph.input_names}")
        if not os.path.isfile(path):
            raise CommandError(f"--input {spec!r}: no such file {path!r}")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise CommandError(f"--input {spec!r}: cannot read {path!r} as .npy ({exc})") from exc
    return inputs


def describe(name: str, value: np.ndarray) -> str:
    """Two lines: shape, dtype and value statistics; then the first values."""
    head = f"output {name}: shape {value.shape} dtype {value.dtype}"
    if value.size and value.dtype.kind in "biuf":
        as_float = value.astype(np.float64)
        head += (f"  min {as_float.min():.6g}  max {as_float.max():.6g}  mean {as_float.mean():.6g}"
                 f"  std {as_float.std():.6g}")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            head += f"  non-finite {int(np.size(value) - np.isfinite(value).sum())}"
    first = np.array2string(value.ravel()[:8], precision=5, suppress_small=True, max_line_width=100)
    more = f" ... ({value.size - 8} more)" if value.size > 8 else ""
    return f"{head}\n  values: {first}{more}"
