"""The optimiser's passes, in the order :func:`optimize` runs them.

* :func:`fold_batch_norm`: a BatchNorm right after a convolution (pnnx folds most; it
  leaves those it cannot prove safe) becomes part of the convolution's weight and bias.
* :func:`fold_zero_padding`: zero padding right before a convolution becomes the
  convolution's own (per-side) padding.
* :func:`fuse_activation`: an activation right after a convolution, a linear layer or
  an arithmetic expression (or after reshapes and permutations of its output) is applied
  in place on that operator's fresh output (ncnn's ``activation_type``), and its operator
  disappears.
* :func:`fuse_pointwise_depthwise`: a 1x1 convolution whose output only a depthwise
  convolution reads becomes one operator with it, computed a stripe of rows at a time
  (:mod:`kuiperinfer.kernels.depthwise_stripes`).
* :func:`fuse_squeeze_excitation`: global average pooling, two 1x1 convolutions and the
  multiplication of the pooled input by their result (a squeeze-and-excitation gate)
  become one operator.
* :func:`fuse_residual_add`: the addition of a residual to a convolution's output (with
  any activation fused into it) is done by the convolution, in place on its fresh output.
* :func:`select_winograd`: 3x3 stride-1 convolutions take Winograd F(4x4, 3x3)
  (:mod:`kuiperinfer.kernels.winograd`) where it pays.
* :func:`select_channels_last`: convolutions (and learned 2x upsampling) hand on their
  output in channels-last memory (:mod:`kuiperinfer.kernels.layout`), as they compute it.
* :func:`select_compiled_kernels`: every layer that has compiled kernels runs them, where
  Numba imported (:mod:`kuiperinfer.kernels.jit`).

A pass takes the graph and returns how many rewrites it made. It learns what an operator
is from the :class:`LayerRegisterer`'s classes, without building layers; it edits the
graph through :mod:`kuiperinfer.optimizer.rewrite` and records what it fused in typed
records (:mod:`kuiperinfer.layers.fusion`) that the layers read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from kuiperinfer.errors import GraphError, KuiperError
from kuiperinfer.kernels import jit
from kuiperinfer.kernels.winograd import MIN_CHANNELS
from kuiperinfer.layers.activation import InplaceActivationLayer
from kuiperinfer.layers.convolution import ConvGeometry, Convolution, TransposedConvolution, spatial_rank
from kuiperinfer.layers.expression import ExpressionLayer
from kuiperinfer.layers.fusion import (
    ConvolutionFusion,
    KernelChoice,
    Pointwise,
    PointwiseDepthwiseFusion,
    SqueezeExcitationFusion,
)
from kuiperinfer.layers.normalization import BatchNorm
from kuiperinfer.layers.normalization import fold_batch_norm as batch_norm_scale_shift
from kuiperinfer.layers.padding import Pad
from kuiperinfer.layers.pooling import AdaptiveAvgPooling
from kuiperinfer.optimizer.rewrite import absorb_consumer, absorb_producer, add_input, fuse, set_weight, sole_consumer
from kuiperinfer.pnnx.ir import numpy_dtype
from kuiperinfer.runtime.graph import GraphState, RuntimeGraph
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.registry import LayerRegisterer

Pass = Callable[[RuntimeGraph], int]


def is_a(op: RuntimeOperator | None, layer_class: type) -> bool:
    """Whether the registry computes ``op`` with ``layer_class`` (or a subclass)."""
    registered = LayerRegisterer.layer_class(op.type) if op is not None else None
    return registered is not None and issubclass(registered, layer_class)


def convolution_fusion(conv: RuntimeOperator) -> ConvolutionFusion:
    """The record of a convolution, empty while no pass has written one."""
    return conv.fusion or ConvolutionFusion()


def geometry(conv: RuntimeOperator) -> ConvGeometry:
    """How a convolution sweeps its input, with any padding a pass folded in."""
    swept = ConvGeometry.from_operator(conv, conv.param_ints("kernel_size", spatial_rank(conv)))
    padding = convolution_fusion(conv).padding
    return swept if padding is None else replace(swept, padding=padding)


def is_conv2d(op: RuntimeOperator | None) -> bool:
    return is_a(op, Convolution) and spatial_rank(op) == 2


def fold_batch_norm(graph: RuntimeGraph) -> int:
    """conv -> BatchNorm becomes one conv with ``W * scale`` and ``b * scale + shift``."""
    folded = 0
    for conv in list(graph.operators):
        bn = sole_consumer(conv) if is_a(conv, Convolution) else None
        if not is_a(bn, BatchNorm):
            continue
        weight, bias, mean, var, eps = BatchNorm.statistics(bn)
        conv_weight = conv.weight("weight")
        if mean.size != conv_weight.shape[0]:
            continue  # mismatched channels: leave the error to the layers
        scale, shift = batch_norm_scale_shift(mean, var, weight, bias, eps)
        conv_bias = conv.weight("bias") if conv.param_bool("bias", default=conv.has_weight("bias")) else 0
        conv_weight *= scale.reshape((-1,) + (1,) * (conv_weight.ndim - 1))
        set_weight(conv, "weight", conv_weight)
        set_weight(conv, "bias", conv_bias * scale + shift)
        absorb_consumer(graph, conv, bn)
        folded += 1
    return folded


def fold_zero_padding(graph: RuntimeGraph) -> int:
    """Zero padding (F.pad, nn.ZeroPad2d, ...) of H and W right before a zero-padded
    nn.Conv2d becomes part of the convolution's padding, which may then differ per side."""
    folded = 0
    for pad in list(graph.operators):
        conv = sole_consumer(pad) if is_a(pad, Pad) else None
        if not is_conv2d(conv) or conv.param_value("padding_mode", "zeros") != "zeros":
            continue
        pads, mode, value = Pad.read_params(pad)
        amounts = ((0, 0),) * (2 - len(pads)) + pads[-2:]
        if mode != "constant" or value != 0 or len(pads) > 2 or min(min(pair) for pair in amounts) < 0:
            continue
        (top, bottom), (left, right) = geometry(conv).padding
        padding = ((top + amounts[0][0], bottom + amounts[0][1]), (left + amounts[1][0], right + amounts[1][1]))
        fuse(conv, replace(convolution_fusion(conv), padding=padding))
        absorb_producer(graph, conv, pad)
        folded += 1
    return folded


