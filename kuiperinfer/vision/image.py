"""Reading photos: one RGB picture the right way up, and the image files of a folder."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from PIL import Image, ImageOps

from kuiperinfer.errors import KuiperError

ImageSource = str | os.PathLike | Image.Image
"""What the vision helpers accept as an image: a file path or a Pillow image."""

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm"})
"""File name endings (lower case) taken as images when a folder is listed."""


class ImageError(KuiperError):
    """An image that cannot be read: a missing file, or one that is not a picture Pillow decodes."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        self.reason = message
        super().__init__(f"{path}: {message}" if path is not None else message)


def load_image(source: ImageSource) -> Image.Image:
    """The image as RGB and turned the way its EXIF orientation says (as a camera shows it).

    A path is read completely and closed; a Pillow image is converted (it is not modified).
    Raises :class:`ImageError` for a missing file or data Pillow cannot decode.
    """
    if isinstance(source, Image.Image):
        return _upright_rgb(source)
    path = os.fspath(source)
    try:
        with Image.open(path) as image:
            return _upright_rgb(image)
    except FileNotFoundError:
        raise ImageError("no such file", path) from None
    except IsADirectoryError:
        raise ImageError("is a directory, not an image", path) from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        # Pillow reports undecodable or truncated data as OSError (UnidentifiedImageError
        # among them), ValueError or SyntaxError depending on the format plug-in.
        raise ImageError(f"cannot read it as an image ({exc})", path) from exc


def _upright_rgb(image: Image.Image) -> Image.Image:
    upright = ImageOps.exif_transpose(image)
    if upright.mode.startswith("I;16"):
        # 16-bit greyscale (PNG): Pillow's RGB conversion clips at 255 instead of scaling.
        upright = upright.point(lambda v: v / 256).convert("L")
    rgb = upright.convert("RGB")
    rgb.load()
    return rgb


def is_image_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names an image by its suffix (``.jpg``, ``.png``, ...)."""
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def find_images(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Expand folders to the image files directly inside them (sorted by name); files stay.

    Files named explicitly are kept whatever their suffix (reading them reports what is
    wrong). Raises :class:`ImageError` for a path that does not exist.
    """
    found: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.is_file() and is_image_file(p)))
        elif path.exists():
            found.append(path)
        else:
            raise ImageError("no such file or directory", str(path))
    return found
