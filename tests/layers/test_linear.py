"""nn.Linear and F.linear against PyTorch, each exported by pnnx; fp32's linear layers on the
matrix engine's float32 tiles against PyTorch and the BLAS path."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from batches import assert_same_at_every_batch, random_inputs
from oracle import assert_matches, check_op, export

import kuiperinfer
from benchmarks.networks import torch_outputs
from kuiperinfer.kernels.matrix import precision as precision_module
from kuiperinfer.kernels.matrix.precision import FP32
from kuiperinfer.kernels.matrix.products import REFERENCE, Fp32Product, fp32_kernel


@pytest.mark.parametrize("shape", [(1, 16), (1, 5, 16), (1, 2, 3, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_any_leading_dims(shape, bias, tmp_path):
    torch.manual_seed(0)
    check_op(nn.Linear(16, 7, bias=bias), shape, directory=tmp_path, batch=3)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 4), (1, 3, 4), (1, 2, 3, 4)])
def test_functional_linear_with_weight_inputs(shape, bias, tmp_path):
    if bias:
        check_op(F.linear, shape, (5, 4), (5,), directory=tmp_path)
    else:
        check_op(F.linear, shape, (5, 4), directory=tmp_path)


def test_functional_linear_on_parameters_becomes_nn_linear(tmp_path):
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.randn(5, 4)), nn.Parameter(torch.randn(5))

        def forward(self, x):
            return F.linear(x, self.w, self.b)
    graph = check_op(Functional(), (1, 3, 4), directory=tmp_path, batch=2)
    assert "nn.Linear" in [op.type for op in graph.operators]


# -- fp32 on the matrix engine's float32 tiles ----------------------------------------------

class Encoder(nn.Module):
    """Linear layers as a transformer's feed-forward block has them: over (N, tokens, features),
    one with GELU fused after it, one with ReLU, deep enough for two blocks of the depth."""

    def __init__(self):
        super().__init__()
        self.up, self.mid, self.down = nn.Linear(40, 600), nn.Linear(600, 70), nn.Linear(70, 33)

    def forward(self, x):
        return self.down(torch.relu(self.mid(F.gelu(self.up(x)))))


def blas_only(monkeypatch):
    """Loads from here on see a CPU without float32 tiles: fp32's products through BLAS."""
    monkeypatch.setattr(precision_module, "fp32_kernel", lambda *args, **kwargs: REFERENCE)


@pytest.mark.skipif(fp32_kernel() is REFERENCE, reason="this CPU (or Numba's target) has no FMA")
def test_linear_layers_on_float_tiles_equal_blas_and_torch(tmp_path, monkeypatch):
    """Chosen once, at load: the linear layers' products are Fp32Product where the CPU has the
    tiles, and match PyTorch, and the BLAS path to float32 rounding, at batch 1, 3 and 8, on
    1, 2 and 4 threads (and each batch its samples run alone)."""
    torch.manual_seed(0)
    model = Encoder().eval()
    param = export(model, [torch.randn(2, 7, 40)], tmp_path)

    def expected(inputs):
        return torch_outputs(model, [torch.from_numpy(x) for x in inputs])
    tiles = assert_same_at_every_batch(param, threads=(2, 4), expected=expected)
    linear = [op.layer for op in tiles.operators if op.type == "nn.Linear"]
    assert len(linear) == 3 and all(isinstance(layer.product, Fp32Product) for layer in linear)
    assert "tiles" in tiles.precision.products
    blas_only(monkeypatch)
    blas = kuiperinfer.load(param, threads=1)
    assert all(op.layer.product is None for op in blas.operators if op.type == "nn.Linear")
    for batch in (1, 3, 8):
        for threads in (1, 2):
            inputs = random_inputs(tiles, batch, seed=batch)
            ours = kuiperinfer.load(param, threads=threads).run(*inputs)
            assert_matches(ours, blas.run(*inputs), atol=1e-5, rtol=1e-5)


def test_linear_layers_without_float_tiles_take_blas(tmp_path, monkeypatch):
    """The reference kernels, and a CPU without the tiles, keep fp32's BLAS path, unchanged."""
    torch.manual_seed(0)
    model = Encoder().eval()
    param = export(model, [torch.randn(2, 7, 40)], tmp_path)
    reference = kuiperinfer.load(param, threads=1, kernels="reference")
    assert all(op.layer.product is None for op in reference.operators if op.type == "nn.Linear")
    blas_only(monkeypatch)
    graph = kuiperinfer.load(param, threads=1)
    assert graph.precision is FP32
    assert all(op.layer.product is None for op in graph.operators if op.type == "nn.Linear")
    x = torch.randn(3, 7, 40)
    assert_matches(graph.run(x.numpy()), torch_outputs(model, [x]))
