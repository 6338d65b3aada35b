"""The graph optimiser: each pass on small graphs, outputs equal to the unoptimised graph
(and to PyTorch), with fewer operators."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import Lambda, assert_matches, export, torch_outputs

from benchmarks.networks import mobilenet_v3_small, randomize_batchnorm, resnet18
from kuiperinfer.errors import GraphError
from kuiperinfer.kernels import depthwise_stripes, parallel
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.layout import is_channels_last
from kuiperinfer.layers.convolution import add_residual
from kuiperinfer.optimizer import optimize
from kuiperinfer.pnnx.ir import Attribute, Graph, Parameter
from kuiperinfer.runtime.graph import RuntimeGraph


def built(source: Path | Graph, optimized: bool) -> tuple[RuntimeGraph, dict[str, int]]:
    graph = RuntimeGraph(source) if isinstance(source, Path) else RuntimeGraph()
    graph.init(None if isinstance(source, Path) else source)
    rewrites = optimize(graph) if optimized else {}
    graph.build()
    return graph, rewrites


def compare(model: nn.Module, shape, directory: Path, batch: int = 3) -> tuple[RuntimeGraph, dict[str, int]]:
    """Export ``model``; the optimised graph matches the plain one (1e-5 relative) and PyTorch."""
    param = export(model, (torch.rand(*shape),), directory)
    plain, _ = built(param, False)
    fast, rewrites = built(param, True)
    for n in (shape[0], batch):
        x = torch.randn(n, *shape[1:], generator=torch.Generator().manual_seed(n))
        expected = plain.run(x.numpy())
        ours = fast.run(x.numpy())
        for a, b in zip(ours, expected):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())
        assert_matches(ours, torch_outputs(model, (x,)))
    return fast, rewrites


def types(graph: RuntimeGraph) -> list[str]:
    return [op.type for op in graph.operators]


class ConvAct(nn.Module):
    def __init__(self, activation: nn.Module, depthwise: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, groups=8 if depthwise else 1)
        self.activation = activation

    def forward(self, x):
        return self.activation(self.conv(x))


@pytest.mark.parametrize("activation", [nn.ReLU(), nn.ReLU6(), nn.Hardtanh(-1, 0.5), nn.LeakyReLU(0.1),
                                        nn.Sigmoid(), nn.SiLU(), nn.Hardswish(), nn.Hardsigmoid()],
                         ids=lambda m: type(m).__name__)
def test_activation_fused_into_convolution(activation, tmp_path):
    graph, rewrites = compare(ConvAct(activation), (1, 8, 20, 20), tmp_path)
    assert rewrites["fuse_activation"] == 1
    assert types(graph) == ["pnnx.Input", "nn.Conv2d", "pnnx.Output"]


def test_winograd_selected_for_3x3_stride_1_convolutions(tmp_path):
    class Convs(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, stride=2),
                                        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 8, 1)])

        def forward(self, x):
            return [conv(x) for conv in self.convs]

    graph, rewrites = compare(Convs(), (1, 8, 24, 24), tmp_path)
    assert rewrites["select_winograd"] == 1
    (chosen,) = [op.layer for op in graph.operators if op.type == "nn.Conv2d" and op.layer.winograd]
    assert chosen.geometry.winograd_applies()
    plain, _ = built(tmp_path / "model.pnnx.param", False)
    assert not any(op.layer.winograd for op in plain.operators if op.type == "nn.Conv2d")


def test_activation_fused_into_depthwise_and_1d_convolutions(tmp_path):
    compare(ConvAct(nn.ReLU6(), depthwise=True), (1, 8, 9, 9), tmp_path)
    conv1d = nn.Sequential(nn.Conv1d(4, 6, 3), nn.ReLU())
    (tmp_path / "1d").mkdir()
    graph, rewrites = compare(conv1d, (1, 4, 17), tmp_path / "1d")
    assert rewrites["fuse_activation"] == 1 and "nn.ReLU" not in types(graph)


def test_activation_fused_into_linear(tmp_path):
    graph, rewrites = compare(nn.Sequential(nn.Linear(6, 5), nn.Hardswish()), (2, 3, 6), tmp_path)
    assert rewrites["fuse_activation"] == 1
    assert types(graph) == ["pnnx.Input", "nn.Linear", "pnnx.Output"]


def test_activation_fused_through_reshapes_and_permutations(tmp_path):
    class DetectHead(nn.Module):            # YOLOv5's: conv, (N, anchors, outputs, H, W), sigmoid
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 2 * 6, 1)

        def forward(self, x):
            y = self.conv(x).reshape(-1, 2, 6, 5, 7).permute(0, 1, 3, 4, 2)
            return torch.sigmoid(y).reshape(-1, 2 * 5 * 7, 6)

    graph, rewrites = compare(DetectHead(), (1, 4, 5, 7), tmp_path)
    assert rewrites["fuse_activation"] == 1
    assert types(graph) == ["pnnx.Input", "nn.Conv2d", "Tensor.reshape", "Tensor.permute", "Tensor.reshape",
                            "pnnx.Output"]


def test_activation_not_fused_through_a_reshape_whose_output_is_read_elsewhere(tmp_path):
    class TwoReaders(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            y = self.conv(x).reshape(-1, 4 * 6 * 6)
            return torch.sigmoid(y), y * 2

    graph, rewrites = compare(TwoReaders(), (1, 3, 6, 6), tmp_path)
    assert rewrites["fuse_activation"] == 0 and "F.sigmoid" in types(graph)


class Residual(nn.Module):
    """``conv(x)`` plus a residual: ``x`` itself, ``x`` through another convolution (a
    downsampling branch) or ``x`` averaged over its pixels (a sum that broadcasts)."""

    def __init__(self, residual: str = "identity", activation: str = "relu"):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.branch = nn.Conv2d(4, 4, 1)
        self.residual, self.activation = residual, activation

    def forward(self, x):
        y = self.conv(x)
        if self.activation == "silu before":           # YOLOv5's bottleneck: x + silu(conv(x))
            y = F.silu(y)
        if self.residual == "branch":
            r = self.branch(x)
        elif self.residual == "mean":
            r = x.mean((2, 3), keepdim=True)
        else:
            r = x
        return F.relu(y + r) if self.activation == "relu" else y + r


def test_residual_addition_and_its_activation_fused_into_convolution(tmp_path):
    graph, rewrites = compare(Residual(), (1, 4, 10, 10), tmp_path)
    assert rewrites["fuse_activation"] == 1 and rewrites["fuse_residual_add"] == 1
    assert types(graph) == ["pnnx.Input", "nn.Conv2d", "pnnx.Output"]
    (conv,) = [op.layer for op in graph.operators if op.type == "nn.Conv2d"]
    assert conv.plan.residual and conv.plan.residual_activation.name == "relu" and conv.plan.activation is None


@pytest.mark.parametrize("residual, activation", [("branch", "relu"), ("identity", "silu before"),
                                                  ("branch", "silu before")])
def test_residual_addition_fused_after_a_fused_activation_or_from_a_second_convolution(
        residual, activation, tmp_path):
    graph, rewrites = compare(Residual(residual, activation), (1, 4, 10, 10), tmp_path)
    assert rewrites["fuse_residual_add"] == 1 and "pnnx.Expression" not in types(graph)
    (fused,) = [op.layer for op in graph.operators if op.type == "nn.Conv2d" and op.layer.plan.residual]
    assert (fused.plan.activation is None) == (activation == "relu" or fused.geometry.kernel == (1, 1))


def test_residual_addition_that_broadcasts_stays(tmp_path):
    graph, rewrites = compare(Residual("mean"), (1, 4, 10, 10), tmp_path)
    assert rewrites["fuse_residual_add"] == 0 and "pnnx.Expression" in types(graph)


def test_residual_added_in_place_unless_the_sum_broadcasts_to_a_larger_shape():
    out, residual = np.ones((1, 4, 1, 5), np.float32), np.arange(60, dtype=np.float32).reshape(1, 4, 3, 5)
    summed = add_residual(out, residual, None)
    np.testing.assert_array_equal(summed, 1 + residual)
    assert summed.shape == (1, 4, 3, 5) and out.max() == 1
    smaller = -np.arange(5, dtype=np.float32)
    assert add_residual(out, smaller, InplaceActivation("relu")) is out
    np.testing.assert_array_equal(out, np.maximum(1 - np.arange(5), 0) * np.ones((1, 4, 1, 5)))


def test_nothing_fused_where_the_value_is_also_read_elsewhere(tmp_path):
    class TwoReaders(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            y = self.conv(x)
            return torch.relu(y), y * 2

    graph, rewrites = compare(TwoReaders(), (1, 3, 6, 6), tmp_path)
    assert rewrites["fuse_activation"] == 0
    assert {"nn.ReLU", "F.relu"} & set(types(graph))


def test_activation_after_a_non_arithmetic_expression_stays(tmp_path):
    graph, rewrites = compare(Lambda(lambda x: F.relu(x.reshape(x.size(0), -1))), (1, 3, 4), tmp_path)
    assert rewrites["fuse_activation"] == 0


def conv_bn_graph(conv: nn.Conv2d, bn: nn.BatchNorm2d, shape: tuple[int, ...]) -> Graph:
    """Input -> nn.Conv2d -> nn.BatchNorm2d -> Output, built by hand (pnnx folds this pair
    itself, but leaves BatchNorms it cannot fold)."""
    graph = Graph()
    operands = []
    for name, dims in (("0", shape), ("1", (shape[0], conv.out_channels, *shape[2:])), ("2", None)):
        operand = graph.new_operand(name)
        operand.type, operand.shape = 1, list(dims or operands[-1].shape)
        operands.append(operand)
    specs = [("pnnx.Input", "in", [], [operands[0]], {}, {}),
             ("nn.Conv2d", "conv", [operands[0]], [operands[1]],
              dict(in_channels=conv.in_channels, out_channels=conv.out_channels, kernel_size=list(conv.kernel_size),
                   stride=[1, 1], padding=list(conv.padding), dilation=[1, 1], groups=conv.groups,
                   bias=conv.bias is not None, padding_mode="zeros"),
              dict(weight=conv.weight, **({"bias": conv.bias} if conv.bias is not None else {}))),
             ("nn.BatchNorm2d", "bn", [operands[1]], [operands[2]], dict(num_features=bn.num_features, eps=bn.eps),
              dict(running_mean=bn.running_mean, running_var=bn.running_var, weight=bn.weight, bias=bn.bias)),
             ("pnnx.Output", "out", [operands[2]], [], {}, {})]
    for kind, name, inputs, outputs, params, attrs in specs:
        op = graph.new_operator(kind, name)
        op.inputs, op.outputs, op.inputnames = inputs, outputs, [""] * len(inputs)
        for operand in inputs:
            operand.consumers.append(op)
        for operand in outputs:
            operand.producer = op
        op.params = {k: Parameter(v) for k, v in params.items()}
        op.attrs = {k: Attribute.from_numpy(v.detach().numpy()) for k, v in attrs.items()}
    return graph


@pytest.mark.parametrize("bias, groups", [(True, 1), (False, 1), (False, 4)])
def test_batchnorm_folded_into_convolution(bias, groups):
    conv, bn = nn.Conv2d(4, 8, 3, padding=1, bias=bias, groups=groups), nn.BatchNorm2d(8)
    model = randomize_batchnorm(nn.Sequential(conv, bn))
    shape = (2, 4, 7, 9)
    plain, _ = built(conv_bn_graph(conv, bn, shape), False)
    fast, rewrites = built(conv_bn_graph(conv, bn, shape), True)
    assert rewrites["fold_batch_norm"] == 1
    assert types(fast) == ["pnnx.Input", "nn.Conv2d", "pnnx.Output"]
    x = torch.randn(*shape)
    expected = torch_outputs(model, (x,))
    assert_matches(plain.run(x.numpy()), expected, atol=1e-5)
    assert_matches(fast.run(x.numpy()), expected, atol=1e-5)


@pytest.mark.parametrize("network", [resnet18, mobilenet_v3_small])
def test_networks_optimised_match_unoptimised(network, tmp_path):
    graph, rewrites = compare(network(), (1, 3, 64, 64), tmp_path, batch=2)
    assert rewrites["fuse_activation"] > 5


def test_optimize_runs_only_between_init_and_build(tmp_path):
    graph = RuntimeGraph(export(nn.ReLU(), (torch.rand(1, 3),), tmp_path))
    with pytest.raises(GraphError, match="between init"):
        optimize(graph)
    graph.init()
    graph.build()
    with pytest.raises(GraphError, match="between init"):
        optimize(graph)


@pytest.mark.parametrize("pad", [nn.ZeroPad2d((0, 1, 0, 1)), nn.ZeroPad2d((2, 0, 1, 3)),
                                 Lambda(lambda x: F.pad(x, (1, 2))), Lambda(lambda x: F.pad(x, (1, 1, 2, 0)))],
                         ids=["zeropad", "zeropad_uneven", "fpad_width", "fpad_both"])
@pytest.mark.parametrize("depthwise", [False, True])
def test_zero_padding_folded_into_convolution(pad, depthwise, tmp_path):
    model = nn.Sequential(pad, nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8 if depthwise else 1), nn.ReLU())
    graph, rewrites = compare(model, (1, 8, 13, 10), tmp_path)
    assert rewrites["fold_zero_padding"] == 1
    assert types(graph) == ["pnnx.Input", "nn.Conv2d", "pnnx.Output"]


def test_padding_that_is_not_zero_stays(tmp_path):
    model = nn.Sequential(Lambda(lambda x: F.pad(x, (1, 1, 1, 1), value=0.5)), nn.Conv2d(3, 4, 3))
    graph, rewrites = compare(model, (1, 3, 8, 8), tmp_path)
    assert rewrites["fold_zero_padding"] == 0 and len(graph.operators) == 4


class InvertedResidual(nn.Module):
    """Expand (1x1 conv, BN, activation), depthwise filter (BN, activation), project, add."""

    def __init__(self, channels: int, expanded: int, kernel: int, stride: int, activation: type = nn.ReLU6):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(channels, expanded, 1, bias=False), nn.BatchNorm2d(expanded),
                                    activation())
        self.depthwise = nn.Sequential(nn.Conv2d(expanded, expanded, kernel, stride, kernel // 2, groups=expanded,
                                                 bias=False), nn.BatchNorm2d(expanded), activation())
        self.project = nn.Conv2d(expanded, channels, 1)
        self.residual = stride == 1

    def forward(self, x):
        y = self.project(self.depthwise(self.expand(x)))
        return y + x if self.residual else y


@pytest.mark.parametrize("kernel, stride, activation", [(3, 1, nn.ReLU6), (3, 2, nn.Hardswish), (5, 2, nn.ReLU),
                                                        (5, 1, nn.SiLU)])
def test_pointwise_then_depthwise_fused(kernel, stride, activation, tmp_path):
    model = randomize_batchnorm(InvertedResidual(6, 24, kernel, stride, activation)).eval()
    graph, rewrites = compare(model, (1, 6, 23, 19), tmp_path)
    assert rewrites["fuse_pointwise_depthwise"] == 1
    (fused,) = [op.layer for op in graph.operators if op.type == "kuiper.PointwiseDepthwise"]
    pointwise = fused.pointwise.product or fused.pointwise     # on the float32 tiles, or BLAS and its epilogue
    assert pointwise.epilogue.activation is not None and fused.depthwise.plan.activation is not None
    assert types(graph).count("nn.Conv2d") == 1    # the projection is left alone


def test_pointwise_then_depthwise_in_stripes_and_shared_among_threads(tmp_path, monkeypatch):
    model = randomize_batchnorm(InvertedResidual(8, 32, 3, 2, nn.Hardswish)).eval()
    monkeypatch.setattr(depthwise_stripes, "STRIPE_BYTES", 40 * 32 * 4 * 6)   # six padded rows
    param = export(model, (torch.rand(1, 8, 40, 37),), tmp_path)
    graph, rewrites = built(param, True)
    assert rewrites["fuse_pointwise_depthwise"] == 1
    x = torch.randn(3, 8, 40, 37)
    expected = torch_outputs(model, (x,))
    assert_matches(graph.run(x.numpy()), expected)
    graph.pool = parallel.ThreadPool(2, timing=parallel.Timing(min_work=1))   # single images split their rows
    assert_matches(graph.run(x[:1].numpy()), torch_outputs(model, (x[:1],)))
    assert_matches(graph.run(x.numpy()), expected)


def test_pointwise_not_fused_where_its_output_is_read_elsewhere_or_the_filter_is_not_depthwise(tmp_path):
    class Unfusable(nn.Module):
        def __init__(self):
            super().__init__()
            self.expand = nn.Conv2d(4, 8, 1)
            self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.expand2 = nn.Conv2d(4, 8, 1)
            self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4)
            self.expand3 = nn.Conv2d(4, 8, 1, stride=2)
            self.dilated = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)

        def forward(self, x):
            y = self.expand(x)
            return (self.depthwise(y) + y, self.grouped(self.expand2(x)),
                    self.depthwise(self.expand3(x)), self.dilated(self.expand(x)))

    graph, rewrites = compare(Unfusable(), (1, 4, 12, 12), tmp_path)
    assert rewrites["fuse_pointwise_depthwise"] == 0
    assert "kuiper.PointwiseDepthwise" not in types(graph)


class SqueezeExcitation(nn.Module):
    """torchvision's MobileNetV3 gate after a convolution: x * hardsigmoid(fc2(relu(fc1(pool(x)))))."""

    def __init__(self, channels: int = 12, squeezed: int = 4, gate_first: bool = True):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)
        self.gate_first = gate_first

    def forward(self, x):
        x = self.conv(x)
        scale = F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
        return scale * x if self.gate_first else x * scale