def _activation_reading(op: RuntimeOperator) -> tuple[RuntimeOperator | None, RuntimeOperator]:
    """The operator that alone reads ``op``'s output, directly or through a chain of
    shape-only operators (:attr:`Layer.shape_only`) that each alone read the one before;
    and the operator whose output it reads (``op`` or the chain's last)."""
    reader, last = sole_consumer(op), op
    while reader is not None and LayerRegisterer.layer_class(reader.type) is not None \
            and LayerRegisterer.layer_class(reader.type).shape_only:
        reader, last = sole_consumer(reader), reader
    return reader, last


def fuse_activation(graph: RuntimeGraph) -> int:
    """producer -> activation becomes the producer applying the activation in place, also
    when reshapes or permutations stand between them (a detection head's sigmoid)."""
    fused = 0
    for op in list(graph.operators):
        layer_class = LayerRegisterer.layer_class(op.type)
        if layer_class is None or not layer_class.takes_activation(op) or \
                (op.fusion is not None and op.fusion.activation is not None):
            continue
        act, last = _activation_reading(op)
        if not is_a(act, InplaceActivationLayer):
            continue
        try:
            activation = LayerRegisterer.layer_class(act.type).activation_of(act)
        except KuiperError:
            continue  # ill-formed parameters: building the activation's own layer reports them
        fuse(op, replace(op.fusion or layer_class.fusion(), activation=activation))
        absorb_consumer(graph, last, act)
        fused += 1
    return fused


