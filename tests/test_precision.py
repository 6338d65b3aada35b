"""Precisions: bfloat16 rounding against PyTorch, the split products of PyTorch's emulation
(benchmarks/emulation.py) against float64, the CPU's matrix features (and the AMX tile
state tools/matrix_features.py asks for), the ``precision`` option, and every layer that
multiplies held to a PyTorch model computing the same definition (the emulation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from batches import assert_same_at_every_batch
from oracle import Holder, assert_matches, export

import kuiperinfer
from benchmarks.emulation import bf16_parts, bf16_products, split_product
from benchmarks.networks import torch_outputs
from kuiperinfer.errors import KuiperError
from kuiperinfer.kernels.layout import nchw
from kuiperinfer.kernels.matrix import features
from kuiperinfer.kernels.matrix.bf16 import round_bf16
from kuiperinfer.kernels.matrix.features import MatrixFeatures, cpu_flags
from kuiperinfer.kernels.matrix.precision import FP32, precision
from tools import matrix_features

# -- bfloat16 -------------------------------------------------------------------------------


def bits(*words: int) -> np.ndarray:
    return np.array(words, np.uint32).view(np.float32)


def test_round_bf16_is_pytorchs_rounding() -> None:
    rng = np.random.default_rng(0)
    scales = np.float64(10.0) ** rng.integers(-30, 30, 10_000)
    x = np.concatenate([
        (rng.standard_normal(10_000) * scales).astype(np.float32),
        np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4028235e38, -3.4028235e38, 1e-40, -1e-45], np.float32),
        bits(0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x7F7F8000, 0x7FC00001, 0x7F800001, 0xFF800001),
    ])
    assert x.dtype == np.float32
    ours = round_bf16(x)
    expected = torch.from_numpy(x).bfloat16().float().numpy()
    np.testing.assert_array_equal(ours, expected)   # NaN where PyTorch has NaN, ties to even, overflow to inf
    assert not np.any(ours.view(np.uint32) & 0xFFFF)


def test_round_bf16_keeps_the_memory_layout() -> None:
    x = nchw(np.random.default_rng(1).standard_normal((2, 5, 7, 3)).astype(np.float32))   # channels-last
    rounded = round_bf16(x)
    assert rounded.shape == x.shape and np.argsort(rounded.strides).tolist() == np.argsort(x.strides).tolist()
    np.testing.assert_array_equal(rounded, torch.from_numpy(np.ascontiguousarray(x)).bfloat16().float().numpy())


@pytest.mark.parametrize("parts, bound", [(1, 2 ** -8), (2, 2 ** -16), (3, 2 ** -24)])
def test_bf16_parts_add_up_to_the_value(parts: int, bound: float) -> None:
    x = np.random.default_rng(2).standard_normal(5000).astype(np.float32) * 100
    total = torch.stack(bf16_parts(torch.from_numpy(x), parts)).double().sum(0).numpy()
    assert np.max(np.abs(total - x) / np.abs(x)) <= bound


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 13, 5), (64, 300, 33), (3, 1024, 2)])
@pytest.mark.parametrize("parts, low, high", [(1, 1e-4, 2e-2), (2, 1e-8, 2e-5), (3, 0.0, 1e-6)])
def test_split_products_recover_float32(shape, parts, low, high) -> None:
    m, k, n = shape
    rng = np.random.default_rng(m * k * n)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    product = split_product(torch.matmul, torch.from_numpy(a), torch.from_numpy(b), parts).numpy()
    error = np.max(np.abs(product - exact)) / np.max(np.abs(exact))
    assert error <= high
    if m * k * n > 1:   # rounding really happened (one exact product of one pair may not show it)
        assert error >= low


# -- the CPU's matrix features ----------------------------------------------------------------

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu sse avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
processor\t: 1
flags\t\t: fpu
"""


def test_features_are_read_from_cpuinfo() -> None:
    flags = cpu_flags(CPUINFO)
    assert "amx_tile" in flags and "fpu" in flags
    sapphire = MatrixFeatures.from_flags(flags)
    assert sapphire == MatrixFeatures(amx_bf16=True, amx_int8=True, avx512_bf16=True, vnni=True, avx512_vnni=True,
                                      avx2=True, avx512f=True)
    assert sapphire.bf16_products == "AMX"
    zen4 = MatrixFeatures.from_flags(frozenset({"avx512_bf16", "avx512_vnni", "amx_bf16"}))   # no amx_tile
    assert (zen4.amx_bf16, zen4.bf16_products, zen4.vnni) == (False, "AVX512-BF16", True)
    alder_lake = MatrixFeatures.from_flags(frozenset({"avx2", "avx_vnni"}))
    assert (alder_lake.vnni, alder_lake.avx512_vnni, alder_lake.avx2) == (True, False, True)
    assert MatrixFeatures().bf16_products is None
    assert cpu_flags("") == frozenset()


