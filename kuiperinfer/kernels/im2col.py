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
