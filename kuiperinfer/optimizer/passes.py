"""The optimiser's passes, in the order :func:`optimize` runs them.

* :func:`fold_batch_norm`: a BatchNorm right after a convolution (pnnx folds most; it
  leaves those it cannot prove safe) becomes part of the convolution's weight and bias.
* :func:`fold_zero_padding`: zero padding right before a convolution becomes the
  convolution's own (per-side) padding.
* :func:`fuse_activation`: an activation right after a convolution, a linear layer or
  an arithmetic expression (or after reshapes and permutations of its output) is applied
  in place on that operator's fresh output (ncnn's ``activation_type``), and its operator
  disappears; GELU only after a linear layer.
* :func:`fuse_pointwise_depthwise`: a 1x1 convolution whose output only a depthwise
  convolution reads becomes one operator with it, computed a stripe of rows at a time
  (:mod:`kuiperinfer.kernels.depthwise_stripes`).
* :func:`fuse_stem_depthwise`: a convolution of few input channels that computes directly (a
  stem) whose output only a depthwise convolution reads becomes one operator with it,
  computed a stripe of rows at a time where its kernels allow.
* :func:`fuse_squeeze_excitation`: global average pooling, two 1x1 convolutions and the
  multiplication of the pooled input by their result (a squeeze-and-excitation gate)
  become one operator.
* :func:`fuse_residual_add`: the addition of a residual to a convolution's output (with
  any activation fused into it) is done by the convolution, in place on its fresh output.
* :func:`fuse_attention`: torch.matmul of a query and a transposed key, a scaling, an
  optional additive mask, a softmax over the keys and torch.matmul with the values (or an
  F.scaled_dot_product_attention without a mask) become one ``kuiper.Attention`` operator;
  so do the reshape, permute and unbind that cut a linear layer's packed q, k and v before
  it, and the transpose and reshape that put the heads side by side after it.
* :func:`fuse_add_layer_norm`: the addition of two float32 values of one shape right
  before an nn.LayerNorm is done by the normalisation, which also hands on the sum where
  others read it.
* :func:`select_winograd`: 3x3 stride-1 convolutions take Winograd F(4x4, 3x3)
  (:mod:`kuiperinfer.kernels.winograd`) where it pays.
* :func:`select_channels_last`: convolutions (and learned 2x upsampling) hand on their
  output in channels-last memory (:mod:`kuiperinfer.kernels.layout`), as they compute it.
* :func:`select_uint8_activations`: in int8, a convolution (depthwise too), linear layer or
  fused 1x1 and depthwise convolution whose output only int8 products of one input range read (through
  max pooling too, or as a convolution's residual) hands it on as uint8 in their form,
  requantized in its epilogue.

A pass takes the graph and returns how many rewrites it made. It learns what an operator
is from the :class:`LayerRegisterer`'s classes (:func:`is_a`), without building layers,
and what a ``pnnx.Expression`` computes from its parsed formula (:func:`formula`), never
from type names or text; it edits the graph through :mod:`kuiperinfer.optimizer.rewrite`
and writes what it fused and chose in each operator's plan (``op.plan``), a frozen
dataclass defined beside the layer that reads it. Whether layers run compiled kernels is
not the optimiser's business: it is the graph's ``kernels`` option.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace

import numpy as np

from kuiperinfer.errors import ExpressionError, GraphError, KuiperError
from kuiperinfer.expression import Call, Constant, InputRef, Node, compile_expression
from kuiperinfer.kernels.matrix.precision import Int8
from kuiperinfer.kernels.winograd import MIN_CHANNELS
from kuiperinfer.layers.activation import GELU, InplaceActivationLayer
from kuiperinfer.layers.attention import AttentionPlan, ScaledDotProductAttention
from kuiperinfer.layers.convolution import (
    ConvGeometry,
    Convolution,
    ConvolutionPlan,
    TransposedConvolution,
    spatial_rank,
)
from kuiperinfer.layers.expression import ExpressionLayer
from kuiperinfer.layers.fused import Pointwise, PointwiseDepthwisePlan, SqueezeExcitationPlan, Stem, StemDepthwisePlan
from kuiperinfer.layers.linalg import MatMul
from kuiperinfer.layers.linear import Linear
from kuiperinfer.layers.normalization import BatchNorm, LayerNorm, LayerNormPlan
from kuiperinfer.layers.normalization import fold_batch_norm as batch_norm_scale_shift
from kuiperinfer.layers.padding import Pad
from kuiperinfer.layers.pooling import AdaptiveAvgPooling
from kuiperinfer.layers.shape import Permute, Reshape, Transpose
from kuiperinfer.layers.softmax import Softmax
from kuiperinfer.layers.tensor_ops import Unbind
from kuiperinfer.optimizer.rewrite import (
    absorb_consumer,
    absorb_producer,
    add_input,
    merge_producer,
    remove_unread,
    replace_inputs,
    set_plan,
    set_weight,
    sole_consumer,
)
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.runtime.graph import GraphState, RuntimeGraph
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.registry import LayerRegisterer

Pass = Callable[[RuntimeGraph], int]


def is_a(op: RuntimeOperator | None, layer_class: type) -> bool:
    """Whether the registry computes ``op`` with ``layer_class`` (or a subclass)."""
    registered = LayerRegisterer.layer_class(op.type) if op is not None else None
    return registered is not None and issubclass(registered, layer_class)


def formula(op: RuntimeOperator | None) -> Node | None:
    """The parsed formula of a ``pnnx.Expression`` operator (None for any other operator,
    or one whose formula does not parse: building its layer reports that)."""
    if not is_a(op, ExpressionLayer) or "expr" not in op.params:
        return None
    try:
        return compile_expression(op.param_text("expr")).tree
    except (ExpressionError, KuiperError):
        return None


SUM_OF_INPUTS = (Call("add", (InputRef(0), InputRef(1))), Call("add", (InputRef(1), InputRef(0))))
"""``add(@0,@1)`` and ``add(@1,@0)``."""
PRODUCT_OF_INPUTS = (Call("mul", (InputRef(0), InputRef(1))), Call("mul", (InputRef(1), InputRef(0))))


def convolution_plan(conv: RuntimeOperator) -> ConvolutionPlan:
    """The plan of a convolution, empty while no pass has written one."""
    return conv.plan or ConvolutionPlan()


def geometry(conv: RuntimeOperator) -> ConvGeometry:
    """How a convolution sweeps its input, with any padding a pass folded in."""
    swept = ConvGeometry.from_operator(conv, conv.param_ints("kernel_size", spatial_rank(conv)))
    padding = convolution_plan(conv).padding
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
        set_plan(conv, replace(convolution_plan(conv), padding=padding))
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
                (op.plan is not None and op.plan.activation is not None):
            continue
        act, last = _activation_reading(op)
        if not (is_a(act, InplaceActivationLayer) or (is_a(act, GELU) and is_a(op, Linear))):
            continue
        try:
            activation = LayerRegisterer.layer_class(act.type).activation_of(act)
        except KuiperError:
            continue  # ill-formed parameters: building the activation's own layer reports them
        set_plan(op, replace(op.plan or layer_class.plan_class(), activation=activation))
        absorb_consumer(graph, last, act)
        fused += 1
    return fused


def _residual_conv(add: RuntimeOperator) -> RuntimeOperator | None:
    """The nn.Conv2d whose output ``add``, a float32 ``add(@0,@1)`` of two different operands
    of the same recorded shape, alone reads (the first such of its two inputs)."""
    if formula(add) not in SUM_OF_INPUTS or len(add.input_operands_seq) != 2 or len(add.output_operands) != 1:
        return None
    operands = add.input_operands_seq + add.output_operands
    shapes = {tuple(operand.shapes) for operand in operands}
    if (operands[0] is operands[1] or len(shapes) != 1 or min(next(iter(shapes)), default=0) < 1
            or any(numpy_dtype(operand.type) != np.float32 for operand in operands)):
        return None
    for operand in add.input_operands_seq:
        conv = operand.producer
        if is_conv2d(conv) and not convolution_plan(conv).residual and operand.consumers == [add]:
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
        activation = add.plan.activation if add.plan is not None else None
        set_plan(conv, replace(convolution_plan(conv), residual=True, residual_activation=activation))
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
    """The 1x1 ``conv``'s weight, bias and fused activation, for a fused operator's plan."""
    has_bias = conv.param_bool("bias", default=conv.has_weight("bias"))
    return Pointwise(conv.name, conv.weight("weight", copy=False),
                     conv.weight("bias", copy=False) if has_bias else None, convolution_plan(conv).activation)


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
        plan = PointwiseDepthwisePlan(_pointwise(pointwise), convolution_plan(depthwise))
        set_plan(depthwise, plan, plan.TYPE)
        absorb_producer(graph, depthwise, pointwise)
        fused += 1
    return fused


def fuse_stem_depthwise(graph: RuntimeGraph) -> int:
    """stem conv (few input channels, computed directly) -> depthwise conv becomes one
    ``kuiper.StemDepthwise`` operator: the depthwise operator, reading the stem's input."""
    fused = 0
    for stem in list(graph.operators):
        if not is_conv2d(stem) or convolution_plan(stem).residual:
            continue
        swept, channels = geometry(stem), stem.param_int("out_channels", default=0)
        depthwise = sole_consumer(stem)
        if not (swept.computes_directly(stem.param_int("in_channels", default=0), channels)
                and _is_depthwise_of(depthwise, channels)):
            continue
        bias = stem.weight("bias", copy=False) if stem.param_bool("bias", default=stem.has_weight("bias")) else None
        plan = StemDepthwisePlan(Stem(stem.name, stem.weight("weight", copy=False), bias,
                                      ConvGeometry.from_operator(stem, swept.kernel), convolution_plan(stem)),
                                 convolution_plan(depthwise))
        set_plan(depthwise, plan, plan.TYPE)
        absorb_producer(graph, depthwise, stem)
        fused += 1
    return fused


