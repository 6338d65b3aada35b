"""nn.Linear on any number of leading dimensions, as one GEMM."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import InferError, InferStatus, ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import ParamLayer
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator


@register_layer("nn.Linear")
class Linear(ParamLayer):
    """y = x W^T + b over the last dimension; W^T is packed once, contiguous."""

    @classmethod
    def create(cls, op: RuntimeOperator) -> "Linear":
        out_features = op.param_int("out_features", Status.kAttrMissingOutFeatures)
        in_features = op.param_int("in_features", Status.kParameterMissingInChannel)
        weight = op.weight("weight", (out_features, in_features))
        use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("bias"))
        bias = op.weight("bias", (out_features,), Status.kAttrMissingBias) if use_bias else None
        return cls(op.name, weight, bias)

    def prepare(self) -> None:
        self._weight_t = np.ascontiguousarray(self._weight.T)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        in_features = self._weight_t.shape[0]
        if x.shape[-1:] != (in_features,):
            raise InferError(f"input of shape {x.shape} does not end in in_features={in_features}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        y = np.matmul(x.reshape(-1, in_features), self._weight_t)
        if self._bias is not None:
            y += self._bias
        return [y.reshape(*x.shape[:-1], -1)]