def _residual_conv(add: RuntimeOperator) -> RuntimeOperator | None:
    """The nn.Conv2d whose output ``add``, a float32 ``add(@0,@1)`` of two different operands
    of the same recorded shape, alone reads (the first such of its two inputs)."""
    if (not is_a(add, ExpressionLayer) or add.param_text("expr") not in ("add(@0,@1)", "add(@1,@0)")
            or len(add.input_operands_seq) != 2 or len(add.output_operands) != 1):
        return None
    operands = add.input_operands_seq + add.output_operands
    shapes = {tuple(operand.shapes) for operand in operands}
    if (operands[0] is operands[1] or len(shapes) != 1 or min(next(iter(shapes)), default=0) < 1
            or any(numpy_dtype(operand.type) != np.float32 for operand in operands)):
        return None
    for operand in add.input_operands_seq:
        conv = operand.producer
        if is_conv2d(conv) and not convolution_fusion(conv).residual and operand.consumers == [add]:
            return conv
    return None


def fuse_residual_add(graph: RuntimeGraph) -> int:
    """conv -> ``add(@0,@1)`` of its output and a residual (and any activation fused into
    the addition) becomes the convolution adding its new second input in place and then
    applying that activation: no operator and no new array for the sum."""
    fused = 0
    for add in list(graph.operators):
        conv = _residual_conv(add)
        if conv is None:
            continue
        (residual,) = [operand for operand in add.input_operands_seq if operand is not conv.output_operands[0]]
        add_input(conv, residual)
        activation = add.fusion.activation if add.fusion is not None else None
        fuse(conv, replace(convolution_fusion(conv), residual=True, residual_activation=activation))
        absorb_consumer(graph, conv, add)
        fused += 1
    return fused


def _is_pointwise(conv: RuntimeOperator | None) -> bool:
    """A plain 1x1 nn.Conv2d: stride 1, no padding, one group."""
    if not is_conv2d(conv):
        return False
    swept = geometry(conv)
    return (swept.kernel == (1, 1) and swept.stride == (1, 1) and swept.groups == 1
            and swept.padding == ((0, 0), (0, 0)))


def _is_depthwise_of(conv: RuntimeOperator | None, channels: int) -> bool:
    """An nn.Conv2d filtering each of ``channels`` channels with its own zero-padded, undilated
    kernel (at least as tall as its stride)."""
    if not is_conv2d(conv):
        return False
    swept = geometry(conv)
    return (swept.groups == channels == conv.param_int("in_channels") == conv.param_int("out_channels")
            and swept.dilation == (1, 1) and swept.padding_mode in ("zeros", "constant")
            and swept.kernel[0] >= swept.stride[0])


def _pointwise(conv: RuntimeOperator) -> Pointwise:
    """The 1x1 ``conv``'s weight, bias and fused activation, for a fused operator's record."""
    has_bias = conv.param_bool("bias", default=conv.has_weight("bias"))
    return Pointwise(conv.weight("weight", copy=False), conv.weight("bias", copy=False) if has_bias else None,
                     convolution_fusion(conv).activation)


def fuse_pointwise_depthwise(graph: RuntimeGraph) -> int:
    """pointwise (1x1) conv -> depthwise conv becomes one ``kuiper.PointwiseDepthwise``
    operator: the depthwise operator, reading the 1x1 convolution's input."""
    fused = 0
    for pointwise in list(graph.operators):
        if not _is_pointwise(pointwise):
            continue
        depthwise = sole_consumer(pointwise)
        if not _is_depthwise_of(depthwise, pointwise.param_int("out_channels")):
            continue
        record = PointwiseDepthwiseFusion(_pointwise(pointwise), convolution_fusion(depthwise))
        fuse(depthwise, record, record.TYPE)
        absorb_producer(graph, depthwise, pointwise)
        fused += 1
    return fused


def _gated_input(gate: RuntimeOperator, x) -> RuntimeOperator | None:
    """The operator computing ``x * gate's output`` (pnnx's ``mul(@0,@1)`` either way round),
    if it is the only reader of the gate."""
    (output,) = gate.output_operands
    if len(output.consumers) != 1:
        return None
    mul = output.consumers[0]
    if (not is_a(mul, ExpressionLayer) or mul.param_text("expr") != "mul(@0,@1)" or len(mul.output_operands) != 1
            or sorted(map(id, mul.input_operands_seq)) != sorted(map(id, (x, output)))):
        return None
    return mul


