"""A model's summary read from its ``.pnnx.param`` alone: shapes, weights and compute.

Nothing is built or run, so the summary also works on models whose operators
kuiperinfer cannot run yet, and without the ``.pnnx.bin``. Shapes are the ones pnnx
recorded at export (batch usually 1). Compute is estimated for the operators that
dominate it, convolutions, linear layers and matrix products, from those shapes:

* MACs, multiply-accumulates: every output element of a convolution costs
  ``in_channels / groups * kernel`` of them, of a linear layer or matrix product the
  length of the reduced dimension; every input element of a transposed convolution
  reaches ``out_channels / groups * kernel`` outputs. A deformable convolution
  (``torchvision.ops.DeformConv2d``) counts as a convolution; its bilinear sampling is not counted.
* FLOPs = 2 * MACs plus one addition per output element for a bias (and for the
  added matrix of ``addmm``/``baddbmm``). For these operators that is what pnnx counts
  in the ``FLOPS`` it prints after an export; pnnx's total also counts elementwise
  operators and pooling.
* Recurrent layers (RNN, GRU, LSTM) multiply each time step's input and state by their
  weight matrices: every element of a ``weight_*`` attribute costs one MAC per time step
  and sequence (over all layers and directions), every element of a ``bias_*`` one
  addition. pnnx also counts the gates' elementwise operations.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kuiperinfer.pnnx import ir
from kuiperinfer.pnnx.ir import Graph, Operator
from kuiperinfer.pnnx.param_file import read_param

Shape = tuple[int, ...]

CONV_TYPES = frozenset({"nn.Conv1d", "nn.Conv2d", "nn.Conv3d", "F.conv1d", "F.conv2d", "F.conv3d",
                        "torchvision.ops.DeformConv2d"})
CONV_TRANSPOSE_TYPES = frozenset({"nn.ConvTranspose1d", "nn.ConvTranspose2d", "nn.ConvTranspose3d",
                                  "F.conv_transpose1d", "F.conv_transpose2d", "F.conv_transpose3d"})
LINEAR_TYPES = frozenset({"nn.Linear", "F.linear"})
MATMUL_REDUCED_INPUT = {"torch.matmul": 0, "torch.mm": 0, "torch.bmm": 0, "torch.mv": 0,
                        "torch.addmm": 1, "torch.baddbmm": 1}
"""Matrix products: which input's last dimension is summed over."""
ADDED_MATRIX_TYPES = frozenset({"torch.addmm", "torch.baddbmm"})
RECURRENT_TYPES = frozenset({"nn.RNN", "nn.GRU", "nn.LSTM"})


@dataclass(frozen=True)
class OperatorSummary:
    """One operator: what pnnx recorded about it and its estimated cost."""

    name: str
    type: str
    line: int
    """Line of the .param file."""
    input_shapes: tuple[Shape, ...]
    """Shapes of the input operands (``()`` where pnnx recorded none, -1 for unknown dims)."""
    output_shapes: tuple[Shape, ...]
    parameters: int
    """Elements in the operator's weight attributes."""
    weight_bytes: int
    macs: int | None
    """Multiply-accumulates; None when not estimated (other operators, unknown dims)."""
    flops: int | None


@dataclass(frozen=True)
class ModelSummary:
    """Every operator of a model and the totals."""

    path: str
    operators: tuple[OperatorSummary, ...]

    @property
    def type_counts(self) -> dict[str, int]:
        """Operators per type, most frequent first (ties by name)."""
        counts = Counter(op.type for op in self.operators)
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    @property
    def parameters(self) -> int:
        return sum(op.parameters for op in self.operators)

    @property
    def weight_bytes(self) -> int:
        return sum(op.weight_bytes for op in self.operators)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the operators whose cost is estimated."""
        return sum(op.macs or 0 for op in self.operators)

    @property
    def flops(self) -> int:
        return sum(op.flops or 0 for op in self.operators)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON: the operators and the totals."""
        return {"model": self.path, "operators": [asdict(op) for op in self.operators],
                "totals": {"operators": len(self.operators), "types": self.type_counts,
                           "parameters": self.parameters, "weight_bytes": self.weight_bytes,
                           "macs": self.macs, "flops": self.flops}}