def test_this_machine() -> None:
    with open("/proc/cpuinfo") as file:
        flags = cpu_flags(file.read())
    found = features.detect()
    assert found == MatrixFeatures.from_flags(flags)


def test_the_tile_state_is_granted_exactly_where_the_cpu_has_amx(capsys) -> None:
    found = features.detect()
    assert matrix_features.request_tile_state() is found.amx_bf16
    assert matrix_features.request_tile_state() is found.amx_bf16   # asked once per process
    assert matrix_features.describe(MatrixFeatures(avx512_bf16=True, vnni=True)) == "AVX512-BF16, VNNI"
    assert "no matrix" in matrix_features.describe(MatrixFeatures())
    assert matrix_features.main() == 0
    printed = capsys.readouterr().out
    assert matrix_features.describe(found) in printed
    assert ("granted" in printed) is found.amx_bf16


# -- the option ---------------------------------------------------------------------------------


def test_precisions_by_name_say_which_kernel_runs() -> None:
    x = np.float32([[1.00390625, 3.0]])   # 1 + 2^-8 is a tie between two bfloat16 values
    assert FP32.product(np.eye(2, dtype=np.float32)) is None and FP32.float_product(np.eye(2, dtype=np.float32)) is None
    zen4 = precision("fp32", MatrixFeatures(avx2=True, fma=True, avx512f=True), "compiled",
                     frozenset({"avx2", "fma", "avx512f"}))
    assert zen4.name == "fp32" and "linear layers and im2col convolutions on AVX-512 FMA tiles" in zen4.products
    assert zen4.product(np.eye(2, dtype=np.float32)) is None                       # fp32: no reduced product
    assert zen4.float_product(np.eye(2, dtype=np.float32)).kernel.name == "AVX-512 FMA"
    assert "AVX2 FMA" in precision("fp32", MatrixFeatures(avx2=True, fma=True), "compiled",
                                   frozenset({"avx2", "fma"})).products
    assert precision("fp32", MatrixFeatures(avx2=True), "compiled", frozenset({"avx2", "fma"})) is FP32   # no FMA
    assert precision("fp32", MatrixFeatures(avx2=True, fma=True, avx512f=True), "reference") is FP32
    bf16 = precision("bf16", MatrixFeatures())
    assert bf16.name == "bf16" and "this CPU has no AVX512-BF16" in bf16.products
    assert bf16.product(np.eye(2, dtype=np.float32))(x).tolist() == [[1.0, 3.0]]
    assert "AVX512-BF16 (vdpbf16ps)" in precision("bf16", MatrixFeatures(avx512_bf16=True), "compiled",
                                                  frozenset({"avx512bf16", "avx512bw"})).products
    assert "NumPy reference" in precision("bf16", MatrixFeatures(avx512_bf16=True), "reference").products
    assert "AVX512-VNNI (vpdpbusd)" in precision("int8", MatrixFeatures(avx512_vnni=True, vnni=True), "compiled",
                                                 frozenset({"avx512vnni", "avx512bw"})).products
    assert "AVX2 (vpmaddwd)" in precision("int8", MatrixFeatures(avx2=True), "compiled", frozenset({"avx2"})).products
    assert "neither AVX2 nor VNNI" in precision("int8", MatrixFeatures()).products
    assert "asked for" in precision("int8", kernels="reference").products
    with pytest.raises(KuiperError, match="one of"):
        precision("fp16")


def test_load_refuses_unknown_precisions(tmp_path) -> None:
    param = export(Holder(nn.Linear(4, 3)), (torch.randn(2, 4),), tmp_path)
    for name, match in (("int8", "needs a calibration table"), ("float32", "one of")):
        with pytest.raises(KuiperError, match=match):
            kuiperinfer.load(param, precision=name)
    assert kuiperinfer.load(param, precision="bf16").precision.name == "bf16"


# -- layers against PyTorch computing the same definition ---------------------------------------


class Attention(nn.Module):
    """Self-attention through nn.MultiheadAttention; :meth:`bf16` is the same with bf16 projections."""

    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]

    def bf16(self, x):
        m, r = self.attention, (lambda t: t.bfloat16().float())
        q, k, v = F.linear(r(x), r(m.in_proj_weight), m.in_proj_bias).chunk(3, dim=-1)
        heads = [t.unflatten(-1, (4, 8)).transpose(1, 2) for t in (q, k, v)]
        y = F.scaled_dot_product_attention(*heads).transpose(1, 2).flatten(2)
        return F.linear(r(y), r(m.out_proj.weight), m.out_proj.bias)


