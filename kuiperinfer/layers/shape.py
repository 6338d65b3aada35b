"""Shape operators: flatten and reshape/view. They return views; no data is copied."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import InferError, InferStatus, ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator


@register_layer("torch.flatten", "Tensor.flatten", "nn.Flatten")
class Flatten(NonParamLayer):
    """Merge dimensions start_dim..end_dim into one."""

    def __init__(self, layer_name: str, start_dim: int, end_dim: int):
        super().__init__(layer_name)
        self.start_dim, self.end_dim = start_dim, end_dim

    @classmethod
    def create(cls, op: RuntimeOperator) -> "Flatten":
        default_start = 1 if op.type == "nn.Flatten" else 0
        return cls(op.name, op.param_int("start_dim", Status.kParameterMissingDim, default=default_start),
                   op.param_int("end_dim", Status.kParameterMissingDim, default=-1))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.ndim == 0:
            return [x.reshape(1)]
        start, end = self.start_dim % x.ndim, self.end_dim % x.ndim
        return [x.reshape(*x.shape[:start], -1, *x.shape[end + 1:])]


@register_layer("Tensor.reshape", "Tensor.view", "torch.reshape")
class Reshape(NonParamLayer):
    """Reshape to a fixed ``shape`` parameter, or to a shape given as inputs at run time.

    When the fixed shape keeps the exported batch size in front (``(1,-1)`` for a
    model exported at batch 1), the batch size follows the actual input instead.
    """

    def __init__(self, layer_name: str, shape: tuple[int, ...] | None, batch_follows: bool):
        super().__init__(layer_name)
        self.shape, self.batch_follows = shape, batch_follows

    @classmethod
    def create(cls, op: RuntimeOperator) -> "Reshape":
        shape = op.param_value("shape")
        if shape is None:
            if len(op.input_operands_seq) < 2:
                raise op.error("missing parameter 'shape'", Status.kParameterMissingShape)
            return cls(op.name, None, False)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        declared = op.input_operands_seq[0].shapes if op.input_operands_seq else []
        batch_follows = bool(declared) and declared[0] > 0 and len(shape) > 1 and shape[0] == declared[0]
        return cls(op.name, shape, batch_follows)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if self.shape is None:
            rest = inputs[1:]
            shape = tuple(rest[0]) if len(rest) == 1 and np.ndim(rest[0]) == 1 else tuple(rest)
            shape = tuple(int(d) for d in shape)
        elif self.batch_follows and x.ndim > 0:
            shape = (x.shape[0],) + self.shape[1:]
        else:
            shape = self.shape
        try:
            return [x.reshape(shape)]
        except ValueError:
            raise InferError(f"cannot reshape input of shape {x.shape} to {shape}",
                             status=InferStatus.kInferFailedOutputSizeError) from None
