"""The compiled epilogue (bias, activation, residual in one pass) against its NumPy reference."""

import numpy as np
import pytest

from kuiperinfer.kernels.compiled import activation, epilogue
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation

ACTIVATIONS = [None, InplaceActivation("relu"), InplaceActivation("clip", (0.0, 6.0)),
               InplaceActivation("clip", (-1.0, 0.5)), InplaceActivation("leaky_relu", (0.1,)),
               InplaceActivation("leaky_relu", (1.5,)), InplaceActivation("sigmoid"), InplaceActivation("silu"),
               InplaceActivation("hardsigmoid"), InplaceActivation("hardswish")]
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: "none" if a is None else f"{a.name}{a.params}")
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (2, 5, 3, 17), (3, 33, 96)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_compiled_epilogue_matches_the_reference(act, shape, with_bias):
    block = (RNG.standard_normal(shape) * 8).astype(np.float32)
    block.flat[::11] = np.nan
    bias = RNG.standard_normal(shape[-1]).astype(np.float32) if with_bias else None
    ours, reference = block.copy(), block.copy()
    epilogue.CompiledEpilogue(bias, shape[-1], act)(ours)
    Epilogue(bias, act)(reference)
    np.testing.assert_allclose(ours, reference, atol=1e-5, rtol=1e-6)   # NaN where the reference has NaN


def test_compiled_epilogue_takes_channel_slices_and_strided_blocks_through_the_reference():
    block = RNG.standard_normal((4, 6)).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    ours, reference = block.copy(), block.copy()
    compiled = epilogue.CompiledEpilogue(bias, 6, InplaceActivation("silu"))
    compiled(ours[:, 2:4], slice(2, 4))
    compiled(ours[::2], slice(None))
    Epilogue(bias, InplaceActivation("silu"))(reference[:, 2:4], slice(2, 4))
    Epilogue(bias, InplaceActivation("silu"))(reference[::2])
    np.testing.assert_allclose(ours, reference, atol=1e-5)


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: "none" if a is None else a.name)
def test_residual_added_then_activated_in_one_pass(act):
    out = RNG.standard_normal((2, 5, 7, 9)).astype(np.float32) * 4
    residual = RNG.standard_normal(out.shape).astype(np.float32) * 4
    expected = out + residual
    if act is not None:
        act(expected)
    assert epilogue.add_residual(out, residual, act)
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert not epilogue.add_residual(out, residual[:, :, :, :1], act)   # broadcasts: not its case
    assert not epilogue.add_residual(out, np.asfortranarray(residual), act)


def test_tanh_approximation_is_within_its_bound():
    x = np.linspace(-20, 20, 400_001, dtype=np.float32)
    y = np.array([activation.tanh(v) for v in x[::97]], dtype=np.float64)
    assert np.max(np.abs(y - np.tanh(x[::97].astype(np.float64)))) < 1e-6
