"""Mutated real exports of every test network through load, optimise, build and run.

tests/test_hostile_models.py mutates one small hand-picked export; the optimiser's passes
only meet their patterns (conv and BatchNorm, padding, activations, pointwise and depthwise
pairs, squeeze-and-excitation, residual additions, attention) in real networks. Here each
network of benchmarks/networks.py, and the bundled EfficientNet-Lite0, is exported once by pnnx
and mutated: a parameter's value, a token, a weight's declared shape, a line deleted or
duplicated. Every case ends in a working graph or a KuiperError that says where.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import export
from test_hostile_models import GARBAGE, VALUES, load_and_run

from benchmarks.networks import SentenceEncoder, VisionTransformer, mobilenet_v3_small, resnet18, unet, yolov5s
from kuiperinfer.models import efficientnet_lite0_path

NETWORKS = {
    "resnet18": (resnet18, [(1, 3, 32, 32)]),
    "mobilenetv3": (mobilenet_v3_small, [(1, 3, 32, 32)]),
    "yolov5s": (yolov5s, [(1, 3, 64, 64)]),
    "unet": (lambda: unet(bilinear=False, base=8), [(1, 3, 32, 32)]),
    "vit": (lambda: VisionTransformer(image=32, patch=8, dim=32, depth=2, heads=2, hidden=64, classes=10),
            [(1, 3, 32, 32)]),
    "encoder": (lambda: SentenceEncoder(vocab=100, length=8, dim=32, depth=2, heads=4, hidden=64), [(1, 8), (1, 8)]),
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """Each network's .pnnx.param (its .pnnx.bin beside it), exported once."""
    params = {"efficientnet_lite0": efficientnet_lite0_path()}
    for name, (build, shapes) in NETWORKS.items():
        inputs = [torch.randint(0, 2 if i else 100, shape) if name == "encoder" else torch.rand(*shape)
                  for i, shape in enumerate(shapes)]
        params[name] = export(build().eval(), inputs, tmp_path_factory.mktemp(name))
    return params


def inputs_of(text: str) -> list[np.ndarray]:
    """Inputs of the shapes and dtypes the pnnx.Input lines declare (zeros of unknown dims at 1)."""
    arrays = []
    for line in text.splitlines():
        if line.startswith("pnnx.Input"):
            declared = line.split("#", 1)[1].split("=", 1)[1] if "#" in line else "(1)f32"
            dims = [int(d) if d.isdigit() else 1 for d in declared[1:declared.index(")")].split(",")]
            dtype = np.int64 if declared.endswith("i64") else np.float32
            arrays.append(np.ones(dims, dtype))
    return arrays


def mutate(text: str, kind: str, line: int, which: int, value: str) -> str:
    lines = text.splitlines()
    i = 2 + line % (len(lines) - 2)
    tokens = lines[i].split()
    if kind == "parameter value":
        params = [k for k, t in enumerate(tokens) if "=" in t and t[0] not in "@$#"]
        if params:
            k = params[which % len(params)]
            tokens[k] = tokens[k].split("=", 1)[0] + "=" + value
    elif kind == "weight shape":
        weights = [k for k, t in enumerate(tokens) if t.startswith("@")]
        if weights:
            k = weights[which % len(weights)]
            tokens[k] = tokens[k].split("=", 1)[0] + "=" + ("(1)f32" if which % 2 else "(3,3)f32")
    elif kind == "token":
        tokens[which % len(tokens)] = value
    elif kind == "drop parameter":
        params = [k for k, t in enumerate(tokens) if "=" in t and t[0] not in "#"]
        if params:
            del tokens[params[which % len(params)]]
    lines[i] = " ".join(tokens)
    if kind == "delete line":
        del lines[i]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("network", ["efficientnet_lite0", *NETWORKS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(kind=st.sampled_from(["parameter value", "parameter value", "weight shape", "token", "drop parameter",
                             "delete line"]),
       line=st.integers(0, 10_000), which=st.integers(0, 100), value=st.sampled_from(VALUES + GARBAGE))
def test_mutated_network_exports_load_or_fail_cleanly(exports, tmp_path_factory, network, kind, line, which, value):
    source = exports[network]
    text = mutate(source.read_text(), kind, line, which, value)
    directory = tmp_path_factory.mktemp("mutated", numbered=True)
    param = directory / source.name
    param.write_text(text)
    (directory / source.with_suffix(".bin").name).symlink_to(source.with_suffix(".bin"))
    load_and_run(param, text, *inputs_of(text))
