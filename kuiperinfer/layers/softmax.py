"""Softmax along one dimension, computed stably (subtracting the maximum)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted, out=shifted)
    e /= e.sum(axis=axis, keepdims=True)
    return e


@register_layer("nn.Softmax", "F.softmax", "torch.softmax", "Tensor.softmax")
class Softmax(NonParamLayer):
    def __init__(self, layer_name: str, dim: int):
        super().__init__(layer_name)
        self.dim = dim

    @classmethod
    def create(cls, op: RuntimeOperator) -> "Softmax":
        return cls(op.name, op.param_int("dim", Status.kParameterMissingDim))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [softmax(inputs[0], self.dim)]
