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

A pass takes the graph and returns how many rewrites it made.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kuiperinfer.errors import GraphError
from kuiperinfer.kernels.winograd import MIN_CHANNELS
from kuiperinfer.layers.activation import InplaceActivationLayer, read_fused_activation, write_fused_activation
from kuiperinfer.layers.convolution import CHANNELS_LAST, PADS, RESIDUAL, WINOGRAD, ConvGeometry
from kuiperinfer.layers.fused import EXPAND, POINTWISE, POINTWISE_DEPTHWISE, REDUCE, SQUEEZE_EXCITATION
from kuiperinfer.layers.normalization import BatchNorm, fold_batch_norm as batch_norm_scale_shift
from kuiperinfer.layers.padding import Pad
from kuiperinfer.layers.registry import LayerRegisterer
from kuiperinfer.optimizer.rewrite import absorb_consumer, absorb_producer, operator_named, sole_consumer
from kuiperinfer.pnnx.ir import Attribute, numpy_dtype
from kuiperinfer.runtime.attribute import RuntimeAttribute
from kuiperinfer.runtime.graph import GraphState, RuntimeGraph
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.parameter import RuntimeParameter, RuntimeParameterType as T

Pass = Callable[[RuntimeGraph], int]

CONVOLUTIONS = ("nn.Conv1d", "nn.Conv2d")
BATCH_NORMS = ("nn.BatchNorm1d", "nn.BatchNorm2d")
PADDINGS = ("F.pad", "nn.ZeroPad2d", "nn.ConstantPad2d")
# Expressions whose outermost operation makes a new array from array operands; sizes
# (``size(@0,1)``) and lists (``[...]``) are Python values, not arrays.
ARITHMETIC = ("add(", "sub(", "mul(", "div(")


def fold_batch_norm(graph: RuntimeGraph) -> int:
    """conv -> BatchNorm becomes one conv with ``W * scale`` and ``b * scale + shift``."""
    folded = 0
    for conv in list(graph.operators):
        bn = sole_consumer(graph, conv) if conv.type in CONVOLUTIONS else None
        if bn is None or bn.type not in BATCH_NORMS or "weight" not in conv.attribute:
            continue
        norm = BatchNorm.create(bn)
        weight = conv.weight("weight")
        if norm.running_mean.size != weight.shape[0]:
            continue  # mismatched channels: leave the error to the layers
        scale, shift = batch_norm_scale_shift(norm.running_mean, norm.running_var, norm.weights(),
                                              norm.bias(), norm.eps)
        bias = conv.weight("bias") if conv.param_bool("bias", default="bias" in conv.attribute) else 0
        weight *= scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        conv.attribute["weight"] = RuntimeAttribute(Attribute.from_numpy(weight))
        conv.attribute["bias"] = RuntimeAttribute(Attribute.from_numpy(
            (bias * scale + shift).astype(np.float32)))
        conv.params["bias"] = RuntimeParameter(T.kParameterBool, True, "True")
        absorb_consumer(graph, conv, bn)
        folded += 1
    return folded


def fold_zero_padding(graph: RuntimeGraph) -> int:
    """Zero padding (F.pad, nn.ZeroPad2d, ...) of H and W right before a zero-padded
    nn.Conv2d becomes part of the convolution's padding, which may then differ per side."""
    folded = 0
    for pad in list(graph.operators):
        conv = sole_consumer(graph, pad) if pad.type in PADDINGS else None
        if conv is None or conv.type != "nn.Conv2d" or conv.param_value("padding_mode", "zeros") != "zeros":
            continue
        layer = Pad.create(pad)
        amounts = ((0, 0),) * (2 - len(layer.pads)) + layer.pads[-2:]
        if (layer.mode != "constant" or layer.value != 0 or len(layer.pads) > 2
                or min(min(pair) for pair in amounts) < 0):
            continue
        (top, bottom), (left, right) = ConvGeometry.from_operator(conv, conv.param_ints("kernel_size", 2)).padding
        pads = (top + amounts[0][0], bottom + amounts[0][1], left + amounts[1][0], right + amounts[1][1])
        conv.params[PADS] = RuntimeParameter(T.kParameterIntArray, pads, "(" + ",".join(map(str, pads)) + ")")
        absorb_producer(graph, conv, pad)
        folded += 1
    return folded


def _makes_fresh_array(op: RuntimeOperator) -> bool:
    """Whether ``op``'s layer returns a new float array it holds no other reference to."""
    if op.type in CONVOLUTIONS or op.type == "nn.Linear":
        return True
    if op.type == "pnnx.Expression" and "expr" in op.params and len(op.output_operands) == 1:
        text = op.param_text("expr")
        floating = numpy_dtype(op.output_operands[0].type) == np.float32
        return floating and text.startswith(ARITHMETIC) and "size(" not in text and "[" not in text
    return False


SHAPE_ONLY = ("Tensor.reshape", "Tensor.view", "torch.reshape", "Tensor.permute", "torch.permute",
              "torch.transpose", "Tensor.transpose", "torch.flatten", "Tensor.flatten",
              "torch.squeeze", "Tensor.squeeze", "torch.unsqueeze", "Tensor.unsqueeze")
