"""Structural operators against PyTorch, each exported by pnnx: constants (pnnx.Attribute)
and tuples and lists of outputs."""

import torch
import torch.nn as nn
from oracle import check_op


def op_types(graph):
    return [op.type for op in graph.operators]


class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(12.0).reshape(3, 4))
        self.register_buffer("index", torch.arange(4))
        self.register_buffer("mask", torch.arange(4) % 2 == 0)

    def forward(self, x):
        return x + self.table, self.index, x.masked_fill(self.mask, 0.0)


def test_attribute_constants(tmp_path):
    graph = check_op(WithBuffers(), (1, 3, 4), directory=tmp_path, batch=2)
    assert "pnnx.Attribute" in op_types(graph)


def test_nested_tuples_and_cat_of_list(tmp_path):
    def fn(x):
        parts = torch.split(x, 1, 1)
        joined = torch.cat([p * i for i, p in enumerate(parts)], 2)
        return (torch.stack(parts[::-1], 0), (joined, parts)), x[:, 0]
    graph = check_op(fn, (1, 3, 4), directory=tmp_path, batch=2)
    assert op_types(graph).count("prim::TupleConstruct") >= 2
