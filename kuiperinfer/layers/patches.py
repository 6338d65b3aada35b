"""Sliding patches: nn.Unfold / F.unfold (im2col) and nn.Fold / F.fold (col2im).

``unfold`` turns an image (N, C, H, W) into its sliding windows as columns
(N, C * kh * kw, L): column ``l`` is the window of output position ``l`` (row-major over
the ``L = oh * ow`` positions), channel-major, as a convolution's weight is flattened.
``fold`` is its adjoint: columns (N, C * kh * kw, L) are summed back into an image
(N, C, *output_size), overlapping windows adding up. Both take ``kernel_size``,
``dilation``, ``padding`` (zeros) and ``stride``; ``fold`` also the ``output_size``.
PyTorch also accepts unbatched (C, H, W) and (C * kh * kw, L) inputs; so do these layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.padding import pad_last_dims
from kuiperinfer.kernels.windows import as_batched, col2im, im2col, sweep_output
from kuiperinfer.layers.base import NonParamLayer, declared_rank
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

Pair = tuple[int, int]


class Patches(NonParamLayer):
    """The window sweep both layers share."""

    def __init__(self, layer_name: str, kernel: Pair, dilation: Pair, padding: Pair, stride: Pair):
        super().__init__(layer_name)
        self.kernel, self.dilation, self.padding, self.stride = kernel, dilation, padding, stride

    @staticmethod
    def read(op: RuntimeOperator) -> tuple[Pair, Pair, Pair, Pair]:
        kernel = op.param_ints("kernel_size", 2, Status.kParameterMissingKernel)
        dilation = op.param_ints("dilation", 2, Status.kParameterMissingUnknown, default=(1, 1))
        padding = op.param_ints("padding", 2, Status.kParameterMissingPadding, default=(0, 0))
        stride = op.param_ints("stride", 2, Status.kParameterMissingStride, default=(1, 1))
        if min(kernel + dilation + stride) < 1 or min(padding) < 0:
            raise op.error(f"kernel {kernel}, dilation {dilation} and stride {stride} must be positive, padding "
                           f"{padding} not negative", Status.kParameterInvalidValue)
        return kernel, dilation, padding, stride

    def positions(self, size: Sequence[int]) -> Pair:
        """How many windows fit along (H, W) of an image of ``size`` once padded."""
        return tuple(sweep_output(s + 2 * p, k, st, d)
                     for s, p, k, st, d in zip(size, self.padding, self.kernel, self.stride, self.dilation))


@register_layer("nn.Unfold", "F.unfold")
class Unfold(Patches):
    """Image to columns of its sliding windows."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Unfold:
        layer = cls(op.name, *cls.read(op))
        layer.batch_independent = declared_rank(op) == 4
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_batched(inputs[0], 2, "unfold")
        out = self.positions(x.shape[2:])
        if min(out) < 1:
            raise InferError(f"input {x.shape} is too small for kernel {self.kernel} with padding {self.padding} "
                             f"and dilation {self.dilation}", status=InferStatus.kInferFailedOutputSizeError)
        padded = pad_last_dims(x, tuple((p, p) for p in self.padding))
        columns = im2col(padded, self.kernel, self.stride, self.dilation, out).transpose(0, 2, 1)
        columns = np.ascontiguousarray(columns)
        return [columns[0] if unbatched else columns]


@register_layer("nn.Fold", "F.fold")
class Fold(Patches):
    """Columns of sliding windows summed back into an image of ``output_size``."""

    def __init__(self, layer_name: str, output_size: Pair, kernel: Pair, dilation: Pair, padding: Pair,
                 stride: Pair):
        super().__init__(layer_name, kernel, dilation, padding, stride)
        self.output_size = output_size

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Fold:
        output_size = op.param_ints("output_size", 2, Status.kParameterMissingOutHW)
        if min(output_size) < 1:
            raise op.error(f"output_size {output_size} must be positive", Status.kParameterMissingOutHW)
        layer = cls(op.name, output_size, *cls.read(op))
        layer.batch_independent = declared_rank(op) == 3
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        cols, unbatched = as_batched(inputs[0], 1, "fold")
        n, rows, length = cols.shape
        out = self.positions(self.output_size)
        taps = self.kernel[0] * self.kernel[1]
        if rows % taps or min(out) < 1 or length != out[0] * out[1]:
            raise InferError(f"input of shape {inputs[0].shape} does not fold into {self.output_size} with kernel "
                             f"{self.kernel}: expected C * {taps} rows and {max(out[0], 0) * max(out[1], 0)} "
                             f"columns", status=InferStatus.kInferFailedOutputSizeError)
        padded = tuple(s + 2 * p for s, p in zip(self.output_size, self.padding))
        image = col2im(cols.reshape(n, rows // taps, *self.kernel, *out), self.stride, self.dilation, padded)
        (top, left), (height, width) = self.padding, self.output_size
        image = np.ascontiguousarray(image[:, :, top:top + height, left:left + width])
        return [image[0] if unbatched else image]
