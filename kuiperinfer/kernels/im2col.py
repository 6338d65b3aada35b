"""im2col: unfold convolution windows into the columns of a matrix, for one GEMM.

For an NCHW input padded beforehand, window (i, j) of output pixel (oy, ox) reads
``x[n, c, oy*sh + i*dh, ox*sw + j*dw]``. A strided view exposes all windows at once
without copying; one reshape then copies them into the ``(N, C*kh*kw, OH*OW)``
column matrix that a single matrix product with the ``(Cout, C*kh*kw)`` weight turns
into the output.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def output_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length of a window sweep over an (already padded) length."""
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def window_view(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """A zero-copy view ``(N, C, kh, kw, OH, OW)`` of every window of the NCHW array ``x``."""
    n, c = x.shape[:2]
    s_n, s_c, s_h, s_w = x.strides
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    return as_strided(x, (n, c, kh, kw, oh, ow),
                      (s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw), writeable=False)


def im2col(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
           dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """The column matrix ``(N, C*kh*kw, OH*OW)`` of the NCHW array ``x``."""
    n, c = x.shape[:2]
    windows = window_view(x, kernel, stride, dilation, out_hw)
    return windows.reshape(n, c * kernel[0] * kernel[1], out_hw[0] * out_hw[1])


BLOCK_BYTES = 1 << 20
"""Bytes of columns made and multiplied at a time, when all of them would exceed
``WHOLE_BYTES`` (below that, one large product is as fast)."""
WHOLE_BYTES = 8 << 20


def im2col_conv2d(x: np.ndarray, weight: np.ndarray, groups: int, kernel: tuple[int, int],
                  stride: tuple[int, int], dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Convolution of padded NCHW ``x`` with ``weight`` (Cout, C/groups, kh, kw): one GEMM per
    group over the column matrix; for large images a stripe of output rows at a time, so
    that the columns of a stripe stay in cache (a 1x1 stride-1 convolution's columns are
    ``x`` itself)."""
    n, c = x.shape[:2]
    c_out, (oh, ow) = weight.shape[0], out_hw
    packed = weight.reshape(groups, c_out // groups, -1)
    row_bytes = n * c * kernel[0] * kernel[1] * ow * x.itemsize
    direct = kernel == (1, 1) and stride == (1, 1)
    step = oh if direct or row_bytes * oh <= WHOLE_BYTES else max(1, BLOCK_BYTES // row_bytes)
    out = None
    for start in range(0, oh, step):
        rows = min(step, oh - start)
        cols = im2col(x[:, :, start * stride[0]:], kernel, stride, dilation, (rows, ow))
        product = np.matmul(packed, cols.reshape(n, groups, -1, rows * ow)).reshape(n, c_out, rows, ow)
        if rows == oh:
            return product
        if out is None:
            out = np.empty((n, c_out, oh, ow), dtype=product.dtype)
        out[:, :, start:start + rows] = product
    return out