"""Operators that only rearrange their one input: an elementwise activation after them
gives the values it would give before them."""


def _activation_reading(graph: RuntimeGraph, op: RuntimeOperator) -> tuple[RuntimeOperator | None, RuntimeOperator]:
    """The operator that alone reads ``op``'s output, directly or through a chain of
    :data:`SHAPE_ONLY` operators that each alone read the one before; and the operator
    whose output it reads (``op`` or the chain's last)."""
    reader, last = sole_consumer(graph, op), op
    while reader is not None and reader.type in SHAPE_ONLY:
        reader, last = sole_consumer(graph, reader), reader
    return reader, last


def fuse_activation(graph: RuntimeGraph) -> int:
    """producer -> activation becomes the producer applying the activation in place, also
    when reshapes or permutations stand between them (a detection head's sigmoid)."""
    fused = 0
    for op in list(graph.operators):
        if not _makes_fresh_array(op) or read_fused_activation(op) is not None:
            continue
        act, last = _activation_reading(graph, op)
        layer = LayerRegisterer.create_layer(act) if act is not None and LayerRegisterer.has(act.type) else None
        if not isinstance(layer, InplaceActivationLayer):
            continue
        write_fused_activation(op, layer.inplace())
        absorb_consumer(graph, last, act)
        fused += 1
    return fused


def _residual_conv(graph: RuntimeGraph, add: RuntimeOperator) -> RuntimeOperator | None:
    """The nn.Conv2d whose output ``add``, a float32 ``add(@0,@1)`` of two different operands
    of the same recorded shape, alone reads (the first such of its two inputs)."""
    if (add.type != "pnnx.Expression" or add.param_text("expr") not in ("add(@0,@1)", "add(@1,@0)")
            or len(add.input_operands_seq) != 2 or len(add.output_operands) != 1):
        return None
    operands = add.input_operands_seq + add.output_operands
    shapes = {tuple(operand.shapes) for operand in operands}
    if (operands[0] is operands[1] or len(shapes) != 1 or min(next(iter(shapes)), default=0) < 1
            or any(numpy_dtype(operand.type) != np.float32 for operand in operands)):
        return None
    for operand in add.input_operands_seq:
        conv = operator_named(graph, operand.producer) if operand.producer else None
        if (conv is not None and conv.type == "nn.Conv2d" and "weight" in conv.attribute
                and not conv.param_bool(RESIDUAL, default=False) and operand.consumers == [add.name]):
            return conv
    return None


def fuse_residual_add(graph: RuntimeGraph) -> int:
    """conv -> ``add(@0,@1)`` of its output and a residual (and any activation fused into
    the addition) becomes the convolution adding its new second input in place and then
    applying that activation: no operator and no new array for the sum."""
    fused = 0
    for add in list(graph.operators):
        conv = _residual_conv(graph, add)
        if conv is None:
            continue
        (residual,) = [operand for operand in add.input_operands_seq if operand is not conv.output_operands[0]]
        conv.input_operands_seq.append(residual)
        conv.input_operands.setdefault(residual.producer, []).append(residual)
        residual.consumers.append(conv.name)
        conv.params[RESIDUAL] = RuntimeParameter(T.kParameterBool, True, "True")
        activation = read_fused_activation(add)
        if activation is not None:
            write_fused_activation(conv, activation, RESIDUAL + ".")
        absorb_consumer(graph, conv, add)
        fused += 1
    return fused


def _geometry(conv: RuntimeOperator) -> ConvGeometry:
    return ConvGeometry.from_operator(conv, conv.param_ints("kernel_size", 2))


def _is_pointwise(conv: RuntimeOperator) -> bool:
    """A plain 1x1 nn.Conv2d: stride 1, no padding, one group, its weight in the model."""
    if conv.type != "nn.Conv2d" or "weight" not in conv.attribute:
        return False
    geometry = _geometry(conv)
    return (geometry.kernel == (1, 1) and geometry.stride == (1, 1) and geometry.groups == 1
            and geometry.padding == ((0, 0), (0, 0)))


def _is_depthwise_of(conv: RuntimeOperator, channels: int) -> bool:
    """An nn.Conv2d filtering each of ``channels`` channels with its own zero-padded, undilated
    kernel (at least as tall as its stride), its weight in the model."""
    if conv.type != "nn.Conv2d" or "weight" not in conv.attribute:
        return False
    geometry = _geometry(conv)
    return (geometry.groups == channels == conv.param_int("in_channels") == conv.param_int("out_channels")
            and geometry.dilation == (1, 1) and geometry.padding_mode in ("zeros", "constant")
            and geometry.kernel[0] >= geometry.stride[0])


