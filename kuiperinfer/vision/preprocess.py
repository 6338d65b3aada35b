"""Image preprocessing for classifiers: the usual ImageNet evaluation transform.

It is torchvision's ``Resize(resize) -> CenterCrop(size) -> ToTensor() -> Normalize(mean, std)``
on Pillow images, written with Pillow and NumPy so that no PyTorch is needed:

1. resize so that the shorter side is ``resize`` pixels (the longer side keeps the aspect
   ratio, truncated to whole pixels as torchvision does);
2. cut the central ``size`` x ``size`` square;
3. scale the 8-bit values to [0, 1] and normalise each channel: ``(x - mean) / std``.

The result is a float32 ``(3, size, size)`` array in RGB order; :meth:`Preprocess.batch`
stacks several into the NCHW batch a model takes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from kuiperinfer.vision.image import ImageSource, load_image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
"""The per-channel mean and standard deviation (of [0, 1] values) most ImageNet models use."""

CROP_FRACTION = 0.875
"""The default share of the resized shorter side that the centre crop keeps (224 of 256)."""

INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}
"""Resampling filters by name (Pillow's, which antialias when they shrink)."""


@dataclass(frozen=True)
class Preprocess:
    """Resize the shorter side, centre-crop, normalise: a picture to a model's input array.

    ``resize`` defaults to ``floor(size / 0.875)`` (256 for 224), the ImageNet convention.
    ``mean`` and ``std`` are per RGB channel, for values scaled to [0, 1].
    Invalid settings raise ``ValueError``.
    """

    size: int = 224
    resize: int | None = None
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        if self.resize is None:
            object.__setattr__(self, "resize", math.floor(self.size / CROP_FRACTION))
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        if self.size < 1:
            raise ValueError(f"size must be a positive number of pixels, got {self.size}")
        if self.resize < self.size:
            raise ValueError(f"resize ({self.resize}) must be at least the crop size ({self.size})")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError(f"mean and std need 3 values (R, G, B), got {self.mean} and {self.std}")
        if not all(s > 0 for s in self.std):
            raise ValueError(f"std must be positive, got {self.std}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"unknown interpolation {self.interpolation!r}; "
                             f"choose from {', '.join(INTERPOLATIONS)}")

    def __call__(self, image: ImageSource) -> np.ndarray:
        """One image (a path or a Pillow image) as a float32 ``(3, size, size)`` array."""
        picture = load_image(image)
        picture = resize_shorter_side(picture, self.resize, INTERPOLATIONS[self.interpolation])
        picture = center_crop(picture, self.size)
        return normalize(picture, self.mean, self.std)

    def batch(self, images: Iterable[ImageSource]) -> np.ndarray:
        """Several images as one float32 ``(N, 3, size, size)`` batch."""
        return np.stack([self(image) for image in images])


EFFICIENTNET_LITE = Preprocess(size=224, resize=256, mean=(127 / 255,) * 3, std=(128 / 255,) * 3,
                               interpolation="bicubic")
"""How the EfficientNet-Lite authors evaluate: inputs mapped to ``(pixel - 127) / 128``
("inception-style" values, kept for quantisation), a bicubic resize and the 224/256 centre
crop (TensorFlow's ``CROP_PADDING = 32``)."""


def resize_shorter_side(image: Image.Image, side: int,
                        resample: Image.Resampling = Image.Resampling.BILINEAR) -> Image.Image:
    """Scale ``image`` so that its shorter side is ``side`` pixels, keeping the aspect ratio.

    The longer side is ``int(side * long / short)``, truncated like torchvision's ``Resize``.
    """
    width, height = image.size
    short, long = min(width, height), max(width, height)
    long = int(side * long / short)
    new_size = (side, long) if width <= height else (long, side)
    return image if new_size == image.size else image.resize(new_size, resample)


def center_crop(image: Image.Image, size: int) -> Image.Image:
    """The central ``size`` x ``size`` square; offsets rounded like torchvision's ``CenterCrop``.

    The image must be at least ``size`` pixels in both directions.
    """
    width, height = image.size
    if width < size or height < size:
        raise ValueError(f"cannot crop {size}x{size} out of a {width}x{height} image")
    left = int(round((width - size) / 2.0))
    top = int(round((height - size) / 2.0))
    return image.crop((left, top, left + size, top + size))


def normalize(image: Image.Image, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """An RGB image as a float32 CHW array: values scaled to [0, 1], then ``(x - mean) / std``."""
    pixels = np.asarray(image, dtype=np.float32) / np.float32(255)
    pixels -= np.asarray(mean, dtype=np.float32)
    pixels /= np.asarray(std, dtype=np.float32)
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))
