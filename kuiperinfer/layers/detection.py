"""torchvision's detection operators: ``torchvision.ops.DeformConv2d`` and ``torchvision.ops.RoIAlign``.

pnnx writes the two torchvision modules as themselves (its pass_level1
``torchvision_DeformConv2d.cpp`` and ``torchvision_RoIAlign.cpp``), with their inputs in
the module's order and no ``$names``:

    torchvision.ops.DeformConv2d  dcn  3 1 x offset mask y  bias=True dilation=(1,1) groups=1
        in_channels=8 kernel_size=(3,3) out_channels=16 padding=(1,1) stride=(1,1) @weight=(16,8,3,3)f32 @bias=(16)f32
    torchvision.ops.RoIAlign  roi  2 1 features rois pooled  aligned=True output_size=(7,7) sampling_ratio=2
        spatial_scale=0.25

**Deformable convolution** (v1, and v2 with a mask) is a convolution whose taps are moved:
tap ``(i, j)`` of output position ``(oy, ox)`` reads the input at
``(oy * stride_h - pad_h + i * dilation_h + dy, ox * stride_w - pad_w + j * dilation_w + dx)``,
the offset ``(dy, dx)`` being channels ``2 * (i * kw + j)`` and ``2 * (i * kw + j) + 1`` of
``offset`` (N, 2 * offset_groups * kh * kw, oh, ow), for the offset group of the input
channel. The fractional position is read by bilinear interpolation, zero outside the
input, and multiplied by the mask (N, offset_groups * kh * kw, oh, ow) when there is one.
The moved taps form im2col's columns, which the weight multiplies as in a convolution.

**RoIAlign** pools each box of ``rois`` (K, 5) rows ``(image, x1, y1, x2, y2)`` (or a list
of (L, 4) boxes per image) to ``output_size`` bins: the box, scaled by ``spatial_scale``
(and shifted by half a pixel when ``aligned``), is cut into bins, each bin averages
``sampling_ratio`` x ``sampling_ratio`` bilinear samples (``ceil(bin size)`` of them per
axis when ``sampling_ratio`` is not positive). Sample positions along y depend only on
the bin row, along x only on the column, so each box is two interpolation matrices:
``out[c] = Wy @ image[c] @ Wx.T / count``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.windows import sweep_output
from kuiperinfer.layers.base import NonParamLayer, ParamLayer, batched
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

Pair = tuple[int, int]


def _fail(message: str, status: InferStatus = InferStatus.kInferFailedDimensionParameterError) -> InferError:
    return InferError(message, status=status)


# -- deformable convolution --------------------------------------------------------------

def bilinear_taps(image: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``image`` (N, C, H, W) read at fractional positions ``y``, ``x`` (N, *taps), by bilinear
    interpolation with zeros outside the image: (N, C, *taps)."""
    n, c, height, width = image.shape
    flat = image.reshape(n, c, height * width)
    y0, x0 = np.floor(y), np.floor(x)
    out = np.zeros((n, c) + y.shape[1:], np.float32)
    for row, row_weight in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for column, column_weight in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            inside = (row >= 0) & (row < height) & (column >= 0) & (column < width)
            index = (np.clip(row, 0, height - 1) * width + np.clip(column, 0, width - 1)).astype(np.int64)
            values = np.take_along_axis(flat, index.reshape(n, 1, -1), axis=2).reshape(out.shape)
            out += values * (row_weight * column_weight * inside)[:, None]
    return out


