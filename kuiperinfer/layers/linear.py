"""nn.Linear and F.linear on any number of leading dimensions, as one GEMM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.layers.base import Layer, ParamLayer, compiled, declared_rank
from kuiperinfer.layers.fusion import ActivationFusion
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.registry import register_layer


def linear(x: np.ndarray, weight_t: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``x @ weight_t + bias`` over the last dimension of ``x``; ``weight_t`` is (in, out)."""
    in_features = weight_t.shape[0]
    if x.shape[-1:] != (in_features,):
        raise InferError(f"input of shape {x.shape} does not end in in_features={in_features}",
                         status=InferStatus.kInferFailedDimensionParameterError)
    y = np.matmul(x.reshape(-1, in_features), weight_t)
    if bias is not None:
        y += bias
    return y.reshape(*x.shape[:-1], weight_t.shape[1])


@register_layer("nn.Linear")
class Linear(ParamLayer):
    """y = x W^T + b over the last dimension; W^T is packed once, contiguous."""

    fusion = ActivationFusion
    compiled_kernels = True

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None = None,
                 activation: InplaceActivation | None = None, compiled: bool = False):
        super().__init__(layer_name, weight, bias)
        self.activation = activation
        """An activation the graph optimiser fused in, applied in place on the output."""
        self.compiled = compiled
        """Whether the bias and activation follow the product in one compiled pass."""
        self.pack()

    @classmethod
    def create(cls, op: RuntimeOperator) -> Linear:
        out_features = op.param_int("out_features", Status.kAttrMissingOutFeatures)
        in_features = op.param_int("in_features", Status.kParameterMissingInChannel)
        weight = op.weight("weight", (out_features, in_features), copy=False)
        use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("bias"))
        bias = op.weight("bias", (out_features,), Status.kAttrMissingBias) if use_bias else None
        layer = cls(op.name, weight, bias, op.fusion.activation if op.fusion is not None else None, compiled(op))
        layer.batch_independent = declared_rank(op) >= 2
        return layer

    @classmethod
    def takes_activation(cls, op: RuntimeOperator) -> bool:
        return True

    def pack(self) -> None:
        self._weight_t = np.require(self._weight.T, np.float32, "CA")
        self._epilogue = CompiledEpilogue(self._bias, self._weight.shape[0], self.activation) if self.compiled \
            else None

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        if self._epilogue is None:
            y = linear(inputs[0], self._weight_t, self._bias)
            return [y if self.activation is None else self.activation(y)]
        y = linear(inputs[0], self._weight_t, None)
        self._epilogue(y)
        return [y]


@register_layer("F.linear")
class FunctionalLinear(Layer):
    """F.linear whose weight (out, in) and optional bias arrive as inputs at run time.

    (pnnx turns F.linear on a module's own parameters into nn.Linear.)
    """

    @classmethod
    def create(cls, op: RuntimeOperator) -> FunctionalLinear:
        if len(op.input_operands_seq) not in (2, 3):
            raise op.error(f"F.linear needs the input, the weight and an optional bias as inputs, got "
                           f"{len(op.input_operands_seq)}", Status.kAttrMissingWeight)
        return cls(op.name)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, weight = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        if weight.ndim != 2:
            raise InferError(f"F.linear weight has shape {weight.shape}, expected (out_features, in_features)",
                             status=InferStatus.kInferFailedWeightParameterError)
        return [linear(x, weight.T, bias)]
