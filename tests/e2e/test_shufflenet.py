"""End to end: a small ShuffleNet-v2 (its units: channel split, a depthwise branch, concat and
nn.ChannelShuffle; stride-2 units with two branches), exported by pnnx and run against PyTorch,
optimised and as pnnx wrote it, at several batch sizes."""

import pytest
import torch
import torch.nn as nn
from oracle import assert_matches, export, torch_outputs

import kuiperinfer
from benchmarks.networks import randomize_batchnorm
from kuiperinfer.pnnx import read_param


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1, relu: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    return nn.Sequential(*layers, *([nn.ReLU()] if relu else []))


class Unit(nn.Module):
    """A ShuffleNet-v2 unit: stride 1 splits the channels and transforms one half; stride 2
    transforms the whole input in two branches; then the halves are joined and shuffled."""

    def __init__(self, c_in: int, c_out: int, stride: int, functional_shuffle: bool = False):
        super().__init__()
        half = c_out // 2
        self.stride, self.functional_shuffle = stride, functional_shuffle
        branch_in = c_in if stride == 2 else half
        self.branch = nn.Sequential(conv_bn(branch_in, half, 1), conv_bn(half, half, 3, stride, half, relu=False),
                                    conv_bn(half, half, 1))
        self.shortcut = (nn.Sequential(conv_bn(c_in, c_in, 3, stride, c_in, relu=False), conv_bn(c_in, half, 1))
                         if stride == 2 else nn.Identity())
        self.shuffle = nn.ChannelShuffle(2)

    def forward(self, x):
        if self.stride == 1:
            kept, changed = x.chunk(2, dim=1)
            y = torch.cat((kept, self.branch(changed)), dim=1)
        else:
            y = torch.cat((self.shortcut(x), self.branch(x)), dim=1)
        return nn.functional.channel_shuffle(y, 2) if self.functional_shuffle else self.shuffle(y)


class ShuffleNetV2(nn.Module):
    def __init__(self, widths=(24, 48, 96), classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, widths[0], 3, 2), nn.MaxPool2d(3, 2, 1))
        stages, c_in = [], widths[0]
        for i, width in enumerate(widths[1:]):
            stages += [Unit(c_in, width, 2), Unit(width, width, 1), Unit(width, width, 1, functional_shuffle=i == 1)]
            c_in = width
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(conv_bn(c_in, 128, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))

    def forward(self, x):
        return self.head(self.stages(self.stem(x)))


@pytest.fixture(scope="module")
def shufflenet(tmp_path_factory):
    torch.manual_seed(0)
    model = ShuffleNetV2().eval()
    randomize_batchnorm(model)
    param = export(model, (torch.randn(1, 3, 64, 64),), tmp_path_factory.mktemp("shufflenet"))
    return model, param


def test_pnnx_writes_the_channel_shuffles(shufflenet):
    _, param = shufflenet
    types = [op.type for op in read_param(param).ops]
    assert types.count("nn.ChannelShuffle") == 5 and types.count("aten::channel_shuffle") == 1


@pytest.mark.parametrize("optimize", [True, False])
def test_shufflenet_v2_matches_pytorch(shufflenet, optimize):
    model, param = shufflenet
    graph = kuiperinfer.load(param, optimize=optimize)
    for batch, seed in ((1, 1), (3, 2)):
        x = torch.randn(batch, 3, 64, 64, generator=torch.Generator().manual_seed(seed))
        assert_matches(graph.run(x.numpy()), torch_outputs(model, (x,)))
