"""Convolution layers the graph optimiser makes by fusing operators; pnnx never writes their types.

Each reads its operator's plan, defined beside it, which says what the operator computes:

* ``kuiper.PointwiseDepthwise``: a 1x1 convolution and the depthwise convolution that
  alone reads it (the expansion and filter of a MobileNet/EfficientNet block), computed
  a stripe of rows at a time (:mod:`kuiperinfer.kernels.depthwise_stripes`), so the
  expanded tensor never exists whole.
* ``kuiper.StemDepthwise``: a convolution of few input channels computed directly (a
  network's stem) and the depthwise convolution that alone reads it, computed a stripe of
  rows at a time (:mod:`kuiperinfer.kernels.compiled.stem_depthwise`) where both run compiled
  kernels (the stem computed directly, in fp32 or int8), so that the stem's output, the
  largest value of a MobileNet or EfficientNet, never exists whole; else one after the other.
* ``kuiper.SqueezeExcitation``: a squeeze-and-excitation gate (MobileNetV3, EfficientNet):
  ``x * expand(reduce(mean of x over H and W))``, where ``reduce`` and ``expand`` are 1x1
  convolutions with their activations. pnnx writes it as five operators on (N, C, 1, 1)
  values, each costing more in calls than in arithmetic; here it is two small products
  between a global mean and one multiplication.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.compiled.depthwise import StripesCall, TiledStripes, float_pointwise, pointwise_depthwise
from kuiperinfer.kernels.compiled.squeeze_excitation import (
    CompiledInt8SqueezeExcitation,
    CompiledSqueezeExcitation,
    Int8Gate,
)
from kuiperinfer.kernels.compiled.stem_depthwise import StemDepthwise as StemDepthwiseWalk
from kuiperinfer.kernels.compiled.stem_depthwise import StemDepthwiseCall
from kuiperinfer.kernels.depthwise_stripes import depthwise_in_stripes
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.jit import kernel_array
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.matrix import int8
from kuiperinfer.kernels.matrix.convolution import DirectInt8Convolution
from kuiperinfer.kernels.matrix.products import Int8Product, Requantize
from kuiperinfer.kernels.pooling import global_avg_pool2d
from kuiperinfer.layers.base import Layer, batched, requantize_for
from kuiperinfer.layers.convolution import (
    ConvGeometry,
    Convolution,
    ConvolutionPlan,
    PointwiseProduct,
    as_2d,
    check_channels,
    depthwise_form,
    from_2d,
    requantized,
)
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


@dataclass(frozen=True, eq=False)
class Pointwise:
    """A 1x1, stride-1, single-group convolution folded into a fused operator."""

    source: str
    """The name of its operator before the optimiser fused it: what its product is called
    when the fused layer asks the build options for its precision."""
    weight: np.ndarray
    """(out, in, 1, 1)."""
    bias: np.ndarray | None
    activation: InplaceActivation | None


@dataclass(frozen=True, eq=False)
class PointwiseDepthwisePlan:
    """The plan of a ``kuiper.PointwiseDepthwise`` operator, ``depthwise(pointwise(x))``: the
    operator is the depthwise nn.Conv2d (its parameters and weight are the operator's own),
    reading the 1x1 convolution's input."""

    TYPE: ClassVar[str] = "kuiper.PointwiseDepthwise"
    pointwise: Pointwise
    depthwise: ConvolutionPlan
    quantized_for: str | None = None
    """The int8 product (by name) whose uint8 input form the output is handed on in, if any."""


@dataclass(frozen=True, eq=False)
class Stem:
    """A convolution of few input channels, computed directly, folded into a fused operator."""

    source: str
    """The name of its operator before the optimiser fused it (its precision's and calibration's)."""
    weight: np.ndarray
    """(out, in, kh, kw)."""
    bias: np.ndarray | None
    geometry: ConvGeometry
    plan: ConvolutionPlan
    """Its own plan: the activation and padding passes folded into it."""


@dataclass(frozen=True, eq=False)
class StemDepthwisePlan:
    """The plan of a ``kuiper.StemDepthwise`` operator, ``depthwise(stem(x))``: the operator is
    the depthwise nn.Conv2d (its parameters and weight are the operator's own), reading the
    stem's input."""

    TYPE: ClassVar[str] = "kuiper.StemDepthwise"
    stem: Stem
    depthwise: ConvolutionPlan
    quantized_for: str | None = None
    """The int8 product (by name) whose uint8 input form the output is handed on in, if any."""


@dataclass(frozen=True, eq=False)
class SqueezeExcitationPlan:
    """The plan of a ``kuiper.SqueezeExcitation`` operator, ``x * expand(reduce(mean of x over
    H and W))``: the operator is the global average pooling, reading ``x``."""

    TYPE: ClassVar[str] = "kuiper.SqueezeExcitation"
    reduce: Pointwise
    expand: Pointwise


def pointwise_product(op: RuntimeOperator, pointwise: Pointwise, what: str, options: BuildOptions,
                      requantize: Requantize | None = None, tiles: bool = False) -> PointwiseProduct:
    """The product computing the 1x1 convolution ``what`` of the fused ``op``, in the precision
    its operator had before it was fused (int8 outputs handed on as uint8 in the form
    ``requantize`` says; fp32 on the float32 tiles where ``tiles`` asks)."""
    weight, bias = pointwise.weight, pointwise.bias
    if weight.ndim != 4 or weight.shape[2:] != (1, 1):
        raise op.error(f"the {what} convolution's weight has shape {weight.shape}, expected (out, in, 1, 1)",
                       Status.kAttrWrongSize)
    if bias is not None and bias.shape != weight.shape[:1]:
        raise op.error(f"the {what} convolution's bias has shape {bias.shape}, expected {weight.shape[:1]}",
                       Status.kAttrWrongSize)
    return PointwiseProduct(weight, bias, pointwise.activation, options.compiled,
                            options.precision_of(pointwise.source), requantize, tiles)


def plan_of(op: RuntimeOperator, plan_class: type) -> Any:
    """``op``'s plan, checked to be a ``plan_class``."""
    if not isinstance(op.plan, plan_class):
        raise op.error(f"{op.type} is made by the graph optimiser and needs its {plan_class.__name__}",
                       Status.kParameterInvalidValue)
    return op.plan


@register_layer(PointwiseDepthwisePlan.TYPE)
class PointwiseDepthwise(Layer):
    """``depthwise(pointwise(x))`` of two nn.Conv2d layers, each with its bias and
    activation, computed in stripes; the two are :attr:`pointwise` and :attr:`depthwise`."""

    plan_class = PointwiseDepthwisePlan

    def __init__(self, layer_name: str, pointwise: PointwiseProduct, depthwise: Convolution, source: str,
                 requantize: Requantize | None = None):
        super().__init__(layer_name)
        self.pointwise, self.depthwise = pointwise, depthwise
        """The 1x1 product (in its precision) and the depthwise convolution (fp32: no product)."""
        self.products = (source,)
        self.requantize = requantize
        """The uint8 form the output is handed on in (int8), or None for float32."""
        product, compiled = pointwise.product, depthwise.packed.compiled_depthwise
        self._form = depthwise_form(compiled, requantize)
        """The form the compiled depthwise kernel stores the output in, where it can (its
        activation computed in registers); else the float32 output is quantized after it."""
        tiled = compiled is not None and product is not None and product.kernel.dot is not None
        self._stripe_product = TiledStripes(product.tiles(), compiled) if tiled else \
            self._reduced_rows if product is not None else \
            float_pointwise(pointwise.matrix, pointwise.epilogue) if pointwise.matrix is not None else None
        """How the stripes compute the 1x1 product, chosen once: on its compiled tiles with the
        compiled depthwise kernel, through the bf16 or int8 product's reference, or through BLAS."""
        self._bound: dict[tuple[object, ...], tuple[StripesCall, bool]] = {}
        """For each shape, strides and type of channels-last input, the tiled stripes' call and
        whether the input goes to it in the product's form (float32 quantized to uint8): a run
        plan's step, made on the first call."""

    @classmethod
    def input_product(cls, op: RuntimeOperator) -> str | None:
        return op.plan.pointwise.source if isinstance(op.plan, PointwiseDepthwisePlan) else None

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> PointwiseDepthwise:
        plan = plan_of(op, PointwiseDepthwisePlan)
        depthwise = Convolution.create_planned(op, options, plan.depthwise)
        # the compiled stripes take fp32's 1x1 product on the float32 tiles, for every activation
        # (MobileNetV3's hardswish, applied after the tiles' sums, included: a run of
        # MobileNetV3-Small 15% faster than through BLAS and a stripe loop in Python)
        pointwise = pointwise_product(op, plan.pointwise, "1x1", options,
                                      tiles=depthwise.packed.compiled_depthwise is not None)
        if pointwise.out_channels != depthwise.packed.in_channels or depthwise.packed.depthwise is None:
            raise op.error(f"the 1x1 convolution makes {pointwise.out_channels} channels, the depthwise "
                           f"one takes {depthwise.packed.in_channels}", Status.kAttrWrongSize)
        layer = cls(op.name, pointwise, depthwise, plan.pointwise.source, requantize_for(options, plan.quantized_for))
        layer.batch_independent = batched(op, 2)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        bound = self._bound.get((inputs[0].shape, inputs[0].strides, inputs[0].dtype))
        if bound is not None:
            call, convert = bound
            return [nchw(call(nhwc(self.pointwise.product.activations(inputs[0]) if convert else inputs[0])))]
        (x, unbatched), geometry = as_2d(inputs[0], 2, "conv2d"), self.depthwise.geometry
        check_channels(x, self.pointwise.in_channels)
        compiled, product = self.depthwise.packed.compiled_depthwise, self.pointwise.product
        if compiled is not None:
            out = nchw(pointwise_depthwise(nhwc(x if product is None else product.activations(x)),
                                           self._stripe_product, self.pointwise.out_channels, compiled,
                                           geometry.stride, geometry.padding, self._form))
        elif product is not None:   # the 1x1 product whole, then the depthwise convolution
            expanded = product(np.ascontiguousarray(nhwc(x)).reshape(-1, x.shape[1]))
            out = nchw(self.depthwise.kernel(nchw(expanded.reshape(*nhwc(x).shape[:3], -1))))
        else:
            padded_hw = [size + before + after for size, (before, after) in zip(x.shape[2:], geometry.padding)]
            out = nchw(depthwise_in_stripes(np.ascontiguousarray(nhwc(x)), self.depthwise.packed.depthwise,
                                            geometry.stride, geometry.padding, geometry.output_hw(padded_hw),
                                            self.depthwise.epilogue, self.pointwise.matrix, self.pointwise.epilogue))
        out = from_2d(requantized(out, self.requantize, compiled is not None), 2, unbatched)
        self._bind(inputs[0])
        return [out if self.depthwise.plan.channels_last else np.ascontiguousarray(out)]

    def _bind(self, x: np.ndarray) -> None:
        """Keep the bound call for input like ``x`` where the tiled stripes take its pixels as they lie
        and their output is the layer's (channels-last, in the form handed on)."""
        stripes, geometry = self._stripe_product, self.depthwise.geometry
        if (isinstance(stripes, TiledStripes) and x.ndim == 4 and nhwc(x).flags.c_contiguous
                and self.depthwise.plan.channels_last and (self.requantize is None or self._form is not None)):
            form = self.pointwise.product.in_dtype
            call = stripes.call(nhwc(x).shape, np.dtype(form), self.pointwise.out_channels, geometry.stride,
                                geometry.padding, self._form)
            self._bound[x.shape, x.strides, x.dtype] = (call, x.dtype != form)

    def _reduced_rows(self, rows: np.ndarray, out: np.ndarray, channels: slice) -> None:
        """A stripe's 1x1 convolution on the bf16 or int8 product's reference
        (:data:`~kuiperinfer.kernels.compiled.depthwise.PointwiseRows`)."""
        self.pointwise.product.multiply(rows, out, columns=(channels.start, channels.stop), shared=False)


@register_layer(StemDepthwisePlan.TYPE)
class StemDepthwise(Layer):
    """``depthwise(stem(x))`` of two nn.Conv2d layers, each with its bias and activation: the
    stem and the depthwise convolution, :attr:`stem` and :attr:`depthwise`."""

    plan_class = StemDepthwisePlan

    def __init__(self, layer_name: str, stem: Convolution, depthwise: Convolution,
                 requantize: Requantize | None = None):
        super().__init__(layer_name)
        self.stem, self.depthwise = stem, depthwise
        """The stem (in its precision) and the depthwise convolution (fp32: no product)."""
        self.products = stem.products
        self.requantize = requantize
        """The uint8 form the output is handed on in (int8), or None for float32."""
        compiled = depthwise.packed.compiled_depthwise
        self._form = depthwise_form(compiled, requantize)
        """The form the compiled depthwise kernel stores the output in, where it can."""
        self.walk: StemDepthwiseWalk | None = None
        """The two in stripes, where both run compiled kernels (a stem computed directly, in
        fp32 or int8); else None, and they run one after the other."""
        self._centred = stem.kernel.centred if isinstance(stem.kernel, DirectInt8Convolution) else None
        """The int8 stem's input as its kernel takes it, centred on its zero point."""
        self._bound: dict[tuple[object, ...], StemDepthwiseCall] = {}
        """The walk's call for each shape, strides and type of input, made on
        the first call."""
        if compiled is None:
            return
        if self._centred is not None:
            direct = stem.kernel
            self.walk = StemDepthwiseWalk(direct.direct, direct.stride, direct.dilation, direct.padding, compiled,
                                          direct.products[0].epilogue_numbers())
        elif stem.packed is not None and stem.packed.direct is not None:
            swept = stem.geometry
            self.walk = StemDepthwiseWalk(stem.packed.direct, swept.stride, swept.dilation, swept.padding, compiled)

    @classmethod
    def input_product(cls, op: RuntimeOperator) -> str | None:
        return op.plan.stem.source if isinstance(op.plan, StemDepthwisePlan) else None

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> StemDepthwise:
        plan = plan_of(op, StemDepthwisePlan)
        depthwise = Convolution.create_planned(op, options, plan.depthwise)
        stem = plan.stem
        if stem.weight.ndim != 4 or stem.weight.shape[0] != depthwise.packed.in_channels:
            raise op.error(f"the stem's weight has shape {stem.weight.shape}, the depthwise convolution takes "
                           f"{depthwise.packed.in_channels} channels", Status.kAttrWrongSize)
        stem_layer = Convolution(stem.source, stem.weight, stem.bias, stem.geometry, 2, stem.plan,
                                 compiled=options.compiled, precision=options.precision_of(stem.source))
        layer = cls(op.name, stem_layer, depthwise, requantize_for(options, plan.quantized_for))
        layer.batch_independent = batched(op, 2)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        bound = self._bound.get((inputs[0].shape, inputs[0].strides, inputs[0].dtype))
        if bound is not None:
            return [nchw(bound(self._centred(inputs[0]) if self._centred else kernel_array(inputs[0])))]
        if self.walk is None:
            out = self.depthwise.forward(self.stem.forward(inputs[:1]))[0]
            return [requantized(out, self.requantize, self.depthwise.compiled)]
        x, unbatched = as_2d(inputs[0], 2, "conv2d")
        check_channels(x, self.stem.kernel.in_channels if self._centred else self.stem.packed.in_channels)
        geometry = self.depthwise.geometry
        out = nchw(self.walk(self._centred(x) if self._centred else x, geometry.stride, geometry.padding, self._form))
        out = from_2d(requantized(out, self.requantize, True), 2, unbatched)
        if x.ndim == inputs[0].ndim and self.depthwise.plan.channels_last and (self.requantize is None
                                                                               or self._form is not None):
            self._bound[x.shape, x.strides, x.dtype] = self.walk.call(x.shape, geometry.stride, geometry.padding,
                                                                      self._form)
        return [out if self.depthwise.plan.channels_last else np.ascontiguousarray(out)]


@register_layer(SqueezeExcitationPlan.TYPE)
class SqueezeExcitation(Layer):
    """``x * expand(reduce(global mean of x))``: :attr:`reduce` and :attr:`expand` are the two
    1x1 convolutions (with their activations), computed as products of (N, C) rows."""

    plan_class = SqueezeExcitationPlan

    def __init__(self, layer_name: str, reduce: PointwiseProduct, expand: PointwiseProduct, sources: tuple[str, str],
                 compiled: CompiledSqueezeExcitation | CompiledInt8SqueezeExcitation | None = None):
        super().__init__(layer_name)
        self.in_channels = reduce.in_channels
        self.reduce, self.expand = (None, None) if compiled is not None else (reduce, expand)
        """The two products, each in the precision of the convolution it was; None where the
        compiled kernel holds the weights (once, in its own form)."""
        self.products = sources
        self.compiled = compiled
        """The compiled kernel doing it all in one call (:func:`compiled_gate`; None: the NumPy
        reference, which takes the products' inputs in any precision)."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> SqueezeExcitation:
        plan = plan_of(op, SqueezeExcitationPlan)
        # in int8, the reduced channels go to the expanding product as uint8
        reduce = pointwise_product(op, plan.reduce, "reducing", options, requantize_for(options, plan.expand.source))
        expand = pointwise_product(op, plan.expand, "expanding", options)
        if (expand.in_channels, expand.out_channels) != (reduce.out_channels, reduce.in_channels):
            raise op.error(f"the expanding convolution maps {expand.in_channels} to {expand.out_channels} "
                           f"channels, expected {reduce.out_channels} to {reduce.in_channels}", Status.kAttrWrongSize)
        compiled = compiled_gate(plan, reduce, expand) if options.compiled else None
        layer = cls(op.name, reduce, expand, (plan.reduce.source, plan.expand.source), compiled)
        layer.batch_independent = batched(op, 2)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_2d(inputs[0], 2, "squeeze-and-excitation")
        check_channels(x, self.in_channels)
        if self.compiled is not None:
            return [from_2d(nchw(self.compiled(kernel_array(nhwc(x)))), 2, unbatched)]
        gate = self.expand(self.reduce(global_avg_pool2d(x.astype(np.float32, copy=False))))
        return [from_2d(x * gate.reshape(*gate.shape, 1, 1), 2, unbatched)]


def compiled_gate(plan: SqueezeExcitationPlan, reduce: PointwiseProduct,
                  expand: PointwiseProduct) -> CompiledSqueezeExcitation | CompiledInt8SqueezeExcitation | None:
    """The compiled kernel of a squeeze-and-excitation block whose products compute in one
    precision, fp32 or int8 on the compiled int8 products (whose numbers it gives to the bit,
    of the mean the compiled global average pooling gives); None for others."""
    precisions = {reduce.precision.name, expand.precision.name}
    if precisions == {"fp32"}:
        return CompiledSqueezeExcitation(reduce.matrix, reduce.epilogue, expand.matrix, expand.epilogue)
    if precisions != {"int8"} or reduce.product.kernel.dot is None or expand.product.kernel.dot is None:
        return None

    def gate(pointwise: Pointwise, product: Int8Product) -> Int8Gate:
        weight = int8.quantize_weight(pointwise.weight.reshape(pointwise.weight.shape[:2]).T, 1)[0]
        return Int8Gate(weight, product.input_scale, product.zero_point, product.scale, product.epilogue.bias,
                        product.epilogue.activation)
    return CompiledInt8SqueezeExcitation(gate(plan.reduce, reduce.product), gate(plan.expand, expand.product))
