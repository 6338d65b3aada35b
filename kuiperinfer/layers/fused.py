"""Layers the graph optimiser makes by fusing operators; pnnx never writes their types.

* ``kuiper.PointwiseDepthwise``: a 1x1 convolution and the depthwise convolution that
  alone reads it (the expansion and filter of a MobileNet/EfficientNet block), computed
  a stripe of rows at a time (:mod:`kuiperinfer.kernels.pointwise_depthwise`), so the
  expanded tensor never exists whole. The operator is the depthwise one, with the 1x1
  convolution's weight, bias and activation under the ``pointwise.`` prefix.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.pointwise_depthwise import pointwise_depthwise
from kuiperinfer.layers.activation import read_fused_activation
from kuiperinfer.layers.base import Layer
from kuiperinfer.layers.convolution import Convolution, ConvGeometry, as_2d, check_channels
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator

POINTWISE_DEPTHWISE = "kuiper.PointwiseDepthwise"
POINTWISE = "pointwise."
"""Prefix of the 1x1 convolution's weight, bias and activation on a fused operator."""
POINTWISE_GEOMETRY = ConvGeometry((1, 1), (1, 1), (1, 1), ((0, 0), (0, 0)), "zeros", 1)


@register_layer(POINTWISE_DEPTHWISE)
class PointwiseDepthwise(Layer):
    """``depthwise(pointwise(x))`` of two nn.Conv2d layers, each with its bias and
    activation, computed in stripes; the two are :attr:`pointwise` and :attr:`depthwise`."""

    batch_independent = True

    def __init__(self, layer_name: str, pointwise: Convolution, depthwise: Convolution):
        super().__init__(layer_name)
        self.pointwise, self.depthwise = pointwise, depthwise

    @classmethod
    def create(cls, op: RuntimeOperator) -> "PointwiseDepthwise":
        depthwise = Convolution.create(op)
        expanded = op.param_int("in_channels", Status.kParameterMissingInChannel)
        c_in = op.param_int(POINTWISE + "in_channels", Status.kParameterMissingInChannel)
        weight = op.weight(POINTWISE + "weight", (expanded, c_in, 1, 1))
        bias = op.weight(POINTWISE + "bias", (expanded,)) if op.has_weight(POINTWISE + "bias") else None
        pointwise = Convolution(op.name + "." + POINTWISE.rstrip("."), weight, bias, POINTWISE_GEOMETRY, 2,
                                read_fused_activation(op, POINTWISE))
        return cls(op.name, pointwise, depthwise)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, geometry = as_2d(inputs[0], 2), self.depthwise.geometry
        check_channels(x, self.pointwise.packed.in_channels)
        padded_hw = [size + before + after for size, (before, after) in zip(x.shape[2:], geometry.padding)]
        out = pointwise_depthwise(np.ascontiguousarray(nhwc(x)), self.pointwise.packed.gemm[0],
                                  self.pointwise.epilogue, self.depthwise.packed.depthwise, geometry.stride,
                                  geometry.padding, geometry.output_hw(padded_hw), self.depthwise.epilogue)
        out = nchw(out)
        return [out if self.depthwise.channels_last else np.ascontiguousarray(out)]
