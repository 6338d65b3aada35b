"""Activations against PyTorch, every spelling pnnx writes.

One export checks several spellings and parameter values at once: :class:`Branches`
applies each function to the same inputs and returns all the results. The modules are
held as attributes so that pnnx writes them as ``nn.X`` (a bare top-level module is
written as its ``F.x`` form).
"""

import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from handmade import one_operator_model
from oracle import Branches, assert_matches, check_branches, check_op, export, torch_outputs

import kuiperinfer
from kuiperinfer.errors import InferError, LayerCreateError


def with_weight(module, values):
    with torch.no_grad():
        module.weight.copy_(torch.as_tensor(values, dtype=torch.float32))
    return module


@pytest.mark.parametrize("fn", [nn.ReLU(), F.relu, torch.relu, lambda x: x.relu(),
                                nn.Sigmoid(), torch.sigmoid, F.sigmoid, lambda x: x.sigmoid()])
def test_relu_sigmoid_spellings(fn, tmp_path):
    check_op(fn, (2, 3, 5, 4), directory=tmp_path, batch=3)


def test_sigmoid_extremes_do_not_overflow(tmp_path):
    check_op(lambda x: torch.sigmoid(x * 200), (1, 64), directory=tmp_path)


SPELLINGS = {
    "relu6_hardtanh": ([nn.ReLU6(), F.relu6, nn.Hardtanh(-0.5, 2.0), nn.Hardtanh(-2, 3),
                        lambda x: F.hardtanh(x, -1.5, 0.5), F.hardtanh, lambda x: F.hardtanh(x, 0.0, 0.0)],
                       ["nn.ReLU6", "F.relu6", "nn.Hardtanh", "F.hardtanh"]),
    "leaky_relu_rrelu": ([nn.LeakyReLU(0.2), nn.LeakyReLU(-0.5), F.leaky_relu, lambda x: F.leaky_relu(x, 1.5),
                          nn.PReLU(init=0.1), nn.RReLU(0.1, 0.3), lambda x: F.rrelu(x, training=False)],
                         ["nn.LeakyReLU", "F.leaky_relu", "nn.RReLU", "F.rrelu"]),
    "elu_selu_celu": ([nn.ELU(0.5), lambda x: F.elu(x, 2.0), F.elu, nn.ELU(0.0), nn.SELU(), F.selu, torch.selu,
                       nn.CELU(0.7), lambda x: F.celu(x, 1.5), lambda x: torch.celu(x, alpha=2.0), F.celu],
                      ["nn.ELU", "F.elu", "nn.SELU", "F.selu", "nn.CELU", "F.celu"]),
    "gelu": ([nn.GELU(), nn.GELU("tanh"), F.gelu, lambda x: F.gelu(x, approximate="tanh"),
              lambda x: F.gelu(x, approximate="none")], ["nn.GELU", "F.gelu"]),
    "silu_mish": ([nn.SiLU(), F.silu, nn.Mish(), F.mish, lambda x: x * torch.tanh(F.softplus(x))],
                  ["nn.SiLU", "F.silu", "nn.Mish", "F.mish"]),
    "sigmoid_tanh": ([nn.Sigmoid(), F.sigmoid, torch.sigmoid, lambda x: x.sigmoid(),
                      nn.Tanh(), F.tanh, torch.tanh, lambda x: x.tanh()],
                     ["nn.Sigmoid", "F.sigmoid", "nn.Tanh", "F.tanh"]),
    "hardsigmoid_hardswish": ([nn.Hardsigmoid(), F.hardsigmoid, nn.Hardswish(), F.hardswish],
                              ["nn.Hardsigmoid", "F.hardsigmoid", "nn.Hardswish", "F.hardswish"]),
    "softplus": ([nn.Softplus(2, 10), nn.Softplus(), F.softplus, lambda x: F.softplus(x, beta=0.5, threshold=3.5),
                  lambda x: F.softplus(x, beta=3, threshold=1)], ["nn.Softplus", "F.softplus"]),
    "softsign_logsigmoid": ([nn.Softsign(), F.softsign, nn.LogSigmoid(), F.logsigmoid],
                            ["nn.Softsign", "F.softsign", "nn.LogSigmoid", "F.logsigmoid"]),
    "threshold": ([nn.Threshold(0.1, 20), lambda x: F.threshold(x, 0.5, -1.0),
                   lambda x: torch.threshold(x, -2, 7)], ["nn.Threshold", "F.threshold"]),
    "shrink": ([nn.Hardshrink(), nn.Hardshrink(1.5), lambda x: F.hardshrink(x, 0.2), nn.Softshrink(0.3),
                F.softshrink, lambda x: F.softshrink(x, 2), nn.Tanhshrink(), F.tanhshrink],
               ["nn.Hardshrink", "F.hardshrink", "nn.Softshrink", "F.softshrink", "nn.Tanhshrink", "F.tanhshrink"]),
    "glu": ([nn.GLU(), nn.GLU(1), lambda x: F.glu(x, 2), lambda x: F.glu(x, -1)], ["nn.GLU", "F.glu"]),
}


