"""Diagonals and cross products: ``torch.diag`` and ``torch.cross``.

``torch.diag`` goes both ways: a vector becomes a square matrix with the vector on one
of its diagonals, a matrix gives one of its diagonals as a vector; ``diagonal`` picks
which (0 the main one, positive above it, negative below). ``torch.cross`` is the 3-D
vector product along a dimension of size 3. (The matrix products are in ``linalg.py``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer, keeps_batch
from kuiperinfer.pnnx.param_file import DEFAULT_MAX_TENSOR_BYTES
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


@register_layer("torch.diag")
class Diag(NonParamLayer):
    """``torch.diag(x, diagonal)``: vector -> matrix, or matrix -> vector."""

    def __init__(self, layer_name: str, diagonal: int):
        super().__init__(layer_name)
        self.diagonal = diagonal

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Diag:
        return cls(op.name, op.param_int("diagonal", Status.kParameterInvalidValue, default=0))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.ndim == 1:
            side = x.shape[0] + abs(self.diagonal)
            if side * side * x.itemsize > DEFAULT_MAX_TENSOR_BYTES:
                raise InferError(f"diag: a {side}x{side} matrix would be too large",
                                 status=InferStatus.kInferFailedOutputSizeError)
            return [np.diag(x, self.diagonal)]
        if x.ndim == 2:
            return [np.diagonal(x, self.diagonal).copy()]
        raise InferError(f"diag takes a vector or a matrix, got shape {x.shape}",
                         status=InferStatus.kInferFailedDimensionParameterError)


@register_layer("torch.cross", "aten::linalg_cross")
class Cross(NonParamLayer):
    """``torch.cross(input, other, dim)``: the vector product of the 3-vectors along ``dim``
    (the inputs broadcast). Without ``dim`` (None), the first dimension of size 3, as
    PyTorch's deprecated default. ``torch.linalg.cross``, which pnnx leaves as
    ``aten::linalg_cross(input, other, dim)`` with the dim made by a ``pnnx.Expression``, is
    the same product."""

    def __init__(self, layer_name: str, other: int, dim: int | None, dim_input: int | None = None):
        super().__init__(layer_name)
        self.other, self.dim, self.dim_input = other, dim, dim_input

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Cross:
        if op.type == "aten::linalg_cross":
            if len(op.input_operands_seq) != 3:
                raise op.error(f"aten::linalg_cross takes 3 inputs (input, other, dim), got "
                               f"{len(op.input_operands_seq)}", Status.kParameterInvalidValue)
            return cls(op.name, 1, None, dim_input=2)
        other = op.input_index("other", 1)
        if other is None or other >= len(op.input_operands_seq):
            raise op.error("missing input 'other'", Status.kParameterMissingUnknown)
        dim = None if op.param_value("dim") is None else op.param_int("dim", Status.kParameterMissingDim)
        layer = cls(op.name, other, dim)
        layer.batch_independent = dim is not None and keeps_batch(op, dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        a, b = inputs[0], inputs[self.other]
        shape = np.broadcast_shapes(np.shape(a), np.shape(b)) if np.ndim(a) == np.ndim(b) else None
        dim = self.dim if self.dim_input is None else int(np.asarray(inputs[self.dim_input]).reshape(-1)[0])
        if shape is None:
            raise InferError(f"cross: inputs of shapes {np.shape(a)} and {np.shape(b)} do not broadcast",
                             status=InferStatus.kInferFailedOutputSizeError)
        if dim is None:
            dim = next((d for d, n in enumerate(shape) if n == 3), None)
        if dim is None or not -len(shape) <= dim < len(shape) or shape[dim] != 3:
            raise InferError(f"cross: dimension {dim} of shape {shape} must have size 3",
                             status=InferStatus.kInferFailedDimensionParameterError)
        return [np.cross(a, b, axis=dim)]
