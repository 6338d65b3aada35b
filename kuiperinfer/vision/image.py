"""Reading photos: one RGB picture the right way up, and the image files of a folder."""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from kuiperinfer.errors import KuiperError

ImageSource = str | os.PathLike | Image.Image | bytes | np.ndarray
"""What the vision helpers accept as an image: a file path, a Pillow image, the bytes of an
image file, or decoded 8-bit pixels (see :func:`load_image`)."""

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
    ``bytes`` are the contents of an image file (JPEG, PNG, ...), as Ray Data's
    ``read_binary_files`` yields them. An array holds decoded 8-bit pixels, ``(H, W)`` grey,
    ``(H, W, 3)`` RGB or ``(H, W, 4)`` RGBA, as Ray Data's ``read_images`` yields them (which
    applies no EXIF orientation: the pixels are taken as they are).
    Raises :class:`ImageError` for a missing file or data Pillow cannot decode.
    """
    if isinstance(source, Image.Image):
        return _upright_rgb(source)
    if isinstance(source, np.ndarray):
        return _from_pixels(source)
    path = None
    if isinstance(source, (bytes, bytearray, memoryview)):
        file = io.BytesIO(source)
    else:
        file = path = os.fspath(source)
    try:
        with Image.open(file) as image:
            return _upright_rgb(image)
    except FileNotFoundError:
        raise ImageError("no such file", path) from None
    except IsADirectoryError:
        raise ImageError("is a directory, not an image", path) from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        # Pillow reports undecodable or truncated data as OSError (UnidentifiedImageError
        # among them), ValueError or SyntaxError depending on the format plug-in.
        detail = str(exc)
        if path is None and isinstance(exc, UnidentifiedImageError):
            detail = "unknown image format"   # Pillow's message would name an in-memory file object
        raise ImageError(f"cannot read it as an image ({detail})", path) from exc


def _from_pixels(pixels: np.ndarray) -> Image.Image:
    """An RGB picture of decoded 8-bit pixels: (H, W), (H, W, 1), (H, W, 3) or (H, W, 4)."""
    channels = pixels.shape[2] if pixels.ndim == 3 else None
    if pixels.dtype != np.uint8 or not (pixels.ndim == 2 or channels in (1, 3, 4)):
        raise ImageError(f"expected 8-bit pixels of shape (H, W), (H, W, 3) or (H, W, 4), "
                         f"got {pixels.dtype} {pixels.shape}")
    if channels == 1:
        pixels = pixels[:, :, 0]
    return Image.fromarray(np.ascontiguousarray(pixels)).convert("RGB")


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
