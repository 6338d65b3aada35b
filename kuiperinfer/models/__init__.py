"""Models bundled with kuiperinfer, so that it does something real on a fresh machine.

``efficientnet_lite0/`` holds the pretrained EfficientNet-Lite0 ImageNet classifier (made by
``tools/export_efficientnet_lite0.py``; licence in its ``LICENSE.md``) and the ImageNet
class names; ``images/`` a few sample photos.
"""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
EFFICIENTNET_LITE0_DIR = MODELS_DIR / "efficientnet_lite0"
SAMPLE_IMAGES_DIR = MODELS_DIR / "images"


def default_model_path() -> Path:
    """The model ``kuiper run``, ``info``, ``profile``... use when given none: EfficientNet-Lite0."""
    return efficientnet_lite0_path()


def efficientnet_lite0_path() -> Path:
    """The .pnnx.param of the bundled EfficientNet-Lite0 (returns ImageNet logits)."""
    return EFFICIENTNET_LITE0_DIR / "efficientnet_lite0.pnnx.param"


def imagenet_labels_path() -> Path:
    """The 1000 ImageNet-1k class names, one per line in class order."""
    return EFFICIENTNET_LITE0_DIR / "imagenet_labels.txt"


def sample_images() -> list[Path]:
    """The bundled sample photos, sorted by name."""
    return sorted(SAMPLE_IMAGES_DIR.glob("*.jpg"))
