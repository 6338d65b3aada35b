"""nn.Linear and F.linear against PyTorch, each exported by pnnx."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import check_op


@pytest.mark.parametrize("shape", [(1, 16), (1, 5, 16), (1, 2, 3, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_any_leading_dims(shape, bias, tmp_path):
    torch.manual_seed(0)
    check_op(nn.Linear(16, 7, bias=bias), shape, directory=tmp_path, batch=3)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 4), (1, 3, 4), (1, 2, 3, 4)])
def test_functional_linear_with_weight_inputs(shape, bias, tmp_path):
    if bias:
        check_op(F.linear, shape, (5, 4), (5,), directory=tmp_path)
    else:
        check_op(F.linear, shape, (5, 4), directory=tmp_path)


def test_functional_linear_on_parameters_becomes_nn_linear(tmp_path):
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.randn(5, 4)), nn.Parameter(torch.randn(5))

        def forward(self, x):
            return F.linear(x, self.w, self.b)
    graph = check_op(Functional(), (1, 3, 4), directory=tmp_path, batch=2)
    assert "nn.Linear" in [op.type for op in graph.operators]
