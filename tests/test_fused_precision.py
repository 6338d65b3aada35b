"""A precision is a definition: every operator the optimiser fuses computes, in bf16 and in
int8, what the operators it replaces compute in that precision.

Each block below makes the optimiser write one kind of fused operator (or plan); it runs
loaded with and without the optimiser, in each reduced precision (int8 with one calibration
table, which holds for both), and the outputs must agree to float32 rounding: a fused form
sums in another order, and a float32 difference of one unit flips a bf16 or int8 rounding
only where a value lies on the boundary, which these fixed inputs do not hit. In fp32, the
fused 1x1-depthwise stripes on the float32 tiles against PyTorch and the BLAS path.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from batches import assert_same_at_every_batch, random_inputs
from oracle import assert_matches, export

import kuiperinfer
from benchmarks.networks import torch_outputs
from kuiperinfer.kernels.matrix import precision as precision_module
from kuiperinfer.kernels.matrix.products import REFERENCE, fp32_kernel

SCALE_TOLERANCE = 1e-5
"""Largest difference allowed, relative to the largest output value."""


class SqueezeExcitation(nn.Module):
    """torchvision's form: adaptive average pool, 1x1 conv, ReLU, 1x1 conv, Hardsigmoid, multiply."""

    def __init__(self, channels: int = 64, squeezed: int = 16):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)
        with torch.no_grad():   # weights as trained ones are: gates that depend on the input
            self.fc1.weight.mul_(8)
            self.fc2.weight.mul_(4)

    def forward(self, x):
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(self.pool(x)))))


class InvertedResidual(nn.Module):
    """A 1x1 expansion read only by a depthwise convolution, a 1x1 projection, the residual;
    ReLU6 after the two first (MobileNetV3's later blocks take hardswish)."""

    def __init__(self, channels: int = 16, expanded: int = 48, activation=F.relu6):
        super().__init__()
        self.activation = activation
        self.expand = nn.Conv2d(channels, expanded, 1)
        self.depthwise = nn.Conv2d(expanded, expanded, 3, padding=1, groups=expanded)
        self.project = nn.Conv2d(expanded, channels, 1)

    def forward(self, x):
        return x + self.project(self.activation(self.depthwise(self.activation(self.expand(x)))))


