"""Pooling layers, 1-D and 2-D: max, average, adaptive average, adaptive max and power-average
(LPPool) pooling, and max unpooling.

pnnx writes pooling modules as functions (nn.MaxPool1d becomes F.max_pool1d,
nn.AdaptiveMaxPool2d becomes F.adaptive_max_pool2d, ...); the module spellings are
registered too. As for convolution, 1-D pooling runs the 2-D kernels on a unit height.
PyTorch also accepts unbatched inputs, (C, L) or (C, H, W); so do these layers (pooling
keeps channels apart, so dimension 0 may be split either way).

Max pooling with ``return_indices=True`` returns int64 indices, the flat position of each
maximum in its input plane, from the N-d window kernels (:mod:`kuiperinfer.kernels.windows`).
pnnx writes two outputs for them (values, indices), or, for adaptive max pooling modules,
one output holding the pair, taken apart by a ``prim::TupleUnpack``
(:class:`~kuiperinfer.layers.pooling3d.IndicesOutput`). ``nn.MaxUnpool2d/3d`` and
``F.max_unpool1d/2d/3d`` reach the file as the TorchScript operators ``aten::max_unpool2d``
(1-D ones between an unsqueeze and a squeeze) and ``aten::max_unpool3d``, and only when the
model gave ``output_size``: without it, tracing the unpooling fails in PyTorch 2.13 itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.compiled.pooling import global_avg_pool2d_channels_last, max_pool2d_channels_last
from kuiperinfer.kernels.layout import is_channels_last
from kuiperinfer.kernels.pooling import adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, max_pool2d, pool_output_hw
from kuiperinfer.kernels.windows import as_batched, avg_pool, max_pool
from kuiperinfer.layers.base import NonParamLayer, batched
from kuiperinfer.layers.convolution import as_2d, from_2d, spatial_rank
from kuiperinfer.layers.pooling3d import IndicesOutput, Window, read_output_size
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


@register_layer("nn.MaxPool1d", "nn.MaxPool2d", "F.max_pool1d", "F.max_pool2d")
class MaxPooling(NonParamLayer):
    """Max pooling (kernel, stride, padding, dilation, ceil_mode), with int64 indices if asked;
    ``compiled``, a float32 input held channels-last (a convolution's output) is pooled by
    the compiled kernel (:mod:`kuiperinfer.kernels.compiled.pooling`), as is an int8
    product's uint8 input (quantized before the pooling, to the same values)."""

    monotone = True

    def __init__(self, layer_name: str, window: Window, rank: int, return_indices: bool = False,
                 as_tuple: bool = False, compiled: bool = False):
        super().__init__(layer_name)
        self.window, self.rank = window, rank
        self.return_indices, self.as_tuple, self.compiled = return_indices, as_tuple, compiled

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> MaxPooling:
        rank = spatial_rank(op)
        layer = cls(op.name, Window.from_operator(op, rank).in_2d(), rank, *IndicesOutput.read(op),
                    compiled=options.compiled)
        layer.batch_independent = batched(op, rank)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        w = self.window
        if self.return_indices:  # the N-d kernel, on the 1-D or 2-D axes themselves
            x, unbatched = as_batched(inputs[0], self.rank, f"max_pool{self.rank}d")
            axes = slice(2 - self.rank, None)
            values, indices = max_pool(x, w.kernel[axes], w.stride[axes], w.padding[axes], w.dilation[axes],
                                       w.ceil_mode)
            if unbatched:
                values, indices = values[0], indices[0]
            return IndicesOutput.outputs(values, indices, True, self.as_tuple)
        x, unbatched = as_2d(inputs[0], self.rank, f"max_pool{self.rank}d")
        if self.compiled and x.dtype in (np.float32, np.uint8) and is_channels_last(x):
            out_hw = pool_output_hw(x, w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode)
            out = max_pool2d_channels_last(x, out_hw, w.kernel, w.stride, w.padding, w.dilation)
        else:
            out = max_pool2d(x, w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode)
        return [from_2d(out, self.rank, unbatched)]


@register_layer("nn.AvgPool1d", "nn.AvgPool2d", "F.avg_pool1d", "F.avg_pool2d")
class AvgPooling(NonParamLayer):
    """Average pooling (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)."""


    def __init__(self, layer_name: str, window: Window, count_include_pad: bool,
                 divisor_override: int | None, rank: int):
        super().__init__(layer_name)
        self.window, self.rank = window, rank
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AvgPooling:
        divisor = op.param_int("divisor_override", Status.kParameterInvalidValue, default=None)
        if divisor is not None and divisor == 0:
            raise op.error("divisor_override must not be zero", Status.kParameterInvalidValue)
        rank = spatial_rank(op)
        layer = cls(op.name, Window.from_operator(op, rank).in_2d(), op.param_bool("count_include_pad", default=True),
                    divisor, rank)
        layer.batch_independent = batched(op, rank)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        w = self.window
        x, unbatched = as_2d(inputs[0], self.rank, f"avg_pool{self.rank}d")
        out = avg_pool2d(x, w.kernel, w.stride, w.padding, w.ceil_mode, self.count_include_pad,
                         self.divisor_override)
        return [from_2d(out, self.rank, unbatched)]


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
        return (1,) * (2 - rank) + read_output_size(op, rank)

    def output_hw(self, x: np.ndarray) -> tuple[int, int]:
        """The output (height, width) for NCHW ``x``."""
        return tuple(s if s is not None else d for s, d in zip(self.output_size, x.shape[2:]))


@register_layer("nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool1d",
                "F.adaptive_avg_pool2d")
class AdaptiveAvgPooling(AdaptivePooling):
    """Adaptive average pooling; ``compiled``, the mean of a float32 input held channels-last
    (a convolution's output) over all its pixels is the compiled kernel's
    (:func:`~kuiperinfer.kernels.compiled.pooling.global_avg_pool2d_channels_last`)."""

    def __init__(self, layer_name: str, output_size: tuple[int | None, int | None], rank: int,
                 compiled: bool = False):
        super().__init__(layer_name, output_size, rank)
        self.compiled = compiled

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AdaptiveAvgPooling:
        layer = cls(op.name, cls.read_output_size(op), spatial_rank(op), options.compiled)
        layer.batch_independent = batched(op, spatial_rank(op))
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_2d(inputs[0], self.rank, f"adaptive_avg_pool{self.rank}d")
        out_hw = self.output_hw(x)
        if self.compiled and out_hw == (1, 1) and x.dtype == np.float32 and is_channels_last(x):
            return [from_2d(global_avg_pool2d_channels_last(x).reshape(*x.shape[:2], 1, 1), self.rank, unbatched)]
        return [from_2d(adaptive_avg_pool2d(x, out_hw), self.rank, unbatched)]


@register_layer("nn.AdaptiveMaxPool1d", "nn.AdaptiveMaxPool2d", "F.adaptive_max_pool1d",
                "F.adaptive_max_pool2d")
class AdaptiveMaxPooling(AdaptivePooling):
    """Adaptive max pooling. pnnx writes the functions with ``return_indices=True`` and a
    second, int64 output with the indices (even when the model ignores them), and a module
    asked for indices with one output holding both, which a ``prim::TupleUnpack`` takes apart."""

    def __init__(self, layer_name: str, output_size: tuple[int | None, int | None], rank: int,
                 return_indices: bool, as_tuple: bool = False):
        super().__init__(layer_name, output_size, rank)
        self.return_indices, self.as_tuple = return_indices, as_tuple

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AdaptiveMaxPooling:
        layer = cls(op.name, cls.read_output_size(op), spatial_rank(op), *IndicesOutput.read(op))
        layer.batch_independent = batched(op, spatial_rank(op))
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        x, unbatched = as_2d(inputs[0], self.rank, f"adaptive_max_pool{self.rank}d")
        values, indices = adaptive_max_pool2d(x, self.output_hw(x))
        values = from_2d(values, self.rank, unbatched)
        indices = from_2d(indices, self.rank, unbatched)
        return IndicesOutput.outputs(values, indices, self.return_indices, self.as_tuple)


@register_layer("nn.LPPool1d", "nn.LPPool2d", "F.lp_pool1d", "F.lp_pool2d")
class LPPooling(NonParamLayer):
    """Power-average pooling: ``(sum of x ** p over each window) ** (1 / p)``, computed as
    PyTorch does, from an average pooling without padding (``ceil_mode``'s partial last
    windows are averaged over their part and scaled by the whole kernel). ``norm_type``
    inf is the maximum of ``|x|``, -inf the minimum (pnnx writes a model's F.lp_pool with
    them as abs and max pooling; here for modules written by hand)."""


    def __init__(self, layer_name: str, norm_type: float, kernel: tuple[int, ...], stride: tuple[int, ...],
                 ceil_mode: bool):
        super().__init__(layer_name)
        self.norm_type, self.kernel, self.stride, self.ceil_mode = norm_type, kernel, stride, ceil_mode

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> LPPooling:
        rank = spatial_rank(op)
        norm_type = op.param_float("norm_type", Status.kParameterInvalidValue)
        if norm_type == 0 or norm_type != norm_type:
            raise op.error(f"norm_type {norm_type} must be a non-zero number", Status.kParameterInvalidValue)
        kernel = op.param_ints("kernel_size", rank, Status.kParameterMissingKernel)
        stride = op.param_ints("stride", rank, Status.kParameterMissingStride, default=kernel)
        if min(kernel) < 1 or min(stride) < 1:
            raise op.error(f"kernel {kernel} and stride {stride} must be positive", Status.kParameterInvalidValue)
        layer = cls(op.name, norm_type, kernel, stride, op.param_bool("ceil_mode", default=False))
        layer.batch_independent = batched(op, spatial_rank(op))
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        rank = len(self.kernel)
        x, unbatched = as_batched(inputs[0], rank, f"lp_pool{rank}d")
        no_padding, no_dilation = (0,) * rank, (1,) * rank
        p = self.norm_type
        if abs(p) == np.inf:
            sign = 1 if p > 0 else -1
            out = sign * max_pool(sign * np.abs(x), self.kernel, self.stride, no_padding, no_dilation,
                                  self.ceil_mode)[0]
        else:
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                powers = np.power(x, np.float32(p))
            average = avg_pool(powers, self.kernel, self.stride, no_padding, self.ceil_mode,
                               True, None)
            average *= np.float32(np.prod(self.kernel))
            with np.errstate(invalid="ignore", divide="ignore"):  # NaN and inf where torch has them
                out = np.power(average, np.float32(1.0 / p))
        out = out.astype(np.float32, copy=False)
        return [out[0] if unbatched else out]


@register_layer("aten::max_unpool2d", "aten::max_unpool3d")
class MaxUnpooling(NonParamLayer):
    """Max unpooling: each value put back at its index (a flat position in its output
    plane, as max pooling returned it), zeros elsewhere. The inputs are those of the
    TorchScript operators: values, indices, the output's spatial size (a list of ints),
    and for 3-D the stride and padding, which the computation does not need."""


    def __init__(self, layer_name: str, rank: int):
        super().__init__(layer_name)
        self.rank = rank

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> MaxUnpooling:
        rank = int(op.type[-2])
        expected = 3 if rank == 2 else 5
        if len(op.input_operands_seq) != expected:
            raise op.error(f"{op.type} takes {expected} inputs (values, indices, output size"
                           f"{', stride, padding' if rank == 3 else ''}), got {len(op.input_operands_seq)}",
                           Status.kParameterInvalidValue)
        layer = cls(op.name, rank)
        layer.batch_independent = batched(op, rank)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        values, indices, size = inputs[0], np.asarray(inputs[1]), inputs[2]
        size = size.tolist() if isinstance(size, np.ndarray) else size
        if not (isinstance(size, (list, tuple)) and len(size) == self.rank
                and all(type(s) is int and s >= 0 for s in size)):
            raise InferError(f"output size {size!r} is not {self.rank} sizes",
                             status=InferStatus.kInferFailedOutputSizeError)
        if values.shape != indices.shape or values.ndim not in (self.rank + 1, self.rank + 2) \
                or indices.dtype.kind not in "iu":
            raise InferError(f"values {values.shape} and integer indices {indices.shape} {indices.dtype} must have "
                             f"one shape, ({self.rank + 2}-D) batched or unbatched",
                             status=InferStatus.kInferFailedInputEmpty)
        lead = values.shape[:values.ndim - self.rank]
        plane = int(np.prod(size))
        flat_indices = indices.reshape(*lead, -1)
        if flat_indices.size and (flat_indices.min() < 0 or flat_indices.max() >= plane):
            raise InferError(f"an index is outside the output plane of {plane} elements (size {tuple(size)})",
                             status=InferStatus.kInferFailedOutputSizeError)
        out = np.zeros((*lead, plane), values.dtype)
        np.put_along_axis(out, flat_indices, values.reshape(*lead, -1), axis=-1)
        return [out.reshape(*lead, *size)]
