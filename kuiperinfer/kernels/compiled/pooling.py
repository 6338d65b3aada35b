"""Pooling of channels-last memory, compiled: the twins of
:func:`kuiperinfer.kernels.pooling.max_pool2d` and
:func:`~kuiperinfer.kernels.pooling.global_avg_pool2d` for the NHWC arrays the convolutions
hand on.

Each pixel's channels are one run of memory, and so is each row of pixels: an output row
takes the maxima of its window's input rows, whole rows at a time, then each of its pixels
the maxima of its window's columns there, vector loops LLVM compiles to vector compares.
Taps outside the input are skipped, which is what padding with the lowest value gives. A NaN anywhere in a window makes
its output NaN, as in PyTorch. Bands of output rows go to the run's threads; each output is
computed alone, so the numbers are the same on any number of threads.

A global average adds each image's pixel rows of channels (:func:`channel_means`), in one
call: NumPy's reduction or BLAS's product with a vector of ones cost 40-60 us inside a
network, where their code and buffers are no longer in cache, for a few microseconds of
arithmetic.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.jit import inline, kernel, kernel_operand
from kuiperinfer.kernels.layout import nchw, nhwc
from kuiperinfer.kernels.parallel import compiled_parts, even_step, threads_for

TAP_WORK = 4
"""Multiply-adds that one output value's tap counts as when deciding whether to share a
pooling among threads (a vector maximum of values in cache)."""
BAND_VALUES = 1 << 16
"""Output values a thread's band holds at least."""
PIXEL_BLOCK = 64
"""Pixels whose channels :func:`channel_means` adds apart before adding their sums to the
totals, so that a float32 total over thousands of pixels strays no further from the exact
sum than one over a hundred."""


@inline
def take_larger(target: np.ndarray, source: np.ndarray) -> None:
    """``target`` = the larger of itself and ``source`` (of one length), NaN taking over:
    a loop without branches, which LLVM compiles to vector compares and blends."""
    for k in range(target.shape[0]):
        v, m = source[k], target[k]
        target[k] = v if (v > m) | (v != v) else m


@kernel
def max_pool_rows(x: np.ndarray, out: np.ndarray, step: int, kernel_hw: tuple[int, int], stride: tuple[int, int],
                  padding: tuple[int, int], dilation: tuple[int, int], lowest, first: int, last: int) -> None:  # noqa: ANN001
    """Bands ``first:last`` of ``step`` output rows (counted over all images: image * OH +
    row) of ``out`` (N, OH, OW, C) = the maxima of the windows of ``x`` (N, H, W, C), both
    C-contiguous, padding counting as ``lowest`` (x's type's lowest value). A window is a
    rectangle: each output row first takes the maxima of its kernel rows' input rows, one long
    run of memory each, into a row of scratch, then each output pixel those of its kernel
    columns there."""
    _, h, w, c = x.shape
    oh, ow = out.shape[1], out.shape[2]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_hw, stride, padding, dilation
    rows = np.empty(w * c, x.dtype)
    for row in range(first * step, min(last * step, out.shape[0] * oh)):
        image, oy = row // oh, row % oh
        rows[:] = lowest
        for i in range(kh):
            y = oy * sh - ph + i * dh
            if 0 <= y < h:
                take_larger(rows, x[image, y].reshape(w * c))
        for ox in range(ow):
            target = out[image, oy, ox]
            target[:] = lowest
            for j in range(kw):
                column = ox * sw - pw + j * dw
                if 0 <= column < w:
                    take_larger(target, rows[column * c:(column + 1) * c])


def max_pool2d_channels_last(x: np.ndarray, out_hw: tuple[int, int], kernel_hw: tuple[int, int],
                             stride: tuple[int, int], padding: tuple[int, int],
                             dilation: tuple[int, int]) -> np.ndarray:
    """Max pooling of NCHW ``x`` held channels-last (float32 or uint8) to ``out_hw``; an
    NCHW array held channels-last, as :func:`~kuiperinfer.kernels.pooling.max_pool2d` gives.
    Bands of even size go to the run's threads as compiled parts."""
    source = nhwc(x)
    n, _, _, c = source.shape
    out = np.empty((n, *out_hw, c), x.dtype)
    lowest = x.dtype.type(-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min)
    rows, work = n * out_hw[0], TAP_WORK * out.size * kernel_hw[0] * kernel_hw[1]
    step = even_step(rows, max(1, BAND_VALUES // max(1, out_hw[1] * c)), threads_for(work))
    compiled_parts(max_pool_rows).run(-(-rows // step), work, (source, out, step, kernel_hw, stride, padding,
                                                               dilation, lowest), ())
    return nchw(out)


@inline
def channel_means(x: np.ndarray, image: int, mean: np.ndarray, block: np.ndarray) -> None:
    """``mean`` (C) = the mean of each channel over the pixels of image ``image`` of ``x``
    (N, P, C): blocks of :data:`PIXEL_BLOCK` pixels summed in ``block`` (C), then into
    ``mean``; loops along the contiguous channels, which LLVM compiles to vector adds."""
    pixels, c = x.shape[1], x.shape[2]
    for q in range(c):
        mean[q] = 0
    for start in range(0, pixels, PIXEL_BLOCK):
        for q in range(c):
            block[q] = 0
        for p in range(start, min(pixels, start + PIXEL_BLOCK)):
            row = x[image, p]
            for q in range(c):
                block[q] += row[q]
        for q in range(c):
            mean[q] += block[q]
    for q in range(c):
        mean[q] /= pixels


@kernel
def global_average(x: np.ndarray, out: np.ndarray) -> None:
    """``out`` (N, C) = the mean of each channel of each image of ``x`` (N, P, C)."""
    block = np.empty(x.shape[2], np.float32)
    for image in range(x.shape[0]):
        channel_means(x, image, out[image], block)


def global_avg_pool2d_channels_last(x: np.ndarray) -> np.ndarray:
    """The mean of each channel of float32 NCHW ``x`` held channels-last, as (N, C)."""
    source = kernel_operand(nhwc(x))
    n, h, w, c = source.shape
    out = np.empty((n, c), np.float32)
    global_average(source.reshape(n, h * w, c), out)
    return out