class StemBlock(nn.Module):
    """MobileNet's and EfficientNet's start: a stem on RGB (stride 2, hardswish) read only by a
    depthwise convolution (ReLU6), then a 1x1 projection."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.project = nn.Conv2d(channels, 24, 1)

    def forward(self, x):
        return self.project(F.relu6(self.depthwise(F.hardswish(self.stem(x)))))


class ResidualConvolutions(nn.Module):
    """Zero padding before a convolution, activations after, a residual added to a convolution's
    output, and 3x3 convolutions wide enough for Winograd."""

    def __init__(self, channels: int = 32):
        super().__init__()
        self.first = nn.Conv2d(channels, channels, 3)
        self.second = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.first(F.pad(x, (1, 1, 1, 1))))
        return F.relu(self.second(y) + x)


class TransformerBlock(nn.Module):
    """Linear layers with a fused GELU, written-out attention, the addition before a LayerNorm."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        n, length, dim = x.shape
        q, k, v = self.qkv(x).reshape(n, length, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        attention = torch.softmax(q @ k.transpose(-2, -1) * (dim // self.heads) ** -0.5, dim=-1)
        y = self.norm(x + self.proj((attention @ v).transpose(1, 2).reshape(n, length, dim)))
        return y + self.down(F.gelu(self.up(y)))


BLOCKS = {
    "squeeze_excitation": (SqueezeExcitation, (2, 64, 14, 14), {"kuiper.SqueezeExcitation"}),
    "pointwise_depthwise": (InvertedResidual, (2, 16, 12, 12), {"kuiper.PointwiseDepthwise"}),
    "stem_depthwise": (StemBlock, (2, 3, 30, 26), {"kuiper.StemDepthwise"}),
    "convolution_plans": (ResidualConvolutions, (2, 32, 16, 16), {"nn.Conv2d"}),
    "transformer": (TransformerBlock, (2, 10, 32), {"kuiper.Attention", "nn.Linear", "nn.LayerNorm"}),
}


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    """Each block exported, with its calibration table and inputs."""
    made = {}

    def block(name: str):
        if name not in made:
            make, shape, _ = BLOCKS[name]
            torch.manual_seed(0)
            folder = tmp_path_factory.mktemp(name)
            param = export(make().eval(), (torch.rand(1, *shape[1:]),), folder)
            rng = np.random.default_rng(1)
            np.save(folder / "calibrate.npy", rng.standard_normal((8, *shape[1:])).astype(np.float32))
            kuiperinfer.quantize(param, folder / "calibrate.npy", method="minmax", output=folder / "table")
            made[name] = param, folder / "table", rng.standard_normal(shape).astype(np.float32)
        return made[name]

    return block


@pytest.mark.parametrize("precision", ["bf16", "int8"])
@pytest.mark.parametrize("name", BLOCKS)
def test_fused_operators_compute_the_precision_of_what_they_replace(blocks, name, precision):
    param, table, x = blocks(name)
    options = {"precision": precision, "calibration": table if precision == "int8" else None, "threads": 1}
    fused = kuiperinfer.load(param, **options)
    assert BLOCKS[name][2] <= {op.type for op in fused.operators}   # the optimiser did fuse
    assert any(op.plan is not None for op in fused.operators)
    plain = kuiperinfer.load(param, optimize=False, **options)
    exact = kuiperinfer.load(param, optimize=False, threads=1)
    got, expected, fp32 = fused(x), plain(x), exact(x)
    scale = np.abs(expected).max()
    assert np.abs(got - expected).max() <= SCALE_TOLERANCE * scale
    assert np.abs(expected - fp32).max() > 10 * SCALE_TOLERANCE * scale   # fused operators in fp32 would fail


def test_one_calibration_table_names_the_operators_as_pnnx_wrote_them(blocks):
    """The fused squeeze-and-excitation asks the table for both of its convolutions."""
    param, table, _ = blocks("squeeze_excitation")
    fused = kuiperinfer.load(param, precision="int8", calibration=table)
    plain = kuiperinfer.load(param, precision="int8", calibration=table, optimize=False)
    (gate,) = [op for op in fused.operators if op.type == "kuiper.SqueezeExcitation"]
    convolutions = [op.name for op in plain.operators if op.type == "nn.Conv2d"]
    assert gate.layer.products == tuple(convolutions)
    assert {name for name in table.read_text().split() if name in convolutions} == set(convolutions)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
@pytest.mark.parametrize("name", BLOCKS)
def test_fused_operators_at_every_batch_and_thread_count(tmp_path, name, precision):
    """Each block exported with a dynamic batch, in each reduced precision: batches of 1, 3
    and 8 give on 2 threads what they give on one, and what their samples give alone."""
    make, shape, _ = BLOCKS[name]
    torch.manual_seed(0)
    param = export(make().eval(), (torch.rand(1, *shape[1:]),), tmp_path, inputs2=(torch.rand(2, *shape[1:]),))
    options = {"precision": precision}
    if precision == "int8":
        np.save(tmp_path / "calibrate.npy", np.random.default_rng(1).standard_normal((8, *shape[1:])).astype(np.float32))
        options["calibration"] = kuiperinfer.quantize(param, tmp_path / "calibrate.npy", method="minmax").table
    graph = assert_same_at_every_batch(param, threads=(2,), **options)
    assert graph.batching.independent and graph.batching.batch is None


@pytest.mark.skipif(fp32_kernel() is REFERENCE, reason="this CPU (or Numba's target) has no FMA")
def test_fused_pointwise_depthwise_stripes_on_float_tiles_in_fp32(tmp_path, monkeypatch):
    """In fp32 the fused 1x1-depthwise stripes take the float32 tiles, whatever the 1x1's
    activation (a clamp, ReLU6, in the tiles' registers; hardswish after their sums); they
    match PyTorch, and the BLAS path to float32 rounding, at batch 1, 3 and 8 on 1, 2 and 4
    threads."""
    torch.manual_seed(0)
    model = nn.Sequential(InvertedResidual(16, 40), InvertedResidual(16, 72, F.hardswish)).eval()
    param = export(model, (torch.rand(1, 16, 13, 11),), tmp_path)

    def expected(inputs):
        return torch_outputs(model, [torch.from_numpy(x) for x in inputs])
    tiles = assert_same_at_every_batch(param, threads=(2, 4), expected=expected)
    fused = [op.layer for op in tiles.operators if op.type == "kuiper.PointwiseDepthwise"]
    assert [type(layer.pointwise.product).__name__ for layer in fused] == ["Fp32Product", "Fp32Product"]
    monkeypatch.setattr(precision_module, "fp32_kernel", lambda *args, **kwargs: REFERENCE)
    blas = kuiperinfer.load(param, threads=1)
    assert not any(op.layer.pointwise.product for op in blas.operators if op.type == "kuiper.PointwiseDepthwise")
    for batch in (1, 3, 8):
        for threads in (1, 2):
            inputs = random_inputs(tiles, batch, seed=batch)
            assert_matches(kuiperinfer.load(param, threads=threads).run(*inputs), blas.run(*inputs), atol=1e-5,
                           rtol=1e-5)


def test_stem_and_depthwise_in_fp32_match_pytorch_and_fuse_only_where_the_depthwise_alone_reads(tmp_path):
    """The fused stem and depthwise convolution match PyTorch at batch 1, 3 and 8 on 1, 2 and 4
    threads; a stem whose output something else reads too stays an operator of its own."""
    torch.manual_seed(0)
    model = StemBlock(32).eval()
    param = export(model, (torch.rand(1, 3, 33, 31),), tmp_path)

    def expected(inputs):
        return torch_outputs(model, [torch.from_numpy(x) for x in inputs])
    graph = assert_same_at_every_batch(param, threads=(2, 4), expected=expected)
    (fused,) = [op.layer for op in graph.operators if op.type == "kuiper.StemDepthwise"]
    assert fused.walk is not None

    class Shared(StemBlock):
        def forward(self, x):
            stem = F.hardswish(self.stem(x))
            return self.project(F.relu6(self.depthwise(stem))), stem
    shared = Shared(32).eval()
    (tmp_path / "shared").mkdir()
    param = export(shared, (torch.rand(1, 3, 33, 31),), tmp_path / "shared")
    graph = kuiperinfer.load(param)
    assert "kuiper.StemDepthwise" not in {op.type for op in graph.operators}
    x = np.random.default_rng(2).standard_normal((2, 3, 33, 31)).astype(np.float32)
    assert_matches(graph.run(x), torch_outputs(shared, [torch.from_numpy(x)]))


def expanded_block() -> nn.Module:
    """A block whose 1x1-depthwise operator and 1x1 projection (with the residual) read
    channels-last input."""
    return nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), InvertedResidual(16, 48))


BOUND = {   # an operator that keeps bound calls, in a model whose input it reads as it keeps them
    "kuiper.PointwiseDepthwise": (expanded_block, (16, 12, 12)),
    "nn.Conv2d": (expanded_block, (16, 12, 12)),
    "kuiper.StemDepthwise": (StemBlock, (3, 30, 26)),
    "nn.Linear": (lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)), (10, 32)),
}


