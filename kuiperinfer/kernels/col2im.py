"""col2im: fold columns back into an image, the scatter half of transposed convolution.

Transposed convolution spreads every input pixel over a kernel-sized patch of the
output. One GEMM turns the ``(N, C_in, H*W)`` input into columns ``(N, C_out*kh*kw, H*W)``:
the contribution of input pixel (y, x) to output pixel ``(y*sh + i*dh, x*sw + j*dw)``
through kernel tap (i, j). col2im adds each tap's ``H x W`` plane into the output at that
strided offset: a loop over the kh*kw taps, each one a whole-batch strided add.
"""

from __future__ import annotations

import numpy as np


def col2im(cols: np.ndarray, stride: tuple[int, int], dilation: tuple[int, int],
           out_hw: tuple[int, int]) -> np.ndarray:
    """Sum the taps of ``cols`` (N, C, kh, kw, H, W) into an (N, C, *out_hw) array.

    ``out_hw`` must hold every tap: at least ``(H-1)*stride + dilation*(k-1) + 1`` per axis;
    positions no tap reaches stay zero.
    """
    n, c, kh, kw, h, w = cols.shape
    (sh, sw), (dh, dw) = stride, dilation
    out = np.zeros((n, c, *out_hw), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i * dh: i * dh + sh * (h - 1) + 1: sh,
                j * dw: j * dw + sw * (w - 1) + 1: sw] += cols[:, :, i, j]
    return out
