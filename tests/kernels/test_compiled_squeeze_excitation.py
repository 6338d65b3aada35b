"""The compiled squeeze-and-excitation gate against its NumPy reference (the mean, two 1x1
products with their epilogues and the broadcast product that SqueezeExcitation runs)."""

import numpy as np
import pytest

from kuiperinfer.kernels.compiled.squeeze_excitation import CompiledSqueezeExcitation
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.jit import kernel_array
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.pooling import global_avg_pool2d
from kuiperinfer.layers.convolution import PointwiseProduct

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
