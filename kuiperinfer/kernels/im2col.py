"""im2col on channels-last (NHWC) input: unfold convolution windows into the rows of a
matrix, for one GEMM.

For an NHWC input padded beforehand, window (i, j) of output pixel (oy, ox) reads the C
adjacent values ``x[n, oy*sh + i*dh, ox*sw + j*dw, :]``. A strided view exposes all
windows at once without copying; one reshape copies them into the column matrix
``(N*OH*OW, kh*kw*C)``, whose product with the packed ``(kh*kw*C, K)`` weight is the
NHWC output itself. A 1x1 stride-1 convolution needs no copy at all: its column matrix
is ``x`` read as ``(N*H*W, C)``.

A convolution of very few input channels (an RGB stem) makes its columns from the
row-major (NCHW) input instead, transposed: :func:`planar_conv2d`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiperinfer.kernels.parallel import even_step, run_parts, threads_for


def output_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length of a window sweep over an (already padded) length."""
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def pack_weight(weight: np.ndarray, groups: int) -> np.ndarray:
    """(K, C/groups, kh, kw) -> the GEMM operand (groups, kh*kw*C/groups, K/groups)."""
    k, c_group, kh, kw = weight.shape
    per_group = weight.reshape(groups, k // groups, c_group, kh, kw)
    return np.require(per_group.transpose(0, 3, 4, 2, 1).reshape(groups, kh * kw * c_group, -1), np.float32, "CA")


def window_view(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                dilation: tuple[int, int], out_hw: tuple[int, int], groups: int = 1) -> np.ndarray:
    """A zero-copy view ``(N, OH, OW, groups, kh, kw, C/groups)`` of every window of the NHWC ``x``."""
    n, _, _, c = x.shape
    s_n, s_h, s_w, s_c = x.strides
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    return as_strided(x, (n, oh, ow, groups, kh, kw, c // groups),
                      (s_n, s_h * sh, s_w * sw, s_c * (c // groups), s_h * dh, s_w * dw, s_c), writeable=False)


BLOCK_BYTES = 1 << 20
"""Bytes of columns made and multiplied at a time (a stripe of output rows of one image),
or of a 1x1 convolution's output, when the whole would exceed ``WHOLE_BYTES`` (below that,
one large product is as fast): blocks small enough to stay in cache for the epilogue."""
WHOLE_BYTES = 8 << 20


def _multiply_block(windows: np.ndarray, packed: np.ndarray, out: np.ndarray) -> None:
    """``out`` (P, K) = the windows (..., groups, kh, kw, C/groups) of P output pixels (or, for a
    1x1 convolution, their (P, C) input pixels) times ``packed``."""
    groups, depth, k_group = packed.shape
    if groups == 1:
        np.matmul(windows.reshape(-1, depth), packed[0], out=out)
        return
    cols = np.moveaxis(windows, -4, 0).reshape(groups, -1, depth)   # (groups, P, kh*kw*C/groups)
    product = np.matmul(cols, packed)                                # (groups, P, K/groups)
    np.copyto(out.reshape(-1, groups, k_group), product.transpose(1, 0, 2))


def im2col_conv2d(x: np.ndarray, packed: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                  dilation: tuple[int, int], out_hw: tuple[int, int],
                  epilogue: Callable[..., object] | None = None) -> np.ndarray:
    """Convolution of padded NHWC ``x`` with a :func:`pack_weight` operand; a new contiguous
    (N, OH, OW, K) array. Large outputs go a block at a time (a stripe of output rows, so
    that its columns stay in cache), and ``epilogue`` runs in place on each finished block;
    the blocks may be shared among threads (:mod:`~kuiperinfer.kernels.parallel`)."""
    n, _, _, c = x.shape
    groups, _, k_group = packed.shape
    (oh, ow), k = out_hw, groups * k_group
    out = np.empty((n, oh, ow, k), dtype=np.float32)
    depth = packed.shape[1]
    work = n * oh * ow * k * depth
    threads = threads_for(work)
    pointwise = kernel == (1, 1) and stride == (1, 1) and groups == 1
    if threads > 1 and groups == 1 and n * oh * ow <= FEW_PIXELS:
        columns = x.reshape(-1, c) if pointwise else window_view(x, kernel, stride, dilation, out_hw).reshape(-1, depth)
        _multiply_by_channels(columns, packed[0], out.reshape(-1, k), threads, work, epilogue)
        return out
    blocks: list[tuple[np.ndarray, np.ndarray]]       # (input pixels or windows, output block)
    if pointwise:
        pixels, flat = x.reshape(-1, c), out.reshape(-1, k)
        step = len(flat) if out.nbytes <= WHOLE_BYTES else max(1, BLOCK_BYTES // (k * out.itemsize))
        step = min(step, -(-len(flat) // threads))
        blocks = [(pixels[start:start + step], flat[start:start + step]) for start in range(0, len(flat), step)]
    else:
        windows = window_view(x, kernel, stride, dilation, out_hw, groups)
        row_bytes = kernel[0] * kernel[1] * c * ow * x.itemsize
        if n * oh * row_bytes <= WHOLE_BYTES and threads == 1:
            blocks = [(windows, out.reshape(-1, k))]
        else:
            step = even_step(oh, BLOCK_BYTES // row_bytes, threads, n)
            blocks = [(windows[image, start:start + step], out[image, start:start + step].reshape(-1, k))
                      for image in range(n) for start in range(0, oh, step)]

    def multiply(block: tuple[np.ndarray, np.ndarray]) -> None:
        source, target = block
        _multiply_block(source, packed, target)
        if epilogue is not None:
            epilogue(target)

    run_parts(blocks, work, multiply)
    return out


FEW_PIXELS = 100
"""Output pixels up to which the threads share a convolution's output channels rather than
its pixels: BLAS runs a product with few rows badly in parallel, and halves of a weight
each stay in cache. With more pixels, halves of the pixels are faster: each thread's
product keeps all the output channels."""


def _multiply_by_channels(cols: np.ndarray, weight: np.ndarray, flat: np.ndarray,
                          threads: int, work: int, epilogue: Callable[..., object] | None) -> None:
    """The column matrix ``cols`` (P, depth) times ``weight`` (depth, K) into ``flat`` (P, K),
    the K output channels shared among ``threads`` threads."""
    k = weight.shape[1]
    parts = [slice(k * i // threads, k * (i + 1) // threads) for i in range(threads)]

    def multiply(channels: slice) -> None:
        np.matmul(cols, weight[:, channels], out=flat[:, channels])
        if epilogue is not None:
            epilogue(flat[:, channels], channels)

    run_parts(parts, work, multiply)


PLANAR_MAX_CHANNELS = 4
"""Input channels up to which a convolution of a row-major input takes :func:`planar_conv2d`:
in NHWC a window row is only kw*C adjacent values, in NCHW an output row is OW of them."""


def pack_planar_weight(weight: np.ndarray) -> np.ndarray:
    """(K, C, kh, kw) -> the (C*kh*kw, K) operand of :func:`planar_conv2d`."""
    return np.require(weight.reshape(weight.shape[0], -1).T, np.float32, "CA")


def planar_conv2d(x: np.ndarray, packed: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                  dilation: tuple[int, int], out_hw: tuple[int, int],
                  epilogue: Callable[..., object] | None = None) -> np.ndarray:
    """Convolution (one group) of a padded, contiguous NCHW ``x`` with a
    :func:`pack_planar_weight` operand; a new contiguous (N, OH, OW, K) array.

    For a stripe of output rows, tap (c, i, j) of every output pixel is one strided slice
    of channel ``c``'s plane: copied together they are the transposed columns
    (C*kh*kw, pixels), and their transpose times ``packed`` is the stripe's NHWC output.
    """
    n, c, _, _ = x.shape
    depth, k = packed.shape
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    out = np.empty((n, oh, ow, k), dtype=np.float32)
    work = n * oh * ow * k * depth
    step = even_step(oh, BLOCK_BYTES // (depth * ow * x.itemsize), threads_for(work), n)
    s_n, s_c, s_h, s_w = x.strides

    def multiply(block: tuple[int, int]) -> None:
        image, start = block
        rows = min(step, oh - start)
        taps = as_strided(x[image, :, start * sh:], (c, kh, kw, rows, ow),
                          (s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw), writeable=False)
        columns = taps.reshape(depth, rows * ow)            # the copy
        target = out[image, start:start + rows].reshape(-1, k)
        np.matmul(columns.T, packed, out=target)
        if epilogue is not None:
            epilogue(target)

    run_parts([(image, start) for image in range(n) for start in range(0, oh, step)], work, multiply)
    return out
