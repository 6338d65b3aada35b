"""Softmax, LogSoftmax and Softmin against PyTorch, every spelling pnnx writes.

Their behaviour on extreme values is checked with the activations'
(test_activation.py, test_extreme_values_are_stable_and_float32).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from handmade import one_operator_model
from oracle import check_branches, check_op

import kuiperinfer
from kuiperinfer.errors import LayerCreateError


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(dim, tmp_path):
    check_op(nn.Softmax(dim), (2, 5, 7), directory=tmp_path)
    check_op(lambda x: F.softmax(x * 10, dim=dim), (3, 4, 6), directory=tmp_path)


SHAPE = (2, 3, 4, 5)

SOFTMAX_SPELLINGS = [
    ([nn.Softmax(0), nn.Softmax(1), nn.Softmax(-1), nn.Softmax2d(), lambda x: F.softmax(x, 2),
      lambda x: torch.softmax(x, -2), lambda x: x.softmax(3)], ["nn.Softmax", "nn.Softmax2d", "F.softmax"]),
    ([nn.LogSoftmax(1), nn.LogSoftmax(-3), lambda x: F.log_softmax(x, dim=-1), lambda x: torch.log_softmax(x, 2),
      lambda x: x.log_softmax(0)], ["nn.LogSoftmax", "F.log_softmax"]),
    ([nn.Softmin(1), lambda x: F.softmin(x, -1), lambda x: F.softmin(x, 0)], ["nn.Softmin", "F.softmin"]),
]


@pytest.mark.parametrize("fns,types", SOFTMAX_SPELLINGS, ids=["softmax", "log_softmax", "softmin"])
def test_softmax_family(fns, types, tmp_path):
    check_branches(fns, types, SHAPE, directory=tmp_path, scale=10.0)


# Parameters that PyTorch rejects are refused when the graph is built, with the operator named.
INVALID = [
    ("nn.Softmax", "dim=4", "dim"),
    ("F.log_softmax", "dim=-5", "dim"),
]


@pytest.mark.parametrize("op_type,params,word", INVALID, ids=[f"{t} {p}" for t, p, _ in INVALID])
def test_invalid_parameters_fail_at_build_time(op_type, params, word, tmp_path):
    with pytest.raises(LayerCreateError, match=f"'op' \\({op_type}\\).*{word}"):
        kuiperinfer.load(one_operator_model(tmp_path, op_type, params))
