"""``python -m benchmarks.kernels``: the rates of single kernels, so that a regression shows.

Each case is a name, a setup function returning a zero-argument callable, and the work of
one call: multiply-adds (printed as GMAC/s) or values (printed as ns per value). It is timed
single-threaded (BLAS limited to one thread, kuiperinfer loaded with one thread) as the best
of a few rounds, each long enough for the clock. The cases go through public, stable entry
points only, so that they survive rewrites of the kernels: NumPy's matrix product, the rate
the other cases compare with, and whole layers, each a one-operator model written as pnnx
writes it and run through ``kuiperinfer.load`` and ``graph.run``, with the optimiser on as
users have it (a ReLU6 after a convolution is fused into it, 3x3 convolutions may take
Winograd). A convolution's multiply-adds are counted as computed directly, whatever
algorithm runs.

Adding a case takes a few lines::

    @kernel("softmax 3x197x197", values=3 * 197 * 197)
    def _softmax():
        return layer("F.softmax", "dim=-1", (1, 3, 197, 197))

:func:`layer` writes the model; a convolution (:func:`conv`) also takes its weights.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

Setup = Callable[[], Callable[[], Any]]


@dataclass(frozen=True)
class KernelCase:
    """One micro-benchmark: ``setup()`` returns the call to time; ``macs`` or ``values`` is its work."""

    name: str
    setup: Setup
    macs: int = 0
    values: int = 0


@dataclass(frozen=True)
class KernelResult:
    """A case's best time per call, and its rate."""

    case: KernelCase
    seconds: float

    @property
    def gmacs(self) -> float | None:
        """Billions of multiply-adds per second (None for a case counted in values)."""
        return self.case.macs / self.seconds / 1e9 if self.case.macs else None

    @property
    def ns_per_value(self) -> float | None:
        """Nanoseconds per value (None for a case counted in multiply-adds)."""
        return self.seconds / self.case.values * 1e9 if self.case.values and not self.case.macs else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.case.name, "seconds": self.seconds, "macs": self.case.macs,
                "values": self.case.values, "gmacs_per_s": self.gmacs, "ns_per_value": self.ns_per_value}


CASES: list[KernelCase] = []


def kernel(name: str, *, macs: int = 0, values: int = 0) -> Callable[[Setup], Setup]:
    """Register the decorated setup function as a case (give ``macs`` or ``values``)."""
    if bool(macs) == bool(values):
        raise ValueError(f"kernel case {name!r}: give its multiply-adds or its values, one of them")

    def register(setup: Setup) -> Setup:
        CASES.append(KernelCase(name, setup, macs, values))
        return setup
    return register


def best_seconds(call: Callable[[], Any], rounds: int = 5, round_seconds: float = 0.02,
                 clock: Callable[[], float] = time.thread_time) -> float:
    """Seconds per call of ``call``: the best of ``rounds`` rounds, each of as many calls as
    fill ``round_seconds`` (measured on a first call, which also warms up). The default clock
    is the calling thread's CPU time, where every case runs: on a shared machine, wall time
    also counts the time other processes hold the core."""
    start = clock()
    call()
    repeats = max(1, int(round_seconds / max(clock() - start, 1e-9)))
    best = float("inf")
    for _ in range(rounds):
        start = clock()
        for _ in range(repeats):
            call()
        best = min(best, (clock() - start) / repeats)
    return best


def measure(case: KernelCase, rounds: int = 5) -> KernelResult:
    """Time ``case`` on one thread."""
    from kuiperinfer.kernels.parallel import blas_threads

    with blas_threads(1):
        call = case.setup()
        return KernelResult(case, best_seconds(call, rounds))


def measure_all(cases: list[KernelCase] | None = None, rounds: int = 5) -> list[KernelResult]:
    return [measure(case, rounds) for case in (CASES if cases is None else cases)]


def rate_text(result: dict[str, Any]) -> str:
    """``12.34 GMAC/s`` or ``1.234 ns/value``."""
    if result["gmacs_per_s"] is not None:
        return f"{result['gmacs_per_s']:.2f} GMAC/s"
    return f"{result['ns_per_value']:.3f} ns/value"


