"""Every test network, at batch 1, 3 and 8, on 1, 2 and 4 threads, gives the one-thread
results (and PyTorch's); joined by the server's batcher, requests get what they get alone.

The networks are exported once each, static, at the batch given: a ViT with timm's class
token ``cls_token.expand(x.shape[0], -1, -1)`` exported at batch 8 (pnnx folds the token into
a constant of 8 rows) and at batch 1, models whose outputs mix samples, a head with int64 and
several outputs, and a model whose constant fixes the batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from batches import assert_joined_requests_match, assert_same_at_every_batch, random_inputs
from e2e.test_shufflenet import ShuffleNetV2
from oracle import export, torch_outputs

import kuiperinfer
from benchmarks.networks import (
    SentenceEncoder,
    VisionTransformer,
    mobilenet_v3_small,
    randomize_batchnorm,
    resnet18,
    small_vit,
    unet,
    yolov5s,
)
from kuiperinfer.errors import InputError
from kuiperinfer.models import efficientnet_lite0_path


class MixesSamples(nn.Module):
    """Outputs computed across the batch: a softmax over dimension 0, a batch mean taken off."""

    def forward(self, x):
        return torch.softmax(x, 0), x - x.mean(0, keepdim=True)


class Heads(nn.Module):
    """A classifier with three outputs: logits, the int64 arg-max, the probabilities."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        logits = self.fc(self.features(x))
        return logits, logits.argmax(1), torch.softmax(logits, 1)


class RowPerSample(nn.Module):
    """Adds a different learned row to each sample: it runs only at the batch it was made for."""

    def __init__(self, batch: int):
        super().__init__()
        self.rows = nn.Parameter(torch.randn(batch, 6))

    def forward(self, x):
        return torch.relu(x * 2 + self.rows)


def tiny_vit() -> VisionTransformer:
    return VisionTransformer(image=32, patch=8, dim=32, depth=2, heads=2, hidden=64, classes=10)


def small_encoder() -> SentenceEncoder:
    return SentenceEncoder(vocab=100, length=8, dim=32, depth=2, heads=4, hidden=64)


NETWORKS = {   # name: (build, input shapes at the traced batch, integer inputs)
    "resnet18": (resnet18, [(1, 3, 32, 32)], False),
    "mobilenetv3": (mobilenet_v3_small, [(1, 3, 32, 32)], False),
    "yolov5s": (yolov5s, [(1, 3, 64, 64)], False),
    "unet": (lambda: unet(bilinear=False, base=8), [(1, 3, 32, 32)], False),
    "vit-traced-at-8": (tiny_vit, [(8, 3, 32, 32)], False),
    "vit-traced-at-1": (tiny_vit, [(1, 3, 32, 32)], False),
    "vit-nn-multihead-attention": (lambda: small_vit("mha"), [(2, 3, 32, 32)], False),
    "vit-scaled-dot-product": (lambda: small_vit("sdpa"), [(2, 3, 32, 32)], False),
    "shufflenet-v2": (lambda: randomize_batchnorm(ShuffleNetV2()), [(1, 3, 64, 64)], False),
    "encoder": (small_encoder, [(1, 8), (1, 8)], True),
    "mixes-samples": (MixesSamples, [(2, 6)], False),
    "int64-and-several-heads": (Heads, [(1, 3, 12, 12)], False),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, tuple[nn.Module, Path]]:
    models = {}
    for name, (build, shapes, integers) in NETWORKS.items():
        torch.manual_seed(0)
        model = build().eval()
        inputs = [torch.randint(0, 2, s) if integers else torch.rand(*s) for s in shapes]
        models[name] = model, export(model, inputs, tmp_path_factory.mktemp(name))
    return models


def torch_at(model: nn.Module):
    return lambda inputs: torch_outputs(model, [torch.from_numpy(x) for x in inputs])


@pytest.mark.parametrize("name", NETWORKS)
def test_every_batch_and_worker_count_gives_the_one_worker_results(exported, name):
    model, param = exported[name]
    graph = assert_same_at_every_batch(param, expected=torch_at(model))
    mixes = name == "mixes-samples"
    assert graph.batching.independent != mixes and graph.batching.batch is None
    requests = [random_inputs(graph, batch, seed) for seed, batch in enumerate((1, 2, 1, 3))]
    executions = assert_joined_requests_match(graph, requests)
    assert executions == (4 if mixes else 1)


def test_the_bundled_model_at_every_batch_and_worker_count():
    graph = assert_same_at_every_batch(efficientnet_lite0_path())
    assert graph.batching.independent and graph.batching.batch is None


def test_a_constant_with_a_row_per_sample_fixes_the_batch(tmp_path):
    torch.manual_seed(0)
    model = RowPerSample(4).eval()
    param = export(model, [torch.rand(4, 6)], tmp_path)
    graph = assert_same_at_every_batch(param, batches=(4,), expected=torch_at(model))
    assert graph.batching.independent and graph.batching.batch == 4
    with pytest.raises(InputError, match=r"runs only at batch 4: operator .* reads the constant .* of shape \(4,6\)"):
        graph.run(np.zeros((3, 6), np.float32))
    # a sample has no result alone: each position of the batch has its own row of the constant
    with pytest.raises(InputError, match="a sample has no result alone"):
        graph.run_samples(np.zeros((4, 6), np.float32))
    # the batcher never joins it, and a request of another batch gets the error
    assert assert_joined_requests_match(graph, [random_inputs(graph, 4, seed) for seed in range(3)]) == 3


@pytest.mark.parametrize("precision", ["bf16", "int8"])
@pytest.mark.parametrize("name", ["resnet18", "mobilenetv3", "yolov5s", "unet", "vit-nn-multihead-attention"])
def test_reduced_precisions_at_every_batch_and_worker_count(exported, tmp_path, name, precision):
    """bf16 and int8 (calibrated on random inputs) at batch 1, 3 and 8 on 2 threads give the
    one-thread results, and each sample what it gives alone."""
    _, param = exported[name]
    options = {"precision": precision}
    if precision == "int8":
        np.savez(tmp_path / "calibrate.npz", *random_inputs(kuiperinfer.load(param, warmup=False), 4, seed=9))
        options["calibration"] = kuiperinfer.quantize(param, tmp_path / "calibrate.npz").table
    assert_same_at_every_batch(param, threads=(2,), **options)