@pytest.mark.parametrize("name", SPELLINGS)
def test_activation_spellings_and_parameters(name, tmp_path):
    fns, types = SPELLINGS[name]
    check_branches(fns, types, (2, 4, 6, 8), directory=tmp_path)


PRELU_CONSTANT = torch.tensor([0.3, 0.0, -1.0])


@pytest.mark.parametrize("shape", [(2, 3), (1, 3, 2, 2, 3)])
def test_prelu_per_channel_on_any_rank(shape, tmp_path):
    fns = [with_weight(nn.PReLU(3), [0.1, -0.5, 2.0]), lambda x: torch.prelu(x, PRELU_CONSTANT)]
    check_branches(fns, ["nn.PReLU"], shape, directory=tmp_path)


def test_functional_prelu_with_weight_input(tmp_path):
    fns = [lambda x, per_channel, single: F.prelu(x, per_channel),
           lambda x, per_channel, single: torch.prelu(x, single)]
    check_branches(fns, ["F.prelu"], (1, 3, 5, 2), (3,), (1,), directory=tmp_path)


# Every activation at once, and the softmax family, on values where the textbook formulas overflow.
EXTREME_FNS = [
    nn.ReLU(), nn.ReLU6(), nn.Hardtanh(-2, 3), nn.LeakyReLU(0.1), nn.RReLU(), nn.PReLU(3), nn.ELU(0.5),
    nn.SELU(), nn.CELU(0.5), nn.GELU(), nn.GELU("tanh"), nn.SiLU(), nn.Mish(), nn.Sigmoid(), nn.Tanh(),
    nn.Hardsigmoid(), nn.Hardswish(), nn.Softplus(), nn.Softplus(2, 30), nn.Softsign(), nn.LogSigmoid(),
    nn.Threshold(1.0, -3.0), nn.Hardshrink(), nn.Softshrink(), nn.Tanhshrink(), nn.GLU(2),
    nn.Softmax(-1), nn.LogSoftmax(-1), nn.Softmin(-1), nn.Softmax(1),
]
EXTREMES = [-1e4, -100.0, -88.8, -30.0, -1.0, -1e-30, 0.0, 1e-30, 1.0, 30.0, 88.8, 100.0, 1e4, 3.0, -3.0, 6.0]


def test_extreme_values_are_stable_and_float32(tmp_path):
    model = Branches(*EXTREME_FNS)
    x = torch.tensor(EXTREMES).reshape(1, 1, 1, -1).repeat(2, 3, 2, 1)
    x[:, 1] *= -1
    graph = kuiperinfer.load(export(model, [x], tmp_path))
    read_only = x.numpy().copy()
    read_only.setflags(write=False)  # layers must never write to their inputs
    with warnings.catch_warnings(), np.errstate(over="raise", divide="raise", invalid="raise"):
        warnings.simplefilter("error")
        ours = graph.run(read_only)
    expected = torch_outputs(model, [x])
    for fn, a, b in zip(EXTREME_FNS, ours, expected):
        assert a.dtype == np.float32, fn
        assert_matches([a], [b])


# Parameters that PyTorch rejects are refused when the graph is built, with the operator named.
INVALID = [
    ("nn.Hardtanh", "max_val=-1.0 min_val=1.0", "min_val"),
    ("nn.CELU", "alpha=0.0", "alpha"),
    ("F.softplus", "beta=0 threshold=20", "beta"),
    ("nn.GELU", "approximate=erf", "approximate"),
    ("nn.Softshrink", "lambd=-0.5", "lambd"),
    ("nn.PReLU", "num_parameters=4 @weight=(3)f32", "weight"),
]


@pytest.mark.parametrize("op_type,params,word", INVALID, ids=[f"{t} {p}" for t, p, _ in INVALID])
def test_invalid_parameters_fail_at_build_time(op_type, params, word, tmp_path):
    path = one_operator_model(tmp_path, op_type, params, {"op.weight": np.ones(3)})
    with pytest.raises(LayerCreateError, match=f"'op' \\({op_type}\\).*{word}"):
        kuiperinfer.load(path)


def test_prelu_weight_that_does_not_fit_the_channels_fails_at_run_time(tmp_path):
    graph = kuiperinfer.load(one_operator_model(tmp_path, "nn.PReLU", "num_parameters=3 @weight=(3)f32",
                                                {"op.weight": np.ones(3)}, "1,4,4,5"), warmup=False)
    with pytest.raises(InferError, match="'op' \\(nn.PReLU\\).*PReLU weight has 3 values"):
        graph.run(np.ones((1, 4, 4, 5), np.float32))
