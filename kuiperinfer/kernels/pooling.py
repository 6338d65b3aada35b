"""Pooling windows on NCHW arrays: output sizes as PyTorch computes them, max and average
pooling over strided taps (in the input's memory layout, row-major or channels-last),
adaptive average pooling as products with averaging matrices and adaptive max pooling
as a gather of each axis's windows."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.kernels.layout import empty_like_layout, is_channels_last, nhwc


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


def pad_for_pooling(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                    padding: tuple[int, int], dilation: tuple[int, int],
                    out_hw: tuple[int, int], value: float) -> np.ndarray:
    """Pad H and W with ``value`` so that every one of the ``out_hw`` windows lies inside."""
    n, c, h, w = x.shape
    need_h = (out_hw[0] - 1) * stride[0] + dilation[0] * (kernel[0] - 1) + 1
    need_w = (out_hw[1] - 1) * stride[1] + dilation[1] * (kernel[1] - 1) + 1
    bottom, right = max(need_h - h - padding[0], 0), max(need_w - w - padding[1], 0)
    if not (padding[0] or padding[1] or bottom or right):
        return x
    out = empty_like_layout(x, (n, c, padding[0] + h + bottom, padding[1] + w + right))
    out.fill(value)
    out[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + w] = x
    return out


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


def _reduce_taps(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                 dilation: tuple[int, int], out_hw: tuple[int, int], combine: np.ufunc,
                 pad_value: float) -> np.ndarray:
    """``combine`` (np.maximum, np.add) over each output pixel's window of ``x`` padded with
    ``pad_value``, a block at a time: each block is padded on its own, so the padded copy
    is never made whole (the result has ``x``'s memory layout). A window is a rectangle,
    so it is reduced in two steps: across the kernel's columns into the rows each output
    column needs, then across its rows (kh + kw passes instead of kh * kw)."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    n, c = x.shape[:2]
    rows_needed = (oh - 1) * sh + (kh - 1) * dh + 1
    out = empty_like_layout(x, (n, c, oh, ow))
    for images, channels in _blocks(x):
        block = pad_for_pooling(x[images, channels], kernel, stride, padding, dilation, out_hw, pad_value)
        block, target = block[:, :, :rows_needed], out[images, channels]
        rows = block[..., 0: sw * (ow - 1) + 1: sw].copy(order="K")
        for j in range(1, kw):
            combine(rows, block[..., j * dw: j * dw + sw * (ow - 1) + 1: sw], out=rows)
        np.copyto(target, rows[:, :, 0: sh * (oh - 1) + 1: sh])
        for i in range(1, kh):
            combine(target, rows[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh], out=target)
    return out


def max_pool2d(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], dilation: tuple[int, int], ceil_mode: bool) -> np.ndarray:
    """Max pooling of NCHW ``x``; padding counts as -inf, NaN propagates as in PyTorch."""
    out_hw = pool_output_hw(x, kernel, stride, padding, dilation, ceil_mode)
    return _reduce_taps(x, kernel, stride, padding, dilation, out_hw, np.maximum, -np.inf)


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
    sum is one BLAS product with a vector of ones over the pixels, 3x faster than
    ``mean`` on MobileNetV3's 14x14 maps."""
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