@pytest.mark.parametrize("gate_first", [True, False])
def test_squeeze_excitation_fused(gate_first, tmp_path):
    graph, rewrites = compare(SqueezeExcitation(gate_first=gate_first), (1, 3, 9, 11), tmp_path)
    assert rewrites["fuse_squeeze_excitation"] == 1
    assert types(graph) == ["pnnx.Input", "nn.Conv2d", "kuiper.SqueezeExcitation", "pnnx.Output"]


def test_squeeze_excitation_not_fused_where_the_gate_is_read_elsewhere_or_gates_another_value(tmp_path):
    class Unfusable(SqueezeExcitation):
        def forward(self, x):
            x = self.conv(x)
            scale = torch.sigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
            return scale * x, scale, F.adaptive_avg_pool2d(x, 1) * x.max()

    graph, rewrites = compare(Unfusable(), (1, 3, 9, 11), tmp_path)
    assert rewrites["fuse_squeeze_excitation"] == 0


class LayoutRecorder(RuntimeGraph):
    """Records whether each operator's first output is in channels-last memory."""

    def run_node(self, op, inputs):
        outputs = super().run_node(op, inputs)
        self.channels_last[op.name] = is_channels_last(outputs[0])
        return outputs


def test_convolutions_hand_on_channels_last_and_outputs_are_row_major(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 4, 1), nn.Sigmoid())
    param = export(model, (torch.rand(1, 3, 10, 10),), tmp_path)
    x = np.random.default_rng(0).standard_normal((2, 3, 10, 10), dtype=np.float32)
    for optimized in (True, False):
        graph = LayoutRecorder(param)
        graph.init()
        rewrites = optimize(graph) if optimized else {}
        graph.build()
        graph.channels_last = {}
        (out,) = graph.run(x)
        assert out.flags.c_contiguous
        assert_matches([out], torch_outputs(model, (torch.from_numpy(x),)))
        recorded = [graph.channels_last[op.name] for op in graph.operators if op.type != "pnnx.Input"
                    and op.type != "pnnx.Output"]
        # conv + relu, max pool, conv + sigmoid (activations fused) all channels-last; or five
        # row-major operators without the optimiser
        assert recorded == [optimized] * len(recorded) and len(recorded) == (3 if optimized else 5)
        assert rewrites.get("select_channels_last", 0) == (2 if optimized else 0)
