"""Draw a model as a graph: Graphviz DOT text written here, rendered by the ``dot`` program.

Operators are boxes (type in bold, name, the formula of an expression, output
shape), coloured by family (convolution, matrix products, normalisation, activation,
pooling and resampling, shape and data movement, expressions); the model's inputs and
outputs are dark ovals. Each operand is an edge from its producer to each consumer, labelled with the
shape pnnx recorded. The layout runs top to bottom. Only the ``.pnnx.param`` is
read, so models with unsupported operators can be drawn too.

    source = to_dot("resnet18.pnnx.param")
    render(source, "resnet18.svg")          # needs Graphviz: apt-get install graphviz
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from kuiperinfer.errors import KuiperError
from kuiperinfer.inspect import shape_text
from kuiperinfer.pnnx.ir import INPUT_TYPE, OUTPUT_TYPE, Graph, Operator
from kuiperinfer.pnnx.param_file import parameter_text, read_param

RENDERED_FORMATS = ("svg", "png", "pdf")
"""Formats that need the ``dot`` program; ``.dot`` and ``.gv`` files are written directly."""
PNG_DPI = 150
"""Resolution of PNG pictures (Graphviz's default of 96 blurs the small shape labels)."""
DOT_SUFFIXES = (".dot", ".gv")
INSTALL_HINT = "install Graphviz (apt-get install graphviz, brew install graphviz) or write a .dot file"

FAMILIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # family, fill colour, keys (first match wins): a key of one or two letters must be a whole
    # word of the lower-cased type (``torch.mm``), a longer one may be part of a word (``maxpool2d``)
    ("convolution", "#cfe2ff", ("conv",)),
    ("matrix product", "#e2d9f3", ("linear", "matmul", "mm", "bmm", "mv", "addmm", "baddbmm",
                                   "einsum", "attention", "embedding")),
    ("normalisation", "#d1f0d8", ("norm",)),
    ("pooling and resampling", "#cff4fc", ("pool", "upsample", "interpolate", "pixel", "pad")),
    ("activation", "#fff3cd", ("relu", "sigmoid", "tanh", "gelu", "silu", "swish", "mish", "elu",
                               "softmax", "softmin", "softplus", "softsign", "glu",
                               "shrink", "threshold", "logsigmoid")),
    ("expression", "#f8d7e3", ("expression",)),
    ("shape and data movement", "#e9ecef", ("reshape", "view", "permute", "transpose", "flatten", "cat",
                                            "concat", "stack", "split", "chunk", "slice", "select",
                                            "squeeze", "expand", "repeat", "tile", "flip", "roll",
                                            "unbind", "construct", "unpack", "attribute", "to", "t")),
)
EXPRESSION_TYPE = "pnnx.Expression"
EXPRESSION_WIDTH = 40
"""An expression's formula is shown up to this many characters."""
DEFAULT_FILL = "#ffffff"
TERMINAL_FILL = "#343a40"
"""Fill of the model's inputs and outputs (white text)."""


class GraphvizError(KuiperError):
    """Rendering with Graphviz failed, or Graphviz is not installed."""


def family_of(op_type: str) -> tuple[str, str]:
    """(family name, fill colour) of an operator type, from the words of its name."""
    words = _words(op_type)
    for family, fill, keys in FAMILIES:
        if any(key in words or (len(key) > 2 and any(key in w for w in words)) for key in keys):
            return family, fill
    return "other", DEFAULT_FILL


def _words(op_type: str) -> list[str]:
    """``nn.ConvTranspose2d`` -> ``['nn', 'convtranspose2d']``; ``F.max_pool2d`` -> [..., 'max', 'pool2d']."""
    return op_type.lower().replace("::", ".").replace("_", ".").split(".")


