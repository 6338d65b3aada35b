"""benchmarks/idle.py: the first run after an idle spell, and the next, pinned and not."""

from __future__ import annotations

import torch
import torch.nn as nn
from oracle import export

from benchmarks.idle import PINS, first_and_next


def test_both_runs_are_timed_for_every_pin(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3))
    param = export(model.eval(), (torch.randn(1, 3, 16, 16),), tmp_path)
    x = torch.randn(1, 3, 16, 16).numpy()
    for pin in PINS:
        first, after = first_and_next(param, [x], pin, threads=2, gap=0.01, rounds=3)
        assert 0 < first < 5 and 0 < after < 5