def markdown(results: list[dict[str, Any]]) -> str:
    """A table of results (as :meth:`KernelResult.to_dict` gives them)."""
    lines = ["| kernel (one thread) | rate | µs per call |", "|---|---:|---:|"]
    lines += [f"| {r['name']} | {rate_text(r)} | {r['seconds'] * 1e6:.1f} |" for r in results]
    return "\n".join(lines) + "\n"


# -- one-operator models through kuiperinfer's public API ---------------------------


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ",".join(map(str, shape)) + ")f32"


def layer(op_type: str, params: str, shape: tuple[int, ...], out_shape: tuple[int, ...] | None = None,
          weights: dict[str, np.ndarray] | None = None, after: str = "") -> Callable[[], Any]:
    """``graph.run`` of a model holding one ``op_type`` operator (pnnx's ``params`` text, its
    ``weights`` as ``@name`` arrays), optionally followed by an ``after`` operator of the same
    output shape, on one random float32 input of ``shape``."""
    out_shape = out_shape or shape
    ops = [("op", op_type, params, ["x"], out_shape, weights or {})]
    if after:
        ops.append(("after", after, "", ["op"], out_shape, {}))
    return model(shape, ops)


Operator = tuple[str, str, str, list[str], tuple[int, ...], dict[str, np.ndarray]]
"""A pnnx operator of :func:`model`: its name (also its output's), type, parameters text, the
names of its inputs ("x" is the model's input), its output shape and its weights."""


def model(shape: tuple[int, ...], ops: list[Operator], alone: str = "", first: bool = False) -> Callable[[], Any]:
    """``graph.run`` of a model of the operators ``ops`` (the last one's output is the model's),
    loaded through ``kuiperinfer.load`` with one thread, on one random float32 input of ``shape``.

    With ``alone``, the call is instead the layer's ``forward`` of the operator of that name
    in the optimised graph (what the optimiser made of it) on a channels-last input, as
    convolutions hand on their outputs inside a network: no graph input or output copies
    between layouts, which would cost more than a fast kernel. With ``first`` too, the input is
    row-major, as a network's first layer gets it."""
    import kuiperinfer
    from kuiperinfer.kernels.layout import nchw

    shapes = {"x": shape}
    lines = [f"pnnx.Input in 0 1 x #x={_shape(shape)}"]
    for name, op_type, params, inputs, out_shape, weights in ops:
        shapes[name] = out_shape
        attributes = " ".join(f"@{key}={_shape(value.shape)}" for key, value in weights.items())
        operands = " ".join(f"#{operand}={_shape(shapes[operand])}" for operand in (*inputs, name))
        lines.append(f"{op_type} {name} {len(inputs)} 1 {' '.join(inputs)} {name} {params} {attributes} {operands}")
    last = ops[-1][0]
    lines.append(f"pnnx.Output out 1 0 {last} #{last}={_shape(shapes[last])}")
    directory = tempfile.TemporaryDirectory(prefix="kuiper-kernel-")
    path = Path(directory.name)
    (path / "m.pnnx.param").write_text(f"7767517\n{len(lines)} {len(lines) - 1}\n" + "\n".join(lines) + "\n")
    with zipfile.ZipFile(path / "m.pnnx.bin", "w", zipfile.ZIP_STORED) as archive:
        for name, *_, weights in ops:
            for key, value in weights.items():
                archive.writestr(f"{name}.{key}", np.ascontiguousarray(value, np.float32).tobytes())
    graph = kuiperinfer.load(path / "m.pnnx.param", threads=1)
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    if alone:
        layer = next(op.layer for op in graph.operators if op.name == alone)
        inputs = [x if first else nchw(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))]

        def run() -> Any:
            return layer.forward(inputs)
    else:
        def run() -> Any:
            return graph.run(x)
    run.files = directory   # the model's files live as long as the call
    return run


