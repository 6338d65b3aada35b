"""Layers the graph optimiser makes by fusing operators; pnnx never writes their types.

Each reads its operator's record (:mod:`kuiperinfer.layers.fusion`), which says what the
operator computes:

* ``kuiper.PointwiseDepthwise``: a 1x1 convolution and the depthwise convolution that
  alone reads it (the expansion and filter of a MobileNet/EfficientNet block), computed
  a stripe of rows at a time (:mod:`kuiperinfer.kernels.depthwise_stripes`), so the
  expanded tensor never exists whole.
* ``kuiper.SqueezeExcitation``: a squeeze-and-excitation gate (MobileNetV3, EfficientNet):
  ``x * expand(reduce(mean of x over H and W))``, where ``reduce`` and ``expand`` are 1x1
  convolutions with their activations. pnnx writes it as five operators on (N, C, 1, 1)
  values, each costing more in calls than in arithmetic; here it is two small products
  between a global mean and one multiplication.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.compiled.depthwise import pointwise_depthwise
from kuiperinfer.kernels.compiled.squeeze_excitation import CompiledSqueezeExcitation
from kuiperinfer.kernels.depthwise_stripes import depthwise_in_stripes
from kuiperinfer.kernels.jit import kernel_array
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.pooling import global_avg_pool2d
from kuiperinfer.layers.base import Layer, batched
from kuiperinfer.layers.convolution import Convolution, PointwiseProduct, as_2d, check_channels, from_2d
from kuiperinfer.layers.fusion import Pointwise, PointwiseDepthwiseFusion, SqueezeExcitationFusion
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.registry import register_layer


def pointwise_product(op: RuntimeOperator, pointwise: Pointwise, what: str, compiled: bool) -> PointwiseProduct:
    """The product computing the 1x1 convolution ``what`` of the fused ``op``."""
    weight, bias = pointwise.weight, pointwise.bias
    if weight.ndim != 4 or weight.shape[2:] != (1, 1):
        raise op.error(f"the {what} convolution's weight has shape {weight.shape}, expected (out, in, 1, 1)",
                       Status.kAttrWrongSize)
    if bias is not None and bias.shape != weight.shape[:1]:
        raise op.error(f"the {what} convolution's bias has shape {bias.shape}, expected {weight.shape[:1]}",
                       Status.kAttrWrongSize)
    return PointwiseProduct(weight, bias, pointwise.activation, compiled)


def fusion_record(op: RuntimeOperator, record_class: type) -> Any:
    """``op``'s record, checked to be a ``record_class``."""
    if not isinstance(op.fusion, record_class):
        raise op.error(f"{op.type} is made by the graph optimiser and needs its {record_class.__name__} record",
                       Status.kParameterInvalidValue)
    return op.fusion


@register_layer(PointwiseDepthwiseFusion.TYPE)
class PointwiseDepthwise(Layer):
    """``depthwise(pointwise(x))`` of two nn.Conv2d layers, each with its bias and
    activation, computed in stripes; the two are :attr:`pointwise` and :attr:`depthwise`."""

    fusion = PointwiseDepthwiseFusion
    compiled_kernels = True

    def __init__(self, layer_name: str, pointwise: PointwiseProduct, depthwise: Convolution):
        super().__init__(layer_name)
        self.pointwise, self.depthwise = pointwise, depthwise

    @classmethod
    def create(cls, op: RuntimeOperator) -> PointwiseDepthwise:
        record = fusion_record(op, PointwiseDepthwiseFusion)
        pointwise = pointwise_product(op, record.pointwise, "1x1", record.compiled)
        depthwise = Convolution.create_fused(op, replace(record.depthwise, compiled=record.compiled))
        if pointwise.out_channels != depthwise.packed.in_channels or depthwise.packed.depthwise is None:
            raise op.error(f"the 1x1 convolution makes {pointwise.out_channels} channels, the depthwise "
                           f"one takes {depthwise.packed.in_channels}", Status.kAttrWrongSize)
        layer = cls(op.name, pointwise, depthwise)
        layer.batch_independent = batched(op, 2)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        (x, unbatched), geometry = as_2d(inputs[0], 2, "conv2d"), self.depthwise.geometry
        check_channels(x, self.pointwise.in_channels)
        compiled = self.depthwise.packed.compiled_depthwise
        if compiled is not None:
            out = nchw(pointwise_depthwise(nhwc(x), self.pointwise.matrix, self.pointwise.epilogue, compiled,
                                           geometry.stride, geometry.padding))
        else:
            padded_hw = [size + before + after for size, (before, after) in zip(x.shape[2:], geometry.padding)]
            out = nchw(depthwise_in_stripes(np.ascontiguousarray(nhwc(x)), self.depthwise.packed.depthwise,
                                            geometry.stride, geometry.padding, geometry.output_hw(padded_hw),
                                            self.depthwise.epilogue, self.pointwise.matrix, self.pointwise.epilogue))
        out = from_2d(out, 2, unbatched)
        return [out if self.depthwise.channels_last else np.ascontiguousarray(out)]


@register_layer(SqueezeExcitationFusion.TYPE)
class SqueezeExcitation(Layer):
    """``x * expand(reduce(global mean of x))``: :attr:`reduce` and :attr:`expand` are the two
    1x1 convolutions (with their activations), computed as products of (N, C) rows."""

    fusion = SqueezeExcitationFusion
    compiled_kernels = True

    def __init__(self, layer_name: str, reduce: PointwiseProduct, expand: PointwiseProduct, compiled: bool = False):
        super().__init__(layer_name)
        self.reduce, self.expand = reduce, expand
        self.compiled = CompiledSqueezeExcitation(reduce.matrix, reduce.epilogue, expand.matrix,
                                                  expand.epilogue) if compiled else None
        """The compiled kernel doing it all in one call (None: the NumPy reference)."""

    @classmethod
    def create(cls, op: RuntimeOperator) -> SqueezeExcitation:
        record = fusion_record(op, SqueezeExcitationFusion)
        reduce = pointwise_product(op, record.reduce, "reducing", record.compiled)
        expand = pointwise_product(op, record.expand, "expanding", record.compiled)
        if (expand.in_channels, expand.out_channels) != (reduce.out_channels, reduce.in_channels):
            raise op.error(f"the expanding convolution maps {expand.in_channels} to {expand.out_channels} "
                           f"channels, expected {reduce.out_channels} to {reduce.in_channels}", Status.kAttrWrongSize)
        layer = cls(op.name, reduce, expand, record.compiled)
        layer.batch_independent = batched(op, 2)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_2d(inputs[0], 2, "squeeze-and-excitation")
        check_channels(x, self.reduce.in_channels)
        if self.compiled is not None:
            return [from_2d(nchw(self.compiled(kernel_array(nhwc(x)))), 2, unbatched)]
        gate = self.expand(self.reduce(global_avg_pool2d(x.astype(np.float32, copy=False))))
        return [from_2d(x * gate.reshape(*gate.shape, 1, 1), 2, unbatched)]