def to_dot(model: str | os.PathLike | Graph, title: str | None = None) -> str:
    """The DOT text of a model (a .pnnx.param path or a PNNX graph)."""
    graph = model if isinstance(model, Graph) else read_param(model)
    if title is None:
        title = Path(graph.param_path).name if graph.param_path else "model"
    ids = {id(op): f"op{i}" for i, op in enumerate(graph.ops)}
    lines = [
        "digraph model {",
        f"  graph [rankdir=TB, nodesep=0.25, ranksep=0.35, fontname=Helvetica, fontsize=14, "
        f"labelloc=t, label={_quote(title)}];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10, '
        'margin="0.10,0.07", height=0.3, penwidth=0.8, fillcolor="#ffffff"];',
        '  edge [fontname=Helvetica, fontsize=8, color="#6c757d", fontcolor="#495057", arrowsize=0.6];',
    ]
    for op in graph.ops:
        lines.append(f"  {ids[id(op)]} [{_node_attributes(op)}];")
    for operand in graph.operands:
        if operand.producer is None:
            continue
        label = f" [label={_quote(' ' + shape_text(operand.shape))}]" if operand.shape else ""
        for consumer in operand.consumers:
            lines.append(f"  {ids[id(operand.producer)]} -> {ids[id(consumer)]}{label};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_attributes(op: Operator) -> str:
    shapes = ", ".join(shape_text(o.shape) for o in op.outputs if o.shape)
    if op.type in (INPUT_TYPE, OUTPUT_TYPE):
        kind = "input" if op.type == INPUT_TYPE else "output"
        shown = shapes or ", ".join(shape_text(o.shape) for o in op.inputs if o.shape)
        label = _html_label(f"{kind} {op.name}", [shown] if shown else [])
        return (f"label={label}, shape=oval, fillcolor={_quote(TERMINAL_FILL)}, "
                f'fontcolor="#ffffff", style=filled')
    _, fill = family_of(op.type)
    details = [op.name]
    if op.type == EXPRESSION_TYPE and "expr" in op.params:
        details.append(_shortened(parameter_text(op.params["expr"]), EXPRESSION_WIDTH))
    label = _html_label(op.type, details + ([shapes] if shapes else []))
    return f"label={label}, fillcolor={_quote(fill)}, tooltip={_quote(f'{op.type} {op.name}')}"


def _html_label(title: str, rest: Sequence[str]) -> str:
    """A Graphviz HTML label: ``title`` in bold, then ``rest`` a line each in a smaller font."""
    lines = [f"<b>{html.escape(title)}</b>"] + [f'<font point-size="9">{html.escape(line)}</font>'
                                                 for line in rest]
    return "<" + "<br/>".join(lines) + ">"


def _shortened(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def output_format(path: str | os.PathLike) -> str:
    """``dot`` for .dot/.gv, else the rendered format the suffix names (GraphvizError if none)."""
    suffix = Path(path).suffix.lower()
    if suffix in DOT_SUFFIXES:
        return "dot"
    if suffix[1:] in RENDERED_FORMATS:
        return suffix[1:]
    known = ", ".join([*DOT_SUFFIXES, *(f".{f}" for f in RENDERED_FORMATS)])
    raise GraphvizError(f"cannot tell the format of {os.fspath(path)!r}: use one of {known}")


def render(dot_source: str, path: str | os.PathLike, timeout: float = 120.0) -> None:
    """Write ``dot_source`` to ``path``: as text for .dot/.gv, else rendered by Graphviz's ``dot``."""
    fmt = output_format(path)
    if fmt == "dot":
        Path(path).write_text(dot_source, encoding="utf-8")
        return
    program = shutil.which("dot")
    if program is None:
        raise GraphvizError(f"rendering {fmt.upper()} needs Graphviz's dot program, which is not "
                            f"installed: {INSTALL_HINT}")
    command = [program, f"-T{fmt}", "-o", os.fspath(path)]
    if fmt == "png":
        command.append(f"-Gdpi={PNG_DPI}")
    try:
        result = subprocess.run(command, input=dot_source.encode(), capture_output=True, timeout=timeout,
                                check=False)
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"dot did not finish rendering {os.fspath(path)!r} "
                            f"within {timeout:g} s") from None
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip() or f"exit code {result.returncode}"
        raise GraphvizError(f"dot failed: {message}")
