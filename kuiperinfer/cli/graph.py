"""Draw a model as a graph: SVG, PNG or PDF through Graphviz, or the DOT text itself.

Operators are boxes labelled with their type, name and output shape, coloured by
family (convolution, matrix product, normalisation, activation, pooling and
resampling, shape and data movement, expressions); inputs and outputs are dark ovals;
each edge is an operand labelled with its shape. Only the .pnnx.param is read, so
models with unsupported operators can be drawn too. The format follows the file
name; rendering needs Graphviz's dot program (apt-get install graphviz), writing
.dot does not. Without -o the DOT text is printed.

Examples:
  kuiper graph resnet18.pnnx.param -o resnet18.svg
  kuiper graph -o demo.png                       (the bundled model)
  kuiper graph model.pnnx.param > model.dot
"""

from __future__ import annotations

import argparse

from kuiperinfer.cli._common import add_model_argument, model_path
from kuiperinfer.visualize import output_format, render, to_dot


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--output", "-o", metavar="FILE",
                        help="the picture to write: .svg, .png, .pdf (rendered by Graphviz) or "
                             ".dot/.gv (DOT text); default: print the DOT text")


def main(args: argparse.Namespace) -> int:
    path = model_path(args.model)
    if args.output:
        output_format(args.output)   # an unknown format fails before any work
    source = to_dot(path)
    if args.output:
        render(source, args.output)
        print(f"wrote {args.output}")
    else:
        print(source, end="")
    return 0
