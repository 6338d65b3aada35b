"""Run a model on .npy inputs (or random ones) and print or save the outputs.

Examples:
  kuiper run model.pnnx.param --input pnnx_input_0=image.npy --output out.npz
  kuiper run model.pnnx.param --random --batch 4
  kuiper run                      (the bundled model on a random input)
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import kuiperinfer
from kuiperinfer.cli import CommandError
from kuiperinfer.models import default_model_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="the .pnnx.param file (default: the bundled model)")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input array; NAME is the input's name, or its position (0, 1, ...)")
    parser.add_argument("--random", action="store_true",
                        help="feed random inputs of the declared shapes (the default without --input)")
    parser.add_argument("--batch", type=int, default=None, help="batch size of random inputs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--output", "-o", help="write the outputs to this .npz file")


def main(args: argparse.Namespace) -> int:
    graph = kuiperinfer.load(args.model or default_model_path())
    inputs = _read_inputs(graph, args.input) if args.input and not args.random else \
        _random_inputs(graph, args.batch, args.seed)
    outputs = graph.run(inputs) if isinstance(inputs, dict) else graph.run(*inputs)
    if args.output:
        np.savez(args.output, **dict(zip(graph.output_names, outputs)))
        print(f"wrote {len(outputs)} output(s) to {args.output}")
    else:
        np.set_printoptions(precision=5, suppress=True, threshold=40, edgeitems=4)
        for name, value in zip(graph.output_names, outputs):
            value = np.asarray(value)
            print(f"output {name}: shape {value.shape} dtype {value.dtype}")
            print(value)
    return 0


def _read_inputs(graph: kuiperinfer.RuntimeGraph, specs: list[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            if len(specs) != 1:
                raise CommandError(f"--input {spec!r}: write NAME=FILE.npy when the model has several inputs")
            name, path = graph.input_names[0], spec
        if name.isdigit() and int(name) < len(graph.input_names):
            name = graph.input_names[int(name)]
        if not os.path.isfile(path):
            raise CommandError(f"--input {spec!r}: no such file {path!r}")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise CommandError(f"--input {spec!r}: cannot read {path!r} as .npy ({exc})") from exc
    return inputs


def _random_inputs(graph: kuiperinfer.RuntimeGraph, batch: int | None, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for name, shape in zip(graph.input_names, graph.input_shapes):
        if any(d == -1 for d in shape[1:]):
            raise CommandError(f"input {name!r} has unknown dimensions {shape}; give it with --input")
        shape = ((batch or max(shape[0], 1)),) + tuple(shape[1:]) if shape else ()
        arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays
