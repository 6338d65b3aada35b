"""Normalisation layers. BatchNorm folds its statistics into one scale and shift at build time."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import ParamLayer
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator


@register_layer("nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d")
class BatchNorm(ParamLayer):
    """Inference batch normalisation over dimension 1: y = x * scale + shift.

    ``weights()``/``bias()`` are PyTorch's gamma and beta; the running mean and
    variance are kept too, and :meth:`prepare` folds all four with eps.
    """

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray,
                 running_mean: np.ndarray, running_var: np.ndarray, eps: float):
        self.running_mean, self.running_var, self.eps = running_mean, running_var, eps
        super().__init__(layer_name, weight, bias)

    @classmethod
    def create(cls, op: RuntimeOperator) -> "BatchNorm":
        channels = op.param_int("num_features", Status.kParameterMissingNumFeatures)
        eps = op.param_float("eps", Status.kParameterMissingEps)
        mean = op.weight("running_mean", (channels,), Status.kAttrMissingRunningMean)
        var = op.weight("running_var", (channels,), Status.kAttrMissingRunningVar)
        if op.param_bool("affine", default=op.has_weight("weight")):
            weight = op.weight("weight", (channels,))
            bias = op.weight("bias", (channels,), Status.kAttrMissingBias)
        else:
            weight, bias = np.ones(channels, np.float32), np.zeros(channels, np.float32)
        return cls(op.name, weight, bias, mean, var, eps)

    def prepare(self) -> None:
        scale = self._weight.astype(np.float64) / np.sqrt(self.running_var.astype(np.float64) + self.eps)
        self._scale = scale.astype(np.float32)
        self._shift = (self._bias - self.running_mean * scale).astype(np.float32)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        shape = (-1,) + (1,) * (x.ndim - 2)
        y = x * self._scale.reshape(shape)
        y += self._shift.reshape(shape)
        return [y]
