"""Elementwise activations: each a pure function of one array, made once per operator."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator

class ActivationLayer(NonParamLayer):
    """Applies ``function`` to its single input. Subclasses supply :meth:`function`."""

    @classmethod
    def create(cls, op: RuntimeOperator) -> "ActivationLayer":
        return cls(op.name)

    def function(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [self.function(inputs[0])]

@register_layer("nn.ReLU", "F.relu", "torch.relu", "Tensor.relu", "F.relu_", "torch.relu_")
class ReLU(ActivationLayer):
    def function(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0)

@register_layer("nn.Sigmoid", "F.sigmoid", "torch.sigmoid", "Tensor.sigmoid")
class Sigmoid(ActivationLayer):
    def function(self, x: np.ndarray) -> np.ndarray:
        # 0.5 * (1 + tanh(x / 2)) is the logistic function without exp overflow.
        y = np.tanh(x * 0.5)
        y += 1
        y *= 0.5
        return y
