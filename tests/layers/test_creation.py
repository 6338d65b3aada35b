"""Creating and converting tensors against PyTorch, each exported by pnnx: casts,
zeros/ones/full(_like), new_zeros/new_ones, empty/empty_like/new_empty, arange, fill,
clone and copy, at fixed and at dynamic shapes."""

import numpy as np
import torch
from handmade import write_model
from oracle import Lambda, assert_matches, check_dynamic, check_op, export, torch_outputs

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


def test_fill(tmp_path):
    # pnnx writes an in-place fill as Tensor.fill on a clone; the value is a number or a one-element input
    def fn(x):
        a = x.clone()
        a.fill_(2.0)
        b = (x * 4).long()
        b.fill_(3)
        c = x.clone()
        c.fill_(x[0, 0, 0])
        return a + 1, b + 1, c * 2

    graph = check_op(fn, (1, 3, 4), directory=tmp_path, batch=3)
    fills = [op for op in graph.operators if op.type == "Tensor.fill"]
    assert len(fills) == 3 and any("value" in op.input_names for op in fills)


def test_clone(tmp_path):
    graph = check_op(lambda x: (torch.clone(x) * 2, torch.clone(x, memory_format=torch.contiguous_format) + 1,
                                (x > 0).clone()),
                     (1, 3, 4), directory=tmp_path, batch=3)
    assert "torch.clone" in op_types(graph)


def test_tensor_clone(tmp_path):
    # pnnx writes Tensor.clone (no input names) before the Tensor.slice_copy of an assignment
    graph = check_op(_assign_slice, (1, 3, 4), directory=tmp_path, batch=2)
    assert "Tensor.clone" in op_types(graph)


def test_tensor_copy(tmp_path):
    # pnnx folds every whole-tensor copy_ we tried into its source, so Tensor.copy is
    # written by hand as pnnx's Tensor_copy pass writes it: src broadcast to self, in self's dtype
    param = write_model(tmp_path, "7767517\n4 3\n"
                        "pnnx.Input in0 0 1 x #x=(1,3,4)f32\n"
                        "pnnx.Input in1 0 1 y #y=(1,3,1)i64\n"
                        "Tensor.copy copy 2 1 x y z $self=x $src=y #x=(1,3,4)f32 #y=(1,3,1)i64 #z=(1,3,4)f32\n"
                        "pnnx.Output out 1 0 z #z=(1,3,4)f32\n", {})
    x = torch.randn(2, 3, 4)
    y = torch.randint(-5, 5, (2, 3, 1))
    (ours,) = kuiperinfer.load(param).run(x.numpy(), y.numpy())
    assert_matches([ours], [x.clone().copy_(y).numpy()])


def _assign_slice(x):
    y = x * 1
    y[:, 1:] = 0.5
    return y + 1


def test_empty(tmp_path):
    # PyTorch leaves empty tensors undefined: only their shapes and dtypes are compared
    # (ours are zeros); pnnx folds fixed-size ones into constants, so sizes come from inputs
    def fn(x):
        return (torch.empty_like(x), torch.empty(x.size(0), 3), x.new_empty((x.size(0), 2)),
                x.new_empty((2, 3)), torch.empty_like(x, dtype=torch.int64), torch.empty(x.size(0), dtype=torch.float64))

    model = Lambda(fn)
    graph = kuiperinfer.load(export(model, [torch.randn(1, 3, 4)], tmp_path, inputs2=[torch.randn(2, 3, 4)]))
    assert {"torch.empty_like", "torch.empty", "Tensor.new_empty"} <= set(op_types(graph))
    for batch in (1, 3):
        x = torch.randn(batch, 3, 4)
        ours = graph.run(x.numpy())
        expected = torch_outputs(model, [x])
        assert [(a.shape, a.dtype) for a in ours] == [(b.shape, b.dtype) for b in expected]
        assert all(not a.any() for a in ours)


def test_arange(tmp_path):
    # constant ranges are folded by pnnx; bounds read from inputs stay torch.arange
    def fn(x):
        return (torch.arange(x.size(1)) * 2, torch.arange(x.size(1), x.size(2)) + 1,
                torch.arange(1, x.size(2), x.size(1) - 2) * 3, torch.arange(0.5, x.size(2) * 1.0) + 1,
                torch.arange(0, x.size(2), 2, dtype=torch.float32) + 1, torch.arange(x.size(0), dtype=torch.int32) + 1,
                torch.arange(x.size(2), 0, -2) * 1, torch.arange(x.size(1) * 0.25, 3.5, 0.3) * 2)
    graph = check_dynamic(fn, [torch.randn(1, 3, 7)], [torch.randn(3, 5, 9)], tmp_path)
    written = [op for op in graph.operators if op.type == "torch.arange"]
    assert len(written) == 8 and any(op.input_names.count("") == 0 and "step" in op.input_names for op in written)


def test_full_with_a_fill_value_from_an_input(tmp_path):
    # a size read at run time as the value: pnnx writes it as an input $fill_value
    def fn(x):
        return torch.full((2,), x.size(2)) + 1, torch.full_like(x, x.size(1)) * x
    graph = check_dynamic(fn, [torch.randn(1, 3, 4)], [torch.randn(2, 5, 6)], tmp_path)
    assert any("fill_value" in op.input_names for op in graph.operators)
