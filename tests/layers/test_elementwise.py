"""torch.lgamma, torch.positive and the torch.bitwise_* operators against PyTorch."""

import math

import numpy as np
import pytest
import torch
from oracle import Lambda, check_model, export

import kuiperinfer
from kuiperinfer.layers.elementwise import log_gamma


def op_types(graph):
    return {op.type for op in graph.operators}


# -- lgamma --------------------------------------------------------------------------------

# poles (0, -1, -2, ... and -0.0), the zeros at 1 and 2, near-pole and near-root values,
# tiny and huge magnitudes, infinities and NaN
LGAMMA_EDGES = [0.0, -0.0, -1.0, -2.0, -7.0, -1e7, 1.0, 2.0, 1.0000001, 1.9999999, -0.9999999, -1.0000001,
                -2.4570248, -2.7476826, 0.5, -0.5, 1e-38, -1e-38, 1e-45, 3.0, 10.0, 10.5, 33.3, 171.5, 1e10,
                1e30, -1e30, 3.4e38, math.inf, -math.inf, math.nan]


def lgamma_inputs(batch, seed):
    generator = torch.Generator().manual_seed(seed)
    wide = torch.cat([torch.randn(batch, 40, generator=generator) * 30,
                      torch.tensor(LGAMMA_EDGES).repeat(batch, 1)], dim=1)
    return wide.reshape(batch, 1, -1)


def test_lgamma(tmp_path):
    module = Lambda(lambda x, i: (torch.lgamma(x), x.lgamma() * 2, torch.lgamma(i)))
    inputs = [lgamma_inputs(1, 0), torch.arange(-20, 51).reshape(1, 1, -1)]
    graph = check_model(module, inputs, tmp_path, [[lgamma_inputs(3, 1), inputs[1].repeat(3, 1, 1)]])
    assert "torch.lgamma" in op_types(graph)
    outputs = graph.run(*[t.numpy() for t in inputs])
    assert [o.dtype for o in outputs] == [np.float32, np.float32, np.float32]  # int64 in: float32 out


def test_lgamma_of_float64(tmp_path):
    x = lgamma_inputs(1, 0).double()
    graph = check_model(Lambda(torch.lgamma), [x], tmp_path, atol=1e-9, rtol=1e-12)
    assert graph.run(x.numpy())[0].dtype == np.float64


def test_lgamma_is_correctly_rounded_float32_on_a_dense_grid():
    """Computed in float64 and rounded once: within half an ulp of the exact value."""
    x = np.concatenate([np.linspace(-40, 40, 400_001, dtype=np.float32),
                        np.geomspace(1e-38, 3e38, 20_001).astype(np.float32),
                        -np.geomspace(1e-38, 1e7, 20_001).astype(np.float32)])
    exact = np.array([math.lgamma(v) if not (v <= 0 and v == round(v)) else math.inf
                      for v in x.astype(np.float64)])
    ours = log_gamma(x)
    assert ours.dtype == np.float32
    with np.errstate(over="ignore"):
        rounded = exact.astype(np.float32)
    finite = np.isfinite(rounded)
    np.testing.assert_array_equal(ours[~finite], rounded[~finite])
    ulps = np.abs(ours[finite].astype(np.float64) - exact[finite]) / np.spacing(np.abs(rounded[finite]))
    assert ulps.max() <= 0.5 + 1e-6


def test_lgamma_matches_torch_except_where_torch_overflows_early():
    """torch's float32 lgamma gives inf from about 4.04e36 on, where the value (about 3.36e38)
    still fits in float32; we give the finite value."""
    x = np.concatenate([np.linspace(-60, 60, 200_001, dtype=np.float32),
                        np.geomspace(1e-38, 3.4e38, 20_001).astype(np.float32),
                        -np.geomspace(1e-38, 3.4e38, 20_001).astype(np.float32), np.float32(LGAMMA_EDGES)])
    ours, theirs = log_gamma(x), torch.lgamma(torch.from_numpy(x)).numpy()
    early = (x > 4.0e36) & (x < 4.1e36)
    np.testing.assert_allclose(ours[~early], theirs[~early], rtol=2e-6, atol=1e-6)
    assert np.isinf(theirs[early]).any() and np.isfinite(ours[early]).all()


