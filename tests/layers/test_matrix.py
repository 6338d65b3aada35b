"""Diagonals and cross products against PyTorch, each exported by pnnx: torch.diag (both
ways, every diagonal offset) and torch.cross (and torch.linalg.cross, written as aten)."""

import pytest
import torch
from oracle import Lambda, check_model


def op_types(graph):
    return {op.type for op in graph.operators}


def test_diag_of_a_vector(tmp_path):
    def fn(v):
        return torch.diag(v) * 2, torch.diag(v, 1) + 1, torch.diag(v, -2) * 3

    graph = check_model(Lambda(fn), [torch.randn(4)], tmp_path, [[torch.randn(4)]])
    assert "torch.diag" in op_types(graph)


def test_diag_of_a_matrix(tmp_path):
    def fn(m):
        return (torch.diag(m) * 2, torch.diag(m, 2) + 1, torch.diag(m, -1) * 3, torch.diag(m, 9) * 1,
                torch.diag((m * 10).int(), -3) + 1)

    graph = check_model(Lambda(fn), [torch.randn(4, 5)], tmp_path, [[torch.randn(4, 5)]])
    assert "torch.diag" in op_types(graph)


@pytest.mark.parametrize("dim", [1, 2, -1])
def test_cross(dim, tmp_path):
    shape = [1, 4, 5]
    shape[dim] = 3

    def fn(a, b):
        return torch.cross(a, b, dim=dim) * 2, torch.cross((a * 10).long(), (b * 10).long(), dim=dim) + 1

    more = [1, 4, 5]
    more[dim] = 3
    more[0] = 3
    graph = check_model(Lambda(fn), [torch.randn(*shape), torch.randn(*shape)], tmp_path,
                        [[torch.randn(*more), torch.randn(*more)]])
    assert "torch.cross" in op_types(graph)


def test_cross_broadcasts(tmp_path):
    graph = check_model(Lambda(lambda a, b: torch.cross(a, b, dim=1) * 2), [torch.randn(1, 3, 4), torch.randn(1, 3, 1)],
                        tmp_path, [[torch.randn(3, 3, 4), torch.randn(1, 3, 1)]])
    assert "torch.cross" in op_types(graph)


def test_linalg_cross_is_written_as_aten(tmp_path):
    graph = check_model(Lambda(lambda a, b: torch.linalg.cross(a, b, dim=1) + 1),
                        [torch.randn(1, 3, 4), torch.randn(1, 3, 4)], tmp_path,
                        [[torch.randn(2, 3, 4), torch.randn(2, 3, 4)]])
    assert "aten::linalg_cross" in op_types(graph)


def test_cross_without_dim_takes_the_first_dimension_of_size_3(tmp_path):
    # dim=None (PyTorch's deprecated default): the first dimension of size 3, here dimension 1;
    # at batch 3 the batch dimension comes first
    graph = check_model(Lambda(lambda a, b: torch.cross(a, b) * 2), [torch.randn(2, 3, 4), torch.randn(2, 3, 4)],
                        tmp_path, [[torch.randn(3, 3, 4), torch.randn(3, 3, 4)]])
    assert any(op.type == "torch.cross" and op.params["dim"].value is None for op in graph.operators)
