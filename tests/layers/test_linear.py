"""nn.Linear and F.linear against PyTorch, each exported by pnnx."""

import pytest
import torch
import torch.nn as nn
from oracle import check_op


@pytest.mark.parametrize("shape", [(1, 16), (1, 5, 16), (1, 2, 3, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_any_leading_dims(shape, bias, tmp_path):
    torch.manual_seed(0)
    check_op(nn.Linear(16, 7, bias=bias), shape, directory=tmp_path, batch=3)
