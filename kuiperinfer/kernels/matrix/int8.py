"""int8 quantization, the NumPy reference: uint8 activations, int8 per-channel weights.

An activation tensor ``x`` is held as ``q = clip(round(x / scale) + zero_point, 0, 255)``, a
uint8, with one ``scale`` and ``zero_point`` per tensor chosen so that the calibrated range
``[low, high]`` (widened to hold 0, which stays exact) spans the 256 steps. A weight is held
as ``clip(round(w / scale_c), -127, 127)``, an int8, with one symmetric scale per output
channel ``c``: ``max |w_c| / 127``. Rounding is to nearest, ties to even. A product of the
two sums ``(q - zero_point) * q_w`` exactly, as integers, and scales the sum by
``scale * scale_c`` (both float32) into float32
(:func:`~kuiperinfer.kernels.matrix.products.int8_reference`).
"""

from __future__ import annotations

import numpy as np

ACTIVATION_STEPS = 255
WEIGHT_LIMIT = 127


def activation_parameters(low: float, high: float) -> tuple[float, int]:
    """The scale and zero point of uint8 activations that span ``[low, high]`` and 0."""
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    scale = (high - low) / ACTIVATION_STEPS
    if not np.isfinite(scale) or scale <= 0:
        return 1.0, 0
    scale = float(np.float32(scale))
    return scale, int(np.clip(round(-low / scale), 0, ACTIVATION_STEPS))


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """float32 activations as uint8 (in the memory layout of ``x``)."""
    q = np.rint(x / np.float32(scale))
    q += zero_point
    return np.clip(q, 0, ACTIVATION_STEPS, out=q).astype(np.uint8)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """uint8 activations back to float32: ``(q - zero_point) * scale``."""
    x = q.astype(np.float32)
    x -= zero_point
    x *= np.float32(scale)
    return x


def weight_scales(weight: np.ndarray, axis: int = 0) -> np.ndarray:
    """The float32 scale of an int8 weight per index along ``axis`` (the output channels):
    the largest magnitude over 127 (1 where all are zero)."""
    weight = np.asarray(weight, np.float32)
    others = tuple(i for i in range(weight.ndim) if i != axis)
    largest = np.max(np.abs(weight), axis=others) if weight.size else np.ones(weight.shape[axis], np.float32)
    return np.where(largest > 0, largest / WEIGHT_LIMIT, 1).astype(np.float32)


def quantize_weight(weight: np.ndarray, axis: int = 0,
                    scales: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """An int8 weight and its float32 scale per index along ``axis`` (:func:`weight_scales`
    unless ``scales`` are given)."""
    weight = np.asarray(weight, np.float32)
    scales = weight_scales(weight, axis) if scales is None else np.asarray(scales, np.float32)
    shape = [1] * weight.ndim
    shape[axis] = -1
    q = np.clip(np.rint(weight / scales.reshape(shape)), -WEIGHT_LIMIT, WEIGHT_LIMIT).astype(np.int8)
    return q, scales
