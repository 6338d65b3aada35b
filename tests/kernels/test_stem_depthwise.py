"""A stem and the depthwise convolution after it, computed a stripe of rows at a time, give
the numbers of the two computed one after the other, to the bit: in fp32 and int8, float32 or
uint8 out, in one stripe or several, on one thread or in bands of rows on three."""

import numpy as np
import pytest
from pools import intra_op

from kuiperinfer.kernels.compiled import depthwise
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.matrix.convolution import DirectInt8Convolution
from kuiperinfer.kernels.matrix.precision import FP32, Int8
from kuiperinfer.kernels.matrix.products import Requantize
from kuiperinfer.layers.convolution import ConvGeometry, Convolution, ConvolutionPlan
from kuiperinfer.layers.fused import StemDepthwise

RNG = np.random.default_rng(0)
PRECISIONS = {"fp32": FP32, "int8": Int8(scale=0.02, zero_point=117)}
GEOMETRIES = {   # the stem's kernel, stride and padding; the depthwise convolution's
    "3x3/2, then 3x3": ((3, 3), (2, 2), ((1, 1), (1, 1)), (3, 3), (1, 1), ((1, 1), (1, 1))),
    "EfficientNet's padding, then 5x5/2": ((3, 3), (2, 2), ((0, 1), (0, 1)), (5, 5), (2, 2), ((1, 2), (1, 2))),
}


def layers(precision, geometry, channels, requantize):
    """The fused layer of a stem (3 -> ``channels``, hardswish) and a depthwise convolution
    (ReLU6), and the same two run one after the other."""
    stem_kernel, stem_stride, stem_pads, kernel, stride, pads = GEOMETRIES[geometry]
    stem = Convolution("stem", RNG.standard_normal((channels, 3, *stem_kernel), dtype=np.float32) / 4,
                       RNG.standard_normal(channels, dtype=np.float32),
                       ConvGeometry(stem_kernel, stem_stride, (1, 1), stem_pads, "zeros", 1), 2,
                       ConvolutionPlan(activation=InplaceActivation("hardswish")), compiled=True,
                       precision=PRECISIONS[precision])
    filter_ = Convolution("depthwise", RNG.standard_normal((channels, 1, *kernel), dtype=np.float32),
                          RNG.standard_normal(channels, dtype=np.float32),
                          ConvGeometry(kernel, stride, (1, 1), pads, "zeros", channels), 2,
                          ConvolutionPlan(activation=InplaceActivation("clip", (0.0, 6.0))), compiled=True)
    fused = StemDepthwise("fused", stem, filter_, requantize)
    one_after_the_other = StemDepthwise("plain", stem, filter_, requantize)
    one_after_the_other.walk = None
    return fused, one_after_the_other


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("channels", [16, 24])      # a vector; a vector and a tail
@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
@pytest.mark.parametrize("threads, stripe_bytes", [(1, 1 << 20), (1, 3000), (3, 3000)],
                         ids=["whole", "stripes", "bands"])
def test_stem_and_depthwise_in_stripes_give_the_two_operators_numbers(precision, geometry, channels, uint8, threads,
                                                                       stripe_bytes, monkeypatch):
    monkeypatch.setattr(depthwise, "PART_WORK", 1)
    monkeypatch.setattr(depthwise, "STRIPE_BYTES", stripe_bytes)
    fused, one_after_the_other = layers(precision, geometry, channels, Requantize(0.05, 3) if uint8 else None)
    direct = precision == "fp32" or isinstance(fused.stem.kernel, DirectInt8Convolution)
    assert (fused.walk is not None) == direct and (direct or channels > 16)   # int8 16 x 27 taps: direct on any CPU
    x = RNG.standard_normal((2, 3, 29, 23), dtype=np.float32)
    with intra_op(threads):
        ours = fused.forward([x])[0]
        expected = one_after_the_other.forward([x])[0]
    assert ours.dtype == expected.dtype == (np.uint8 if uint8 else np.float32) and ours.shape == expected.shape
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(fused.forward([x[1:]])[0], expected[1:])   # an image alone as in the batch
