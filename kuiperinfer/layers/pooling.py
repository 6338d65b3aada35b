"""Pooling layers, 1-D and 2-D: max, average, adaptive average and adaptive max pooling.

pnnx writes pooling modules as functions (nn.MaxPool1d becomes F.max_pool1d,
nn.AdaptiveMaxPool2d becomes F.adaptive_max_pool2d, ...); the module spellings are
registered too. As for convolution, 1-D pooling runs the 2-D kernels on a unit height.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.pooling import adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, max_pool2d
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.convolution import as_2d, from_2d, spatial_ints, spatial_rank
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.registry import register_layer


@dataclass(frozen=True)
class PoolWindow:
    """Kernel, stride, padding and dilation of a pooling window, as (height, width)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    ceil_mode: bool

    @classmethod
    def from_operator(cls, op: RuntimeOperator) -> PoolWindow:
        """Read the window; ``stride=None`` (F.max_pool2d(x, 3)) means the kernel size."""
        rank = spatial_rank(op)
        kernel = spatial_ints(op, "kernel_size", rank, 1, Status.kParameterMissingKernel)
        stride = spatial_ints(op, "stride", rank, 1, Status.kParameterMissingStride, kernel[2 - rank:])
        padding = spatial_ints(op, "padding", rank, 0, Status.kParameterMissingPadding, (0,) * rank)
        dilation = spatial_ints(op, "dilation", rank, 1, Status.kParameterMissingUnknown, (1,) * rank)
        if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1:
            raise op.error(f"kernel {kernel}, stride {stride} and dilation {dilation} must be positive",
                           Status.kParameterInvalidValue)
        if any(p < 0 or 2 * p > k for p, k in zip(padding, kernel)):
            raise op.error(f"padding {padding} must be between 0 and half the kernel {kernel}",
                           Status.kParameterMissingPadding)
        return cls(kernel, stride, padding, dilation, op.param_bool("ceil_mode", default=False))


@register_layer("nn.MaxPool1d", "nn.MaxPool2d", "F.max_pool1d", "F.max_pool2d")
class MaxPooling(NonParamLayer):
    """Max pooling (kernel, stride, padding, dilation, ceil_mode); no indices."""

    batch_independent = True

    def __init__(self, layer_name: str, window: PoolWindow, rank: int):
        super().__init__(layer_name)
        self.window, self.rank = window, rank

    @classmethod
    def create(cls, op: RuntimeOperator) -> MaxPooling:
        if op.param_bool("return_indices", default=False):
            raise op.error("return_indices=True is not supported", Status.kParameterInvalidValue)
        return cls(op.name, PoolWindow.from_operator(op), spatial_rank(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        w = self.window
        out = max_pool2d(as_2d(inputs[0], self.rank), w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode)
        return [from_2d(out, self.rank)]


@register_layer("nn.AvgPool1d", "nn.AvgPool2d", "F.avg_pool1d", "F.avg_pool2d")
class AvgPooling(NonParamLayer):
    """Average pooling (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)."""

    batch_independent = True

    def __init__(self, layer_name: str, window: PoolWindow, count_include_pad: bool,
                 divisor_override: int | None, rank: int):
        super().__init__(layer_name)
        self.window, self.rank = window, rank
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    @classmethod
    def create(cls, op: RuntimeOperator) -> AvgPooling:
        divisor = op.param_int("divisor_override", Status.kParameterInvalidValue, default=None)
        if divisor is not None and divisor == 0:
            raise op.error("divisor_override must not be zero", Status.kParameterInvalidValue)
        return cls(op.name, PoolWindow.from_operator(op), op.param_bool("count_include_pad", default=True),
                   divisor, spatial_rank(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        w = self.window
        out = avg_pool2d(as_2d(inputs[0], self.rank), w.kernel, w.stride, w.padding, w.ceil_mode,
                         self.count_include_pad, self.divisor_override)
        return [from_2d(out, self.rank)]


class AdaptivePooling(NonParamLayer):
    """Pooling to a fixed output size. pnnx writes a None entry (keep the input's size) as 0:
    nn.AdaptiveAvgPool2d((None, 3)) becomes ``F.adaptive_avg_pool2d ... output_size=(0,3)``."""

    batch_independent = True

    def __init__(self, layer_name: str, output_size: tuple[int | None, int | None], rank: int):
        super().__init__(layer_name)
        self.output_size, self.rank = output_size, rank

    @classmethod
    def read_output_size(cls, op: RuntimeOperator) -> tuple[int | None, int | None]:
        """output_size as (height, width), None where the input's size is kept."""
        rank = spatial_rank(op)
        size = op.param_ints("output_size", status=Status.kParameterMissingOutHW, default=None)
        if size is None:
            raise op.error("missing parameter 'output_size'", Status.kParameterMissingOutHW)
        if len(size) == 1:
            size = size * rank
        if len(size) != rank or any(s < 0 for s in size):
            raise op.error(f"output_size {size} must be {rank} sizes", Status.kParameterMissingOutHW)
        return (1,) * (2 - rank) + tuple(s or None for s in size)

    def output_hw(self, x: np.ndarray) -> tuple[int, int]:
        """The output (height, width) for NCHW ``x``."""
        return tuple(s if s is not None else d for s, d in zip(self.output_size, x.shape[2:]))


@register_layer("nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool1d",
                "F.adaptive_avg_pool2d")
class AdaptiveAvgPooling(AdaptivePooling):
    """Adaptive average pooling."""

    @classmethod
    def create(cls, op: RuntimeOperator) -> AdaptiveAvgPooling:
        return cls(op.name, cls.read_output_size(op), spatial_rank(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = as_2d(inputs[0], self.rank)
        return [from_2d(adaptive_avg_pool2d(x, self.output_hw(x)), self.rank)]


@register_layer("nn.AdaptiveMaxPool1d", "nn.AdaptiveMaxPool2d", "F.adaptive_max_pool1d",
                "F.adaptive_max_pool2d")
class AdaptiveMaxPooling(AdaptivePooling):
    """Adaptive max pooling. pnnx always writes ``return_indices=True`` and a second, int64
    output with the indices (even when the model ignores them), so both are computed."""

    def __init__(self, layer_name: str, output_size: tuple[int | None, int | None], rank: int,
                 return_indices: bool):
        super().__init__(layer_name, output_size, rank)
        self.return_indices = return_indices

    @classmethod
    def create(cls, op: RuntimeOperator) -> AdaptiveMaxPooling:
        return cls(op.name, cls.read_output_size(op), spatial_rank(op),
                   op.param_bool("return_indices", default=False))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = as_2d(inputs[0], self.rank)
        values, indices = adaptive_max_pool2d(x, self.output_hw(x))
        values, indices = from_2d(values, self.rank), from_2d(indices, self.rank)
        return [values, indices] if self.return_indices else [values]
