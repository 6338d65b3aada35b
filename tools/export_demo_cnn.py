"""Export the small demo CNN the CLI tests use, into tests/data/demo_cnn (reproducible).

    python -m tools.export_demo_cnn

Needs torch==2.13.0 and pnnx (the test dependencies). Writes the .pnnx.param and .pnnx.bin.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pnnx
import torch
import torch.nn as nn

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "demo_cnn"


class DemoCNN(nn.Module):
    """conv-bn-relu blocks, a residual add, pooling, a linear classifier and softmax."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.BatchNorm2d(16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 1))
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return torch.softmax(self.head(self.pool(x)), dim=1)


def main() -> None:
    torch.manual_seed(0)
    model = DemoCNN().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        pnnx.export(model, str(Path(tmp) / "demo_cnn.pt"), (x,))
        for suffix in (".pnnx.param", ".pnnx.bin"):
            shutil.copy(Path(tmp) / f"demo_cnn{suffix}", OUT / f"demo_cnn{suffix}")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
