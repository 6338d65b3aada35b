"""F.grid_sample and F.affine_grid against PyTorch, exported by pnnx: every mode, padding
mode and align_corners, 4-D and 5-D, grids reaching outside the input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from handmade import make_operator
from oracle import check_model

from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.layers import LayerRegisterer


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def grid(*shape, seed=0):
    """Normalised coordinates in [-1.3, 1.3]: inside and outside the input, plus the exact
    corners and the centre."""
    generator = torch.Generator().manual_seed(seed)
    g = torch.rand(*shape, generator=generator) * 2.6 - 1.3
    g.view(-1, shape[-1])[:3] = torch.tensor([[-1.0] * shape[-1], [1.0] * shape[-1], [0.0] * shape[-1]])
    return g


def written_types(graph) -> set[str]:
    return {op.type for op in graph.operators}


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_2d(mode, padding_mode, align_corners, tmp_path):
    def sample(x, g):
        return F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    torch.manual_seed(0)
    graph = check_model(Fn(sample), [torch.randn(1, 3, 5, 6), grid(1, 4, 7, 2)], tmp_path,
                        [[torch.randn(2, 3, 5, 6), grid(2, 4, 7, 2, seed=1)]])
    assert "F.grid_sample" in written_types(graph)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d(mode, padding_mode, align_corners, tmp_path):
    def sample(x, g):
        return F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    torch.manual_seed(0)
    graph = check_model(Fn(sample), [torch.randn(1, 2, 4, 5, 6), grid(1, 3, 4, 5, 3)], tmp_path,
                        [[torch.randn(3, 2, 4, 5, 6), grid(3, 3, 4, 5, 3, seed=2)]])
    assert "F.grid_sample" in written_types(graph)


def test_grid_sample_reflects_far_outside_and_on_a_single_pixel(tmp_path):
    def sample(x, g):
        return (F.grid_sample(x, g * 4, padding_mode="reflection", align_corners=False),
                F.grid_sample(x, g * 4, padding_mode="reflection", align_corners=True),
                F.grid_sample(x[:, :, :1], g, mode="bicubic", padding_mode="reflection", align_corners=True))

    check_model(Fn(sample), [torch.randn(1, 2, 5, 4), grid(1, 6, 6, 2)], tmp_path)


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_2d(align_corners, tmp_path):
    def warp(theta, x):
        g = F.affine_grid(theta, [1, 3, 5, 7], align_corners=align_corners)
        return g, F.grid_sample(x, g, align_corners=align_corners)

    theta = torch.tensor([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.2]]])
    graph = check_model(Fn(warp), [theta, torch.randn(1, 3, 6, 6)], tmp_path)
    assert {"F.affine_grid", "F.grid_sample"} <= written_types(graph)
    ours = graph.run(torch.randn(4, 2, 3).numpy(), np.zeros((4, 3, 6, 6), np.float32))[0]
    assert ours.shape == (4, 5, 7, 2)   # the batch comes from theta, not from the size pnnx recorded


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_3d(align_corners, tmp_path):
    def grid3(theta):
        return F.affine_grid(theta, [1, 2, 3, 4, 5], align_corners=align_corners)

    graph = check_model(Fn(grid3), [torch.randn(1, 3, 4)], tmp_path)
    assert "F.affine_grid" in written_types(graph)
    theta = torch.randn(2, 3, 4)   # torch takes the batch from size, which pnnx recorded as 1
    expected = F.affine_grid(theta, [2, 2, 3, 4, 5], align_corners=align_corners).numpy()
    np.testing.assert_allclose(graph.run(theta.numpy())[0], expected, atol=1e-6)


def test_affine_grid_of_one_pixel(tmp_path):
    check_model(Fn(lambda theta: F.affine_grid(theta, [1, 1, 1, 3], align_corners=True)), [torch.randn(1, 2, 3)],
                tmp_path)


@pytest.mark.parametrize("params,message", [
    (dict(mode="area"), "must be one of"),
    (dict(padding_mode="circular"), "must be one of"),
])
def test_bad_parameters_raise_layer_create_error(params, message):
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator("F.grid_sample", [[1, 2, 4, 4], [1, 3, 3, 2]], **params))


def test_wrong_inputs_raise_infer_error():
    layer = LayerRegisterer.create_layer(make_operator("F.grid_sample", [[1, 2, 4, 4], [1, 3, 3, 2]],
                                                       mode="bicubic"))
    with pytest.raises(InferError, match="4-D input only"):
        layer.forward([np.zeros((1, 2, 3, 4, 4), np.float32), np.zeros((1, 3, 3, 3, 3), np.float32)])
    with pytest.raises(InferError, match="grid"):
        layer.forward([np.zeros((1, 2, 4, 4), np.float32), np.zeros((2, 3, 3, 2), np.float32)])
    affine = LayerRegisterer.create_layer(make_operator("F.affine_grid", [[1, 2, 3]], size=(1, 1, 4, 4)))
    with pytest.raises(InferError, match="theta"):
        affine.forward([np.zeros((1, 3, 4), np.float32)])
