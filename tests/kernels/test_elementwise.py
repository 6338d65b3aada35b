"""The in-place activations and the epilogue (bias, activation) that the products apply to
their blocks, against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.layers.convolution import ConvGeometry, PackedWeight, conv2d

RNG = np.random.default_rng(0)


ACTIVATIONS = [
    (InplaceActivation("relu"), F.relu),
    (InplaceActivation("clip", (-0.5, 2.0)), lambda t: F.hardtanh(t, -0.5, 2.0)),
    (InplaceActivation("clip", (0.0, 6.0)), F.relu6),
    (InplaceActivation("leaky_relu", (0.2,)), lambda t: F.leaky_relu(t, 0.2)),
    (InplaceActivation("leaky_relu", (-1.5,)), lambda t: F.leaky_relu(t, -1.5)),
    (InplaceActivation("sigmoid"), torch.sigmoid),
    (InplaceActivation("silu"), F.silu),
    (InplaceActivation("hardsigmoid"), F.hardsigmoid),
    (InplaceActivation("hardswish"), F.hardswish),
]


@pytest.mark.parametrize("activation, reference", ACTIVATIONS, ids=lambda a: getattr(a, "name", ""))
def test_inplace_activations_match_pytorch_and_work_in_place(activation, reference):
    x = np.concatenate([RNG.standard_normal(1000, dtype=np.float32) * 5,
                        np.array([0, -0.0, 3, -3, 6, -6, 1e30, -1e30, np.nan], np.float32)])
    y = x.copy()
    assert activation(y) is y
    np.testing.assert_allclose(y, reference(torch.from_numpy(x)).numpy(), atol=1e-6, rtol=1e-6)
    assert y.dtype == np.float32


@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
@pytest.mark.parametrize("kind", ["im2col", "winograd", "depthwise", "planar"])
def test_halved_weights_give_the_activation_exactly_the_same_values(activation, kind):
    """Weights and bias halved (exact in floating point) and the activation's halving pass
    skipped: the same bits as the whole product followed by the whole activation."""
    c, groups = {"depthwise": (8, 8), "planar": (3, 1)}.get(kind, (8, 1))
    x = RNG.standard_normal((1, c, 12, 12), dtype=np.float32)
    weight = RNG.standard_normal((8, c // groups, 3, 3), dtype=np.float32)
    bias = RNG.standard_normal(8, dtype=np.float32)
    geometry = ConvGeometry((3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), "zeros", groups)
    fn = InplaceActivation(activation)
    assert fn.takes_halves and not InplaceActivation("relu").takes_halves
    whole = PackedWeight(weight, groups, winograd=kind == "winograd")
    halved = PackedWeight(weight, groups, winograd=kind == "winograd", scale=0.5)
    expected = conv2d(x, whole, geometry, Epilogue(bias, fn))
    ours = conv2d(x, halved, geometry, Epilogue(bias * np.float32(0.5), fn, halved=True))
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("channels", [3, 16, 100, 1024, 1500])
@pytest.mark.parametrize("pixels", [1, 7, 200])
def test_epilogue_adds_the_bias_along_the_channels_of_any_block(channels, pixels):
    """Whole blocks go over rows of the repeated bias with a remainder of single pixels;
    a block of some channels, or in strided memory, gets just those channels' biases."""
    bias = RNG.standard_normal(channels, dtype=np.float32)
    block = RNG.standard_normal((pixels, channels), dtype=np.float32)
    expected = np.maximum(block + bias, 0)
    whole = block.copy()
    Epilogue(bias, InplaceActivation("relu"))(whole)
    np.testing.assert_array_equal(whole, expected)
    part = slice(channels // 3, channels)
    columns = block.copy()
    Epilogue(bias)(columns[:, part], part)
    np.testing.assert_array_equal(columns[:, part], block[:, part] + bias[part])
    np.testing.assert_array_equal(columns[:, :part.start], block[:, :part.start])
    strided = block[::-1].copy()[::-1]
    Epilogue(bias)(strided)
    np.testing.assert_array_equal(strided, block + bias)


def test_unknown_inplace_activation_is_refused():
    with pytest.raises(ValueError, match="unknown in-place activation"):
        InplaceActivation("swoosh")
