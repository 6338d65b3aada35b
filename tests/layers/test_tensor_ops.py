"""Joining and splitting tensors against PyTorch, each exported by pnnx: cat, stack, split,
chunk, tensor_split and unbind."""

import pytest
import torch
import torch.nn.functional as F
from oracle import check_op


def op_types(graph):
    return [op.type for op in graph.operators]


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat(dim, tmp_path):
    check_op(lambda a, b: torch.cat((a, b, a), dim), (2, 3, 4), (2, 3, 4), directory=tmp_path)


def test_cat_same_operand_twice(tmp_path):
    check_op(lambda a: torch.cat([a, a], 1), (1, 3, 4), directory=tmp_path, batch=2)


@pytest.mark.parametrize("sections,dim", [(2, 1), ([1, 3, 2], 1), (4, -1), ([5, 1], 2)])
def test_split(sections, dim, tmp_path):
    check_op(lambda x: tuple(t * 2 for t in torch.split(x, sections, dim)), (1, 6, 6), directory=tmp_path,
             batch=2)


@pytest.mark.parametrize("chunks,dim", [(2, 1), (3, 1), (4, 2), (3, 2)])
def test_chunk(chunks, dim, tmp_path):
    check_op(lambda x: tuple(t + 1 for t in torch.chunk(x, chunks, dim)), (1, 6, 7), directory=tmp_path)


def test_split_pieces_feed_different_consumers(tmp_path):
    def fn(x):
        a, b = torch.split(x, [2, 4], dim=1)
        return torch.cat([F.relu(b), torch.sigmoid(a)], 1)
    check_op(fn, (1, 6, 5), directory=tmp_path, batch=3)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack(dim, tmp_path):
    check_op(lambda a, b: torch.stack((a, b, a), dim), (1, 2, 3), (1, 2, 3), directory=tmp_path, batch=2)


def test_tensor_split(tmp_path):
    check_op(lambda x: (*torch.tensor_split(x, 3, 1), *torch.tensor_split(x, [1, 4], dim=2),
                        *x.tensor_split((2,), -1), *torch.tensor_split(x, [2, 2, 9], 2)),
             (1, 7, 6), directory=tmp_path, batch=2)


def test_unbind(tmp_path):
    check_op(lambda x: (*torch.unbind(x, 1), *x.unbind(-1)), (1, 3, 2), directory=tmp_path, batch=2)


def test_select_of_batch_becomes_unbind(tmp_path):
    # pnnx writes x[0] of a batch-1 export as torch.unbind with one output.
    graph = check_op(lambda x: x[0] * 2, (1, 3, 4), directory=tmp_path, batch=3)
    assert "torch.unbind" in op_types(graph)
