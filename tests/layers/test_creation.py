"""Creating and converting tensors against PyTorch, each exported by pnnx: casts,
zeros/ones/full(_like), new_zeros/new_ones, at fixed and at dynamic shapes."""

import numpy as np
import torch
from oracle import check_dynamic, check_op

import kuiperinfer


def op_types(graph):
    return [op.type for op in graph.operators]


def test_casts(tmp_path):
    graph = check_op(lambda x: ((x * 3).to(torch.int64), x.int(), (x > 0).float(), x.bool(),
                                x.to(torch.float64), (x * 50).to(torch.uint8), (x * 50).to(torch.int8),
                                x.type_as((x * 4).long()), (x * 3).short()),
                     (1, 3, 4), directory=tmp_path, batch=2)
    assert {"Tensor.to", "Tensor.type_as"} <= set(op_types(graph))


def test_half_cast_rounds_to_float16(tmp_path):
    # pnnx removes casts to float16 from exports, so write the cast into a real export by hand.
    def fn(x):
        return x.to(torch.float64)
    check_op(fn, (1, 3, 4), directory=tmp_path)
    param = tmp_path / "model.pnnx.param"
    param.write_text(param.read_text().replace("torch.double", "torch.half").replace(")f64", ")f16"))
    x = torch.randn(2, 3, 4) * 100
    (ours,) = kuiperinfer.load(param).run(x.numpy())
    assert ours.dtype == np.float16
    np.testing.assert_array_equal(ours, x.half().numpy())


def test_like_constants_are_folded_at_fixed_shapes(tmp_path):
    graph = check_op(lambda x: (torch.zeros_like(x), torch.full_like(x, 2.5), torch.ones_like(x, dtype=torch.int32)),
                     (1, 3, 4), directory=tmp_path)
    assert set(op_types(graph)) - {"pnnx.Input", "pnnx.Output"} == {"pnnx.Attribute", "prim::TupleConstruct"}


def test_like_with_dynamic_shapes(tmp_path):
    def fn(x):
        return (torch.zeros_like(x), torch.ones_like(x), torch.full_like(x, 2.5),
                        torch.full_like(x, 3, dtype=torch.int64), torch.zeros_like(x, dtype=torch.bool),
                        torch.full_like(x, float("-inf")))
    graph = check_dynamic(fn, [torch.randn(1, 3, 4)], [torch.randn(2, 3, 4)], tmp_path)
    assert {"torch.zeros_like", "torch.ones_like", "torch.full_like"} <= set(op_types(graph))


def test_new_and_full_sizes_from_input(tmp_path):
    def fn(x):
        return (x.new_zeros((x.size(0), 3)), torch.zeros(x.size(0), 2),
                        torch.ones(x.size(0), 2, dtype=torch.int64), x.new_ones((2, x.size(0))))
    graph = check_dynamic(fn, [torch.randn(1, 3, 4)], [torch.randn(2, 3, 4)], tmp_path)
    assert {"Tensor.new_zeros", "Tensor.new_ones", "torch.zeros", "torch.ones"} <= set(op_types(graph))
