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

from collections.abc import Sequence

import numpy as np

from kuiperinfer.kernels.padding import NUMPY_MODES
from kuiperinfer.kernels.parallel import run_parts, threads_for

COPY_WORK = 16
"""Multiply-adds that copying one value counts as when deciding whether to share a copy
among threads: about its cost here, cold, in a matrix product's multiply-adds (as
pooling's taps)."""


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


def copy_in_bands(copies: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
    """``target[...] = source`` for each (target, source) pair, all (N, H, ...) arrays of one
    height H: large copies go in bands of rows shared among the intra-op threads
    (:mod:`~kuiperinfer.kernels.parallel`), each band copying its rows of every pair."""
    height = copies[0][0].shape[1]
    work = COPY_WORK * sum(target.size for target, _ in copies)
    threads = min(threads_for(work), height)

    def copy_rows(rows: slice) -> None:
        for target, source in copies:
            np.copyto(target[:, rows], source[:, rows])

    run_parts([slice(height * i // threads, height * (i + 1) // threads) for i in range(threads)], work, copy_rows)


def concatenate_channels(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate(arrays, axis=1)`` of channels-last (N, C_i, H, W) arrays of one dtype,
    itself channels-last: each array copied into its channels by :func:`copy_in_bands`."""
    n, _, h, w = arrays[0].shape
    bounds = np.cumsum([0] + [a.shape[1] for a in arrays])
    out = np.empty((n, h, w, bounds[-1]), dtype=arrays[0].dtype)
    copy_in_bands([(out[..., start:stop], nhwc(a)) for a, start, stop in zip(arrays, bounds, bounds[1:])])
    return nchw(out)


def pad_nhwc(x: np.ndarray, pads: tuple[tuple[int, int], tuple[int, int]],
             mode: str = "zeros", value: float = 0) -> np.ndarray:
    """The NCHW array ``x`` padded along H and W by ``pads`` ((top, bottom), (left, right)),
    as a contiguous NHWC array: one copy, which also converts a row-major ``x``.

    ``mode`` is a PyTorch padding mode: zeros (with ``value``: what zero is in ``x``'s
    form, uint8 activations' zero point), reflect, replicate or circular.
    """
    (top, bottom), (left, right) = pads
    source = nhwc(x)
    if mode in ("zeros", "constant"):
        if not (top or bottom or left or right) and source.flags.c_contiguous:
            return source
        n, h, w, c = source.shape
        out = np.empty((n, top + h + bottom, left + w + right, c), dtype=x.dtype)
        # only the border is zeroed: np.zeros would first write the whole buffer
        # (large ones come from the heap, not fresh zero pages; runtime/memory.py)
        out[:, :top] = value
        out[:, top + h:] = value
        out[:, top:top + h, :left] = value
        out[:, top:top + h, left + w:] = value
        copy_in_bands([(out[:, top:top + h, left:left + w], source)])
        return out
    return np.ascontiguousarray(np.pad(source, ((0, 0), (top, bottom), (left, right), (0, 0)),
                                       mode=NUMPY_MODES[mode]))
