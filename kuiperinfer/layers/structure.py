"""Structural operators: constants (pnnx.Attribute) and TorchScript tuples/lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer, declared_rank
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.runtime.batching import Batch, sequence_flow
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


@register_layer("pnnx.Attribute")
class Constant(NonParamLayer):
    """A constant tensor stored in the model (its ``@data`` attribute), decoded once."""

    def __init__(self, layer_name: str, value: np.ndarray):
        super().__init__(layer_name)
        value.setflags(write=False)
        self.value = value

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Constant:
        if len(op.attribute) != 1:
            raise op.error(f"expected one attribute, found {sorted(op.attribute)}", Status.kAttrMissingWeight)
        (key, attribute), = op.attribute.items()
        dtype = numpy_dtype(attribute.type)
        if dtype is None or np.dtype(dtype).kind == "f":
            dtype = np.float32
        return cls(op.name, op.weight(key, dtype=dtype))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [self.value]


@register_layer("prim::TupleConstruct")
class TupleConstruct(NonParamLayer):
    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> TupleConstruct:
        return cls(op.name)

    def batch_flow(self, inputs: Sequence[Batch]) -> Batch | None:
        """A tuple of batched values is batched; one with a shared item would repeat it per chunk."""
        return sequence_flow(inputs)

    def forward(self, inputs: Sequence[Any]) -> list[tuple]:
        return [tuple(inputs)]


@register_layer("prim::ListConstruct")
class ListConstruct(NonParamLayer):
    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ListConstruct:
        return cls(op.name)

    def batch_flow(self, inputs: Sequence[Batch]) -> Batch | None:
        """A list of batched values is batched; one with a shared item would repeat it per chunk."""
        return sequence_flow(inputs)

    def forward(self, inputs: Sequence[Any]) -> list[list]:
        return [list(inputs)]


@register_layer("prim::TupleUnpack", "prim::ListUnpack")
class TupleUnpack(NonParamLayer):
    """A tuple's items, or a tensor's slices along dimension 0."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> TupleUnpack:
        layer = cls(op.name)
        # pnnx records shapes of tensors only: a tuple's items keep their samples apart, a
        # tensor is taken apart along the batch
        layer.batch_independent = declared_rank(op) == 0
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        return list(inputs[0])
