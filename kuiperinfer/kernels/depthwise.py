"""Depthwise convolution (one filter per channel) as a sum over kernel taps.

GEMM serves depthwise convolution badly (a 1 x 9 by 9 x P product per channel);
instead each of the kh*kw taps multiplies a strided view of the input by a
per-channel weight and accumulates into the output.
"""

from __future__ import annotations

import numpy as np


def depthwise_conv2d(x: np.ndarray, taps: np.ndarray, stride: tuple[int, int],
                     dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Depthwise convolution of padded NCHW ``x`` with ``taps`` of shape (C, kh, kw)."""
    n, c = x.shape[:2]
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    kh, kw = taps.shape[1:]
    out = np.zeros((n, c, oh, ow), dtype=x.dtype)
    scratch = np.empty_like(out)
    for i in range(kh):
        for j in range(kw):
            window = x[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                       j * dw: j * dw + sw * (ow - 1) + 1: sw]
            np.multiply(window, taps[:, i, j, None, None], out=scratch)
            out += scratch
    return out
