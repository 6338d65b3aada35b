"""3-D pooling (video and volumetric models): max, average, adaptive average and adaptive max.

pnnx writes the module types (nn.MaxPool3d, ...) for modules a model holds and the
functions (F.max_pool3d, ...) otherwise, with the same parameters as the 2-D ones:
``kernel_size``, ``stride`` (None: the kernel), ``padding``, ``dilation``,
``ceil_mode``, ``return_indices``, ``count_include_pad``, ``divisor_override``, and
``output_size`` for adaptive pooling (0 where the model wrote None: the input's size).

The windows are NumPy views (:mod:`kuiperinfer.kernels.windows`). Indices, where asked
for, are int64 flat positions in each input volume (``d * H * W + h * W + w``), as
PyTorch returns them and ``max_unpool3d`` takes them. PyTorch also accepts unbatched
``(C, D, H, W)`` inputs; so do these layers (pooling keeps channels apart, so dimension 0
may be split either way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.windows import adaptive_avg_pool, adaptive_max_pool, as_batched, avg_pool, max_pool
from kuiperinfer.layers.base import NonParamLayer, batched
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

Sizes = tuple[int, ...]


def check_window(op: RuntimeOperator, kernel: Sizes, stride: Sizes, padding: Sizes, dilation: Sizes) -> None:
    """Raise the operator's error unless the window's sizes are positive and its padding at
    most half the kernel (as PyTorch requires)."""
    if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1:
        raise op.error(f"kernel {kernel}, stride {stride} and dilation {dilation} must be positive",
                       Status.kParameterInvalidValue)
    if any(p < 0 or 2 * p > k for p, k in zip(padding, kernel)):
        raise op.error(f"padding {padding} must be between 0 and half the kernel {kernel}",
                       Status.kParameterMissingPadding)


@dataclass(frozen=True)
class Window:
    """Kernel, stride, padding and dilation of a pooling window, one size per spatial axis."""

    kernel: Sizes
    stride: Sizes
    padding: Sizes
    dilation: Sizes
    ceil_mode: bool

    @classmethod
    def from_operator(cls, op: RuntimeOperator, rank: int) -> Window:
        """Read and check the window of a ``rank``-D pooling operator."""
        kernel = op.param_ints("kernel_size", rank, Status.kParameterMissingKernel)
        stride = op.param_ints("stride", rank, Status.kParameterMissingStride, default=kernel)
        padding = op.param_ints("padding", rank, Status.kParameterMissingPadding, default=(0,) * rank)
        dilation = op.param_ints("dilation", rank, Status.kParameterMissingUnknown, default=(1,) * rank)
        check_window(op, kernel, stride, padding, dilation)
        return cls(kernel, stride, padding, dilation, op.param_bool("ceil_mode", default=False))

    def in_2d(self) -> Window:
        """A 1-D window as the 2-D window of unit height (:func:`~kuiperinfer.layers.convolution.as_2d`)."""
        lift = 2 - len(self.kernel)
        return Window((1,) * lift + self.kernel, (1,) * lift + self.stride, (0,) * lift + self.padding,
                      (1,) * lift + self.dilation, self.ceil_mode)


class IndicesOutput:
    """How a layer that can return indices hands them on: pnnx declares two outputs
    (values, int64 indices), or one output holding the pair, which a ``prim::TupleUnpack``
    after it takes apart (adaptive max pooling); without ``return_indices``, the values."""

    @staticmethod
    def read(op: RuntimeOperator) -> tuple[bool, bool]:
        """(return_indices, as one tuple output)."""
        return_indices = op.param_bool("return_indices", default=False)
        outputs = len(op.output_operands)
        if outputs not in (0, 1, 2) or (outputs == 2 and not return_indices):
            raise op.error(f"{outputs} outputs for return_indices={return_indices}", Status.kParameterInvalidValue)
        return return_indices, return_indices and outputs == 1

    @staticmethod
    def outputs(values: np.ndarray, indices: np.ndarray, return_indices: bool, as_tuple: bool) -> list[Any]:
        if not return_indices:
            return [values]
        return [(values, indices)] if as_tuple else [values, indices]


def _unbatch(arrays: tuple[np.ndarray, ...], unbatched: bool) -> tuple[np.ndarray, ...]:
    return tuple(a[0] for a in arrays) if unbatched else arrays


@register_layer("nn.MaxPool3d", "F.max_pool3d")
class MaxPooling3d(NonParamLayer):
    """3-D max pooling (kernel, stride, padding, dilation, ceil_mode), with indices if asked."""


    def __init__(self, layer_name: str, window: Window, return_indices: bool, as_tuple: bool):
        super().__init__(layer_name)
        self.window, self.return_indices, self.as_tuple = window, return_indices, as_tuple

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> MaxPooling3d:
        layer = cls(op.name, Window.from_operator(op, 3), *IndicesOutput.read(op))
        layer.batch_independent = batched(op, 3)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        x, unbatched = as_batched(inputs[0], 3, "max_pool3d")
        w = self.window
        values, indices = _unbatch(max_pool(x, w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode), unbatched)
        return IndicesOutput.outputs(values, indices, self.return_indices, self.as_tuple)


@register_layer("nn.AvgPool3d", "F.avg_pool3d")
class AvgPooling3d(NonParamLayer):
    """3-D average pooling (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)."""


    def __init__(self, layer_name: str, window: Window, count_include_pad: bool, divisor_override: int | None):
        super().__init__(layer_name)
        self.window, self.count_include_pad, self.divisor_override = window, count_include_pad, divisor_override

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AvgPooling3d:
        divisor = op.param_int("divisor_override", Status.kParameterInvalidValue, default=None)
        if divisor is not None and divisor == 0:
            raise op.error("divisor_override must not be zero", Status.kParameterInvalidValue)
        window = Window.from_operator(op, 3)
        if window.dilation != (1, 1, 1):
            raise op.error(f"average pooling has no dilation, got {window.dilation}", Status.kParameterInvalidValue)
        layer = cls(op.name, window, op.param_bool("count_include_pad", default=True), divisor)
        layer.batch_independent = batched(op, 3)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_batched(inputs[0], 3, "avg_pool3d")
        w = self.window
        out = avg_pool(x, w.kernel, w.stride, w.padding, w.ceil_mode, self.count_include_pad, self.divisor_override)
        return [out[0] if unbatched else out]


def read_output_size(op: RuntimeOperator, rank: int) -> tuple[int | None, ...]:
    """``output_size`` of an adaptive pooling, None where the input's size is kept (pnnx writes 0)."""
    size = op.param_ints("output_size", status=Status.kParameterMissingOutHW, default=None)
    if size is None:
        raise op.error("missing parameter 'output_size'", Status.kParameterMissingOutHW)
    if len(size) == 1:
        size = size * rank
    if len(size) != rank or any(s < 0 for s in size):
        raise op.error(f"output_size {size} must be {rank} sizes", Status.kParameterMissingOutHW)
    return tuple(s or None for s in size)


