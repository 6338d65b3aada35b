"""Joining and splitting tensors against PyTorch, each exported by pnnx: cat, split, chunk."""

import pytest
import torch
import torch.nn.functional as F
from oracle import check_op


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
