"""Run the ``kuiper`` command in-process and capture what it prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from kuiperinfer.cli import main as kuiper

DEMO = Path(__file__).resolve().parent / "data" / "demo_cnn" / "demo_cnn.pnnx.param"
"""A tiny random-weight CNN (1x3x64x64 -> 10 probabilities), made by tools/export_demo_cnn.py."""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``kuiper *argv``."""
    code = kuiper(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def usage_error(capsys, *argv: str) -> str:
    """Run a command that argparse refuses (exit 2); return its stderr."""
    with pytest.raises(SystemExit) as exit_info:
        kuiper(list(argv))
    assert exit_info.value.code == 2
    return capsys.readouterr().err
