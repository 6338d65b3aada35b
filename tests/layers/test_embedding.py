"""nn.Embedding and F.embedding against PyTorch, each exported by pnnx."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import check_model, export

import kuiperinfer
from kuiperinfer.errors import InferError


class Lookup(nn.Module):
    def __init__(self, functional: bool = False):
        super().__init__()
        self.functional = functional
        self.table = nn.Embedding(10, 6, padding_idx=0)

    def forward(self, indices):
        if self.functional:
            return F.embedding(indices, self.table.weight) * 2
        return self.table(indices)


@pytest.mark.parametrize("shape", [(1, 5), (1, 2, 3), (1,)])
@pytest.mark.parametrize("functional", [False, True])
def test_embedding(shape, functional, tmp_path):
    generator = torch.Generator().manual_seed(0)
    indices = torch.randint(0, 10, shape, generator=generator)
    other_batch = torch.randint(0, 10, (3, *shape[1:]), generator=generator)
    check_model(Lookup(functional), [indices], tmp_path, more_inputs=[[other_batch]])


class LookupInTableInput(nn.Module):
    def forward(self, indices, table):
        return F.embedding(indices, table)


def test_functional_embedding_with_weight_input(tmp_path):
    check_model(LookupInTableInput(), [torch.tensor([[1, 0, 3, 3]]), torch.randn(4, 5)], tmp_path)


def test_embedding_int32_indices(tmp_path):
    check_model(Lookup(), [torch.tensor([[1, 9, 0]], dtype=torch.int32)], tmp_path)


@pytest.mark.parametrize("bad", [10, -1])
def test_embedding_index_out_of_range(bad, tmp_path):
    graph = kuiperinfer.load(export(Lookup(), [torch.tensor([[1, 2]])], tmp_path))
    with pytest.raises(InferError, match=r"out of range \[0, 10\)"):
        graph.run(np.array([[1, bad]], dtype=np.int64))
