"""Layers the graph optimiser makes by fusing operators; pnnx never writes their types.

* ``kuiper.PointwiseDepthwise``: a 1x1 convolution and the depthwise convolution that
  alone reads it (the expansion and filter of a MobileNet/EfficientNet block), computed
  a stripe of rows at a time (:mod:`kuiperinfer.kernels.depthwise_stripes`), so the
  expanded tensor never exists whole. The operator is the depthwise one, with the 1x1
  convolution's weight, bias and activation under the ``pointwise.`` prefix.
* ``kuiper.SqueezeExcitation``: a squeeze-and-excitation gate (MobileNetV3, EfficientNet):
  ``x * expand(reduce(mean of x over H and W))``, where ``reduce`` and ``expand`` are 1x1
  convolutions with their activations. pnnx writes it as five operators on (N, C, 1, 1)
  values, each costing more in calls than in arithmetic; here it is two small products
  between a global mean and one multiplication. The operator is the global average
  pooling, with the convolutions' weights, biases and activations under the ``reduce.``
  and ``expand.`` prefixes.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.depthwise_stripes import depthwise_in_stripes
from kuiperinfer.kernels.pooling import global_avg_pool2d
from kuiperinfer.layers.activation import read_fused_activation
from kuiperinfer.layers.base import Layer
from kuiperinfer.layers.convolution import Convolution, ConvGeometry, as_2d, check_channels
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator

POINTWISE_DEPTHWISE = "kuiper.PointwiseDepthwise"
POINTWISE = "pointwise."
"""Prefix of the 1x1 convolution's weight, bias and activation on a fused operator."""
SQUEEZE_EXCITATION = "kuiper.SqueezeExcitation"
REDUCE, EXPAND = "reduce.", "expand."
"""Prefixes of the squeeze-and-excitation convolutions' weights, biases and activations."""
POINTWISE_GEOMETRY = ConvGeometry((1, 1), (1, 1), (1, 1), ((0, 0), (0, 0)), "zeros", 1)


def read_pointwise(op: RuntimeOperator, prefix: str) -> Convolution:
    """The 1x1 convolution whose weight, bias and activation ``op`` carries under ``prefix``."""
    weight = op.weight(prefix + "weight", copy=False)
    if weight.ndim != 4 or weight.shape[2:] != (1, 1):
        raise op.error(f"{prefix}weight has shape {weight.shape}, expected (out, in, 1, 1)",
                       Status.kAttrWrongSize)
    bias = op.weight(prefix + "bias", weight.shape[:1]) if op.has_weight(prefix + "bias") else None
    return Convolution(op.name + "." + prefix.rstrip("."), weight, bias, POINTWISE_GEOMETRY, 2,
                       read_fused_activation(op, prefix))


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
        depthwise, pointwise = Convolution.create(op), read_pointwise(op, POINTWISE)
        if pointwise.weights().shape[0] != depthwise.packed.in_channels:
            raise op.error(f"the 1x1 convolution makes {pointwise.weights().shape[0]} channels, the depthwise "
                           f"one takes {depthwise.packed.in_channels}", Status.kAttrWrongSize)
        return cls(op.name, pointwise, depthwise)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, geometry = as_2d(inputs[0], 2), self.depthwise.geometry
        check_channels(x, self.pointwise.packed.in_channels)
        padded_hw = [size + before + after for size, (before, after) in zip(x.shape[2:], geometry.padding)]
        out = depthwise_in_stripes(np.ascontiguousarray(nhwc(x)), self.depthwise.packed.depthwise, geometry.stride,
                                   geometry.padding, geometry.output_hw(padded_hw), self.depthwise.epilogue,
                                   self.pointwise.packed.gemm[0], self.pointwise.epilogue)
        out = nchw(out)
        return [out if self.depthwise.channels_last else np.ascontiguousarray(out)]


@register_layer(SQUEEZE_EXCITATION)
class SqueezeExcitation(Layer):
    """``x * expand(reduce(global mean of x))``: :attr:`reduce` and :attr:`expand` are the two
    1x1 convolutions (with their activations), computed as products of (N, C) rows."""

    batch_independent = True

    def __init__(self, layer_name: str, reduce: Convolution, expand: Convolution):
        super().__init__(layer_name)
        self.reduce, self.expand = reduce, expand

    @classmethod
    def create(cls, op: RuntimeOperator) -> "SqueezeExcitation":
        reduce, expand = read_pointwise(op, REDUCE), read_pointwise(op, EXPAND)
        channels, squeezed = reduce.weights().shape[1], reduce.weights().shape[0]
        if expand.weights().shape[:2] != (channels, squeezed):
            raise op.error(f"{EXPAND}weight has shape {expand.weights().shape}, expected "
                           f"({channels}, {squeezed}, 1, 1)", Status.kAttrWrongSize)
        return cls(op.name, reduce, expand)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = as_2d(inputs[0], 2)
        check_channels(x, self.reduce.packed.in_channels)
        hidden = np.matmul(global_avg_pool2d(x.astype(np.float32, copy=False)), self.reduce.packed.gemm[0])
        self.reduce.epilogue(hidden)
        gate = np.matmul(hidden, self.expand.packed.gemm[0])
        self.expand.epilogue(gate)
        return [x * gate.reshape(*gate.shape, 1, 1)]
