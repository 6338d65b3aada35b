"""Pooling windows on NCHW arrays: output sizes as PyTorch computes them, max and average
pooling over strided taps (in the input's memory layout, row-major or channels-last),
adaptive average pooling as products with averaging matrices and adaptive max pooling
as a gather of each axis's windows."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.kernels.layout import empty_like_layout, is_channels_last, nhwc
from kuiperinfer.kernels.parallel import run_parts, threads_for


def pool_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int,
                     ceil_mode: bool) -> int:
    """PyTorch's pooling output length; with ceil_mode the last window must start inside."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def pool_output_hw(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                   padding: tuple[int, int], dilation: tuple[int, int],
                   ceil_mode: bool) -> tuple[int, int]:
    """Output (height, width) of pooling NCHW ``x``; an InferError when no window fits."""
    out_hw = tuple(pool_output_size(size, k, s, p, d, ceil_mode) for size, k, s, p, d
                   in zip(x.shape[2:], kernel, stride, padding, dilation))
    if min(out_hw) < 1:
        raise InferError(f"input {x.shape} is too small for kernel {kernel} with padding {padding}",
                         status=InferStatus.kInferFailedOutputSizeError)
    return out_hw


BLOCK_BYTES = 1 << 20
"""Input bytes pooled at a time (row-major input): a block of channels small enough to stay in cache while
every tap passes over it (one pass over a whole batch would stream it from memory
kh * kw times)."""


