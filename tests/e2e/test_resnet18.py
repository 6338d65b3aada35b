"""End to end: a hand-written ResNet-18, exported by pnnx in the test run, against PyTorch."""

import pytest
import torch
from oracle import assert_matches, export, torch_outputs

import kuiperinfer
from benchmarks.networks import resnet18


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = resnet18()
    param = export(model, (torch.rand(1, 3, 224, 224),), tmp_path_factory.mktemp("resnet18"))
    return model, param


@pytest.mark.parametrize("batch", [1, 4])
def test_resnet18_matches_pytorch(exported, batch):
    model, param = exported
    graph = kuiperinfer.load(param)
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch))
    ours = graph(x.numpy())
    worst = assert_matches([ours], torch_outputs(model, (x,)), atol=1e-4, rtol=0)
    assert ours.shape == (batch, 1000)
    assert worst < 1e-4


def test_resnet18_batchnorm_folded_by_pnnx(exported):
    _, param = exported
    graph = kuiperinfer.load(param)
    types = [op.type for op in graph.operators]
    assert types.count("nn.Conv2d") == 20
    assert "nn.BatchNorm2d" not in types
