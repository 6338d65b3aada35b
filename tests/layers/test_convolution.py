"""Convolutions against PyTorch, each exported by pnnx: nn.Conv2d / F.conv2d, the 1-D path
(the 2-D code on a unit height) and ConvTranspose1d/2d (GEMM + col2im), over a spread of
parameters; and conv2d on its packed weights, called directly; fp32's im2col products on the
matrix engine's float32 tiles against PyTorch and the BLAS path.

The kernels behind conv2d (im2col, Winograd, depthwise, ...) have their own tests in tests/kernels.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from batches import assert_same_at_every_batch, random_inputs
from handmade import make_operator
from oracle import assert_matches, check_op, export

import kuiperinfer
from benchmarks.networks import torch_outputs
from kuiperinfer.errors import LayerCreateError
from kuiperinfer.kernels.elementwise import Epilogue
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.matrix import precision as precision_module
from kuiperinfer.kernels.matrix.convolution import ProductConvolution
from kuiperinfer.kernels.matrix.products import REFERENCE, Fp32Product, fp32_kernel
from kuiperinfer.kernels.matrix.winograd import TiledWinograd
from kuiperinfer.layers import LayerRegisterer
from kuiperinfer.layers.convolution import ConvGeometry, PackedWeight, conv2d

RNG = np.random.default_rng(0)


def case_id(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items())


CONV_CASES = [
    dict(cin=3, cout=8, k=3, stride=1, padding=1),
    dict(cin=4, cout=6, k=(3, 5), stride=(2, 1), padding=(1, 2), bias=False),
    dict(cin=4, cout=4, k=3, stride=1, padding=2, dilation=2),
    dict(cin=8, cout=8, k=3, stride=2, padding=1, groups=8),           # depthwise
    dict(cin=4, cout=8, k=3, stride=1, padding=1, groups=4),           # depth multiplier 2
    dict(cin=6, cout=9, k=1, stride=1, padding=0, groups=3),
    dict(cin=3, cout=5, k=4, stride=1, padding="same"),                # even kernel: asymmetric
    dict(cin=3, cout=5, k=3, stride=1, padding="same", dilation=2),
    dict(cin=3, cout=5, k=3, stride=1, padding="valid"),
    dict(cin=3, cout=4, k=3, stride=1, padding=1, padding_mode="reflect"),
    dict(cin=3, cout=4, k=3, stride=2, padding=2, padding_mode="replicate"),
    dict(cin=3, cout=4, k=3, stride=1, padding=(1, 2), padding_mode="circular"),
    dict(cin=8, cout=8, k=5, stride=1, padding=2, groups=8, padding_mode="reflect"),
    dict(cin=16, cout=32, k=7, stride=2, padding=3, bias=False),
    dict(cin=3, cout=16, k=3, stride=2, padding=1),                    # few inputs: the direct convolution
    dict(cin=3, cout=24, k=7, stride=2, padding=3, bias=False),
    dict(cin=4, cout=16, k=(2, 3), stride=1, padding=(1, 0), dilation=(2, 1)),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=case_id)
def test_conv2d(case, tmp_path):
    case = dict(case)
    cin, cout, k = case.pop("cin"), case.pop("cout"), case.pop("k")
    torch.manual_seed(0)
    check_op(nn.Conv2d(cin, cout, k, **case), (1, cin, 13, 11), directory=tmp_path, batch=2)


def test_functional_conv2d_with_weight_input(tmp_path):
    check_op(lambda x, w: F.conv2d(x, w, stride=2, padding=1), (1, 4, 9, 9), (6, 4, 3, 3),
             directory=tmp_path)


CONV1D_CASES = [
    dict(cin=3, cout=8, k=3, stride=1, padding=1),
    dict(cin=4, cout=6, k=5, stride=2, padding=2, bias=False),
    dict(cin=4, cout=4, k=3, stride=1, padding=2, dilation=2),
    dict(cin=6, cout=6, k=3, stride=2, padding=1, groups=6),            # depthwise
    dict(cin=4, cout=8, k=3, stride=3, padding=0, groups=2),
    dict(cin=3, cout=5, k=4, stride=1, padding="same"),                  # even kernel: asymmetric
    dict(cin=3, cout=5, k=3, stride=1, padding="same", dilation=3),
    dict(cin=3, cout=5, k=3, stride=1, padding="valid"),
    dict(cin=3, cout=4, k=3, stride=1, padding=1, padding_mode="reflect"),
    dict(cin=3, cout=4, k=3, stride=2, padding=2, padding_mode="replicate"),
    dict(cin=3, cout=4, k=3, stride=1, padding=2, padding_mode="circular"),
    dict(cin=3, cout=4, k=4, stride=1, padding="same", padding_mode="reflect"),
    dict(cin=2, cout=3, k=1, stride=1, padding=0),
    dict(cin=2, cout=16, k=5, stride=2, padding=2),                     # the direct convolution
]


@pytest.mark.parametrize("case", CONV1D_CASES, ids=case_id)
def test_conv1d(case, tmp_path):
    case = dict(case)
    cin, cout, k = case.pop("cin"), case.pop("cout"), case.pop("k")
    torch.manual_seed(0)
    check_op(nn.Conv1d(cin, cout, k, **case), (1, cin, 17), directory=tmp_path, batch=3)


@pytest.mark.parametrize("kwargs", [dict(stride=2, padding=1), dict(padding="same", dilation=2),
                                    dict(padding="valid", groups=2)], ids=case_id)
def test_functional_conv1d_with_weight_input(kwargs, tmp_path):
    check_op(lambda x, w: F.conv1d(x, w, **kwargs), (1, 4, 13), (6, 4 // kwargs.get("groups", 1), 3),
             directory=tmp_path)


def test_functional_conv1d_with_bias_input(tmp_path):
    check_op(lambda x, w, b: F.conv1d(x, w, b, stride=2), (1, 4, 13), (6, 4, 3), (6,), directory=tmp_path)


def test_functional_conv2d_with_bias_input(tmp_path):
    check_op(lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2), (1, 4, 7, 6), (6, 2, 3, 3), (6,),
             directory=tmp_path)


CONV_T2D_CASES = [
    dict(cin=3, cout=5, k=3),
    dict(cin=4, cout=6, k=3, stride=2, padding=1, output_padding=1),
    dict(cin=4, cout=4, k=(3, 2), stride=(1, 2), padding=(0, 1), bias=False),
    dict(cin=4, cout=6, k=3, stride=2, padding=1, output_padding=1, groups=2, dilation=2),
    dict(cin=6, cout=6, k=4, stride=2, padding=1, groups=6),                  # depthwise upsampling
    dict(cin=3, cout=2, k=2, stride=2),                                        # U-Net style
    dict(cin=5, cout=3, k=(2, 3), stride=(2, 3), bias=False),                  # blocks, not square
    dict(cin=2, cout=3, k=5, stride=3, padding=2, output_padding=2),
    dict(cin=2, cout=4, k=3, stride=(2, 3), padding=(1, 0), output_padding=(0, 2), dilation=(1, 2)),
    dict(cin=2, cout=2, k=3, stride=1, padding=1, dilation=3, output_padding=2),  # op < dilation
    dict(cin=4, cout=2, k=1, stride=1),
]


@pytest.mark.parametrize("case", CONV_T2D_CASES, ids=case_id)
def test_conv_transpose2d(case, tmp_path):
    case = dict(case)
    cin, cout, k = case.pop("cin"), case.pop("cout"), case.pop("k")
    torch.manual_seed(0)
    check_op(nn.ConvTranspose2d(cin, cout, k, **case), (1, cin, 7, 6), directory=tmp_path, batch=2)


class UpToSize(nn.Module):
    """ConvTranspose2d called with output_size: pnnx turns it into output_padding."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 4, 3, stride=2)

    def forward(self, x):
        return self.up(x, output_size=(12, 16))