class SmallCNN(nn.Module):
    """The products of a depthwise network: a stem, 1x1 expansion, depthwise filter (fused
    with it by the optimiser), a squeeze-and-excitation gate, a residual 1x1 projection, an
    upsampling transposed convolution and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.expand = nn.Conv2d(16, 48, 1)
        self.depthwise = nn.Conv2d(48, 48, 3, padding=1, groups=48)
        self.reduce, self.excite = nn.Conv2d(48, 12, 1), nn.Conv2d(12, 48, 1)
        self.project = nn.Conv2d(48, 16, 1)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.classifier = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        y = F.hardswish(self.depthwise(F.hardswish(self.expand(x))))
        gate = torch.sigmoid(self.excite(F.relu(self.reduce(y.mean((2, 3), keepdim=True)))))
        x = x + self.project(y * gate)
        x = F.relu(self.up(x))
        return self.classifier(x.mean((2, 3)))


LAYERS = {   # name: (a factory of the model, the shapes of its inputs), built under a fixed seed
    "conv 3x3": (lambda: nn.Conv2d(8, 16, 3, padding=1), (2, 8, 12, 12)),
    "conv 1x1": (lambda: nn.Conv2d(8, 16, 1), (2, 8, 12, 12)),
    "conv strided, grouped": (lambda: nn.Conv2d(8, 16, 3, stride=2, groups=2), (2, 8, 13, 13)),
    "conv1d": (lambda: nn.Conv1d(8, 16, 5, padding=2), (2, 8, 20)),
    "conv transposed": (lambda: nn.ConvTranspose2d(8, 4, 3, stride=2), (2, 8, 6, 6)),
    "linear 3-d": (lambda: nn.Linear(24, 40), (2, 5, 24)),
    "F.linear": (lambda: (lambda x, w: F.linear(x, w)), (3, 8), (6, 8)),
    "F.conv2d": (lambda: (lambda x, w: F.conv2d(x, w, padding=1)), (2, 8, 6, 6), (4, 8, 3, 3)),
    "small CNN": (SmallCNN, (2, 3, 32, 32)),
    "nn.MultiheadAttention": (Attention, (2, 7, 32)),
}
# Products in a chain, each input rounded to bf16: a one-ulp float32 difference upstream (another
# summation order) may move an intermediate by one bf16 step (2^-8 of its magnitude), and the
# outputs by about as much of their scale.
CHAINS = {"small CNN", "nn.MultiheadAttention"}
BF16_STEP = 2.0 ** -8


def layer(name: str):
    """``LAYERS[name]``'s model, built the same whichever tests ran before, and its input shapes."""
    make, *shapes = LAYERS[name]
    torch.manual_seed(0)
    model = make()
    return model, shapes


def bf16_reference(model, inputs):
    if isinstance(model, Attention):
        with torch.no_grad():
            return [model.bf16(*inputs).numpy()]
    if isinstance(model, nn.Module):
        with bf16_products(model):
            return torch_outputs(model, inputs)
    r = [t.bfloat16().float() for t in inputs]
    return torch_outputs(Holder(_Function(model)), r)


