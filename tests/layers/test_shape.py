"""Shape, indexing, joining/splitting, creation and cast operators against PyTorch.

Each test exports a small function with pnnx and compares every output; most also run
the same export at another batch size. Several operators share one export (a tuple of
outputs) to keep the suite fast.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from oracle import Lambda, check_model, check_op

import kuiperinfer


def check_dynamic(fn, inputs, inputs2, directory):
    """Export with pnnx's dynamic shapes, so that sizes read from tensors stay run-time
    values; compare on both sets of inputs."""
    return check_model(Lambda(fn), inputs, directory, [inputs2], dynamic=True)


# Run-time shapes reach these operators as a pnnx.Expression list such as
# expr=[size(@0,0),3,-1], which the Expression layer does not read yet.

def op_types(graph):
    return [op.type for op in graph.operators]


# -- flatten, view, reshape -----------------------------------------------------------

@pytest.mark.parametrize("start,end", [(0, -1), (1, -1), (1, 2), (2, 3)])
def test_flatten(start, end, tmp_path):
    check_op(lambda x: torch.flatten(x, start, end) + 1, (1, 2, 3, 4), directory=tmp_path, batch=2)


class FlattenLinear(nn.Module):
    # Named children: pnnx's generated Python cannot name an attribute "1" (nn.Sequential).
    def __init__(self):
        super().__init__()
        self.flatten, self.fc = nn.Flatten(), nn.Linear(24, 3)

    def forward(self, x):
        return self.fc(self.flatten(x))


def test_nn_flatten(tmp_path):
    check_op(FlattenLinear(), (1, 2, 3, 4), directory=tmp_path, batch=3)


@pytest.mark.parametrize("fn", [lambda x: x.view(1, 6, 4) * 2, lambda x: x.reshape(-1, 2, 12) * 2,
                                lambda x: x.view(x.size(0), -1) * 2, lambda x: torch.reshape(x, (1, 24)) * 2])
def test_view_reshape(fn, tmp_path):
    check_op(fn, (1, 2, 3, 4), directory=tmp_path)


def test_reshape_follows_batch(tmp_path):
    check_op(lambda x: x.view(x.size(0), 6, 4) * 2, (1, 2, 3, 4), directory=tmp_path, batch=5)


# -- permute, transpose, unflatten, squeeze --------------------------------------------

def test_permute(tmp_path):
    check_op(lambda x: (x.permute(0, 2, 1, 3), torch.permute(x, (3, 2, 1, 0)), x.permute(-1, 0, 1, -2)),
             (1, 2, 3, 4), directory=tmp_path, batch=3)


def test_transpose(tmp_path):
    check_op(lambda x: (torch.transpose(x, 1, 2), x.transpose(-1, 0), x.transpose(2, -2) + 1),
             (1, 2, 3, 4), directory=tmp_path, batch=2)


def test_t(tmp_path):
    graph = check_op(lambda x: x.t() * 2, (3, 5), directory=tmp_path)
    assert "torch.t" in op_types(graph)


def test_unflatten(tmp_path):
    check_op(lambda x: (torch.unflatten(x, 1, (2, 3)), x.unflatten(-1, (2, -1)), nn.Unflatten(1, (3, -1))(x)),
             (1, 6, 4), directory=tmp_path, batch=2)


def test_squeeze_unsqueeze(tmp_path):
    # At batch 1 squeeze() also drops the batch dimension; at batch 2 it must not.
    check_op(lambda x: (torch.squeeze(x), torch.squeeze(x, 1), x.squeeze((1, 3)), x.squeeze(-1),
                        x.squeeze(2), torch.unsqueeze(x, 0), x.unsqueeze(-1), x.unsqueeze(2)),
             (1, 1, 3, 1), directory=tmp_path, batch=2)


# -- stack, tensor_split, unbind -------------------------------------------------------

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


# -- slice and select ------------------------------------------------------------------

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


# -- expand, repeat, flip, roll --------------------------------------------------------

def test_expand(tmp_path):
    check_op(lambda x: (x.expand(2, 3, 4), x.expand(-1, 3, -1), x.expand(5, -1, 3, 4),
                        x.expand_as(torch.zeros(1, 3, 4))),
             (1, 1, 4), directory=tmp_path)


def test_expand_follows_batch(tmp_path):
    # x.size(0) is the constant 2 in the export; it must follow the actual batch.
    check_op(lambda x: x[:, :1].expand(x.size(0), 3, 4) + x, (2, 3, 4), directory=tmp_path, batch=5)


def test_expand_sizes_from_input(tmp_path):
    def fn(x):
        return (x[:, :1].expand(x.size(0), 3, -1) * 2, x.unsqueeze(1).expand(-1, 2, -1, -1) * 2)
    check_dynamic(fn, [torch.randn(1, 3, 4)], [torch.randn(2, 3, 4)], tmp_path)


def test_repeat_tile(tmp_path):
    check_op(lambda x: (x.repeat(1, 2, 3), x.repeat(2, 1, 1, 2), x.tile((1, 2)), torch.tile(x, (2,))),
             (1, 2, 3), directory=tmp_path, batch=2)


def test_flip_roll(tmp_path):
    check_op(lambda x: (torch.flip(x, (1,)), x.flip(-1, 0), torch.roll(x, 1, 1), torch.roll(x, (1, -2), (1, 2)),
                        x.roll(3), torch.roll(x, -1, -1), torch.roll(x, 5, 2)),
             (1, 3, 4), directory=tmp_path, batch=2)


# -- creation and casts ----------------------------------------------------------------

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


# -- constants, tuples and lists -------------------------------------------------------

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
