"""Depthwise convolution (one filter per channel) on channels-last (NHWC) input.

GEMM serves depthwise convolution badly: per channel it is a (P, kh*kw) by (kh*kw, 1)
product. In NHWC the channels of a pixel are adjacent, so the convolution is one
contraction over a strided view of every window, ``out[n, y, x, c] = sum_ij
window[n, y, x, i, j, c] * taps[i, j, c]``: a single ``np.einsum`` whose inner loop runs
along the channels, with no copy of the windows and one pass over the output (a loop
over the taps would make 2 * kh * kw passes).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def pack_depthwise(weight: np.ndarray) -> np.ndarray:
    """(C, 1, kh, kw) -> the taps (kh, kw, C)."""
    return np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0), dtype=np.float32)


def depthwise_conv2d(x: np.ndarray, taps: np.ndarray, stride: tuple[int, int],
                     dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Depthwise convolution of padded NHWC ``x`` with :func:`pack_depthwise` taps; a new
    contiguous (N, OH, OW, C) array."""
    n, _, _, c = x.shape
    s_n, s_h, s_w, s_c = x.strides
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    kh, kw = taps.shape[:2]
    windows = as_strided(x, (n, oh, ow, kh, kw, c), (s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c),
                         writeable=False)
    out = np.empty((n, oh, ow, c), dtype=np.float32)
    return np.einsum("nyxijc,ijc->nyxc", windows, taps, out=out)