@pytest.mark.skipif(fp32_kernel() is REFERENCE, reason="this CPU (or Numba's target) has no FMA")
@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("kind", BOUND)
def test_a_bound_call_gives_the_bits_of_the_first_call(tmp_path, kind, precision):
    """The fused operators, 1x1 convolutions and linear layers on compiled kernels keep a call
    bound to each shape of input (channels-last for the 1x1 products) from its first call; the bound
    calls give what the first call gave, bit for bit, as the batch changes, on 1 and 2
    threads, in fp32 and in int8 (float32 input quantized on the way in, a residual in either
    form)."""
    make, shape = BOUND[kind]
    torch.manual_seed(0)
    param = export(make().eval(), (torch.rand(1, *shape),), tmp_path, inputs2=(torch.rand(2, *shape),))
    x = np.random.default_rng(3).standard_normal((2, *shape)).astype(np.float32)
    options = {"precision": precision}
    if precision == "int8":
        np.save(tmp_path / "calibrate.npy", x)
        options["calibration"] = kuiperinfer.quantize(param, tmp_path / "calibrate.npy", method="minmax").table
    for threads in (1, 2):
        graph = kuiperinfer.load(param, threads=threads, **options)
        firsts = [graph.run(x[:batch]) for batch in (2, 1)]
        kept = [op.layer._bound for op in graph.operators if op.type == kind and op.layer._bound]
        assert kept and all(len(calls) == 2 or threads > 1 for calls in kept)   # 2 threads: chunks of a batch
        for _ in range(2):
            for batch, first in zip((2, 1), firsts):
                np.testing.assert_array_equal(graph.run(x[:batch]), first)
