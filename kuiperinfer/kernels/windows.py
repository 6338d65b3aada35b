"""Sliding windows over the trailing dimensions of an array, for any number of them: the
N-d NumPy reference kernels behind 3-D convolution and pooling, ``fold``/``unfold``,
and the indices of max pooling.

A window sweep over ``r`` trailing axes is described per axis by a kernel size, a stride,
a dilation and the number of outputs. :func:`windows` views an (already padded) array
as ``(..., *outputs, *kernel)`` without copying: element ``[..., o, k]`` is
``x[..., o * stride + k * dilation]``. Reductions over the kernel axes are pooling; the
same view reshaped to a matrix is im2col, so that a convolution is one matrix product;
:func:`col2im` is its adjoint, the scatter-add of transposed convolution and ``fold``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.kernels.padding import pad_last_dims
from kuiperinfer.kernels.pooling import pool_output_size

Sizes = tuple[int, ...]


def sweep_output(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Windows that fit in an (already padded) length: PyTorch's convolution output size."""
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def span(out: int, kernel: int, stride: int, dilation: int) -> int:
    """The length ``out`` windows cover, from the first window's start to the last one's end."""
    return (out - 1) * stride + dilation * (kernel - 1) + 1


def windows(x: np.ndarray, kernel: Sizes, stride: Sizes, dilation: Sizes, out: Sizes) -> np.ndarray:
    """A read-only view ``(*lead, *out, *kernel)`` of ``x``'s windows over its last
    ``len(kernel)`` axes, which must be at least :func:`span` long."""
    rank = len(kernel)
    lead, axes = x.shape[:-rank], x.shape[-rank:]
    if any(size < span(o, k, s, d) for size, o, k, s, d in zip(axes, out, kernel, stride, dilation)):
        raise ValueError(f"windows {kernel} x {out} do not fit the axes {axes}")
    steps = x.strides[-rank:]
    strides = x.strides[:-rank] + tuple(st * s for st, s in zip(steps, stride)) \
        + tuple(st * d for st, d in zip(steps, dilation))
    return np.lib.stride_tricks.as_strided(x, lead + tuple(out) + tuple(kernel), strides, writeable=False)


def im2col(x: np.ndarray, kernel: Sizes, stride: Sizes, dilation: Sizes, out: Sizes) -> np.ndarray:
    """``(N, C, *spatial)`` -> the columns ``(N, prod(out), C * prod(kernel))`` (a new array):
    row ``p`` holds the window of output position ``p``, channel-major as a weight
    ``(C, *kernel)`` is flattened."""
    n, c = x.shape[:2]
    rank = len(kernel)
    view = windows(x, kernel, stride, dilation, out)                    # (N, C, *out, *kernel)
    order = (0, *range(2, 2 + rank), 1, *range(2 + rank, 2 + 2 * rank))  # (N, *out, C, *kernel)
    return view.transpose(order).reshape(n, math.prod(out), c * math.prod(kernel))


def col2im(cols: np.ndarray, stride: Sizes, dilation: Sizes, size: Sizes) -> np.ndarray:
    """The adjoint of :func:`im2col`: ``cols`` ``(N, C, *kernel, *inputs)`` scatter-added
    into a new ``(N, C, *size)`` array, tap ``k`` of input position ``i`` landing at
    ``i * stride + k * dilation`` (``size`` must hold every landing place)."""
    rank = len(size)
    kernel, inputs = cols.shape[2:2 + rank], cols.shape[2 + rank:]
    out = np.zeros(cols.shape[:2] + tuple(size), cols.dtype)
    for tap in itertools.product(*(range(k) for k in kernel)):
        landing = tuple(slice(t * d, t * d + (i - 1) * s + 1, s)
                        for t, d, i, s in zip(tap, dilation, inputs, stride))
        out[(Ellipsis, *landing)] += cols[(slice(None), slice(None), *tap)]
    return out


# -- pooling ---------------------------------------------------------------------------

def pool_outputs(shape: Sizes, kernel: Sizes, stride: Sizes, padding: Sizes, dilation: Sizes,
                 ceil_mode: bool) -> Sizes:
    """Pooling output sizes over the last ``len(kernel)`` axes of ``shape``, as PyTorch
    computes them; an InferError when no window fits."""
    axes = shape[len(shape) - len(kernel):]
    out = tuple(pool_output_size(size, k, s, p, d, ceil_mode)
                for size, k, s, p, d in zip(axes, kernel, stride, padding, dilation))
    if min(out) < 1:
        raise InferError(f"input {tuple(shape)} is too small for kernel {kernel} with padding {padding}",
                         status=InferStatus.kInferFailedOutputSizeError)
    return out


def _padded_for(x: np.ndarray, kernel: Sizes, stride: Sizes, padding: Sizes, dilation: Sizes,
                out: Sizes, value: float) -> np.ndarray:
    """``x`` padded by ``padding`` before each axis and, after it, up to what the windows
    span (ceil_mode's last window may reach past the padding; cropped if they span less)."""
    pads = tuple((p, span(o, k, s, d) - size - p)
                 for size, o, k, s, p, d in zip(x.shape[-len(kernel):], out, kernel, stride, padding, dilation))
    return pad_last_dims(x, pads, "constant", value)


