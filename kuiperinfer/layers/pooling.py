"""Pooling layers: max pooling and adaptive average pooling."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.pooling import adaptive_avg_pool2d, max_pool2d
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator


@register_layer("nn.MaxPool2d", "F.max_pool2d")
class MaxPooling(NonParamLayer):
    """2-D max pooling (kernel, stride, padding, dilation, ceil_mode)."""

    def __init__(self, layer_name: str, kernel: tuple[int, int], stride: tuple[int, int],
                 padding: tuple[int, int], dilation: tuple[int, int], ceil_mode: bool):
        super().__init__(layer_name)
        self.kernel, self.stride, self.padding = kernel, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    @classmethod
    def create(cls, op: RuntimeOperator) -> "MaxPooling":
        kernel = op.param_ints("kernel_size", 2, Status.kParameterMissingKernel)
        stride = op.param_ints("stride", 2, Status.kParameterMissingStride, default=kernel)
        padding = op.param_ints("padding", 2, Status.kParameterMissingPadding, default=(0, 0))
        dilation = op.param_ints("dilation", 2, default=(1, 1))
        if op.param_bool("return_indices", default=False):
            raise op.error("return_indices=True is not supported", Status.kParameterInvalidValue)
        if any(2 * p > k for p, k in zip(padding, kernel)):
            raise op.error(f"padding {padding} must be at most half the kernel {kernel}",
                           Status.kParameterMissingPadding)
        if min(stride) < 1 or min(dilation) < 1 or min(kernel) < 1:
            raise op.error(f"kernel {kernel}, stride {stride} and dilation {dilation} must be positive",
                           Status.kParameterInvalidValue)
        return cls(op.name, kernel, stride, padding, dilation, op.param_bool("ceil_mode", default=False))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [max_pool2d(inputs[0], self.kernel, self.stride, self.padding, self.dilation,
                           self.ceil_mode)]


@register_layer("nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d")
class AdaptiveAvgPooling(NonParamLayer):
    """Adaptive average pooling to a fixed output size (None keeps the input's size)."""

    def __init__(self, layer_name: str, output_size: tuple[int | None, int | None]):
        super().__init__(layer_name)
        self.output_size = output_size

    @classmethod
    def create(cls, op: RuntimeOperator) -> "AdaptiveAvgPooling":
        size = op.param_value("output_size")
        if size is None:
            raise op.error("missing parameter 'output_size'", Status.kParameterMissingOutHW)
        size = (size, size) if isinstance(size, int) else tuple(size)
        if len(size) == 1:
            size = size * 2
        # pnnx writes PyTorch's None ("keep the input size") as 0.
        size = tuple(None if s == 0 else s for s in size)
        if len(size) != 2 or any(s is not None and (not isinstance(s, int) or s < 0) for s in size):
            raise op.error(f"output_size {size} must be two positive ints", Status.kParameterMissingOutHW)
        return cls(op.name, size)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        out_hw = tuple(s if s is not None else d for s, d in zip(self.output_size, x.shape[-2:]))
        return [adaptive_avg_pool2d(x, out_hw)]
