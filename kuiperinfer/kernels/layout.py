"""Channels-last memory for NCHW arrays, as PyTorch's ``torch.channels_last`` memory format.

The graph's meaning stays NCHW, as PyTorch's: every 4-D activation has the logical shape
(N, C, H, W). Its memory may hold the channels of a pixel side by side (NHWC), which is
what convolution wants: im2col becomes a strided view plus one copy, and the product of
the columns with the (kh*kw*C, K) weight *is* the NHWC output, with no transposes. Such
an array is the view ``nchw(y)`` of a contiguous NHWC ``y``; NumPy computes on it as on
any other array (results mean the same) and its ufuncs keep the layout, so activations,
residual additions and concatenations between convolutions stay channels-last for free.
Only operators that reshape or flatten pay a copy back to row-major order.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.padding import NUMPY_MODES


def nhwc(x: np.ndarray) -> np.ndarray:
    """The (N, H, W, C) view of an (N, C, H, W) array (contiguous if ``x`` is channels-last)."""
    return x.transpose(0, 2, 3, 1)


def nchw(y: np.ndarray) -> np.ndarray:
    """The (N, C, H, W) view of an (N, H, W, C) array."""
    return y.transpose(0, 3, 1, 2)


def is_channels_last(x: np.ndarray) -> bool:
    """Whether the 4-D ``x`` holds each pixel's channels side by side (a contiguous NHWC view)."""
    return x.ndim == 4 and nhwc(x).flags.c_contiguous


def empty_like_layout(x: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    """A new (N, C, H, W) array of ``shape`` and ``x``'s dtype, channels-last if ``x`` is."""
    if is_channels_last(x) and not x.flags.c_contiguous:
        n, c, h, w = shape
        return nchw(np.empty((n, h, w, c), dtype=x.dtype))
    return np.empty(shape, dtype=x.dtype)


def pad_nhwc(x: np.ndarray, pads: tuple[tuple[int, int], tuple[int, int]],
             mode: str = "zeros") -> np.ndarray:
    """The NCHW array ``x`` padded along H and W by ``pads`` ((top, bottom), (left, right)),
    as a contiguous NHWC array: one copy, which also converts a row-major ``x``.

    ``mode`` is a PyTorch padding mode: zeros, reflect, replicate or circular.
    """
    (top, bottom), (left, right) = pads
    source = nhwc(x)
    if mode in ("zeros", "constant"):
        if not (top or bottom or left or right):
            return np.ascontiguousarray(source)
        n, h, w, c = source.shape
        out = np.empty((n, top + h + bottom, left + w + right, c), dtype=x.dtype)
        # only the border is zeroed: np.zeros would first write the whole buffer
        # (large ones come from the heap, not fresh zero pages; runtime/memory.py)
        out[:, :top] = 0
        out[:, top + h:] = 0
        out[:, top:top + h, :left] = 0
        out[:, top:top + h, left + w:] = 0
        out[:, top:top + h, left:left + w] = source
        return out
    return np.ascontiguousarray(np.pad(source, ((0, 0), (top, bottom), (left, right), (0, 0)),
                                       mode=NUMPY_MODES[mode]))
