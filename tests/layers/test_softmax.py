"""Softmax against PyTorch, exported by pnnx."""

import pytest
import torch.nn as nn
import torch.nn.functional as F
from oracle import check_op


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(dim, tmp_path):
    check_op(nn.Softmax(dim), (2, 5, 7), directory=tmp_path)
    check_op(lambda x: F.softmax(x * 10, dim=dim), (3, 4, 6), directory=tmp_path)
