"""Convolution: nn.Conv2d / F.conv2d as im2col plus one GEMM per group.

Parameters are read and the weight is packed once, at build time: ``forward`` only
pads, unfolds and multiplies. Depthwise convolutions take a dedicated kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import InferError, InferStatus, ParseParameterAttrStatus as Status
from kuiperinfer.kernels.depthwise import depthwise_conv2d
from kuiperinfer.kernels.im2col import im2col, output_size
from kuiperinfer.kernels.padding import PAD_MODES, pad_last_dims
from kuiperinfer.layers.base import Layer, ParamLayer
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator


@dataclass(frozen=True)
class ConvGeometry:
    """How a 2-D convolution sweeps its input: everything but the weights."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[tuple[int, int], tuple[int, int]]  # (top, bottom), (left, right)
    padding_mode: str
    groups: int

    @classmethod
    def from_operator(cls, op: RuntimeOperator, kernel: tuple[int, int]) -> "ConvGeometry":
        stride = op.param_ints("stride", 2, Status.kParameterMissingStride, default=(1, 1))
        dilation = op.param_ints("dilation", 2, Status.kParameterMissingUnknown, default=(1, 1))
        groups = op.param_int("groups", Status.kParameterMissingGroups, default=1)
        mode = op.param_str("padding_mode", Status.kParameterMissingPadding, default="zeros")
        if mode not in PAD_MODES:
            raise op.error(f"unsupported padding_mode {mode!r}", Status.kParameterMissingPadding)
        if min(stride) < 1 or min(dilation) < 1 or groups < 1:
            raise op.error(f"stride {stride}, dilation {dilation} and groups {groups} must be positive",
                           Status.kParameterInvalidValue)
        padding = op.param_value("padding", (0, 0))
        if isinstance(padding, str):
            if padding == "valid":
                pads = ((0, 0), (0, 0))
            elif padding == "same":
                totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
                pads = tuple((t // 2, t - t // 2) for t in totals)
            else:
                raise op.error(f"unsupported padding {padding!r}", Status.kParameterMissingPadding)
        else:
            ph, pw = op.param_ints("padding", 2, Status.kParameterMissingPadding)
            pads = ((ph, ph), (pw, pw))
        return cls(kernel, stride, dilation, pads, mode, groups)

    def pad(self, x: np.ndarray) -> np.ndarray:
        return pad_last_dims(x, self.padding, self.padding_mode)

    def output_hw(self, padded: np.ndarray) -> tuple[int, int]:
        return (output_size(padded.shape[2], self.kernel[0], self.stride[0], self.dilation[0]),
                output_size(padded.shape[3], self.kernel[1], self.stride[1], self.dilation[1]))


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
           geometry: ConvGeometry) -> np.ndarray:
    """2-D convolution of NCHW ``x`` with ``weight`` (Cout, Cin/groups, kh, kw)."""
    padded = geometry.pad(x)
    oh, ow = geometry.output_hw(padded)
    if oh < 1 or ow < 1:
        raise InferError(f"input {x.shape} is too small for kernel {geometry.kernel} "
                         f"with padding {geometry.padding}", status=InferStatus.kInferFailedOutputSizeError)
    n, groups, c_out = x.shape[0], geometry.groups, weight.shape[0]
    if c_out == groups and weight.shape[1] == 1 and x.shape[1] == groups:
        out = depthwise_conv2d(padded, weight[:, 0], geometry.stride, geometry.dilation, (oh, ow))
    else:
        cols = im2col(padded, geometry.kernel, geometry.stride, geometry.dilation, (oh, ow))
        if groups == 1:
            out = np.matmul(weight.reshape(c_out, -1), cols)
        else:
            cols = cols.reshape(n, groups, -1, oh * ow)
            out = np.matmul(weight.reshape(groups, c_out // groups, -1), cols)
        out = out.reshape(n, c_out, oh, ow)
    if bias is not None:
        out += bias.reshape(-1, 1, 1)
    return out


def _check_channels(x: np.ndarray, weight: np.ndarray, groups: int) -> None:
    if x.ndim != 4 or x.shape[1] != weight.shape[1] * groups:
        raise InferError(f"input of shape {x.shape} does not fit weight {weight.shape} with "
                         f"groups={groups} (expected (N,{weight.shape[1] * groups},H,W))",
                         status=InferStatus.kInferFailedChannelParameterError)


@register_layer("nn.Conv2d")
class Convolution(ParamLayer):
    """nn.Conv2d with its weight (and bias) stored in the model."""

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None,
                 geometry: ConvGeometry):
        self.geometry = geometry
        super().__init__(layer_name, weight, bias)

    @classmethod
    def create(cls, op: RuntimeOperator) -> "Convolution":
        c_out = op.param_int("out_channels", Status.kParameterMissingOutChannel)
        c_in = op.param_int("in_channels", Status.kParameterMissingInChannel)
        kernel = op.param_ints("kernel_size", 2, Status.kParameterMissingKernel)
        geometry = ConvGeometry.from_operator(op, kernel)
        if c_in % geometry.groups or c_out % geometry.groups:
            raise op.error(f"in_channels {c_in} and out_channels {c_out} must be divisible by "
                           f"groups {geometry.groups}", Status.kParameterMissingGroups)
        weight = op.weight("weight", (c_out, c_in // geometry.groups, *kernel))
        use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("bias"))
        bias = op.weight("bias", (c_out,), Status.kAttrMissingBias) if use_bias else None
        return cls(op.name, weight, bias, geometry)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        _check_channels(x, self._weight, self.geometry.groups)
        return [conv2d(x, self._weight, self._bias, self.geometry)]


@register_layer("F.conv2d")
class FunctionalConvolution(Layer):
    """F.conv2d whose weight (and bias) arrive as inputs at run time."""

    def __init__(self, layer_name: str, geometry: ConvGeometry):
        super().__init__(layer_name)
        self.geometry = geometry

    @classmethod
    def create(cls, op: RuntimeOperator) -> "FunctionalConvolution":
        if len(op.input_operands_seq) < 2:
            raise op.error("F.conv2d needs the weight as its second input", Status.kAttrMissingWeight)
        weight_shape = op.input_operands_seq[1].shapes
        if len(weight_shape) != 4 or min(weight_shape[2:]) < 1:
            raise op.error(f"weight operand has shape {weight_shape}, expected (Cout,Cin/groups,kh,kw)",
                           Status.kParameterMissingKernel)
        return cls(op.name, ConvGeometry.from_operator(op, tuple(weight_shape[2:])))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, weight = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        _check_channels(x, weight, self.geometry.groups)
        return [conv2d(x, weight, bias, self.geometry)]
