"""im2col on channels-last (NHWC) input: unfold convolution windows into the rows of a
matrix, for one GEMM.

For an NHWC input padded beforehand, window (i, j) of output pixel (oy, ox) reads the C
adjacent values ``x[n, oy*sh + i*dh, ox*sw + j*dw, :]``. A strided view exposes all
windows at once without copying; one reshape copies them into the column matrix
``(N*OH*OW, kh*kw*C)``, whose product with the packed ``(kh*kw*C, K)`` weight is the
NHWC output itself. A 1x1 stride-1 convolution needs no copy at all: its column matrix
is ``x`` read as ``(N*H*W, C)``.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def output_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length of a window sweep over an (already padded) length."""
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def pack_weight(weight: np.ndarray, groups: int) -> np.ndarray:
    """(K, C/groups, kh, kw) -> the GEMM operand (groups, kh*kw*C/groups, K/groups)."""
    k, c_group, kh, kw = weight.shape
    per_group = weight.reshape(groups, k // groups, c_group, kh, kw)
    return np.ascontiguousarray(per_group.transpose(0, 3, 4, 2, 1).reshape(groups, kh * kw * c_group, -1),
                                dtype=np.float32)


def window_view(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                dilation: tuple[int, int], out_hw: tuple[int, int], groups: int = 1) -> np.ndarray:
    """A zero-copy view ``(N, OH, OW, groups, kh, kw, C/groups)`` of every window of the NHWC ``x``."""
    n, _, _, c = x.shape
    s_n, s_h, s_w, s_c = x.strides
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    return as_strided(x, (n, oh, ow, groups, kh, kw, c // groups),
                      (s_n, s_h * sh, s_w * sw, s_c * (c // groups), s_h * dh, s_w * dw, s_c), writeable=False)


BLOCK_BYTES = 1 << 20
"""Bytes of columns made and multiplied at a time, when all of them would exceed
``WHOLE_BYTES`` (below that, one large product is as fast)."""
WHOLE_BYTES = 8 << 20


def _multiply_block(windows: np.ndarray, packed: np.ndarray, out: np.ndarray) -> None:
    """``out`` (P, K) = the windows (..., groups, kh, kw, C/groups) of P output pixels times ``packed``."""
    groups, depth, k_group = packed.shape
    if groups == 1:
        np.matmul(windows.reshape(-1, depth), packed[0], out=out)
        return
    cols = np.moveaxis(windows, -4, 0).reshape(groups, -1, depth)   # (groups, P, kh*kw*C/groups)
    product = np.matmul(cols, packed)                                # (groups, P, K/groups)
    np.copyto(out.reshape(-1, groups, k_group), product.transpose(1, 0, 2))


def im2col_conv2d(x: np.ndarray, packed: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                  dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Convolution of padded NHWC ``x`` with a :func:`pack_weight` operand; a new contiguous
    (N, OH, OW, K) array. Large images go a stripe of output rows at a time, so that the
    columns of a stripe stay in cache."""
    n, _, _, c = x.shape
    groups, _, k_group = packed.shape
    (oh, ow), k = out_hw, groups * k_group
    out = np.empty((n, oh, ow, k), dtype=np.float32)
    if kernel == (1, 1) and stride == (1, 1) and groups == 1:
        np.matmul(x.reshape(-1, c), packed[0], out=out.reshape(-1, k))
        return out
    windows = window_view(x, kernel, stride, dilation, out_hw, groups)
    row_bytes = kernel[0] * kernel[1] * c * ow * x.itemsize
    if n * oh * row_bytes <= WHOLE_BYTES:
        _multiply_block(windows, packed, out.reshape(-1, k))
        return out
    step = max(1, BLOCK_BYTES // row_bytes)
    for image in range(n):
        for start in range(0, oh, step):
            rows = min(step, oh - start)
            _multiply_block(windows[image, start:start + rows], packed,
                            out[image, start:start + rows].reshape(-1, k))
    return out