def test_conv_transpose2d_with_output_size(tmp_path):
    torch.manual_seed(0)
    check_op(UpToSize(), (1, 3, 5, 7), directory=tmp_path, batch=2)


@pytest.mark.parametrize("case", [dict(cin=3, cout=5, k=3), dict(cin=4, cout=6, k=4, stride=2, padding=1),
                                  dict(cin=4, cout=4, k=3, stride=3, padding=1, output_padding=2, groups=2,
                                       bias=False),
                                  dict(cin=2, cout=2, k=3, dilation=2, padding=2),
                                  dict(cin=4, cout=3, k=2, stride=2)], ids=case_id)
def test_conv_transpose1d(case, tmp_path):
    case = dict(case)
    cin, cout, k = case.pop("cin"), case.pop("cout"), case.pop("k")
    torch.manual_seed(0)
    check_op(nn.ConvTranspose1d(cin, cout, k, **case), (1, cin, 9), directory=tmp_path, batch=3)


@pytest.mark.parametrize("kwargs", [dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2)],
                         ids=case_id)
def test_functional_conv_transpose2d(kwargs, tmp_path):
    check_op(lambda x, w: F.conv_transpose2d(x, w, **kwargs), (1, 4, 5, 6), (4, 3, 3, 3), directory=tmp_path)