def max_pool(x: np.ndarray, kernel: Sizes, stride: Sizes, padding: Sizes, dilation: Sizes,
             ceil_mode: bool) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling over the last ``len(kernel)`` axes: the maxima and their int64 indices,
    each the flat position in its input plane (``d * H * W + h * W + w`` in 3-D), the first
    maximum of a window where several are equal (as PyTorch)."""
    rank = len(kernel)
    out = pool_outputs(x.shape, kernel, stride, padding, dilation, ceil_mode)
    padded = _padded_for(x, kernel, stride, padding, dilation, out, -np.inf)
    taps = windows(padded, kernel, stride, dilation, out).reshape(*x.shape[:-rank], *out, -1)
    best = np.argmax(taps, axis=-1)
    values = np.take_along_axis(taps, best[..., None], axis=-1)[..., 0]
    # the winning tap's coordinate along each axis, then the flat index in the input plane
    index = np.zeros(best.shape, np.int64)
    for axis, offset in enumerate(np.unravel_index(best, kernel)):
        grid = np.arange(out[axis]).reshape((-1,) + (1,) * (rank - 1 - axis))
        coordinate = grid * stride[axis] - padding[axis] + offset * dilation[axis]
        index = index * x.shape[x.ndim - rank + axis] + coordinate
    return values, index


def _window_lengths(size: int, kernel: int, stride: int, padding: int, out: int,
                    count_padding: bool) -> np.ndarray:
    """How many elements each average-pooling window along an axis divides by: its extent
    inside the padded input (count_include_pad), or inside the input proper."""
    start = np.arange(out) * stride - padding
    end = np.minimum(start + kernel, size + padding)
    if not count_padding:
        start, end = np.maximum(start, 0), np.minimum(end, size)
    return end - start


def avg_pool(x: np.ndarray, kernel: Sizes, stride: Sizes, padding: Sizes, ceil_mode: bool,
             count_include_pad: bool, divisor_override: int | None) -> np.ndarray:
    """Average pooling over the last ``len(kernel)`` axes (no dilation, as PyTorch)."""
    rank = len(kernel)
    ones = (1,) * rank
    out = pool_outputs(x.shape, kernel, stride, padding, ones, ceil_mode)
    padded = _padded_for(x, kernel, stride, padding, ones, out, 0.0)
    sums = windows(padded, kernel, stride, ones, out).sum(axis=tuple(range(-rank, 0)), dtype=np.float32)
    if divisor_override is not None:
        return (sums / np.float32(divisor_override)).astype(x.dtype, copy=False)
    divisor = np.ones((), np.float32)
    for axis in range(rank):
        lengths = _window_lengths(x.shape[x.ndim - rank + axis], kernel[axis], stride[axis], padding[axis],
                                  out[axis], count_include_pad)
        divisor = np.multiply.outer(divisor, lengths.astype(np.float32))
    return (sums / divisor).astype(x.dtype, copy=False)


def adaptive_bounds(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive windows: ``[floor(i * size / out), ceil((i + 1) * size / out))``."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def adaptive_avg_pool(x: np.ndarray, out: Sizes) -> np.ndarray:
    """Adaptive average pooling to ``out`` over the last ``len(out)`` axes: one averaging
    matrix per axis, applied in turn (the windows are boxes, so averages separate)."""
    rank = len(out)
    y = x
    for axis, o in enumerate(out):
        at = x.ndim - rank + axis
        matrix = np.zeros((o, x.shape[at]), np.float32)
        for i, (start, end) in enumerate(adaptive_bounds(x.shape[at], o)):
            matrix[i, start:end] = 1.0 / (end - start)
        y = np.moveaxis(np.tensordot(y, matrix, axes=([at], [1])), -1, at)
    return np.ascontiguousarray(y, dtype=x.dtype)


def adaptive_max_pool(x: np.ndarray, out: Sizes) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive max pooling to ``out``: maxima and int64 flat indices in each input plane
    (the first maximum of a window, as PyTorch), one output cell at a time over all
    images and channels."""
    rank = len(out)
    lead, sizes = x.shape[:-rank], x.shape[-rank:]
    values = np.empty(lead + tuple(out), x.dtype)
    indices = np.empty(lead + tuple(out), np.int64)
    bounds = [adaptive_bounds(size, o) for size, o in zip(sizes, out)]
    for cell in itertools.product(*(range(o) for o in out)):
        box = [bounds[axis][i] for axis, i in enumerate(cell)]
        region = x[(Ellipsis, *(slice(start, end) for start, end in box))]
        shape = tuple(end - start for start, end in box)
        best = np.argmax(region.reshape(*lead, -1), axis=-1)
        values[(Ellipsis, *cell)] = np.take_along_axis(region.reshape(*lead, -1), best[..., None], -1)[..., 0]
        flat = np.zeros(best.shape, np.int64)
        for size, (start, _), offset in zip(sizes, box, np.unravel_index(best, shape)):
            flat = flat * size + start + offset
        indices[(Ellipsis, *cell)] = flat
    return values, indices


def as_batched(x: np.ndarray, rank: int, what: str) -> tuple[np.ndarray, bool]:
    """``x`` as ``(N, C, *spatial)`` for an operator over ``rank`` spatial axes: an unbatched
    ``(C, *spatial)`` input (which PyTorch accepts) gains a batch of one. Returns the array
    and whether it was unbatched."""
    if x.ndim == rank + 2:
        return x, False
    if x.ndim == rank + 1:
        return x[None], True
    raise InferError(f"{what} takes ({rank + 2}-D) batched or ({rank + 1}-D) unbatched input, "
                     f"got shape {x.shape}", status=InferStatus.kInferFailedInputEmpty)

