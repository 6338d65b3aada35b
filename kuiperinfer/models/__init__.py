"""Models bundled with kuiperinfer, so that it does something real on a fresh machine."""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent


def default_model_path() -> Path:
    """The .pnnx.param of the bundled default model."""
    return MODELS_DIR / "demo_cnn" / "demo_cnn.pnnx.param"