def shape_text(shape: Sequence[int]) -> str:
    """A declared shape as pnnx writes it (:func:`kuiperinfer.pnnx.ir.shape_text`), ``-`` for none."""
    return ir.shape_text(shape) if shape else "-"


def summarize(model: str | os.PathLike | Graph) -> ModelSummary:
    """Summarise a .pnnx.param file (or a PNNX graph already read)."""
    graph = model if isinstance(model, Graph) else read_param(model)
    return ModelSummary(graph.param_path or "<graph>",
                        tuple(_summarize_operator(op) for op in graph.ops))


def _summarize_operator(op: Operator) -> OperatorSummary:
    macs, adds = _cost(op)
    return OperatorSummary(
        name=op.name, type=op.type, line=op.line,
        input_shapes=tuple(tuple(o.shape) for o in op.inputs),
        output_shapes=tuple(tuple(o.shape) for o in op.outputs),
        parameters=sum(a.elemcount() for a in op.attrs.values()),
        weight_bytes=sum(a.nbytes() for a in op.attrs.values()),
        macs=macs, flops=None if macs is None else 2 * macs + adds)


def _cost(op: Operator) -> tuple[int | None, int]:
    """(MACs, additions outside them); (None, 0) for operators whose cost is not estimated."""
    if not op.outputs:
        return None, 0
    if op.type in CONV_TYPES or op.type in CONV_TRANSPOSE_TYPES:
        return _conv_cost(op, transposed=op.type in CONV_TRANSPOSE_TYPES)
    if op.type in LINEAR_TYPES or op.type in MATMUL_REDUCED_INPUT:
        return _matmul_cost(op)
    if op.type in RECURRENT_TYPES:
        return _recurrent_cost(op)
    return None, 0


def _conv_cost(op: Operator, transposed: bool) -> tuple[int | None, int]:
    outputs = _numel(op.outputs[0].shape)
    weight = _weight_shape(op, "weight", 1)
    # a convolution's MACs run over its outputs, a transposed one's over its inputs
    driving = _numel(op.inputs[0].shape) if transposed else outputs
    per_element = _numel(weight[1:]) if weight else None
    macs = driving * per_element if driving is not None and per_element is not None else None
    bias_adds = outputs if outputs is not None and _weight_shape(op, "bias", 2) else 0
    return macs, bias_adds


def _matmul_cost(op: Operator) -> tuple[int | None, int]:
    outputs = _numel(op.outputs[0].shape)
    index = MATMUL_REDUCED_INPUT.get(op.type, 0)
    reduced = op.inputs[index].shape if index < len(op.inputs) else []
    k = reduced[-1] if reduced and reduced[-1] >= 0 else None
    macs = outputs * k if outputs is not None and k is not None else None
    added = op.type in ADDED_MATRIX_TYPES or bool(_weight_shape(op, "bias", 2))
    return macs, outputs if added and outputs is not None else 0


def _recurrent_cost(op: Operator) -> tuple[int | None, int]:
    shape = op.inputs[0].shape if op.inputs else []
    # time steps times sequences: (L, N, features), (N, L, features) or one (L, features)
    steps = _numel(shape[:-1]) if len(shape) in (2, 3) else None
    if steps is None:
        return None, 0
    weights = sum(a.elemcount() for key, a in op.attrs.items() if key.startswith("weight_"))
    biases = sum(a.elemcount() for key, a in op.attrs.items() if key.startswith("bias_"))
    return steps * weights, steps * biases


def _weight_shape(op: Operator, key: str, position: int) -> list[int]:
    """Shape of a weight: the attribute ``@key`` (nn.*) or the input ``$key`` (F.*, at ``position``)."""
    if key in op.attrs:
        return op.attrs[key].shape
    operand = op.named_input(key)
    if operand is None and not any(op.inputnames) and position < len(op.inputs):
        operand = op.inputs[position]
    return operand.shape if operand is not None else []


def _numel(shape: Sequence[int]) -> int | None:
    """Elements of a recorded shape; None when unknown (no shape, or a ``?`` dimension)."""
    if not shape or any(d < 0 for d in shape):
        return None
    return math.prod(shape)