def _blocks(x: np.ndarray) -> list[tuple[slice, slice]]:
    """(images, channels) blocks of about ``BLOCK_BYTES`` of ``x``, each contiguous in memory:
    blocks of channels of row-major ``x``, single images of channels-last ``x``."""
    n, c = x.shape[:2]
    if is_channels_last(x):
        return [(slice(i, i + 1), slice(None)) for i in range(n)]
    step = max(1, BLOCK_BYTES // max(1, n * x[0, 0].nbytes))
    return [(slice(None), slice(start, start + step)) for start in range(0, c, step)]


def _tap_spans(size: int, kernel: int, stride: int, padding: int, dilation: int,
               out: int) -> list[tuple[int, int, int]]:
    """For each tap of a window sweeping an axis of ``size`` (padded by ``padding`` before
    it): the outputs ``first:end`` whose tap falls inside the input proper, and the input
    index the first of them reads. Taps that reach no output are left out."""
    spans = []
    for tap in range(kernel):
        offset = tap * dilation - padding            # input index of output 0's tap
        first = max(0, -(offset // stride))
        end = min(out, (size - 1 - offset) // stride + 1)
        if first < end:
            spans.append((first, end, first * stride + offset))
    return spans


def _along(array: np.ndarray, axis: int, start: int, stop: int, step: int = 1) -> np.ndarray:
    index = [slice(None)] * array.ndim
    index[axis] = slice(start, stop, step)
    return array[tuple(index)]


def _reduce_axis(x: np.ndarray, out: np.ndarray, axis: int, kernel: int, stride: int, padding: int,
                 dilation: int, combine: np.ufunc, pad_value: float) -> None:
    """``out`` = ``combine`` over the windows sweeping ``axis`` of ``x``, padding counting as
    ``pad_value``. Each tap combines into just the outputs it reaches inside ``x``, so no
    padded copy is made; the first two taps that every output reaches combine into ``out``
    in one pass (one alone is copied), instead of a fill."""
    def taps(first: int, end: int, source: int) -> np.ndarray:
        return _along(x, axis, source, source + stride * (end - first - 1) + 1, stride)

    spans = _tap_spans(x.shape[axis], kernel, stride, padding, dilation, out.shape[axis])
    whole = [span for span in spans if span[:2] == (0, out.shape[axis])][:2]
    for span in whole:
        spans.remove(span)
    if len(whole) == 2:
        combine(taps(*whole[0]), taps(*whole[1]), out=out)
    elif whole:
        np.copyto(out, taps(*whole[0]))
    else:
        out.fill(pad_value)
    for first, end, source in spans:
        target = _along(out, axis, first, end)
        combine(target, taps(first, end, source), out=target)


def _reduce_taps(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                 dilation: tuple[int, int], out_hw: tuple[int, int], combine: np.ufunc,
                 pad_value: float) -> np.ndarray:
    """``combine`` (np.maximum, np.add) over each output pixel's window of ``x`` padded with
    ``pad_value``, a block at a time (the result has ``x``'s memory layout). A window is a
    rectangle, so it is reduced in two steps: across the kernel's rows into the columns
    each output row needs, then across its columns (kh + kw passes instead of kh * kw).
    Rows first: a pass over whole rows runs along contiguous memory in either layout,
    while a pass over strided columns runs in short pieces (C values channels-last), and
    the second pass has the less data.
    A single block (one channels-last image) is cut into bands of output rows that the
    threads share (:mod:`~kuiperinfer.kernels.parallel`)."""
    n, c, h, _ = x.shape
    out = empty_like_layout(x, (n, c, *out_hw))
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    blocks = _blocks(x)
    work = TAP_WORK * out.size * (kh + kw)
    bands = min(threads_for(work), out_hw[0]) if len(blocks) == 1 else 1

    def reduce(part: tuple[tuple[slice, slice], int]) -> None:
        (images, channels), band = part
        first, end = out_hw[0] * band // bands, out_hw[0] * (band + 1) // bands
        top = max(0, first * sh - ph)                               # the input rows the band reads
        bottom = min(h, (end - 1) * sh + (kh - 1) * dh - ph + 1)
        block, target = x[images, channels, top:bottom], out[images, channels, first:end]
        columns = empty_like_layout(block, (*block.shape[:2], end - first, block.shape[3]))
        _reduce_axis(block, columns, 2, kh, sh, ph - first * sh + top, dh, combine, pad_value)
        _reduce_axis(columns, target, 3, kw, sw, pw, dw, combine, pad_value)

    run_parts([(block, band) for block in blocks for band in range(bands)], work, reduce)
    return out


TAP_WORK = 16
"""Multiply-adds that one output value's pass over one tap counts as when deciding whether
to share a pooling among threads: its cost in the time of a matrix product's
multiply-adds, with its input no longer in cache."""


def max_pool2d(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], dilation: tuple[int, int], ceil_mode: bool) -> np.ndarray:
    """Max pooling of NCHW ``x`` (float, or uint8 activations); padding counts as the lowest
    value (-inf), NaN propagates as in PyTorch."""
    out_hw = pool_output_hw(x, kernel, stride, padding, dilation, ceil_mode)
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    return _reduce_taps(x, kernel, stride, padding, dilation, out_hw, np.maximum, lowest)


def _window_counts(size: int, kernel: int, stride: int, padding: int, out: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per output position along one axis: the window's length within the padded input
    (PyTorch's ``pool_size``) and its length within the input proper."""
    start = np.arange(out) * stride - padding
    end = np.minimum(start + kernel, size + padding)
    inside = np.minimum(end, size) - np.maximum(start, 0)
    return end - start, inside


def avg_pool2d(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], ceil_mode: bool, count_include_pad: bool,
               divisor_override: int | None) -> np.ndarray:
    """Average pooling of NCHW ``x`` with PyTorch's divisor rules.

    The divisor is ``divisor_override`` when given, else the window's size counting the
    padding (``count_include_pad``) or not; with ceil_mode, window parts beyond the
    padding never count.
    """
    dilation = (1, 1)
    out_hw = pool_output_hw(x, kernel, stride, padding, dilation, ceil_mode)
    out = _reduce_taps(x, kernel, stride, padding, dilation, out_hw, np.add, 0.0)
    if divisor_override:
        out /= np.float32(divisor_override)
        return out
    (with_pad_h, inside_h), (with_pad_w, inside_w) = (
        _window_counts(size, k, s, p, o)
        for size, k, s, p, o in zip(x.shape[2:], kernel, stride, padding, out_hw))
    counts = np.outer(with_pad_h, with_pad_w) if count_include_pad else np.outer(inside_h, inside_w)
    out /= counts.astype(np.float32)
    return out


def _adaptive_bounds(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) of PyTorch's adaptive windows: floor(i*size/out), ceil((i+1)*size/out)."""
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


@lru_cache(maxsize=256)
def adaptive_average_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) matrix whose row i averages PyTorch's adaptive window i."""
    matrix = np.zeros((out, size), dtype=np.float32)
    for i, (start, end) in enumerate(zip(*_adaptive_bounds(size, out))):
        matrix[i, start:end] = 1.0 / (end - start)
    matrix.setflags(write=False)
    return matrix


def global_avg_pool2d(x: np.ndarray) -> np.ndarray:
    """The mean of each channel of float32 NCHW ``x`` (any memory layout), as (N, C): the
    sum is one BLAS product with a vector of ones over the pixels, which beats ``mean``'s
    strided reduction."""
    n, c, h, w = x.shape
    ones = np.ones(h * w, dtype=np.float32)
    if is_channels_last(x):
        sums = np.matmul(ones, nhwc(x).reshape(n, h * w, c))
    else:
        sums = np.matmul(x.reshape(n, c, h * w), ones)
    sums /= h * w
    return sums


def adaptive_avg_pool2d(x: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Adaptive average pooling of NCHW ``x`` to ``out_hw``."""
    h, w = x.shape[-2:]
    oh, ow = out_hw
    if (oh, ow) == (1, 1) and x.ndim == 4 and x.dtype == np.float32:
        return global_avg_pool2d(x).reshape(*x.shape[:2], 1, 1)
    if (oh, ow) == (1, 1):
        return x.mean(axis=(-2, -1), keepdims=True, dtype=np.float32).astype(x.dtype, copy=False)
    if h % oh == 0 and w % ow == 0:
        blocks = x.reshape(*x.shape[:-2], oh, h // oh, ow, w // ow)
        return blocks.mean(axis=(-3, -1), dtype=np.float32).astype(x.dtype, copy=False)
    rows = np.matmul(adaptive_average_matrix(h, oh), x)
    return np.matmul(rows, adaptive_average_matrix(w, ow).T)


@lru_cache(maxsize=256)
def adaptive_window_table(size: int, out: int) -> np.ndarray:
    """(out, longest window) input indices of each adaptive window along one axis.

    Shorter windows repeat their first index, which changes neither the maximum nor
    the first position where it occurs.
    """
    start, end = _adaptive_bounds(size, out)
    offsets = np.arange(int((end - start).max()))
    table = np.where(start[:, None] + offsets < end[:, None], start[:, None] + offsets, start[:, None])
    table.setflags(write=False)
    return table


def adaptive_max_pool2d(x: np.ndarray, out_hw: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive max pooling of NCHW ``x``: the maxima and their flat ``h * W + w`` indices.

    Separable: the maximum of each window row along W first, then of those along H; the
    index is the first maximum in row-major order, as PyTorch reports it.
    """
    h, w = x.shape[-2:]
    cols, rows = adaptive_window_table(w, out_hw[1]), adaptive_window_table(h, out_hw[0])
    windows = x[..., cols]                                          # (N, C, H, OW, kw)
    best = windows.argmax(axis=-1)[..., None]
    row_max = np.take_along_axis(windows, best, axis=-1)[..., 0]    # (N, C, H, OW)
    col_index = cols[np.arange(out_hw[1]), best[..., 0]]            # (N, C, H, OW)
    windows = row_max[..., rows, :]                                 # (N, C, OH, kh, OW)
    best = windows.argmax(axis=-2)[..., None, :]
    values = np.take_along_axis(windows, best, axis=-2)[..., 0, :]  # (N, C, OH, OW)
    row_index = rows[np.arange(out_hw[0])[:, None], best[..., 0, :]]
    indices = row_index * w + np.take_along_axis(col_index, row_index, axis=-2)
    return values, indices.astype(np.int64)
