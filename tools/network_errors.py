"""Export each end-to-end network with pnnx, run it with kuiperinfer, and print a Markdown
table of the worst errors against PyTorch for every output.

    .venv/bin/python -m tools.network_errors [--only NAME ...] [--verbose]

The networks are the ones the tests use (benchmarks/networks.py), with the same random
weights. Errors are measured in float64: the max absolute error over all elements, and the
max relative error |ours - torch| / |torch| over the elements where the tests' relative
tolerance is the looser one (|torch| > ATOL / RTOL; smaller references are judged by the
absolute error). The "within" column applies the tests' criterion, np.allclose(atol=ATOL,
rtol=RTOL). Progress goes to stderr, the table to stdout; pnnx's pass log is silenced unless
--verbose.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pnnx
import torch

import kuiperinfer
from benchmarks.networks import (
    ATOL,
    RTOL,
    SmallViT,
    mobilenet_v3_small,
    resnet18,
    small_vit,
    torch_outputs,
    unet,
    yolov5s,
)


@dataclass
class Network:
    """A network to check: exported traced at ``export_batches`` (two sizes: a dynamic
    export), then compared with PyTorch at each of ``batches``."""

    name: str
    make: Callable[[], torch.nn.Module]
    image: tuple[int, int, int]
    batches: tuple[int, ...]
    export_batches: tuple[int, ...] = (1,)


def vision_transformers() -> list[Network]:
    """The small ViT with each of its three attentions, exported as tests/e2e/test_vit.py does."""
    image = (SmallViT.CHANNELS, SmallViT.IMAGE, SmallViT.IMAGE)
    return [Network(f"ViT ({attention})", partial(small_vit, attention), image, (1, 3), (1, 3))
            for attention in ("mha", "hand", "sdpa")]


def networks() -> list[Network]:
    return [
        Network("ResNet-18", resnet18, (3, 224, 224), (1, 4)),
        Network("MobileNetV3-Small", mobilenet_v3_small, (3, 224, 224), (1, 2)),
        Network("YOLOv5s", yolov5s, (3, 640, 640), (1,)),
        Network("UNet (ConvTranspose2d)", lambda: unet(bilinear=False), (3, 256, 256), (1, 2)),
        Network("UNet (bilinear)", lambda: unet(bilinear=True), (3, 256, 256), (1,)),
        *vision_transformers(),
    ]


@contextmanager
def silenced_stderr(silence: bool) -> Iterator[None]:
    """Send file descriptor 2 to /dev/null: pnnx's converter process writes its log there."""
    if not silence:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def images(batch: int, image: tuple[int, int, int], seed: int) -> torch.Tensor:
    return torch.randn(batch, *image, generator=torch.Generator().manual_seed(seed))


def export(net: Network, model: torch.nn.Module, directory: Path, verbose: bool) -> Path:
    """Export with pnnx, traced at one batch size, or two for a dynamic export."""
    examples = [(images(batch, net.image, 0),) for batch in net.export_batches]
    with torch.no_grad(), warnings.catch_warnings(), silenced_stderr(not verbose):
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        pnnx.export(model, str(directory / "model.pt"), *examples)
    return directory / "model.pnnx.param"


def errors(ours: np.ndarray, expected: np.ndarray) -> tuple[float, float, bool]:
    """Max absolute error, max relative error where |expected| > ATOL / RTOL, and the verdict."""
    ours64, expected64 = ours.astype(np.float64), expected.astype(np.float64)
    difference = np.abs(ours64 - expected64)
    large = np.abs(expected64) > ATOL / RTOL
    relative = float(np.max(difference[large] / np.abs(expected64[large]))) if large.any() else 0.0
    ok = bool(np.allclose(ours, expected, atol=ATOL, rtol=RTOL))
    return float(difference.max()), relative, ok


def check(net: Network, verbose: bool) -> list[tuple[list[str], bool]]:
    """Table rows for one network, one per batch size and output, each with its verdict."""
    model = net.make().eval()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        print(f"exporting {net.name} ...", file=sys.stderr, flush=True)
        graph = kuiperinfer.load(export(net, model, Path(tmp), verbose))
        for batch in net.batches:
            x = images(batch, net.image, batch)
            print(f"running {net.name} at batch {batch} ...", file=sys.stderr, flush=True)
            ours = graph.run(x.numpy())
            for index, (a, b) in enumerate(zip(ours, torch_outputs(model, (x,)))):
                abs_error, rel_error, ok = errors(np.asarray(a), b)
                shape = "x".join(map(str, b.shape))
                rows.append(([net.name, str(batch), str(index), shape, f"{abs_error:.2e}",
                              f"{rel_error:.2e}", "yes" if ok else "**NO**"], ok))
    return rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths)) + " |"
                     for line in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="only the networks whose name contains one of these words")
    parser.add_argument("--verbose", action="store_true", help="show pnnx's export log")
    args = parser.parse_args()
    selected = [net for net in networks()
                if not args.only or any(word.lower() in net.name.lower() for word in args.only)]
    results = [result for net in selected for result in check(net, args.verbose)]
    header = ["network", "batch", "output", "shape", "max abs error", "max rel error",
              f"within {ATOL:g} / {RTOL:g}"]
    print(f"torch {torch.__version__}, numpy {np.__version__}; relative error over "
          f"|torch| > {ATOL / RTOL:g}\n")
    print(markdown(header, [row for row, _ in results]))
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
