"""load's options switch one thing each, and none changes a result.

Each network of the benchmark suite is exported once (small inputs where the network
allows) and run with the defaults (graph rewrites, compiled kernels, a thread per core)
and with everything off (``PLAIN``: operators as pnnx wrote them, the NumPy reference
kernels, one thread); each option alone off changes no result either, and every optimiser
pass keeps the graph's invariants on each network.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from oracle import export

import kuiperinfer
from benchmarks.networks import (
    SentenceEncoder,
    VisionTransformer,
    mobilenet_v3_small,
    randomize_transformer,
    resnet18,
    unet,
    yolov5s,
)
from kuiperinfer.errors import GraphError
from kuiperinfer.models import efficientnet_lite0_path
from kuiperinfer.optimizer import PASSES
from kuiperinfer.pnnx import read_param
from kuiperinfer.runtime.graph import RuntimeGraph

NETWORKS = {
    "resnet18": (resnet18, (3, 64, 64)),
    "mobilenetv3": (mobilenet_v3_small, (3, 64, 64)),
    "yolov5s": (yolov5s, (3, 64, 64)),
    "unet": (lambda: unet(bilinear=False, base=16), (3, 32, 32)),
    "unet_bilinear": (lambda: unet(bilinear=True, base=16), (3, 32, 32)),
}

TRANSFORMERS = {   # small ViT-Tiny and MiniLM layouts, exported for any batch size
    "vit": (lambda: randomize_transformer(VisionTransformer(32, 8, 24, 2, 3, 48, 10)),
            lambda batch: (torch.rand(batch, 3, 32, 32),)),
    "minilm": (lambda: randomize_transformer(SentenceEncoder(100, 9, 24, 2, 4, 48)),
               lambda batch: (torch.randint(0, 100, (batch, 9)),
                              torch.cat([torch.ones(batch, 6, dtype=torch.int64),
                                         torch.zeros(batch, 3, dtype=torch.int64)], 1))),
}


PLAIN = {"optimize": False, "kernels": "reference", "threads": 1}
"""Every option off."""


def run_both(param, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    fast = kuiperinfer.load(param, threads=2)
    plain = kuiperinfer.load(param, **PLAIN)
    return fast.run(x), plain.run(x)


def assert_agree(fast: list[np.ndarray], plain: list[np.ndarray]) -> None:
    assert len(fast) == len(plain)
    for a, b in zip(fast, plain):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-3)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The .pnnx.param of each network, exported on first use."""
    params = {"efficientnet_lite0": efficientnet_lite0_path()}

    def param(name: str):
        if name not in params and name in TRANSFORMERS:
            build, inputs = TRANSFORMERS[name]
            torch.manual_seed(0)
            params[name] = export(build(), inputs(1), tmp_path_factory.mktemp(name), inputs2=inputs(3))
        elif name not in params:
            build, shape = NETWORKS[name]
            params[name] = export(build(), (torch.rand(1, *shape),), tmp_path_factory.mktemp(name))
        return params[name]

    return param


@pytest.mark.parametrize("name", NETWORKS)
def test_optimised_and_plain_agree(exported, name):
    build, shape = NETWORKS[name]
    param = exported(name)
    batch = 1 if name == "yolov5s" else 3   # yolov5's Detect views with the exported batch
    x = np.random.default_rng(0).standard_normal((batch, *shape), dtype=np.float32)
    assert_agree(*run_both(param, x))


@pytest.mark.parametrize("name", TRANSFORMERS)
@pytest.mark.parametrize("batch", [1, 3])
def test_transformers_optimised_and_plain_agree(exported, name, batch):
    inputs = [t.numpy() for t in TRANSFORMERS[name][1](batch)]
    fast = kuiperinfer.load(exported(name), threads=2)
    plain = kuiperinfer.load(exported(name), **PLAIN)
    assert "kuiper.Attention" in {op.type for op in fast.operators} and fast.batching.independent
    assert_agree(fast.run(*inputs), plain.run(*inputs))


def test_bundled_efficientnet_lite0_agrees():
    x = np.random.default_rng(1).random((2, 3, 224, 224), dtype=np.float32)
    assert_agree(*run_both(efficientnet_lite0_path(), x))


@pytest.mark.parametrize("option", [{"optimize": False}, {"kernels": "reference"}, {"threads": 1}],
                         ids=["no rewrites", "reference kernels", "one thread"])
def test_each_option_alone_changes_no_result(exported, option):
    param = exported("mobilenetv3")
    x = np.random.default_rng(2).standard_normal((3, 3, 64, 64), dtype=np.float32)
    graph = kuiperinfer.load(param, **option)
    defaults = kuiperinfer.load(param)
    assert graph.threads == option.get("threads", defaults.threads)
    assert graph.options.kernels == option.get("kernels", defaults.options.kernels)
    assert (len(graph.operators) == len(read_param(param).ops)) == ("optimize" in option)
    assert_agree(graph.run(x), defaults.run(x))


@pytest.mark.parametrize("name", [*NETWORKS, *TRANSFORMERS, "efficientnet_lite0"])
def test_every_pass_keeps_the_graph_invariants(exported, name):
    graph = RuntimeGraph(exported(name))
    graph.init()
    graph.check()
    rewrites = 0
    for rewrite in PASSES:
        rewrites += rewrite(graph)
        graph.check()
    assert rewrites > 0
    for op in graph.operators:   # what check() holds for the residual additions, spelt out
        assert len(op.input_names) == len(op.input_operands_seq), op.name


def test_check_finds_a_broken_link(exported):
    graph = RuntimeGraph(exported("resnet18"))
    graph.init()
    conv = next(op for op in graph.operators if op.type == "nn.Conv2d")
    conv.input_names.append("")
    with pytest.raises(GraphError, match="1 inputs and 2 input names"):
        graph.check()
    conv.input_names.pop()
    conv.input_operands_seq[0].consumers.append(conv)
    with pytest.raises(GraphError, match="do not read it as often"):
        graph.check()


def test_optimize_false_keeps_every_operator(tmp_path):
    param = export(resnet18(), (torch.rand(1, 3, 32, 32),), tmp_path)
    plain = kuiperinfer.load(param, optimize=False)
    assert len(plain.operators) == len(read_param(param).ops)
    assert len(kuiperinfer.load(param).operators) < len(plain.operators)   # ReLUs fused