def _carry_pointwise(conv: RuntimeOperator, fused: RuntimeOperator, prefix: str) -> None:
    """Record the 1x1 ``conv``'s weight, bias and activation on ``fused`` under ``prefix``."""
    fused.attribute[prefix + "weight"] = conv.attribute["weight"]
    if conv.param_bool("bias", default="bias" in conv.attribute):
        fused.attribute[prefix + "bias"] = conv.attribute["bias"]
    activation = read_fused_activation(conv)
    if activation is not None:
        write_fused_activation(fused, activation, prefix)


def fuse_pointwise_depthwise(graph: RuntimeGraph) -> int:
    """pointwise (1x1) conv -> depthwise conv becomes one ``kuiper.PointwiseDepthwise``
    operator: the depthwise operator, carrying the 1x1 convolution's weight, bias and
    activation under the ``pointwise.`` prefix."""
    fused = 0
    for pointwise in list(graph.operators):
        depthwise = sole_consumer(graph, pointwise) if _is_pointwise(pointwise) else None
        if depthwise is None or not _is_depthwise_of(depthwise, pointwise.param_int("out_channels")):
            continue
        _carry_pointwise(pointwise, depthwise, POINTWISE)
        depthwise.type = POINTWISE_DEPTHWISE
        absorb_producer(graph, depthwise, pointwise)
        fused += 1
    return fused


def _gated_input(graph: RuntimeGraph, gate: RuntimeOperator, x: RuntimeOperand) -> RuntimeOperator | None:
    """The operator computing ``x * gate's output`` (pnnx's ``mul(@0,@1)`` either way round),
    if it is the only reader of the gate."""
    (output,) = gate.output_operands
    if len(output.consumers) != 1:
        return None
    mul = operator_named(graph, output.consumers[0])
    if (mul.type != "pnnx.Expression" or mul.param_text("expr") != "mul(@0,@1)" or len(mul.output_operands) != 1
            or sorted(map(id, mul.input_operands_seq)) != sorted(map(id, (x, output)))):
        return None
    return mul


def fuse_squeeze_excitation(graph: RuntimeGraph) -> int:
    """global average pool -> 1x1 conv -> 1x1 conv -> multiply with the pool's input becomes
    one ``kuiper.SqueezeExcitation`` operator: the pooling operator, carrying the
    convolutions' weights, biases and activations under the ``reduce.`` and ``expand.``
    prefixes."""
    fused = 0
    for pool in list(graph.operators):
        if pool.type not in ("nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d") or len(pool.input_operands_seq) != 1:
            continue
        if tuple(pool.param_ints("output_size", default=(0,))) not in ((1,), (1, 1)):
            continue
        reduce = sole_consumer(graph, pool)
        expand = sole_consumer(graph, reduce) if reduce is not None and _is_pointwise(reduce) else None
        if expand is None or not _is_pointwise(expand):
            continue
        mul = _gated_input(graph, expand, pool.input_operands_seq[0])
        if mul is None:
            continue
        _carry_pointwise(reduce, pool, REDUCE)
        _carry_pointwise(expand, pool, EXPAND)
        for consumer in (reduce, expand, mul):
            absorb_consumer(graph, pool, consumer)
        pool.type = SQUEEZE_EXCITATION
        fused += 1
    return fused


def select_winograd(graph: RuntimeGraph) -> int:
    """Mark the convolutions Winograd F(4x4, 3x3) computes: 3x3, stride 1, one group and
    enough input channels (the layer still takes im2col for calls with too few tiles)."""
    selected = 0
    for op in graph.operators:
        if op.type != "nn.Conv2d":
            continue
        geometry = _geometry(op)
        if geometry.winograd_applies() and op.param_int("in_channels") >= MIN_CHANNELS:
            op.params[WINOGRAD] = RuntimeParameter(T.kParameterBool, True, "True")
            selected += 1
    return selected


def select_channels_last(graph: RuntimeGraph) -> int:
    """Let every convolution (and every transposed one that computes in channels-last
    memory) hand on its output in the channels-last memory its kernels compute in, so that
    the next convolution reads it without a transpose. The layout never changes a result:
    everything downstream sees NCHW arrays (see :mod:`kuiperinfer.kernels.layout`)."""
    selected = 0
    for op in graph.operators:
        if op.type in CONVOLUTIONS + (POINTWISE_DEPTHWISE, "nn.ConvTranspose2d"):
            op.params[CHANNELS_LAST] = RuntimeParameter(T.kParameterBool, True, "True")
            selected += 1
    return selected


PASSES: tuple[Pass, ...] = (fold_batch_norm, fold_zero_padding, fuse_activation, fuse_pointwise_depthwise,
                            fuse_squeeze_excitation, fuse_residual_add, select_winograd, select_channels_last)


def optimize(graph: RuntimeGraph, passes: tuple[Pass, ...] = PASSES) -> dict[str, int]:
    """Run ``passes`` on ``graph`` (between init() and build()); the rewrites of each."""
    if graph.graph_state != GraphState.NeedBuild:
        raise GraphError(f"optimize() runs between init() and build(); the graph is in state "
                         f"{graph.graph_state.name}")
    return {rewrite.__name__: rewrite(graph) for rewrite in passes}