def conv_operator(name: str, source: str, cin: int, cout: int, size: int, kernel_size: int, stride: int = 1,
                  groups: int = 1, pad: int | None = None) -> Operator:
    """An nn.Conv2d with bias and "same" padding (or ``pad``) reading ``source``, (1, cin, size, size)."""
    rng = np.random.default_rng(0)
    pad = kernel_size // 2 if pad is None else pad
    out = (size + 2 * pad - kernel_size) // stride + 1
    params = (f"bias=True dilation=(1,1) groups={groups} in_channels={cin} kernel_size=({kernel_size},{kernel_size}) "
              f"out_channels={cout} padding=({pad},{pad}) padding_mode=zeros stride=({stride},{stride})")
    weights = {"bias": rng.standard_normal(cout), "weight": rng.standard_normal(
        (cout, cin // groups, kernel_size, kernel_size)) / np.sqrt(cin // groups * kernel_size ** 2)}
    return name, "nn.Conv2d", params, [source], (1, cout, out, out), weights


def conv(cin: int, cout: int, size: int, kernel_size: int, stride: int = 1, groups: int = 1,
         after: str = "", alone: bool = False, first: bool = False, pad: int | None = None) -> Callable[[], Any]:
    """An nn.Conv2d with bias, "same" padding (or ``pad``), on a (1, cin, size, size) input
    (``alone``: its layer alone, on a channels-last input, or with ``first`` a row-major one as
    a network's first layer gets, see :func:`model`)."""
    op = conv_operator("op", "x", cin, cout, size, kernel_size, stride, groups, pad)
    ops = [op] + ([("after", after, "", ["op"], op[4], {})] if after else [])
    return model((1, cin, size, size), ops, "op" if alone or first else "", first)


def pointwise_depthwise(cin: int, channels: int, size: int, kernel_size: int, stride: int) -> Callable[[], Any]:
    """A 1x1 convolution expanding ``cin`` to ``channels`` channels, ReLU6, and a depthwise one,
    ReLU6 (an EfficientNet-Lite block's expansion and filter: one fused operator)."""
    expand = conv_operator("expand", "x", cin, channels, size, 1)
    depthwise = conv_operator("depthwise", "act1", channels, channels, size, kernel_size, stride, channels)
    return model((1, cin, size, size), [expand, ("act1", "nn.ReLU6", "", ["expand"], expand[4], {}), depthwise,
                                        ("act2", "nn.ReLU6", "", ["depthwise"], depthwise[4], {})], "depthwise")


def squeeze_excitation(channels: int, hidden: int, size: int) -> Callable[[], Any]:
    """MobileNetV3's gate on (1, channels, size, size): global mean, 1x1 to ``hidden``, ReLU, 1x1
    back, hard sigmoid, times the input (one fused operator)."""
    pooled, full = (1, channels, 1, 1), (1, channels, size, size)
    reduce = conv_operator("reduce", "pool", channels, hidden, 1, 1)
    expand = conv_operator("expand", "relu", hidden, channels, 1, 1)
    return model(full, [("pool", "nn.AdaptiveAvgPool2d", "output_size=(1,1)", ["x"], pooled, {}), reduce,
                        ("relu", "nn.ReLU", "", ["reduce"], reduce[4], {}), expand,
                        ("gate", "nn.Hardsigmoid", "", ["expand"], pooled, {}),
                        ("mul", "pnnx.Expression", "expr=mul(@0,@1)", ["gate", "x"], full, {})], "pool")


def matmul(m: int, k: int, n: int) -> Callable[[], Any]:
    """``np.matmul`` of (m, k) by (k, n) float32 into a preallocated output."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    out = np.empty((m, n), np.float32)
    return lambda: np.matmul(a, b, out=out)


# -- the cases ----------------------------------------------------------------------

@kernel("np.matmul 3136x96 @ 96x576 (a 1x1 convolution's GEMM, 56x56)", macs=3136 * 96 * 576)
def _gemm_pointwise():
    return matmul(3136, 96, 576)


@kernel("np.matmul 197x192 @ 192x576 (ViT-Tiny's qkv)", macs=197 * 192 * 576)
def _gemm_qkv():
    return matmul(197, 192, 576)


@kernel("conv 1x1 96->576 56x56", macs=3136 * 96 * 576)
def _pointwise():
    return conv(96, 576, 56, 1)


@kernel("conv 1x1 96->576 56x56 + bias + ReLU6", macs=3136 * 96 * 576)
def _pointwise_relu6():
    return conv(96, 576, 56, 1, after="nn.ReLU6")


@kernel("conv 3x3 64->64 56x56", macs=3136 * 64 * 64 * 9)
def _dense3x3():
    return conv(64, 64, 56, 3)


@kernel("depthwise 3x3 stride 1, 96 channels 56x56", macs=96 * 56 * 56 * 9)
def _depthwise3x3():
    return conv(96, 96, 56, 3, groups=96)


@kernel("depthwise 3x3 stride 2, 96 channels 56x56", macs=96 * 28 * 28 * 9)
def _depthwise3x3_s2():
    return conv(96, 96, 56, 3, stride=2, groups=96)


@kernel("depthwise 5x5 stride 1, 96 channels 28x28", macs=96 * 28 * 28 * 25)
def _depthwise5x5():
    return conv(96, 96, 28, 5, groups=96)


@kernel("stem 3x3 stride 2, 3->16 224x224 + hardswish, alone (MobileNetV3-Small)", macs=112 * 112 * 16 * 27)
def _stem_mobilenet():
    return conv(3, 16, 224, 3, stride=2, after="nn.Hardswish", first=True)


@kernel("stem 3x3 stride 2, 3->32 224x224 + ReLU6, alone (EfficientNet-Lite0)", macs=112 * 112 * 32 * 27)
def _stem_efficientnet():
    return conv(3, 32, 224, 3, stride=2, after="nn.ReLU6", first=True)


@kernel("stem 7x7 stride 2, 3->64 224x224 + ReLU, alone (ResNet-18)", macs=112 * 112 * 64 * 147)
def _stem_resnet():
    return conv(3, 64, 224, 7, stride=2, after="nn.ReLU", first=True)


@kernel("stem 6x6 stride 2, 3->32 640x640 + SiLU, alone (YOLOv5s)", macs=320 * 320 * 32 * 108)
def _stem_yolo():
    return conv(3, 32, 640, 6, stride=2, after="nn.SiLU", first=True, pad=2)


@kernel("depthwise 3x3 stride 2, 16 channels 112x112 + ReLU, alone (MobileNetV3-Small)", macs=16 * 56 * 56 * 9)
def _depthwise3x3_s2_mobilenet():
    return conv(16, 16, 112, 3, stride=2, groups=16, after="nn.ReLU", alone=True)


@kernel("depthwise 3x3 stride 1, 32 channels 112x112 + ReLU6, alone (EfficientNet-Lite0)", macs=32 * 112 * 112 * 9)
def _depthwise3x3_112_efficientnet():
    return conv(32, 32, 112, 3, groups=32, after="nn.ReLU6", alone=True)


@kernel("depthwise 3x3 stride 1, 144 channels 56x56 + ReLU6, alone (EfficientNet-Lite0)", macs=144 * 56 * 56 * 9)
def _depthwise3x3_efficientnet():
    return conv(144, 144, 56, 3, groups=144, after="nn.ReLU6", alone=True)


@kernel("depthwise 3x3 stride 2, 96 channels 112x112 + ReLU6, alone (EfficientNet-Lite0)", macs=96 * 56 * 56 * 9)
def _depthwise3x3_s2_efficientnet():
    return conv(96, 96, 112, 3, stride=2, groups=96, after="nn.ReLU6", alone=True)


@kernel("depthwise 5x5 stride 1, 672 channels 14x14 + ReLU6, alone (EfficientNet-Lite0)", macs=672 * 14 * 14 * 25)
def _depthwise5x5_efficientnet():
    return conv(672, 672, 14, 5, groups=672, after="nn.ReLU6", alone=True)


@kernel("depthwise 5x5 stride 2, 144 channels 56x56 + ReLU6, alone (EfficientNet-Lite0)", macs=144 * 28 * 28 * 25)
def _depthwise5x5_s2_efficientnet():
    return conv(144, 144, 56, 5, stride=2, groups=144, after="nn.ReLU6", alone=True)


@kernel("depthwise 5x5 stride 1, 1152 channels 7x7 + ReLU6, alone (EfficientNet-Lite0)", macs=1152 * 7 * 7 * 25)
def _depthwise5x5_7_efficientnet():
    return conv(1152, 1152, 7, 5, groups=1152, after="nn.ReLU6", alone=True)


@kernel("depthwise 3x3 stride 1, 1152 channels 7x7 + ReLU6, alone (EfficientNet-Lite0)", macs=1152 * 7 * 7 * 9)
def _depthwise3x3_7_efficientnet():
    return conv(1152, 1152, 7, 3, groups=1152, after="nn.ReLU6", alone=True)


@kernel("1x1 24->144 + depthwise 3x3, 56x56, ReLU6 both (fused, alone)", macs=3136 * 144 * (24 + 9))
def _pointwise_depthwise():
    return pointwise_depthwise(24, 144, 56, 3, 1)


@kernel("1x1 112->672 + depthwise 5x5 stride 2, 14x14, ReLU6 both (fused, alone)", macs=196 * 672 * 112 + 49 * 672 * 25)
def _pointwise_depthwise_s2():
    return pointwise_depthwise(112, 672, 14, 5, 2)


@kernel("squeeze-excitation 576 channels 7x7, alone (per input value)", values=576 * 7 * 7)
def _squeeze_excitation():
    return squeeze_excitation(576, 144, 7)


@kernel("squeeze-excitation 16 channels 56x56, alone (per input value)", values=16 * 56 * 56)
def _squeeze_excitation_large():
    return squeeze_excitation(16, 8, 56)


@kernel("global average pool 1280 channels 7x7, channels-last (per input value)", values=1280 * 7 * 7)
def _global_average_pool_channels_last():
    return model((1, 1280, 7, 7), [("pool", "nn.AdaptiveAvgPool2d", "output_size=(1,1)", ["x"], (1, 1280, 1, 1), {})],
                 "pool")


@kernel("max pool 3x3 stride 2, 64 channels 112x112 (per output value)", values=64 * 56 * 56)
def _max_pool():
    return layer("nn.MaxPool2d", "ceil_mode=False dilation=(1,1) kernel_size=(3,3) padding=(1,1) "
                 "return_indices=False stride=(2,2)", (1, 64, 112, 112), (1, 64, 56, 56))


@kernel("global average pool 576 channels 7x7 (per input value)", values=576 * 7 * 7)
def _global_average_pool():
    return layer("nn.AdaptiveAvgPool2d", "output_size=(1,1)", (1, 576, 7, 7), (1, 576, 1, 1))


@kernel("softmax over 3x197x197", values=3 * 197 * 197)
def _softmax():
    return layer("F.softmax", "dim=-1", (1, 3, 197, 197))


@kernel("layer norm 197x192", values=197 * 192)
def _layer_norm():
    rng = np.random.default_rng(0)
    return layer("nn.LayerNorm", "elementwise_affine=True eps=1.000000e-6 normalized_shape=(192)", (1, 197, 192),
                 weights={"bias": rng.standard_normal(192), "weight": rng.random(192) + 0.5})


@kernel("GELU 197x768", values=197 * 768)
def _gelu():
    return layer("nn.GELU", "", (1, 197, 768))


def attention(batch: int, heads: int, length: int, depth: int, masked: bool) -> Callable[[], Any]:
    """Self-attention over a packed (batch, length, 3, heads, depth) projection, as
    ``kuiper.Attention`` runs it (``kuiperinfer.layers.attention.fast_attention``)."""
    from kuiperinfer.layers.attention import fast_attention

    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((batch, length, 3, heads, depth), dtype=np.float32)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    mask = np.where(rng.random((batch, 1, 1, length)) > 0.2, 0, -10000).astype(np.float32) if masked else None
    return lambda: fast_attention(q, k, v, mask, depth ** -0.5, safe=False)


@kernel("attention 3 heads 197x64 (ViT-Tiny)", macs=2 * 3 * 197 * 197 * 64)
def _attention_vit():
    return attention(1, 3, 197, 64, False)


@kernel("attention 12 heads 32x32 + key mask (MiniLM)", macs=2 * 12 * 32 * 32 * 32)
def _attention_minilm():
    return attention(1, 12, 32, 32, True)


@kernel("linear 197x192 -> 768 + GELU (ViT-Tiny's MLP)", macs=197 * 192 * 768)
def _linear_gelu():
    rng = np.random.default_rng(0)
    return layer("nn.Linear", "bias=True in_features=192 out_features=768", (1, 197, 192), (1, 197, 768),
                 {"bias": rng.standard_normal(768), "weight": rng.standard_normal((768, 192)) / 14}, after="nn.GELU")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--match", default="", help="only the cases whose name contains this text")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per case, the best counts (default 5)")
    args = parser.parse_args(argv)
    cases = [case for case in CASES if args.match.lower() in case.name.lower()]
    if not cases:
        parser.error(f"no case matches {args.match!r}")
    print(markdown([result.to_dict() for result in measure_all(cases, args.rounds)]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
