"""Normalisation operators against PyTorch, every spelling pnnx writes.

Weights, biases and running statistics are randomised so that no normalisation is the
identity. pnnx turns F.* calls with constant weights into nn modules (F.layer_norm with
constant tensors becomes nn.LayerNorm) and keeps F.* when the weights are computed, as
named inputs (``$weight=1``); both forms are covered.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from handmade import one_operator_model
from oracle import check_branches, check_op

import kuiperinfer
from benchmarks.networks import randomize_batchnorm
from kuiperinfer.errors import LayerCreateError


def randomized(module, seed=0):
    """``module`` with random affine parameters and running statistics (variances > 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if name.endswith("weight") or name.endswith("running_var"):
                tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
            elif name.endswith("bias") or name.endswith("running_mean"):
                tensor.copy_(torch.rand(tensor.shape, generator=generator) - 0.5)
    return module.eval()


def constants(*shape, seed=1):
    """A constant tensor (folded into the model by the trace) in [0.5, 1.5)."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) + 0.5


@pytest.mark.parametrize("shape", [(2, 5), (2, 5, 7)], ids=["NC", "NCL"])
def test_batch_norm_1d(shape, tmp_path):
    mean, var, weight, bias = constants(5, seed=1) - 1, constants(5, seed=2), constants(5, seed=3), constants(5) - 1
    fns = [randomized(nn.BatchNorm1d(5)), randomized(nn.BatchNorm1d(5, eps=1e-2, affine=False), seed=1),
           lambda x: F.batch_norm(x, mean, var, weight, bias, eps=1e-3),    # becomes nn.BatchNorm1d
           lambda x: F.batch_norm(x, mean, var)]                             # stays, stats are pnnx.Attribute
    check_branches(fns, ["nn.BatchNorm1d", "F.batch_norm"], shape, directory=tmp_path)


def test_batch_norm_3d(tmp_path):
    fns = [randomized(nn.BatchNorm3d(3)), randomized(nn.BatchNorm3d(3, affine=False), seed=2)]
    check_branches(fns, ["nn.BatchNorm3d"], (1, 3, 2, 4, 5), directory=tmp_path)


def test_batchnorm2d_left_unfused(tmp_path):
    bn = randomize_batchnorm(nn.BatchNorm2d(5), seed=3)
    graph = check_op(bn, (1, 5, 6, 7), directory=tmp_path, batch=4)
    assert "nn.BatchNorm2d" in [op.type for op in graph.operators]


def test_functional_batch_norm_with_inputs(tmp_path):
    fns = [lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b),
           lambda x, m, v, w, b: F.batch_norm(x, m, v, w, eps=0.1),
           lambda x, m, v, w, b: F.batch_norm(x, m, v, bias=b)]
    inputs = [(2, 4, 3, 3), (4,), constants(4, seed=5), (4,), (4,)]
    check_branches(fns, ["F.batch_norm"], *inputs, directory=tmp_path)


def test_layer_norm(tmp_path):
    weight, bias = constants(4, 5), constants(4, 5, seed=2) - 1
    fns = [randomized(nn.LayerNorm(5)), nn.LayerNorm((4, 5), elementwise_affine=False),
           randomized(nn.LayerNorm((3, 4, 5), eps=1e-2)), lambda x: F.layer_norm(x, (5,)),
           lambda x: F.layer_norm(x, (4, 5), weight, bias, eps=1e-3),
           lambda x: torch.layer_norm(x, [3, 4, 5], eps=0.5)]
    check_branches(fns, ["nn.LayerNorm", "F.layer_norm"], (2, 3, 4, 5), directory=tmp_path)


def test_layer_norm_with_weight_inputs(tmp_path):
    fns = [lambda x, w, b: F.layer_norm(x, (6,), w, b),
           lambda x, w, b: F.layer_norm(x, (6,), w),
           lambda x, w, b: F.layer_norm(x, (6,), None, b, eps=1e-2)]
    check_branches(fns, ["F.layer_norm"], (2, 7, 6), (6,), (6,), directory=tmp_path)


def test_layer_norm_far_from_zero(tmp_path):
    """A large common offset: E[x^2] - E[x]^2 would be off by 10% here, the variance of
    the centred values is not."""
    x = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(0)) + 1000
    check_branches([randomized(nn.LayerNorm(16)), lambda x: F.layer_norm(x, (3, 16))], ["nn.LayerNorm"], x,
                   directory=tmp_path)


def test_rms_norm(tmp_path):
    weight = constants(4, 5)
    fns = [randomized(nn.RMSNorm(5)), nn.RMSNorm((4, 5), eps=1e-3, elementwise_affine=False),
           lambda x: F.rms_norm(x, (5,)), lambda x: F.rms_norm(x, (4, 5), weight, eps=1e-5)]
    # Small inputs, so that the default eps (float32's machine epsilon) matters.
    check_branches(fns, ["nn.RMSNorm", "F.rms_norm"], (2, 3, 4, 5), directory=tmp_path, scale=1e-3)


@pytest.mark.parametrize("shape", [(2, 6), (2, 6, 7), (2, 6, 4, 5), (1, 6, 2, 3, 4)])
def test_group_norm(shape, tmp_path):
    # nn.GroupNorm(affine=False) is left out: pnnx writes it without num_channels, and
    # its own Python re-export then fails (see test_group_norm_without_num_channels).
    weight, bias = constants(6), constants(6, seed=2) - 1
    fns = [randomized(nn.GroupNorm(2, 6)), randomized(nn.GroupNorm(6, 6)), randomized(nn.GroupNorm(1, 6, eps=0.1)),
           lambda x: F.group_norm(x, 2), lambda x: F.group_norm(x, 3, weight, bias, eps=1e-3)]
    check_branches(fns, ["nn.GroupNorm", "F.group_norm"], shape, directory=tmp_path)


def test_group_norm_with_weight_inputs(tmp_path):
    fns = [lambda x, w, b: F.group_norm(x, 4, w, b), lambda x, w, b: F.group_norm(x, 2, w, eps=0.5)]
    check_branches(fns, ["F.group_norm"], (2, 8, 3, 3), (8,), (8,), directory=tmp_path)


INSTANCE_NORMS = {
    1: (nn.InstanceNorm1d, (2, 3, 7)),
    2: (nn.InstanceNorm2d, (2, 3, 4, 5)),
    3: (nn.InstanceNorm3d, (1, 3, 2, 3, 4)),
}


@pytest.mark.parametrize("dims", INSTANCE_NORMS)
def test_instance_norm(dims, tmp_path):
    module, shape = INSTANCE_NORMS[dims]
    weight, bias = constants(3), constants(3, seed=2) - 1
    fns = [module(3), randomized(module(3, affine=True, eps=1e-3)),
           randomized(module(3, track_running_stats=True), seed=1),
           randomized(module(3, affine=True, track_running_stats=True), seed=2),
           lambda x: F.instance_norm(x), lambda x: F.instance_norm(x, weight=weight, bias=bias, eps=0.1)]
    check_branches(fns, [module.__name__.replace("InstanceNorm", "nn.InstanceNorm"), "F.instance_norm"], shape,
                   directory=tmp_path)


def test_instance_norm_with_weight_inputs(tmp_path):
    fns = [lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
           lambda x, w, b: F.instance_norm(x, weight=w, eps=0.2)]
    check_branches(fns, ["F.instance_norm"], (2, 3, 4, 5), (3,), (3,), directory=tmp_path)


def test_instance_norm_1d_unbatched(tmp_path):
    fns = [randomized(nn.InstanceNorm1d(3, affine=True)), randomized(nn.InstanceNorm1d(3, track_running_stats=True))]
    check_branches(fns, ["nn.InstanceNorm1d"], (3, 7), directory=tmp_path, batch=None)


def test_normalize(tmp_path):
    fns = [F.normalize, lambda x: F.normalize(x, p=1.0, dim=-1, eps=1e-6), lambda x: F.normalize(x, p=3, dim=0),
           lambda x: F.normalize(x, p=float("inf"), dim=2), lambda x: F.normalize(x, p=0.5, dim=1),
           lambda x: F.normalize(x, p=2, dim=1, eps=4.0)]
    check_branches(fns, ["F.normalize"], (2, 3, 4, 5), directory=tmp_path)


def run_one_operator(directory, op_type, params, x):
    return kuiperinfer.load(one_operator_model(directory, op_type, params, shape=",".join(map(str, x.shape))))(x)


def test_normalize_over_several_dims(tmp_path):
    # pnnx exports F.normalize(x, dim=(1, 3)) as if it were F.normalize(x): written by hand.
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    ours = run_one_operator(tmp_path, "F.normalize", "dim=(1,3) eps=1.000000e-12 p=3.0", x)
    np.testing.assert_allclose(ours, F.normalize(torch.from_numpy(x), p=3.0, dim=(1, 3)).numpy(), atol=1e-6)


def test_group_norm_without_num_channels(tmp_path):
    # What pnnx writes for nn.GroupNorm(3, 6, eps=1e-3, affine=False).
    x = np.random.default_rng(0).standard_normal((2, 6, 4, 5)).astype(np.float32)
    ours = run_one_operator(tmp_path, "nn.GroupNorm", "affine=False eps=0.001 num_groups=3", x)
    np.testing.assert_allclose(ours, F.group_norm(torch.from_numpy(x), 3, eps=1e-3).numpy(), atol=1e-5)


INVALID = [
    ("nn.GroupNorm", "affine=False eps=1.0e-5 num_channels=3 num_groups=2", "divisible"),
    ("nn.GroupNorm", "affine=True eps=1.0e-5 num_channels=3 num_groups=3", "weight"),
    ("nn.LayerNorm", "elementwise_affine=False eps=1.0e-5 normalized_shape=()", "normalized_shape"),
    ("nn.LayerNorm", "elementwise_affine=True eps=1.0e-5 normalized_shape=(5)", "weight"),
    ("nn.InstanceNorm2d", "affine=False eps=1.0e-5 num_features=3 track_running_stats=True", "running_mean"),
    ("nn.BatchNorm2d", "affine=False eps=-1.0 num_features=3", "eps"),
    ("F.batch_norm", "eps=1.0e-5", "running_mean"),
    ("F.normalize", "dim=1 eps=1.0e-12 p=fro", "p"),
]


@pytest.mark.parametrize("op_type,params,word", INVALID, ids=[f"{t} {p}" for t, p, _ in INVALID])
def test_invalid_parameters_fail_at_build_time(op_type, params, word, tmp_path):
    with pytest.raises(LayerCreateError, match=f"'op' \\({op_type}\\).*{word}"):
        kuiperinfer.load(one_operator_model(tmp_path, op_type, params))


def test_batch_norm_weights_are_folded_once(tmp_path):
    bn = randomized(nn.BatchNorm1d(5))
    graph = check_branches([bn], ["nn.BatchNorm1d"], (2, 5), directory=tmp_path, batch=None)
    layer = next(op.layer for op in graph.operators if op.type == "nn.BatchNorm1d")
    layer.set_weights(np.full(5, 2.0, np.float32))
    x = np.ones((1, 5), np.float32)
    with torch.no_grad():
        bn.weight.fill_(2.0)
        expected = bn(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(graph(x), expected, rtol=1e-6, atol=1e-6)


LRN_CASES = [dict(size=1), dict(size=2), dict(size=3, alpha=1e-2, beta=0.5, k=2.0), dict(size=5, alpha=0.5),
             dict(size=8)]   # a window wider than the channels


@pytest.mark.parametrize("shape", [(1, 6, 9), (1, 6, 5, 4), (1, 6, 3, 4, 5)], ids=str)
@pytest.mark.parametrize("case", LRN_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_local_response_norm(case, shape, tmp_path):
    graph = check_op(nn.LocalResponseNorm(**case), shape, directory=tmp_path, batch=2)
    assert "nn.LocalResponseNorm" in {op.type for op in graph.operators}
    graph = check_op(lambda x: F.local_response_norm(x * 3, **case), shape, directory=tmp_path, batch=3)
    assert "F.local_response_norm" in {op.type for op in graph.operators}
