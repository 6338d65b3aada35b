"""How far each precision's outputs are from float32, for every network of the benchmark's
zoo and the test suite's small vision transformers: a Markdown table.

    .venv/bin/python -m tools.precision_errors [--only NAME ...] [--cache DIR]

For each network, PyTorch computes its float32 outputs and, through
:func:`benchmarks.emulation.bf16_products`, the outputs of products made of bfloat16 parts:
one part (kuiperinfer's ``bf16``), two parts and three products (the fp32-accurate form a
matrix engine computes from bf16 products), three parts and six products. kuiperinfer runs
the pnnx export in ``fp32`` and in ``bf16``. Each column is the largest difference from
PyTorch's float32 outputs relative to their scale, max |y - y32| / max |y32|, and "within"
says whether the outputs stay within the tests' tolerance of float32 (np.allclose with ATOL,
RTOL). EfficientNet-Lite0, the pretrained bundled model, runs on the bundled photos; the
others on the benchmark's random inputs. Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

import kuiperinfer
from benchmarks.emulation import bf16_products
from benchmarks.engines import pnnx_file
from benchmarks.models import MODELS
from benchmarks.networks import ATOL, RTOL, small_vit, torch_outputs
from kuiperinfer.models import sample_images
from kuiperinfer.vision import EFFICIENTNET_LITE
from tools.network_errors import Network, export, images, markdown

FORMS = (("bf16", 1), ("split bf16, 3 products", 2), ("split bf16, 6 products", 3))
"""PyTorch's emulations: a name and the number of bfloat16 parts."""


@dataclass
class Case:
    """A network, its pnnx export, and the inputs it is measured on."""

    name: str
    module: torch.nn.Module
    param: Callable[[], Path]
    inputs: list[np.ndarray]


def zoo_cases(cache: Path) -> list[Case]:
    cases = []
    for model in MODELS.values():
        if model.name == "efficientnet_lite0":
            inputs = [np.stack([EFFICIENTNET_LITE(path) for path in sample_images()])]
        else:
            inputs = list(model.sample_inputs(2 if model.name != "yolov5s" else 1).values())
        cases.append(Case(model.name, model.module(), lambda model=model: pnnx_file(model, cache), inputs))
    return cases


def vit_cases(directory: Path) -> list[Case]:
    cases = []
    for attention in ("mha", "hand", "sdpa"):
        module = small_vit(attention).eval()
        net = Network(f"ViT ({attention})", partial(small_vit, attention), (module.CHANNELS, module.IMAGE, module.IMAGE),
                      (2,))
        folder = directory / attention
        folder.mkdir()
        cases.append(Case(net.name, module, partial(export, net, module, folder, False), [images(2, net.image, 2).numpy()]))
    return cases


def relative(y: np.ndarray, reference: np.ndarray) -> tuple[float, bool]:
    y, reference = np.asarray(y, np.float64), np.asarray(reference, np.float64)
    scale = np.max(np.abs(reference)) or 1.0
    return float(np.max(np.abs(y - reference)) / scale), bool(np.allclose(y, reference, atol=ATOL, rtol=RTOL))


def measure(case: Case) -> list[str]:
    tensors = [torch.from_numpy(x) for x in case.inputs]
    fp32 = torch_outputs(case.module, tensors)[0]
    cells = [case.name]
    for _, parts in FORMS:
        with bf16_products(case.module, parts):
            error, within = relative(torch_outputs(case.module, tensors)[0], fp32)
        cells.append(f"{error:.1e}" + (" within" if within else ""))
    for precision in ("fp32", "bf16"):
        graph = kuiperinfer.load(case.param(), precision=precision)
        error, within = relative(graph.run(*case.inputs)[0], fp32)
        cells.append(f"{error:.1e}" + (" within" if within else ""))
    return cells


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only the networks whose name contains one of these")
    parser.add_argument("--cache", type=Path, help="where the zoo's exports are kept (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache or Path(tmp)
        cases = [*zoo_cases(cache), *vit_cases(Path(tmp))]
        rows = []
        for case in cases:
            if args.only and not any(word.lower() in case.name.lower() for word in args.only):
                continue
            print(f"measuring {case.name} ...", file=sys.stderr, flush=True)
            rows.append(measure(case))
    header = ["network", *(f"PyTorch, {name}" for name, _ in FORMS), "kuiperinfer fp32", "kuiperinfer bf16"]
    print(f"max |y - y32| / max |y32| against PyTorch's float32; \"within\": np.allclose(atol={ATOL:g}, "
          f"rtol={RTOL:g})\n")
    print(markdown(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