def _gated_input(gate: RuntimeOperator, x) -> RuntimeOperator | None:
    """The operator computing ``x * gate's output`` (pnnx's ``mul(@0,@1)`` either way round),
    if it is the only reader of the gate."""
    (output,) = gate.output_operands
    if len(output.consumers) != 1:
        return None
    mul = output.consumers[0]
    if (formula(mul) not in PRODUCT_OF_INPUTS or len(mul.output_operands) != 1
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
        plan = SqueezeExcitationPlan(_pointwise(reduce), _pointwise(expand))
        for consumer in (reduce, expand, mul):
            absorb_consumer(graph, pool, consumer)
        set_plan(pool, plan, plan.TYPE)
        fused += 1
    return fused


def _only_reader(operand) -> RuntimeOperator | None:
    """The operator that alone reads ``operand`` (once), if any."""
    return operand.consumers[0] if len(operand.consumers) == 1 else None


def _recorded(operand) -> tuple[int, ...]:
    return tuple(operand.shapes)


def _scores_step(op: RuntimeOperator, scores) -> tuple[float, object] | None:
    """What an expression does to the attention scores it reads: (scale, mask operand or
    None) for ``scores * c``, ``c * scores``, ``scores / c``, ``scores + mask``, ``mask +
    scores`` and ``scores * c + mask`` (either way round), matched on its parsed formula."""
    tree = formula(op)
    if tree is None or len(op.output_operands) != 1 or len(op.input_operands_seq) > 2 \
            or op.input_operands_seq.count(scores) != 1:
        return None
    s = InputRef(op.input_operands_seq.index(scores))
    others = [operand for operand in op.input_operands_seq if operand is not scores]
    mask = InputRef(1 - s.index) if others else None
    if mask is not None and numpy_dtype(others[0].type) != np.float32:
        return None
    scaled = _scaled(tree, s)
    if scaled is not None and mask is None:
        return scaled, None
    if mask is not None and isinstance(tree, Call) and tree.name == "add" and mask in tree.args:
        (term,) = [arg for arg in tree.args if arg != mask] or [None]
        scale = 1.0 if term == s else _scaled(term, s)
        if scale is not None and term is not None:
            return scale, others[0]
    return None


def _scaled(tree: Node | None, s: InputRef) -> float | None:
    """``c`` for ``s * c`` or ``c * s``, ``1 / c`` for ``s / c``, with ``c`` a number literal."""
    if not isinstance(tree, Call) or len(tree.args) != 2 or tree.name not in ("mul", "div"):
        return None
    a, b = tree.args
    number = b if a == s else a if tree.name == "mul" and b == s else None
    if not isinstance(number, Constant) or isinstance(number.value, (bool, complex)) \
            or not isinstance(number.value, (int, float)) or number.value == 0:
        return None
    return float(number.value) if tree.name == "mul" else 1.0 / float(number.value)


def _is_key_transpose(op: RuntimeOperator | None) -> bool:
    """torch.transpose of the last two dimensions of a 4-d operand."""
    if not is_a(op, Transpose) or not op.has_param("dim0") or len(op.input_operands_seq) != 1:
        return False
    dims = {op.param_int("dim0", default=0) % 4, op.param_int("dim1", default=0) % 4}
    return dims == {2, 3} and len(_recorded(op.input_operands_seq[0])) == 4


def _attention_chain(first: RuntimeOperator):
    """The operators of the attention starting at the torch.matmul ``first`` (q @ k^T), if it
    is one: (transpose, scoring expressions, softmax, second matmul, scale, mask)."""
    if not is_a(first, MatMul) or len(first.input_operands_seq) != 2 or len(first.output_operands) != 1:
        return None
    q, key_t = first.input_operands_seq
    transpose = key_t.producer
    if not _is_key_transpose(transpose) or key_t.consumers != [first] or len(_recorded(q)) != 4:
        return None
    scale, mask, steps, operand = 1.0, None, [], first.output_operands[0]
    reader = _only_reader(operand)
    while reader is not None and is_a(reader, ExpressionLayer) and len(steps) < 2:
        step = _scores_step(reader, operand)
        if step is None or (step[1] is not None and mask is not None):
            return None
        if step[1] is not None:
            mask = step[1]
        elif mask is not None:   # a scaling after the mask would scale the mask too
            return None
        scale *= step[0]
        steps.append(reader)
        operand = reader.output_operands[0]
        reader = _only_reader(operand)
    if not is_a(reader, Softmax) or reader.input_operands_seq != [operand]:
        return None
    if reader.param_int("dim", default=0) % 4 != 3:
        return None
    softmax = reader
    second = _only_reader(softmax.output_operands[0])
    if not is_a(second, MatMul) or len(second.input_operands_seq) != 2 \
            or second.input_operands_seq[0] is not softmax.output_operands[0] \
            or second.input_operands_seq[1] is softmax.output_operands[0]:
        return None
    if any(numpy_dtype(o.type) != np.float32 for o in (q, key_t, second.input_operands_seq[1])):
        return None
    return transpose, steps, softmax, second, scale, mask


def _packed_source(q, k, v):
    """The (N, L, 3 * heads * head_dim) operand and (heads, head_dim) when q, k and v are the
    three outputs of timm's ``x.reshape(N, L, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)``
    and nothing else reads them or the steps before."""
    unbind = q.producer
    if not is_a(unbind, Unbind) or unbind.output_operands != [q, k, v] \
            or unbind.param_int("dim", default=0) != 0 or len(unbind.input_operands_seq) != 1:
        return None
    permute = unbind.input_operands_seq[0].producer
    if not is_a(permute, Permute) or unbind.input_operands_seq[0].consumers != [unbind] \
            or tuple(permute.param_ints("dims", default=())) != (2, 0, 3, 1, 4):
        return None
    reshape = permute.input_operands_seq[0].producer
    if not is_a(reshape, Reshape) or permute.input_operands_seq[0].consumers != [permute] \
            or len(reshape.input_operands_seq) != 1 or not reshape.has_param("shape"):
        return None
    shape = tuple(reshape.param_ints("shape"))
    source = reshape.input_operands_seq[0]
    recorded = _recorded(source)
    if len(shape) != 5 or shape[2] != 3 or min(shape[1:]) < 1 or len(recorded) != 3 \
            or recorded[1:] != (shape[1], 3 * shape[3] * shape[4]) or shape[0] not in (-1, recorded[0]):
        return None
    return source, (shape[3], shape[4]), [unbind, permute, reshape]


def _merged_heads(op: RuntimeOperator) -> list[RuntimeOperator] | None:
    """The transpose(1, 2) and reshape to (N, L, heads * dim) that alone read the attention's
    (N, heads, L, dim) output, if they do."""
    (output,) = op.output_operands
    transpose = _only_reader(output)
    shape = _recorded(output)
    if not is_a(transpose, Transpose) or not transpose.has_param("dim0") or len(shape) != 4 \
            or {transpose.param_int("dim0", default=0) % 4, transpose.param_int("dim1", default=0) % 4} != {1, 2}:
        return None
    reshape = _only_reader(transpose.output_operands[0])
    if not is_a(reshape, Reshape) or not reshape.has_param("shape") \
            or len(reshape.input_operands_seq) != 1:
        return None
    target = tuple(reshape.param_ints("shape"))
    if len(target) != 3 or target[1:] != (shape[2], shape[1] * shape[3]) or min(target[1:]) < 1 \
            or target[0] not in (-1, shape[0]):
        return None
    return [transpose, reshape]


def fuse_attention(graph: RuntimeGraph) -> int:
    """q @ k^T -> scale (and mask) -> softmax -> @ v, or F.scaled_dot_product_attention without
    a mask, becomes one ``kuiper.Attention`` operator: the first torch.matmul (or the SDPA
    operator), reading q, k, v (and the mask), or the packed projection they were cut from;
    its output may put the heads side by side."""
    fused = 0
    for first in list(graph.operators):
        if first not in graph.operators:
            continue
        try:
            chain = _attention_chain(first)
            scale = _plain_sdpa_scale(first) if chain is None else None
        except KuiperError:
            continue  # ill-formed parameters: building the operators' own layers reports them
        if chain is not None:
            transpose, steps, softmax, second, scale, mask = chain
            q = first.input_operands_seq[0]
            k, v = transpose.input_operands_seq[0], second.input_operands_seq[1]
            absorb_producer(graph, first, transpose)
            add_input(first, v)
            if mask is not None:
                add_input(first, mask)
            for consumer in (*steps, softmax, second):
                absorb_consumer(graph, first, consumer)
        elif scale is not None:
            (q, k, v), mask = first.input_operands_seq, None
        else:
            continue
        try:
            packed = _packed_source(q, k, v)
            merged = _merged_heads(first)
        except KuiperError:
            packed = merged = None
        if packed is not None:
            source, heads, cut = packed
            replace_inputs(first, [source] + ([mask] if mask is not None else []))
            remove_unread(graph, cut)
        for consumer in merged or ():
            absorb_consumer(graph, first, consumer)
        plan = AttentionPlan(scale, mask is not None, heads if packed is not None else None, merged is not None)
        set_plan(first, plan, plan.TYPE)
        fused += 1
    return fused


def _plain_sdpa_scale(op: RuntimeOperator) -> float | None:
    """The scale of an F.scaled_dot_product_attention of three float32 4-d operands without a
    mask, causality or grouped heads (what kuiper.Attention computes), else None."""
    if not is_a(op, ScaledDotProductAttention) or len(op.input_operands_seq) != 3 or len(op.output_operands) != 1 \
            or op.param_bool("is_causal", default=False) or op.param_bool("enable_gqa", default=False):
        return None
    q, k, v = op.input_operands_seq
    if any(len(_recorded(o)) != 4 or numpy_dtype(o.type) != np.float32 for o in (q, k, v)) \
            or _recorded(q)[3] < 1 or _recorded(q)[3] != _recorded(k)[3]:
        return None
    scale = op.param_float("scale", default=None)
    return 1.0 / float(np.sqrt(_recorded(q)[3])) if scale is None else scale


def fuse_add_layer_norm(graph: RuntimeGraph) -> int:
    """``add(@0,@1)`` -> nn.LayerNorm (stored weights) becomes the normalisation reading both
    addends; where others read the sum too, the normalisation hands it on as its second output."""
    fused = 0
    for norm in list(graph.operators):
        if not is_a(norm, LayerNorm) or len(norm.input_operands_seq) != 1 \
                or norm.plan is not None or len(norm.output_operands) != 1:
            continue
        add = norm.input_operands_seq[0].producer
        if (formula(add) not in SUM_OF_INPUTS or len(add.input_operands_seq) != 2 or len(add.output_operands) != 1
                or add.plan is not None):
            continue
        operands = add.input_operands_seq + add.output_operands
        if operands[0] is operands[1] or len({tuple(o.shapes) for o in operands}) != 1 or not operands[0].shapes \
                or any(numpy_dtype(o.type) != np.float32 for o in operands):
            continue
        if norm.input_operands_seq[0].consumers.count(norm) != 1:
            continue
        sum_output = len(add.output_operands[0].consumers) > 1
        merge_producer(graph, norm, add)
        set_plan(norm, LayerNormPlan(residual=True, sum_output=sum_output))
        fused += 1
    return fused


def select_winograd(graph: RuntimeGraph) -> int:
    """Mark the convolutions Winograd F(4x4, 3x3) computes: 3x3, stride 1, one group and
    enough input channels (the layer still takes im2col for calls with too few tiles)."""
    selected = 0
    for op in graph.operators:
        if is_conv2d(op) and geometry(op).winograd_applies() and op.param_int("in_channels") >= MIN_CHANNELS:
            set_plan(op, replace(convolution_plan(op), winograd=True))
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
            set_plan(op, replace(convolution_plan(op), channels_last=True))
        elif isinstance(op.plan, (PointwiseDepthwisePlan, StemDepthwisePlan)):
            set_plan(op, replace(op.plan, depthwise=replace(op.plan.depthwise, channels_last=True)))
        else:
            continue
        selected += 1
    return selected


def select_uint8_activations(graph: RuntimeGraph) -> int:
    """In int8, let an int8 convolution or linear layer (or a depthwise convolution, which
    int8 computes in fp32, or a fused 1x1 and depthwise convolution whose 1x1 product is
    int8) whose output only int8 products read,
    all of one input range (directly, or through shape-only operators such as reshapes,
    through max pooling, which picks values without changing them, and through
    concatenations), hand it on as uint8 in their input form, requantized in its epilogue:
    they take it without quantizing it (the numbers are the same), and the value between them
    takes a quarter of float32's memory. An int8 convolution may also read it as its
    residual, which its epilogue dequantizes (the residual is then the quantized value). A
    concatenation joins uint8 values only where every one of its inputs arrives so, in the
    same form. Any other reader (an addition, average pooling, a graph output) keeps the
    output float32. A join whose readers are int8 products of one form quantizes its float32
    inputs into it (:func:`_quantizing_joins`): its producers then hand it uint8 where they
    can and float32 where they cannot."""
    table = graph.options.calibration
    chosen: dict[str, tuple[RuntimeOperator, list[str], list[RuntimeOperator], list[RuntimeOperator]]] = {}
    for op in graph.operators if table is not None else ():
        plan_class = getattr(LayerRegisterer.layer_class(op.type), "plan_class", None)
        computed_as = LayerRegisterer.layer_class(op.type).input_product(op) if plan_class else None
        in_int8 = isinstance(table.precision_of(computed_as or op.name), Int8) \
            or _is_depthwise_of(op, op.param_int("in_channels", default=0)) \
            or isinstance(op.plan, StemDepthwisePlan)     # a depthwise convolution is no product: fp32 in int8
        if not (in_int8 and len(op.output_operands) == 1
                and "quantized_for" in {f.name for f in fields(plan_class or object)}):
            continue
        residuals: list[RuntimeOperator] = []
        joins: list[RuntimeOperator] = []
        readers = _product_readers(op.output_operands[0], residuals, joins)
        if _one_int8_form(table, readers) \
                and all(isinstance(table.precision_of(reader.name), Int8) for reader in residuals):
            chosen[op.name] = (op, readers, residuals, joins)
    quantizing = _quantizing_joins(graph)
    while True:    # a join that does not quantize, and some of whose inputs arrive as float32, keeps them all so
        dropped = [name for name, (_, _, _, joins) in chosen.items()
                   if not all(join in quantizing or _arrives_quantized(operand, chosen) for join in joins
                              for operand in join.input_operands_seq)]
        if not dropped:
            break
        for name in dropped:
            del chosen[name]
    for op, readers, residuals, _ in chosen.values():
        quantizing[op] = readers[0]
        for reader in residuals:
            set_plan(reader, replace(reader.plan, residual_quantized_for=readers[0]))
    for op, reader in quantizing.items():
        set_plan(op, replace(op.plan or LayerRegisterer.layer_class(op.type).plan_class(), quantized_for=reader))
    return len(quantizing)


def _quantizing_joins(graph: RuntimeGraph) -> dict[RuntimeOperator, str]:
    """The joins whose output only int8 products of one input range read (directly, or
    through shape-only and monotone operators; no other join, no residual), each with the
    first of those products: such a join quantizes every float32 input into their uint8 form
    as it joins it (``quantize(join(x)) == join(quantize(x))``: the same numbers), so that
    its producers may hand it float32 or uint8 in that form as suits each, a quarter of the
    bytes to write, and the products take the joined values as they are."""
    table, found = graph.options.calibration, {}
    for join in graph.operators if table is not None else ():
        layer_class = LayerRegisterer.layer_class(join.type)
        if layer_class is None or not layer_class.joins or len(join.output_operands) != 1:
            continue
        residuals: list[RuntimeOperator] = []
        joins: list[RuntimeOperator] = []
        readers = _product_readers(join.output_operands[0], residuals, joins)
        if _one_int8_form(table, readers) and not residuals and not joins:
            found[join] = readers[0]
    return found


def _one_int8_form(table, readers: list[str] | None) -> bool:
    """Whether ``readers`` (products, by name) all take their input in one int8 form."""
    forms = {table.precision_of(name) for name in readers or ()}
    return len(forms) == 1 and isinstance(forms.pop(), Int8)


def _product_readers(operand, residuals: list[RuntimeOperator], joins: list[RuntimeOperator]) -> list[str] | None:
    """The products (by the names their precisions are asked for) whose activations are
    ``operand``, read by them directly or through shape-only and monotone operators and
    joins (which are put in ``joins``); the operators that add it as their residual are put
    in ``residuals``. None if anything else reads it."""
    found = []
    for reader in operand.consumers:
        layer_class = LayerRegisterer.layer_class(reader.type)
        if layer_class is None or reader.input_operands_seq.count(operand) != 1:
            return None
        passes = (layer_class.shape_only or layer_class.monotone or layer_class.joins) \
            and len(reader.output_operands) == 1
        if reader.input_operands_seq[0] is not operand and not (passes and layer_class.joins):
            if reader.input_operands_seq.index(operand) != layer_class.residual_input(reader):
                return None
            residuals.append(reader)
            continue
        if passes:
            if layer_class.joins:
                joins.append(reader)
            inner = _product_readers(reader.output_operands[0], residuals, joins)
        else:
            name = layer_class.input_product(reader)
            inner = None if name is None else [name]
        if inner is None:
            return None
        found += inner
    return found


def _arrives_quantized(operand, chosen: Mapping[str, object]) -> bool:
    """Whether ``operand`` arrives as uint8: made by an operator of ``chosen``, or by a
    shape-only or monotone one from such a value."""
    producer = operand.producer
    if producer is None:
        return False
    if producer.name in chosen:
        return True
    layer_class = LayerRegisterer.layer_class(producer.type)
    return (layer_class is not None and (layer_class.shape_only or layer_class.monotone)
            and bool(producer.input_operands_seq) and _arrives_quantized(producer.input_operands_seq[0], chosen))


PASSES: tuple[Pass, ...] = (fold_batch_norm, fold_zero_padding, fuse_activation, fuse_pointwise_depthwise,
                            fuse_stem_depthwise, fuse_squeeze_excitation, fuse_residual_add, fuse_attention,
                            fuse_add_layer_norm, select_winograd, select_channels_last, select_uint8_activations)


def optimize(graph: RuntimeGraph, passes: tuple[Pass, ...] = PASSES) -> dict[str, int]:
    """Run ``passes`` on ``graph`` (between init() and build()); the rewrites of each."""
    if graph.graph_state != GraphState.NeedBuild:
        raise GraphError(f"optimize() runs between init() and build(); the graph is in state "
                         f"{graph.graph_state.name}")
    return {rewrite.__name__: rewrite(graph) for rewrite in passes}
