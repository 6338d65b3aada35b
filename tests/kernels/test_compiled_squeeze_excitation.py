"""The compiled squeeze-and-excitation gate against its NumPy reference (the mean, two 1x1
products with their epilogues and the broadcast product that SqueezeExcitation runs), in fp32
and int8."""

import numpy as np
import pytest

from kuiperinfer.kernels.compiled.pooling import global_avg_pool2d_channels_last
from kuiperinfer.kernels.compiled.squeeze_excitation import CompiledInt8SqueezeExcitation, CompiledSqueezeExcitation
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.jit import kernel_array
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.matrix.precision import Int8
from kuiperinfer.kernels.pooling import global_avg_pool2d
from kuiperinfer.layers.convolution import PointwiseProduct
from kuiperinfer.layers.fused import Pointwise, SqueezeExcitationPlan, compiled_gate

ACTIVATIONS = [None, InplaceActivation("relu"), InplaceActivation("clip", (0.0, 6.0)),
               InplaceActivation("leaky_relu", (0.1,)), InplaceActivation("sigmoid"), InplaceActivation("silu"),
               InplaceActivation("hardsigmoid"), InplaceActivation("hardswish")]
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("gate", ACTIVATIONS, ids=lambda a: "none" if a is None else a.name)
@pytest.mark.parametrize("shape, hidden", [((1, 16, 56, 56), 8), ((3, 19, 7, 5), 5), ((2, 576, 1, 1), 144)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_squeeze_excitation_matches_the_reference(gate, shape, hidden, with_bias):
    n, c, h, w = shape
    x = RNG.standard_normal(shape, dtype=np.float32) * 2
    reduce_weight = RNG.standard_normal((hidden, c, 1, 1), dtype=np.float32) / np.sqrt(c)
    expand_weight = RNG.standard_normal((c, hidden, 1, 1), dtype=np.float32) / np.sqrt(hidden)
    biases = [RNG.standard_normal(size, dtype=np.float32) if with_bias else None for size in (hidden, c)]
    relu = InplaceActivation("relu")
    reduce_ref, expand_ref = PointwiseProduct(reduce_weight, biases[0], relu), PointwiseProduct(expand_weight, biases[1], gate)
    expected = x * expand_ref(reduce_ref(global_avg_pool2d(x))).reshape(n, c, 1, 1)
    reduce, expand = (PointwiseProduct(reduce_weight, biases[0], relu, compiled=True),
                      PointwiseProduct(expand_weight, biases[1], gate, compiled=True))
    compiled = CompiledSqueezeExcitation(reduce.matrix, reduce.epilogue, expand.matrix, expand.epilogue)
    for source in (x, nchw(np.ascontiguousarray(nhwc(x)))):          # row-major, or channels-last
        ours = nchw(compiled(kernel_array(nhwc(source))))
        np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("gate", ACTIVATIONS, ids=lambda a: "none" if a is None else a.name)
@pytest.mark.parametrize("shape, hidden", [((1, 16, 56, 56), 8), ((3, 19, 7, 5), 5), ((2, 576, 1, 1), 144),
                                           ((2, 8, 3, 3), 24)])   # more hidden channels than channels
@pytest.mark.parametrize("requantized", [True, False])
def test_int8_squeeze_excitation_is_the_int8_products_to_the_bit(gate, shape, hidden, requantized):
    """The gate's int8 products in one call: the numbers of the layer's products on the
    compiled tiles (the reduced channels handed on as uint8 or as float32)."""
    n, c, h, w = shape
    x = RNG.standard_normal(shape, dtype=np.float32) * 2
    plan = SqueezeExcitationPlan(
        Pointwise("reduce", RNG.standard_normal((hidden, c, 1, 1), dtype=np.float32) / np.sqrt(c),
                  RNG.standard_normal(hidden, dtype=np.float32), InplaceActivation("relu")),
        Pointwise("expand", RNG.standard_normal((c, hidden, 1, 1), dtype=np.float32) / np.sqrt(hidden),
                  RNG.standard_normal(c, dtype=np.float32), gate))
    reduce_precision, expand_precision = Int8(scale=0.004, zero_point=128), Int8(scale=0.02, zero_point=30)
    reduce = PointwiseProduct(plan.reduce.weight, plan.reduce.bias, plan.reduce.activation, True, reduce_precision,
                              expand_precision.requantize if requantized else None)
    expand = PointwiseProduct(plan.expand.weight, plan.expand.bias, gate, True, expand_precision)
    channels_last = nchw(np.ascontiguousarray(nhwc(x)))
    mean = global_avg_pool2d_channels_last(channels_last)     # the mean the gate takes, as the unfused pooling's
    np.testing.assert_allclose(mean, global_avg_pool2d(x), atol=1e-6, rtol=1e-5)
    expected = x * expand(reduce(mean)).reshape(n, c, 1, 1)
    compiled = compiled_gate(plan, reduce, expand)
    assert isinstance(compiled, CompiledInt8SqueezeExcitation)
    for source in (x, channels_last):          # row-major, or channels-last
        np.testing.assert_array_equal(nchw(compiled(kernel_array(nhwc(source)))), expected)


def test_a_gate_of_mixed_precisions_takes_the_reference():
    weight = RNG.standard_normal((4, 8, 1, 1), dtype=np.float32)
    plan = SqueezeExcitationPlan(Pointwise("reduce", weight, None, None),
                                 Pointwise("expand", weight.transpose(1, 0, 2, 3).copy(), None, None))
    reduce = PointwiseProduct(plan.reduce.weight, None, None, True, Int8(scale=0.01, zero_point=0))
    expand = PointwiseProduct(plan.expand.weight, None, None, True)
    assert compiled_gate(plan, reduce, expand) is None