def adaptive_sizes(x: np.ndarray, output_size: tuple[int | None, ...]) -> Sizes:
    """The output sizes for ``x``: ``output_size`` with None replaced by the input's size."""
    return tuple(d if s is None else s for s, d in zip(output_size, x.shape[x.ndim - len(output_size):]))


@register_layer("nn.AdaptiveAvgPool3d", "F.adaptive_avg_pool3d")
class AdaptiveAvgPooling3d(NonParamLayer):
    """3-D adaptive average pooling."""


    def __init__(self, layer_name: str, output_size: tuple[int | None, ...]):
        super().__init__(layer_name)
        self.output_size = output_size

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AdaptiveAvgPooling3d:
        layer = cls(op.name, read_output_size(op, 3))
        layer.batch_independent = batched(op, 3)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_batched(inputs[0], 3, "adaptive_avg_pool3d")
        out = adaptive_avg_pool(x, adaptive_sizes(x, self.output_size))
        return [out[0] if unbatched else out]


@register_layer("nn.AdaptiveMaxPool3d", "F.adaptive_max_pool3d")
class AdaptiveMaxPooling3d(NonParamLayer):
    """3-D adaptive max pooling, with indices if asked (pnnx writes ``return_indices=True``
    and two outputs for the function, one tuple output for the module)."""


    def __init__(self, layer_name: str, output_size: tuple[int | None, ...], return_indices: bool, as_tuple: bool):
        super().__init__(layer_name)
        self.output_size, self.return_indices, self.as_tuple = output_size, return_indices, as_tuple

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AdaptiveMaxPooling3d:
        layer = cls(op.name, read_output_size(op, 3), *IndicesOutput.read(op))
        layer.batch_independent = batched(op, 3)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        x, unbatched = as_batched(inputs[0], 3, "adaptive_max_pool3d")
        values, indices = _unbatch(adaptive_max_pool(x, adaptive_sizes(x, self.output_size)), unbatched)
        return IndicesOutput.outputs(values, indices, self.return_indices, self.as_tuple)