def test_functional_conv_transpose_with_bias_input(tmp_path):
    check_op(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2), (1, 4, 7), (4, 6, 3), (6,),
             directory=tmp_path)
    check_op(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1), (1, 4, 5, 4), (4, 2, 3, 3),
             (2,), directory=tmp_path)
    check_op(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2), (1, 4, 5, 4), (4, 2, 2, 2), (2,),
             directory=tmp_path)


@pytest.mark.parametrize("module, shape", [
    (nn.Conv1d(3, 4, 3, padding=1), (3, 9)), (nn.Conv2d(3, 4, 3, stride=2), (3, 9, 8)),
    (nn.ConvTranspose1d(3, 4, 3, stride=2), (3, 9)), (nn.ConvTranspose2d(3, 2, 2, stride=2), (3, 5, 4)),
    (nn.Sequential(nn.Conv2d(3, 6, 1), nn.ReLU(), nn.Conv2d(6, 6, 3, groups=6, padding=1)), (3, 8, 8)),
], ids=["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "pointwise-depthwise"])
def test_unbatched_input(module, shape, tmp_path):
    """(channels, length) or (channels, height, width), as PyTorch takes them."""
    torch.manual_seed(0)
    graph = check_op(module, shape, directory=tmp_path)
    assert not graph.batching.independent   # dimension 0 is the channels


class EncoderDecoder1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv1d(2, 4, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose1d(4, 2, 4, stride=2, padding=1)

    def forward(self, x):
        return self.up(F.relu(self.down(x)))


def test_conv_chain_keeps_float32(tmp_path):
    torch.manual_seed(0)
    graph = check_op(EncoderDecoder1d(), (1, 2, 8), directory=tmp_path, batch=2)
    assert graph(torch.randn(1, 2, 8).numpy()).dtype == "float32"


# -- build-time validation (operators made by hand: PyTorch itself refuses these models) --

@pytest.mark.parametrize("type_name,shapes,params,message", [
    ("F.conv_transpose2d", [[1, 4, 5, 5], [4, 2, 3, 3]], dict(stride=(1, 1), output_padding=(1, 1)),
     "output_padding"),
    ("F.conv_transpose2d", [[1, 4, 5, 5], [4, 2, 3, 3]], dict(padding="same"), "numeric zero padding"),
    ("F.conv1d", [[1, 4, 5]], dict(stride=(1,)), "weight as its second input"),
    ("F.conv1d", [[1, 4, 5], [2, 4, 3, 3]], dict(stride=(1,)), "expected 3 dimensions"),
    ("F.conv2d", [[1, 4, 5, 5], [2, 4, 3, 3]], dict(padding="full"), "unsupported padding"),
    ("F.conv2d", [[1, 4, 5, 5], [2, 4, 3, 3]], dict(stride=(0, 1)), "must be positive"),
    ("F.conv2d", [[1, 4, 5, 5], [2, 4, 3, 3]], dict(stride=(1, 1, 1)), "expected 2"),
])
def test_bad_parameters_raise_layer_create_error(type_name, shapes, params, message):
    with pytest.raises(LayerCreateError, match=message):
        LayerRegisterer.create_layer(make_operator(type_name, shapes, **params))


# -- conv2d on packed weights, called directly ------------------------------------------

@pytest.mark.parametrize("shape, groups", [((1, 6, 1, 1), 1), ((4, 1, 3, 3), 4), ((1, 3, 3, 3), 1)])
def test_weights_packed_from_an_unaligned_read_only_view_are_aligned(shape, groups):
    values = RNG.standard_normal(shape, dtype=np.float32)
    stored = np.frombuffer(b"\0" + values.tobytes(), dtype=np.float32, offset=1).reshape(shape)
    stored.flags.writeable = False
    assert not stored.flags.aligned
    packed = PackedWeight(stored, groups)
    operands = [packed.depthwise.taps] if packed.depthwise else [packed.gemm] + [packed.planar] * (shape[1] <= 4)
    assert all(a.flags.aligned and a.flags.c_contiguous for a in operands)
    x = RNG.standard_normal((2, shape[1] * groups, 9, 9), dtype=np.float32)
    geometry = ConvGeometry(shape[2:], (1, 1), (1, 1), ((1, 1), (1, 1)), "zeros", groups)
    expected = F.conv2d(torch.from_numpy(x), torch.from_numpy(values), padding=1, groups=groups).numpy()
    np.testing.assert_allclose(nchw(conv2d(x, packed, geometry)), expected, atol=1e-5)


@pytest.mark.parametrize("groups, kernel, stride", [(1, (3, 3), (2, 2)), (1, (1, 1), (1, 1)), (4, (3, 1), (1, 2)),
                                                    (8, (3, 3), (1, 1))])
def test_conv2d_takes_either_layout_and_returns_nhwc(groups, kernel, stride):
    x = RNG.standard_normal((2, 8, 11, 10), dtype=np.float32)
    weight = RNG.standard_normal((8, 8 // groups, *kernel), dtype=np.float32)
    bias = RNG.standard_normal(8, dtype=np.float32)
    geometry = ConvGeometry(kernel, stride, (1, 1), ((1, 0), (2, 1)), "zeros", groups)
    expected = F.conv2d(F.pad(torch.from_numpy(x), (2, 1, 1, 0)), torch.from_numpy(weight),
                        torch.from_numpy(bias), stride=stride, groups=groups).numpy()
    for source in (x, nchw(np.ascontiguousarray(nhwc(x)))):
        ours = conv2d(source, PackedWeight(weight, groups), geometry, Epilogue(bias))
        np.testing.assert_allclose(nchw(ours), expected, atol=1e-5, rtol=1e-5)


# -- fp32 on the matrix engine's float32 tiles ----------------------------------------------

class Blocks(nn.Module):
    """Convolutions fp32 computes as im2col products: strided 3x3, grouped (20 channels a
    group, within a tile's strip), reflect-padded 5x5, 1x1 with hardswish, and a 1x1 whose
    output the optimiser adds a residual to, ReLU after it."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 40, 3, padding=1)
        self.down = nn.Conv2d(40, 40, 3, stride=2, padding=1)
        self.grouped = nn.Conv2d(40, 40, 3, padding=1, groups=2)
        self.wide = nn.Conv2d(40, 24, 5, padding=2, padding_mode="reflect")
        self.expand = nn.Conv2d(24, 72, 1)
        self.project = nn.Conv2d(72, 24, 1)

    def forward(self, x):
        x = self.grouped(self.down(torch.relu(self.stem(x))))
        y = self.wide(x)
        return torch.relu(self.project(F.hardswish(self.expand(y))) + y)


@pytest.mark.skipif(fp32_kernel() is REFERENCE, reason="this CPU (or Numba's target) has no FMA")
def test_convolutions_on_float_tiles_equal_blas_and_torch(tmp_path, monkeypatch):
    """Chosen once, at load: the im2col and 1x1 convolutions' products are Fp32Product (one
    per group) where the CPU has the tiles; they match PyTorch, and the BLAS path to float32
    rounding, at batch 1, 3 and 8, on 1, 2 and 4 threads (and each batch its samples alone)."""
    torch.manual_seed(0)
    model = Blocks().eval()
    param = export(model, [torch.randn(1, 3, 20, 24)], tmp_path)

    def expected(inputs):
        return torch_outputs(model, [torch.from_numpy(x) for x in inputs])
    tiles = assert_same_at_every_batch(param, threads=(2, 4), expected=expected)
    tiled = [op.layer.kernel for op in tiles.operators if isinstance(getattr(op.layer, "kernel", None),
                                                                      ProductConvolution)]
    assert len(tiled) >= 5 and all(isinstance(p, Fp32Product) for k in tiled for p in k.products)
    assert any(len(k.products) == 2 for k in tiled)                            # the grouped one
    monkeypatch.setattr(precision_module, "fp32_kernel", lambda *args, **kwargs: REFERENCE)
    blas = kuiperinfer.load(param, threads=1)
    assert not any(isinstance(getattr(op.layer, "kernel", None), ProductConvolution) for op in blas.operators)
    for batch in (1, 3, 8):
        for threads in (1, 2):
            inputs = random_inputs(tiles, batch, seed=batch)
            ours = kuiperinfer.load(param, threads=threads).run(*inputs)
            assert_matches(ours, blas.run(*inputs), atol=1e-5, rtol=1e-5)


class SmallImageBlock(nn.Module):
    """A residual block of 3x3 convolutions on a 7x7 image (ResNet-18's last stage), which the
    optimiser plans as Winograd: 4 tiles at batch 1, too few to pay."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Conv2d(32, 32, 3, padding=1), nn.Conv2d(32, 32, 3, padding=1, bias=False)

    def forward(self, x):
        return torch.relu(self.second(torch.relu(self.first(x))) + x)


@pytest.mark.skipif(fp32_kernel() is REFERENCE, reason="this CPU (or Numba's target) has no FMA")
@pytest.mark.parametrize("image", [7, 16])
def test_winograd_calls_of_too_few_tiles_run_on_float_tiles(tmp_path, image):
    """A Winograd convolution on the float32 tiles recorded at an image too small for it to pay
    computes such calls by the tiles' columns, made at load, and larger batches by Winograd;
    recorded at an image where Winograd pays, it makes the columns' convolution only for the
    odd small call. Both match PyTorch at batch 1, 3 and 8 on 1, 2 and 4 threads."""
    torch.manual_seed(0)
    model = SmallImageBlock().eval()
    param = export(model, [torch.randn(1, 32, image, image)], tmp_path)

    def expected(inputs):
        return torch_outputs(model, [torch.from_numpy(x) for x in inputs])
    graph = assert_same_at_every_batch(param, threads=(2, 4), expected=expected)
    kernels = [op.layer.kernel for op in graph.operators if type(op.layer).__name__ == "Convolution"]
    assert [type(kernel) for kernel in kernels] == [TiledWinograd, TiledWinograd]
    for kernel in kernels:
        if image == 7:
            assert isinstance(kernel.made_few_tiles, ProductConvolution)
            assert all(isinstance(product, Fp32Product) for product in kernel.made_few_tiles.products)
        else:
            assert kernel.made_few_tiles is None