class _Function(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


@pytest.mark.parametrize("name", LAYERS)
def test_bf16_products_are_the_definitions(name, tmp_path) -> None:
    """Each layer that multiplies, alone or in a network, with compiled and reference
    kernels, optimised or not: bf16 as PyTorch computes it on rounded inputs, and not fp32."""
    model, shapes = layer(name)
    module = model if isinstance(model, nn.Module) else _Function(model)
    module.eval()
    inputs = [torch.randn(*shape) for shape in shapes]
    param = export(Holder(module), inputs, tmp_path)
    expected, fp32 = bf16_reference(model, inputs), torch_outputs(module, inputs)
    assert np.max(np.abs(expected[0] - fp32[0])) > 1e-4, "bf16 changes nothing here"
    for kernels in ("compiled", "reference"):
        for optimize in (True, False):
            graph = kuiperinfer.load(param, precision="bf16", kernels=kernels, optimize=optimize)
            assert_matches(graph.run(*[t.numpy() for t in inputs]), expected)


def test_depthwise_convolutions_stay_fp32(tmp_path) -> None:
    module = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    x = torch.randn(2, 8, 9, 9)
    param = export(Holder(module), (x,), tmp_path)
    assert_matches(kuiperinfer.load(param, precision="bf16").run(x.numpy()), torch_outputs(module, (x,)))


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precisions_at_every_batch_and_thread_count(tmp_path, precision) -> None:
    """Chunked among threads or not, batched or sample by sample: the same numbers (bf16's
    also PyTorch's on rounded inputs)."""
    torch.manual_seed(1)
    model = SmallCNN().eval()
    param = export(Holder(model), (torch.randn(1, 3, 32, 32),), tmp_path)
    expected = None if precision == "int8" else \
        lambda inputs: bf16_reference(model, [torch.from_numpy(x) for x in inputs])  # noqa: E731
    assert_same_at_every_batch(param, expected=expected, **options_for(precision, param, tmp_path, (1, 3, 32, 32)))


# -- the matrix engine's products in the layers ---------------------------------------------------


def options_for(precision: str, param, tmp_path, shape) -> dict:
    """The load options of ``precision``: int8's with a table calibrated on random inputs of ``shape``."""
    if precision != "int8":
        return {"precision": precision}
    np.save(tmp_path / "calibrate.npy", np.random.default_rng(5).standard_normal((4, *shape[1:])).astype(np.float32))
    return {"precision": precision, "calibration": kuiperinfer.quantize(param, tmp_path / "calibrate.npy").table}


@pytest.mark.parametrize("precision, name", [*(("bf16", name) for name in LAYERS),
                                             *(("int8", name) for name in LAYERS
                                               if not name.startswith("F.") and name != "nn.MultiheadAttention")])
def test_products_are_the_same_at_every_batch_thread_count_and_kernel(tmp_path, name, precision) -> None:
    """Each layer's products at batch 1, 3 and 8, on 1 and 2 threads, alone or together: the
    same values to the bit (the tiles sum each output the same way whatever else they
    compute); against the NumPy reference kernels, int8's equal to the bit too (exact integer
    sums) where no activation is approximated, bf16's to float32 rounding. (int8 does not
    quantize weights that arrive at run time, nor nn.MultiheadAttention.)"""
    model, shapes = layer(name)
    module = model if isinstance(model, nn.Module) else _Function(model)
    param = export(Holder(module.eval()), [torch.randn(*shape) for shape in shapes], tmp_path)
    options = options_for(precision, param, tmp_path, shapes[0])
    graphs = {threads: kuiperinfer.load(param, threads=threads, **options) for threads in (1, 2)}
    reference = kuiperinfer.load(param, kernels="reference", **options)
    rng = np.random.default_rng(3)
    for batch in (1, 3, 8):
        inputs = [rng.standard_normal((batch, *shapes[0][1:])).astype(np.float32),
                  *(rng.standard_normal(shape).astype(np.float32) for shape in shapes[1:])]
        ours = graphs[1].run(*inputs)
        np.testing.assert_array_equal(graphs[2].run(*inputs)[0], ours[0], err_msg=f"batch {batch}, 2 threads")
        alone = np.concatenate([graphs[1].run(inputs[0][i:i + 1], *inputs[1:])[0] for i in range(batch)])
        np.testing.assert_array_equal(alone, ours[0], err_msg=f"batch {batch}, samples alone")
        expected = reference.run(*inputs)[0]
        if precision == "int8" and name != "small CNN":
            np.testing.assert_array_equal(ours[0], expected, err_msg=f"batch {batch}, reference kernels")
        elif precision == "bf16":   # one product: float32 rounding of the sums; a chain: one bf16 step
            step = BF16_STEP if name in CHAINS else 1e-5
            np.testing.assert_allclose(ours[0], expected, rtol=0, atol=step * np.abs(expected).max(),
                                       err_msg=f"batch {batch}, reference kernels")


@pytest.mark.parametrize("precision, itemsize", [("bf16", 2), ("int8", 1)])
def test_weights_are_held_packed_in_the_precision_and_stay_replaceable(tmp_path, precision, itemsize) -> None:
    """A convolution's and a linear layer's products hold their weights as bfloat16 or int8
    (half or a quarter of float32's bytes), no float32 copy; ``weights()`` still gives the
    model's float32 weight and ``set_weights`` packs a new one."""
    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.Flatten(), nn.Linear(32 * 4 * 4, 16))
    x = torch.randn(2, 16, 4, 4)
    param = export(model.eval(), (x,), tmp_path)
    graph = kuiperinfer.load(param, **options_for(precision, param, tmp_path, (2, 16, 4, 4)))
    conv, linear = (next(op.layer for op in graph.operators if op.type == kind) for kind in ("nn.Conv2d", "nn.Linear"))
    kernel = conv.kernel.products[0].kernel
    groups = -(-16 * 9 * itemsize // 4)
    groups += -groups % kernel.depth_groups       # what the kernel's tiles read at a time
    assert conv.packed is None and conv.kernel.nbytes == 32 * 4 * groups + kernel.overreach
    assert not hasattr(linear, "_weight_t") and \
        linear.product.nbytes == 16 * 512 * itemsize + linear.product.kernel.overreach
    np.testing.assert_array_equal(conv.weights(), model[0].weight.detach().numpy())
    before = graph(x.numpy())
    conv.set_weights(conv.weights() * 0)
    after = graph(x.numpy())
    assert not np.array_equal(before, after) and conv.weights().max() == 0