def test_lgamma_edge_values():
    got = log_gamma(np.array([0.0, -0.0, -3.0, 1.0, 2.0, math.inf, -math.inf, math.nan, 1e-45], np.float32))
    assert got[:3].tolist() == [math.inf] * 3 and got[3:5].tolist() == [0.0, 0.0]
    assert got[5:7].tolist() == [math.inf, math.inf] and math.isnan(got[7])
    assert got[8] == pytest.approx(-math.log(float(np.float32(1e-45))), rel=1e-6)  # the subnormal 1.4e-45
    assert log_gamma(np.array([True, False])).tolist() == [0.0, math.inf]
    assert log_gamma(np.array([3, 4], np.int32)).dtype == np.float32
    assert log_gamma(np.array([0.5], np.float16)).dtype == np.float16


# -- positive ------------------------------------------------------------------------------

def test_positive(tmp_path):
    module = Lambda(lambda x, i: (torch.positive(x), x.positive() * 2, torch.positive(i)))
    graph = check_model(module, [torch.randn(1, 3, 4), torch.randint(-5, 5, (1, 3, 4))], tmp_path,
                        [[torch.randn(3, 3, 4), torch.randint(-5, 5, (3, 3, 4))]])
    assert "torch.positive" in op_types(graph)
    positive = next(op for op in graph.operators if op.type == "torch.positive")
    with pytest.raises(kuiperinfer.KuiperError, match="not defined for bool"):
        positive.layer.forward([np.array([True])])


# -- bitwise -------------------------------------------------------------------------------

def integers(batch, seed, low=-300, high=300, dtype=torch.int64):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (batch, 3, 5), generator=generator, dtype=dtype)


def bitwise_inputs(batch, seed):
    """Values, and amounts from -3 to 70 (shifts by a negative amount or the width or more)."""
    return [integers(batch, seed), integers(batch, seed + 1, -3, 70)]


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_logic(name, tmp_path):
    """Tensors, a number as other or as input, bools, int32 and uint8, broadcasting."""
    f = getattr(torch, name)

    def fn(i, j):
        return (f(i, j), getattr(i, name)(j), f(i, 0x5A), f(-77, j), f(i > 0, j > 10), f(i > 0, j[:, :1] > 5),
                f(i.int(), j.int()), f(i.to(torch.uint8), j.to(torch.uint8)), f(i, j.int()), f(i.int(), 7))

    graph = check_model(Lambda(fn), bitwise_inputs(1, 0), tmp_path, [bitwise_inputs(3, 2)])
    assert f"torch.{name}" in op_types(graph)


@pytest.mark.parametrize("name", ["bitwise_left_shift", "bitwise_right_shift"])
def test_bitwise_shift(name, tmp_path):
    """Amounts past the width (and negative) give 0 (or the sign for >>), as in torch;
    int32 and uint8 have their own widths; a number as either operand."""
    f = getattr(torch, name)

    def fn(i, j):
        amount = j.clamp(0, 80)
        return (f(i, j), getattr(i, name)(amount), f(i, 3), f(-100, amount), f(i.int(), amount.int()),
                f(i.to(torch.uint8), (amount % 10).to(torch.uint8)), f(i, 64), f(i.int(), 31))

    graph = check_model(Lambda(fn), bitwise_inputs(1, 0), tmp_path, [bitwise_inputs(3, 2)])
    assert f"torch.{name}" in op_types(graph)


def test_bitwise_refuses_floats_at_run_time(tmp_path):
    graph = kuiperinfer.load(export(Lambda(lambda i, j: torch.bitwise_and(i, j)), bitwise_inputs(1, 0), tmp_path))
    layer = next(op for op in graph.operators if op.type == "torch.bitwise_and").layer
    with pytest.raises(kuiperinfer.KuiperError, match="and\\(\\) is not defined for float32 operands"):
        layer.forward([np.ones(3, np.float32), np.ones(3, np.int64)])
    (tmp_path / "hand.pnnx.param").write_text(
        "7767517\n3 2\npnnx.Input in0 0 1 0 #0=(1,3,5)i64\n"
        "torch.bitwise_and op 1 1 0 1 other=1.5 $input=0 #0=(1,3,5)i64 #1=(1,3,5)i64\npnnx.Output out 1 0 1\n")
    (tmp_path / "hand.pnnx.bin").write_bytes((tmp_path / "model.pnnx.bin").read_bytes())
    with pytest.raises(kuiperinfer.KuiperError, match="other 1.5 must be an input, an integer or a bool"):
        kuiperinfer.load(tmp_path / "hand.pnnx.param")
