"""Shape operators against PyTorch: flatten, view/reshape, permute, transpose, unflatten,
squeeze/unsqueeze, expand, repeat/tile, flip and roll; reshape_as, repeat_interleave and
as_strided.

Each test exports a small function with pnnx and compares every output; most also run
the same export at another batch size. Several operators share one export (a tuple of
outputs) to keep the suite fast.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from handmade import make_operator, write_model
from oracle import Lambda, check_dynamic, check_model, check_op

import kuiperinfer
from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.layers import LayerRegisterer


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


def test_reshape_as(tmp_path):
    def fn(x, y):
        return x.reshape_as(y) * 2, y.reshape_as(x) + 1

    graph = check_model(Lambda(fn), [torch.randn(1, 4, 6), torch.randn(1, 24)], tmp_path,
                        [[torch.randn(3, 4, 6), torch.randn(3, 24)]])
    assert "Tensor.reshape_as" in op_types(graph)


@pytest.mark.parametrize("dim", [1, 2, -1, None])
def test_repeat_interleave_by_a_number(dim, tmp_path):
    graph = check_op(lambda x: torch.repeat_interleave(x, 3, dim) * 2, (1, 3, 4), directory=tmp_path, batch=2)
    assert "torch.repeat_interleave" in op_types(graph)


@pytest.mark.parametrize("dim", [1, 2])
def test_repeat_interleave_by_a_tensor(dim, tmp_path):
    def fn(x, repeats):
        return torch.repeat_interleave(x, repeats, dim=dim) * 2, x.repeat_interleave(repeats[:1], dim=dim) + 1

    repeats = torch.tensor([1, 0, 3, 2])[: 3 if dim == 1 else 4]
    graph = check_model(Lambda(fn), [torch.randn(1, 3, 4), repeats], tmp_path, [[torch.randn(2, 3, 4), repeats + 1]])
    assert any(op.type == "torch.repeat_interleave" and "repeats" in op.input_names for op in graph.operators)


def test_repeat_interleave_with_constant_repeats(tmp_path):
    graph = check_op(lambda x: torch.repeat_interleave(x, torch.tensor([2, 0, 1]), dim=1) * 2, (1, 3, 4),
                     directory=tmp_path, batch=2)
    assert "torch.repeat_interleave" in op_types(graph)


def test_as_strided(tmp_path):
    # windows, overlapping reads and a broadcast (stride 0); the sizes are fixed in the export
    def fn(x):
        return (torch.as_strided(x, (2, 3, 3), (30, 6, 1)) * 2, x.as_strided((4, 4), (2, 3)) + 1,
                torch.as_strided(x, (3, 2, 5), (0, 5, 1)) * 3, torch.as_strided(x, (0, 2), (1, 1)) + 1)
    graph = check_op(fn, (2, 5, 6), directory=tmp_path)
    assert "torch.as_strided" in op_types(graph)


def test_as_strided_storage_offset_and_bounds(tmp_path):
    # pnnx drops a storage_offset when it exports (its Python program does too): write one by hand
    check_op(lambda x: x.as_strided((4, 4), (2, 3)) + 1, (2, 5, 6), directory=tmp_path)
    param = tmp_path / "model.pnnx.param"
    text = param.read_text()
    param.write_text(text.replace("stride=(2,3)", "stride=(2,3) storage_offset=7"))
    x = torch.randn(2, 5, 6)
    (ours,) = kuiperinfer.load(param).run(x.numpy())
    np.testing.assert_array_equal(ours, (x.as_strided((4, 4), (2, 3), 7) + 1).numpy())
    # a view that reaches past the end of the input is refused, before anything is read
    param.write_text(text.replace("stride=(2,3)", "stride=(2,3) storage_offset=50"))
    graph = kuiperinfer.load(param)   # the warm-up on zeros fails too, and is skipped
    with pytest.raises(InferError, match="reach element 65 of an input of 60 elements"):
        graph.run(x.numpy())
    param.write_text(text.replace("stride=(2,3)", "stride=(-2,3)"))
    with pytest.raises(LayerCreateError, match="must not be negative"):
        kuiperinfer.load(param)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_channel_shuffle(groups, tmp_path):
    graph = check_op(nn.ChannelShuffle(groups), (1, 6, 4, 5), directory=tmp_path, batch=2)
    assert "nn.ChannelShuffle" in op_types(graph)
    graph = check_op(nn.ChannelShuffle(groups), (1, 6, 7), directory=tmp_path, batch=3)


def test_functional_channel_shuffle(tmp_path):
    # pnnx has no name for F.channel_shuffle: it writes aten::channel_shuffle, the groups an input
    graph = check_op(lambda x: torch.nn.functional.channel_shuffle(x, 3) * 2, (1, 6, 4, 5), directory=tmp_path,
                     batch=2)
    assert "aten::channel_shuffle" in op_types(graph)


def test_channel_shuffle_of_indivisible_channels_raises_infer_error():
    layer = LayerRegisterer.create_layer(make_operator("nn.ChannelShuffle", [[1, 4, 3]], groups=2))
    with pytest.raises(InferError, match="cannot shuffle"):
        layer.forward([np.zeros((1, 3, 3), np.float32)])
    with pytest.raises(LayerCreateError, match="groups"):
        LayerRegisterer.create_layer(make_operator("nn.ChannelShuffle", [[1, 4, 3]], groups=0))


def size_model(directory, params: str, inputs: int = 1):
    """x -> Tensor.size -> the int, then into an expression that uses it: pnnx's own form of
    ``x.size(dim)`` (which an export folds into ``size(@0,dim)`` expressions)."""
    dim_input = "pnnx.Input in1 0 1 d #d=()i64\n" if inputs == 2 else ""
    operands = "x d" if inputs == 2 else "x"
    text = (f"7767517\n{4 + inputs} {2 + inputs}\n"
            "pnnx.Input in0 0 1 x #x=(1,3,4,5)f32\n" + dim_input +
            f"Tensor.size op {inputs} 1 {operands} s {params} $input=x #x=(1,3,4,5)f32\n"
            "pnnx.Expression expr 2 1 x s y expr=mul(@0,@1) #x=(1,3,4,5)f32 #y=(1,3,4,5)f32\n"
            "pnnx.Output out0 1 0 y #y=(1,3,4,5)f32\n"
            "pnnx.Output out1 1 0 s\n")
    return write_model(directory, text, {}, name="size")


@pytest.mark.parametrize("dim", [0, 1, 3, -1, -4])
def test_tensor_size(dim, tmp_path):
    graph = kuiperinfer.load(size_model(tmp_path, f"dim={dim}"))
    for batch in (1, 2):
        x = torch.randn(batch, 3, 4, 5)
        y, size = graph.run(x.numpy())
        assert type(size) is int and size == x.size(dim)
        np.testing.assert_allclose(y, (x * x.size(dim)).numpy())


def test_tensor_size_with_a_computed_dim_and_without_dim(tmp_path):
    graph = kuiperinfer.load(size_model(tmp_path, "", inputs=2))
    x = torch.randn(2, 3, 4, 5)
    assert graph.run(x.numpy(), np.array(2))[1] == x.size(2)
    whole = LayerRegisterer.create_layer(make_operator("Tensor.size", [[2, 3, 4, 5]]))
    assert whole.forward([x.numpy()]) == [tuple(x.size())]
    with pytest.raises(InferError, match="out of range"):
        graph.run(x.numpy(), np.array(4))
