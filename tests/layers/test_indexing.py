"""Indexing against PyTorch, each exported by pnnx: slices and selects (alone, fused over
several dimensions, with bounds computed at run time), where and masked_fill; gathers
(gather, index_select, narrow, masked_select, advanced indexing) and scatters (scatter,
scatter_add, slice_scatter, select_scatter, index_put, slice_copy)."""

import numpy as np
import pytest
import torch
from oracle import Lambda, check_dynamic, check_model, check_op

import kuiperinfer
from kuiperinfer.errors import InferError


def op_types(graph):
    return {op.type for op in graph.operators}


def check(fn, inputs, more, directory, types):
    """Export ``fn`` on ``inputs``, compare with PyTorch there and on ``more`` (another
    batch size), and check that pnnx wrote every type in ``types``."""
    graph = check_model(Lambda(fn), inputs, directory, [more])
    assert set(types) <= op_types(graph), f"pnnx wrote {sorted(op_types(graph))}"
    return graph


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def randint(high, *shape, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


def test_slice(tmp_path):
    check_op(lambda x: (x[:, 1:3], x[:, :, ::2], x[:, -2:], x[..., 1:5:2], x[:, 1:100], x[:, -100:2],
                        x[:, 3:1], x[:, :-1]),
             (1, 4, 6, 7), directory=tmp_path, batch=2)


def test_fused_multi_dim_slice(tmp_path):
    graph = check_op(lambda x: (x[:, :-1, 1:], x[:, 1:3, 2:4, ::3], x[..., 1:, ::2], x[:, :, -3:-1, 1:6:2]),
                     (1, 4, 6, 7), directory=tmp_path, batch=2)
    assert any(op.has_param("dims") for op in graph.operators)


def test_slice_with_negative_step(tmp_path):
    # PyTorch rejects negative steps, but pnnx's slice allows them (ONNX Slice does):
    # write one into a real export by hand; INT_MIN as end means "past the beginning".
    check_op(lambda x: x[:, 1:3] * 2, (1, 4, 5), directory=tmp_path)
    param = tmp_path / "model.pnnx.param"
    param.write_text(param.read_text().replace("end=3 start=1 step=1", "end=-2147483648 start=-2 step=-2"))
    x = np.random.default_rng(0).standard_normal((2, 4, 5), dtype=np.float32)
    (ours,) = kuiperinfer.load(param).run(x)
    np.testing.assert_array_equal(ours, x[:, -2::-2] * 2)


def test_select(tmp_path):
    check_op(lambda x: (x[:, 1], x[:, -1], x.select(2, 0), torch.select(x, 1, 2), x[..., 0], x[:, :, -2]),
             (1, 4, 6, 7), directory=tmp_path, batch=2)


def test_fused_slice_and_select(tmp_path):
    # dims index the input: x[:, 0, :, -2] is dims=(1,3) selects=(0,-2)
    check_op(lambda x: (x[:, 0, :, -2], x[:, 1:3, 0], x[0, :, 2:], x[:, 0, 0], x[:, 2, 1:, -1],
                        x[..., 1:3, 2], x[:, :, -3:-1, 0]),
             (1, 4, 6, 7), directory=tmp_path, batch=2)


def test_slice_and_select_bounds_from_inputs(tmp_path):
    def fn(x):
        return (x[:, : x.size(1) // 2] * 2, x[:, :, x.size(2) // 3:] * 2, x[:, x.size(1) - 1] * 2)
    graph = check_dynamic(fn, [torch.randn(1, 4, 6)], [torch.randn(2, 6, 9)], tmp_path)
    assert any("end" in op.input_names for op in graph.operators)


def test_where(tmp_path):
    check_op(lambda x, y: (torch.where(x > 0, x, y), torch.where(x > 0, x, 0.5), torch.where(x > y, 2.0, y),
                           torch.where(x > 0, 1.0, 0.0), torch.where(x > 0, 1, 0), torch.where(x > 0, x, y[:, :1]),
                           torch.where(y[:, :1] > 0, x, float("-inf"))),
             (1, 3, 4), (1, 3, 4), directory=tmp_path, batch=2)


def test_masked_fill(tmp_path):
    check_op(lambda x, y: (x.masked_fill(x > 0, 0.0), x.masked_fill(y > 0.5, float("-inf")),
                           torch.masked_fill(x, x < 0, 2), x.masked_fill(y[:, :1] > 0, -1.5),
                           x.masked_fill(x > 1, float("nan")), (x * 4).long().masked_fill(y > 0, 7)),
             (1, 3, 4), (1, 3, 4), directory=tmp_path, batch=2)


@pytest.mark.parametrize("dim", [1, 2, -1])
def test_gather(dim, tmp_path):
    # the index may be smaller than the input outside ``dim``
    def fn(x, index):
        return torch.gather(x, dim, index) * 2, torch.gather(x, dim, index[:, :2, :3]) + 1

    size = 5 if dim == 1 else 6
    check(fn, [randn(1, 5, 6), randint(size, 1, 4, 6)], [randn(3, 5, 6, seed=1), randint(size, 3, 4, 6, seed=1)],
          tmp_path, {"torch.gather"})


def test_gather_with_a_constant_index(tmp_path):
    index = torch.tensor([[[0, 2, 1], [5, 5, 0]]])
    graph = check_op(lambda x: torch.gather(x, 2, index) * 2, (1, 2, 6), directory=tmp_path)
    assert {"torch.gather", "pnnx.Attribute"} <= op_types(graph)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(dim, tmp_path):
    def fn(x, index):
        return torch.index_select(x, dim, index) * 2, x.index_select(dim, index[:1]) + 1

    size = 4 if dim == 0 else 5
    batch = 4 if dim == 0 else 2       # a selection along the batch needs enough samples
    check(fn, [randn(4 if dim == 0 else 1, 5, 5), torch.tensor([0, 3, 1, 3]) % size],
          [randn(batch, 5, 5, seed=1), torch.tensor([2, 2, 0, 1]) % size], tmp_path, {"torch.index_select"})


def test_index_select_with_a_constant_index(tmp_path):
    graph = check_op(lambda x: torch.index_select(x, 2, torch.tensor([4, 0, 0])) * 2, (1, 3, 5),
                     directory=tmp_path, batch=3)
    assert "torch.index_select" in op_types(graph)


def test_narrow(tmp_path):
    graph = check_op(lambda x: (torch.narrow(x, 1, 1, 3) * 2, x.narrow(2, -3, 2) + 1, torch.narrow(x, -1, 0, 6) * 3,
                                torch.narrow(x, 1, 4, 0) * 1),
                     (1, 4, 6), directory=tmp_path, batch=3)
    assert "torch.narrow" in op_types(graph)


def test_masked_select(tmp_path):
    def fn(x, y):
        return torch.masked_select(x, x > 0.5) * 2, torch.masked_select(x, y[:, :1] > 0) + 1

    check(fn, [randn(1, 3, 4), randn(1, 3, 4, seed=1)], [randn(3, 3, 4, seed=2), randn(3, 3, 4, seed=3)],
          tmp_path, {"torch.masked_select"})


@pytest.mark.parametrize("dim", [1, 2, -1])
def test_scatter_add(dim, tmp_path):
    # repeated positions add up; src may be larger than index
    size = 5 if dim == 1 else 6

    def fn(x, index, src):
        return torch.scatter_add(x, dim, index, src) * 2, x.scatter_add(dim, index[:, :2, :3], src) + 1

    check(fn, [randn(1, 5, 6), randint(size, 1, 4, 6), randn(1, 4, 6, seed=1)],
          [randn(3, 5, 6, seed=2), randint(size, 3, 4, 6, seed=3), randn(3, 4, 6, seed=4)],
          tmp_path, {"torch.scatter_add"})


def test_scatter_is_written_as_aten(tmp_path):
    # pnnx has no torch.scatter: it writes aten::scatter(input, dim, index, src or number)
    def fn(x, index, src):
        return torch.scatter(x, 1, index, src) * 2, x.scatter(2, index % 4, 1.5) + 1

    index = torch.tensor([[[0, 1, 2, 3], [4, 3, 2, 1]]])
    more_index = torch.tensor([[[4, 1, 2, 0], [3, 0, 2, 1]]]).repeat(3, 1, 1)
    check(fn, [randn(1, 5, 4), index, randn(1, 2, 4, seed=1)],
          [randn(3, 5, 4, seed=2), more_index, randn(3, 2, 4, seed=3)], tmp_path, {"aten::scatter"})


@pytest.mark.parametrize("dim,start,end,step", [(1, 1, 4, 1), (2, 0, 6, 2), (-1, 1, 5, 3), (1, -3, None, 1)])
def test_slice_scatter(dim, start, end, step, tmp_path):
    x = randn(1, 5, 6)
    shape = list(x.shape)
    shape[dim] = len(range(*slice(start, end, step).indices(shape[dim])))

    def fn(x, src):
        return torch.slice_scatter(x, src, dim, start, end, step) * 2

    check(fn, [x, randn(*shape, seed=1)], [randn(3, 5, 6, seed=2), randn(3, *shape[1:], seed=3)], tmp_path,
          {"torch.slice_scatter"})


def test_select_scatter_is_written_as_aten(tmp_path):
    def fn(x, a, b):
        return torch.select_scatter(x, a, 1, 2) * 2, torch.select_scatter(x, b, -1, -1) + 1

    check(fn, [randn(1, 5, 6), randn(1, 6, seed=1), randn(1, 5, seed=2)],
          [randn(3, 5, 6, seed=3), randn(3, 6, seed=4), randn(3, 5, seed=5)], tmp_path, {"aten::select_scatter"})


def test_index_with_index_tensors(tmp_path):
    # pnnx writes the index list as a pnnx.Expression ([None,@0]): None is a whole dimension
    def fn(x, i):
        return (x[:, i] * 2, x[:, i, i[:1]] + 1, x[..., i] * 3, x[:, None, i] + 2, x[:, 1:3, i] * 1,
                x[i % 1, :, i] + 4, x[:, i.reshape(2, 2)] * 2, x[:, -i - 1] * 5)

    check(fn, [randn(1, 5, 6), torch.tensor([0, 2, 4, 2])], [randn(3, 5, 6, seed=1), torch.tensor([1, 1, 0, 3])],
          tmp_path, {"Tensor.index"})


def test_index_with_a_mask(tmp_path):
    def fn(x):
        return x[x > 0.5] + 1, x[:, x[0, :, 0] > 0] * 2

    graph = check_op(fn, (1, 5, 6), directory=tmp_path)
    assert "Tensor.index" in op_types(graph)


def test_index_with_constant_indices(tmp_path):
    # constant index lists are a parameter: expr=[None,[0,-1,2]]
    graph = check_op(lambda x: (x[:, [0, -1, 2]] * 2, x[:, :, [1, 1]] + 1, x[:, [1, 0], [2, 2]] * 3),
                     (1, 5, 6), directory=tmp_path, batch=3)
    assert any(op.type == "Tensor.index" and op.has_param("expr") for op in graph.operators)


def test_index_with_constant_boolean_lists(tmp_path):
    # expr=[[True,False],[False,False,True,False]]: each list of booleans is a mask, as in PyTorch
    graph = check_op(lambda x: (x[[True, False], [False, False, True, False]] * 2,
                                x[:, [False, True, True, True]] + 1), (2, 4, 5), directory=tmp_path)
    assert any(op.type == "Tensor.index" and "True" in op.param_text("expr") for op in graph.operators)


def test_index_put(tmp_path):
    def fn(x, i):
        a = x.clone()
        a[:, i] = 0.5                                     # a number
        b = x.clone()
        b[x > 0] = 1.0                                    # a mask
        c = x.clone()
        c[:, i] = x[:, :4] * 2                            # values from an input
        d = x.clone()
        d[:, i, i] = torch.arange(4.0)                    # several index tensors
        e = x.clone()
        e.index_put_((i[:2] % 1,), torch.ones(5, 6), accumulate=True)       # repeated positions add up
        f = x.clone()
        f.index_put_((i % 1, i), torch.full((4, 6), 2.0), accumulate=True)  # i repeats 2
        g = x.clone()
        g.index_put_((x > 1,), torch.tensor(3.0), accumulate=True)          # a mask, accumulated
        return a * 2, b * 2, c * 2, d * 2, e * 2, f * 2, g * 2

    # exported at batch 2: at batch 1 PyTorch's setitem strips the leading 1 of the values
    # with a fixed view, which pnnx records as a reshape that no other batch fits
    graph = check(fn, [randn(2, 5, 6), torch.tensor([0, 2, 4, 2])],
                  [randn(3, 5, 6, seed=1), torch.tensor([1, 1, 0, 3])], tmp_path, {"Tensor.index_put"})
    accumulate = {op.params["accumulate"].value for op in graph.operators if op.type == "Tensor.index_put"}
    assert accumulate == {True, False}


def test_slice_copy(tmp_path):
    # an assignment into a slice: pnnx writes Tensor.slice_copy on a Tensor.clone
    def fn(x):
        a = x * 1
        a[:, 1:3] = 7.0                      # one dimension
        b = x + 0
        b[:, 1:3, 2] = x[:, :2, 0]           # fused: a slice and a select
        c = x.clone()
        c[:, :, ::2] = x[:, :, 1::2] * 2     # a step
        d = x.clone()
        d[:, 2] = x[:, 0] * 3                # a select
        return a + 1, b + 1, c + 1, d + 1

    graph = check_op(fn, (1, 5, 6), directory=tmp_path, batch=3)
    assert {"Tensor.slice_copy", "Tensor.clone"} <= op_types(graph)
    assert any(op.type == "Tensor.slice_copy" and op.has_param("dims") for op in graph.operators)


@pytest.mark.parametrize("fn, inputs, needle", [
    (lambda x, i: torch.gather(x, 1, i) * 2, [randn(1, 5, 6), randint(5, 1, 4, 6)], "out of bounds"),
    (lambda x, i: torch.index_select(x, 1, i) * 2, [randn(1, 5, 6), torch.tensor([0, 1])], "out of bounds"),
    (lambda x, i: x[:, i] * 2, [randn(1, 5, 6), torch.tensor([0, 1])], "out of bounds"),
])
def test_out_of_range_indices_are_refused(fn, inputs, needle, tmp_path):
    """A hostile index is an InferError naming the operator, never a read outside the array."""
    graph = check_model(Lambda(fn), inputs, tmp_path)
    bad = [inputs[0].numpy(), np.full_like(inputs[1].numpy(), 9)]
    with pytest.raises(InferError, match=needle):
        graph.run(*bad)
    bad[1] = np.full_like(inputs[1].numpy(), -9)
    with pytest.raises(InferError, match=needle):
        graph.run(*bad)