def fuse_squeeze_excitation(graph: RuntimeGraph) -> int:
    """global average pool -> 1x1 conv -> 1x1 conv -> multiply with the pool's input becomes
    one ``kuiper.SqueezeExcitation`` operator: the pooling operator, reading the same input."""
    fused = 0
    for pool in list(graph.operators):
        if not is_a(pool, AdaptiveAvgPooling) or spatial_rank(pool) != 2 or len(pool.input_operands_seq) != 1:
            continue
        if AdaptiveAvgPooling.read_output_size(pool) != (1, 1):
            continue
        reduce = sole_consumer(pool)
        expand = sole_consumer(reduce) if _is_pointwise(reduce) else None
        if not _is_pointwise(expand):
            continue
        mul = _gated_input(expand, pool.input_operands_seq[0])
        if mul is None:
            continue
        record = SqueezeExcitationFusion(_pointwise(reduce), _pointwise(expand))
        for consumer in (reduce, expand, mul):
            absorb_consumer(graph, pool, consumer)
        fuse(pool, record, record.TYPE)
        fused += 1
    return fused


def select_winograd(graph: RuntimeGraph) -> int:
    """Mark the convolutions Winograd F(4x4, 3x3) computes: 3x3, stride 1, one group and
    enough input channels (the layer still takes im2col for calls with too few tiles)."""
    selected = 0
    for op in graph.operators:
        if is_conv2d(op) and geometry(op).winograd_applies() and op.param_int("in_channels") >= MIN_CHANNELS:
            fuse(op, replace(convolution_fusion(op), winograd=True))
            selected += 1
    return selected


def select_channels_last(graph: RuntimeGraph) -> int:
    """Let every convolution (and every transposed one) hand on its output in the
    channels-last memory its kernels compute in, so that the next convolution reads it
    without a transpose. The layout never changes a result: everything downstream sees
    NCHW arrays (see :mod:`kuiperinfer.kernels.layout`)."""
    selected = 0
    for op in graph.operators:
        if is_a(op, Convolution) or is_a(op, TransposedConvolution):
            fuse(op, replace(convolution_fusion(op), channels_last=True))
        elif isinstance(op.fusion, PointwiseDepthwiseFusion):
            fuse(op, replace(op.fusion, depthwise=replace(op.fusion.depthwise, channels_last=True)))
        else:
            continue
        selected += 1
    return selected


def select_compiled_kernels(graph: RuntimeGraph) -> int:
    """Record on every operator whose layer has compiled kernels that it runs them (none
    where Numba could not be imported: the layers then run their NumPy references)."""
    if not jit.AVAILABLE:
        return 0
    selected = 0
    for op in graph.operators:
        layer_class = LayerRegisterer.layer_class(op.type)
        if layer_class is not None and layer_class.compiled_kernels:
            if op.fusion is None and hasattr(layer_class.fusion, "TYPE"):
                continue   # a fused type in the model file, without its record: its layer refuses it
            record = op.fusion or (layer_class.fusion or KernelChoice)()
            fuse(op, replace(record, compiled=True))
            selected += 1
    return selected


PASSES: tuple[Pass, ...] = (fold_batch_norm, fold_zero_padding, fuse_activation, fuse_pointwise_depthwise,
                            fuse_squeeze_excitation, fuse_residual_add, select_winograd, select_channels_last,
                            select_compiled_kernels)


def optimize(graph: RuntimeGraph, passes: tuple[Pass, ...] = PASSES) -> dict[str, int]:
    """Run ``passes`` on ``graph`` (between init() and build()); the rewrites of each."""
    if graph.graph_state != GraphState.NeedBuild:
        raise GraphError(f"optimize() runs between init() and build(); the graph is in state "
                         f"{graph.graph_state.name}")
    return {rewrite.__name__: rewrite(graph) for rewrite in passes}