@register_layer("torchvision.ops.DeformConv2d")
class DeformConv2d(ParamLayer):
    """Deformable convolution: inputs (input, offset[, mask]), the weight and bias stored."""


    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None, stride: Pair, padding: Pair,
                 dilation: Pair, groups: int):
        super().__init__(layer_name, weight, bias)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> DeformConv2d:
        if len(op.input_operands_seq) not in (2, 3):
            raise op.error(f"DeformConv2d takes (input, offset[, mask]), got {len(op.input_operands_seq)} inputs",
                           Status.kParameterInvalidValue)
        kernel = op.param_ints("kernel_size", 2, Status.kParameterMissingKernel)
        stride = op.param_ints("stride", 2, Status.kParameterMissingStride, default=(1, 1))
        padding = op.param_ints("padding", 2, Status.kParameterMissingPadding, default=(0, 0))
        dilation = op.param_ints("dilation", 2, Status.kParameterMissingUnknown, default=(1, 1))
        groups = op.param_int("groups", Status.kParameterMissingGroups, default=1)
        if min(kernel + stride + dilation) < 1 or groups < 1 or min(padding) < 0:
            raise op.error(f"kernel {kernel}, stride {stride}, dilation {dilation} and groups {groups} must be "
                           f"positive, padding {padding} not negative", Status.kParameterInvalidValue)
        c_in = op.param_int("in_channels", Status.kParameterMissingInChannel)
        c_out = op.param_int("out_channels", Status.kParameterMissingOutChannel)
        if c_in < 1 or c_out < 1 or c_in % groups or c_out % groups:
            raise op.error(f"in_channels {c_in} and out_channels {c_out} must be positive and divisible by "
                           f"groups {groups}", Status.kParameterMissingGroups)
        weight = op.weight("weight", (c_out, c_in // groups, *kernel), copy=False)
        use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("bias"))
        bias = op.weight("bias", (c_out,), Status.kAttrMissingBias, copy=False) if use_bias else None
        layer = cls(op.name, weight, bias, stride, padding, dilation, groups)
        layer.batch_independent = batched(op, 2)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, offset = np.asarray(inputs[0], np.float32), np.asarray(inputs[1], np.float32)
        mask = np.asarray(inputs[2], np.float32) if len(inputs) > 2 else None
        c_out, c_group, kh, kw = self._weight.shape
        taps = kh * kw
        if x.ndim != 4 or x.shape[1] != c_group * self.groups:
            raise _fail(f"input of shape {x.shape} is not (N, {c_group * self.groups}, H, W)",
                        InferStatus.kInferFailedChannelParameterError)
        n, channels, height, width = x.shape
        out_hw = tuple(sweep_output(size + 2 * p, k, s, d) for size, p, k, s, d
                       in zip((height, width), self.padding, (kh, kw), self.stride, self.dilation))
        offset_groups = offset.shape[1] // (2 * taps) if offset.ndim == 4 else 0
        if min(out_hw) < 1 or offset.ndim != 4 or offset_groups < 1 or offset.shape[1] != 2 * taps * offset_groups \
                or channels % offset_groups or offset.shape[0] != n or offset.shape[2:] != out_hw:
            raise _fail(f"offset of shape {offset.shape} does not fit input {x.shape}: expected (N, 2 * offset_groups"
                        f" * {taps}, {out_hw[0]}, {out_hw[1]}), offset_groups dividing the channels")
        if mask is not None and mask.shape != (n, offset_groups * taps, *out_hw):
            raise _fail(f"mask of shape {mask.shape} is not {(n, offset_groups * taps, *out_hw)}")
        # the undeformed tap positions: (kh*kw, oh, ow) rows and columns
        i, j = np.divmod(np.arange(taps), kw)
        rows = (np.arange(out_hw[0]) * self.stride[0] - self.padding[0])[None, :, None] \
            + (i * self.dilation[0])[:, None, None]
        columns = (np.arange(out_hw[1]) * self.stride[1] - self.padding[1])[None, None, :] \
            + (j * self.dilation[1])[:, None, None]
        moves = offset.reshape(n, offset_groups, taps, 2, *out_hw)
        per_group = channels // offset_groups
        sampled = []  # per offset group: (N, C/offset_groups, kh*kw, oh, ow)
        for g in range(offset_groups):
            y, x_position = rows + moves[:, g, :, 0], columns + moves[:, g, :, 1]
            values = bilinear_taps(x[:, g * per_group:(g + 1) * per_group], y, x_position)
            if mask is not None:
                values *= mask.reshape(n, offset_groups, taps, *out_hw)[:, g, None]
            sampled.append(values)
        cols = np.concatenate(sampled, axis=1).reshape(n, self.groups, c_group * taps, -1)   # (N, G, C/G*K, P)
        out = np.matmul(self._weight.reshape(self.groups, c_out // self.groups, c_group * taps), cols)
        out = out.reshape(n, c_out, *out_hw)
        if self._bias is not None:
            out += self._bias.reshape(-1, 1, 1)
        return [out]


# -- RoIAlign ------------------------------------------------------------------------------

def interpolation_matrix(start: np.float32, bin_size: np.float32, grid: int, bins: int, size: int) -> np.ndarray:
    """(bins, size): row ``b`` sums the bilinear weights of bin ``b``'s ``grid`` samples along
    an axis of ``size``, as RoIAlign places and clamps them (a sample more than a pixel
    outside reads nothing; one within a pixel is clamped to the edge). In float32, in
    torchvision's order of operations, so that the samples land exactly where its samples do."""
    matrix = np.zeros((bins, size), np.float32)
    if grid < 1:
        return matrix
    f32 = np.float32
    steps = (np.arange(grid, dtype=f32) + f32(0.5)) * bin_size / f32(grid)
    samples = (start + np.arange(bins, dtype=f32) * bin_size)[:, None] + steps[None, :]
    valid = (samples >= -1.0) & (samples <= size)
    position = np.where(valid, np.maximum(samples, f32(0)), f32(0))
    low = position.astype(np.int64)                      # truncation, as (int) on a non-negative value
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    fraction = np.where(at_edge, f32(0), position - low.astype(f32)) * valid
    bin_of = np.broadcast_to(np.arange(bins)[:, None], samples.shape)
    np.add.at(matrix, (bin_of, low), (f32(1) - fraction) * valid)
    np.add.at(matrix, (bin_of, high), fraction)
    return matrix


def roi_rows(rois: Any) -> np.ndarray:
    """The boxes as (K, 5) rows (image, x1, y1, x2, y2): a (K, 5) array, or a list of (L, 4)
    boxes per image (torchvision's two forms)."""
    if isinstance(rois, (list, tuple)):
        parts = [np.asarray(boxes, np.float32).reshape(-1, 4) for boxes in rois]
        rows = [np.concatenate([np.full((len(b), 1), i, np.float32), b], axis=1) for i, b in enumerate(parts)]
        return np.concatenate(rows or [np.zeros((0, 5), np.float32)])
    rois = np.asarray(rois, np.float32)
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise _fail(f"rois of shape {rois.shape} are not (K, 5) rows (image, x1, y1, x2, y2)")
    return rois


@register_layer("torchvision.ops.RoIAlign")
class RoIAlign(NonParamLayer):
    """RoIAlign: inputs (features (N, C, H, W), rois); output (K, C, *output_size)."""

    def __init__(self, layer_name: str, output_size: Pair, spatial_scale: float, sampling_ratio: int, aligned: bool):
        super().__init__(layer_name)
        self.output_size, self.spatial_scale = output_size, spatial_scale
        self.sampling_ratio, self.aligned = sampling_ratio, aligned

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> RoIAlign:
        if len(op.input_operands_seq) != 2:
            raise op.error(f"RoIAlign takes (input, rois), got {len(op.input_operands_seq)} inputs",
                           Status.kParameterInvalidValue)
        output_size = op.param_ints("output_size", 2, Status.kParameterMissingOutHW)
        if min(output_size) < 1:
            raise op.error(f"output_size {output_size} must be positive", Status.kParameterMissingOutHW)
        scale = op.param_float("spatial_scale", Status.kParameterMissingScale)
        if not math.isfinite(scale):
            raise op.error(f"spatial_scale {scale} must be finite", Status.kParameterMissingScale)
        return cls(op.name, output_size, scale, op.param_int("sampling_ratio", Status.kParameterInvalidValue),
                   op.param_bool("aligned", Status.kParameterInvalidValue, default=False))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        features, rois = np.asarray(inputs[0]), roi_rows(inputs[1])
        if features.ndim != 4:
            raise _fail(f"input of shape {features.shape} is not (N, C, H, W)")
        n, channels, height, width = features.shape
        pooled_h, pooled_w = self.output_size
        out = np.zeros((len(rois), channels, pooled_h, pooled_w), np.float32)
        f32 = np.float32
        shift = f32(0.5) if self.aligned else f32(0)
        for k, row in enumerate(rois):
            image = int(row[0])
            if not 0 <= image < n:
                raise _fail(f"roi {k} names image {row[0]} of a batch of {n}")
            x1, y1, x2, y2 = (f32(v) * f32(self.spatial_scale) - shift for v in row[1:])
            roi_w, roi_h = x2 - x1, y2 - y1
            if not self.aligned:  # malformed boxes become 1 x 1
                roi_w, roi_h = max(roi_w, f32(1)), max(roi_h, f32(1))
            bin_h, bin_w = roi_h / f32(pooled_h), roi_w / f32(pooled_w)
            grid_h = self.sampling_ratio if self.sampling_ratio > 0 else math.ceil(roi_h / f32(pooled_h))
            grid_w = self.sampling_ratio if self.sampling_ratio > 0 else math.ceil(roi_w / f32(pooled_w))
            count = max(grid_h * grid_w, 1)
            rows = interpolation_matrix(y1, bin_h, grid_h, pooled_h, height)
            columns = interpolation_matrix(x1, bin_w, grid_w, pooled_w, width)
            out[k] = np.einsum("ph,chw,qw->cpq", rows, features[image].astype(np.float32), columns) / count
        return [out]
