"""Depthwise convolution (one filter per channel) as a sum over kernel taps.

GEMM serves depthwise convolution badly (a 1 x 9 by 9 x P product per channel);
instead each of the kh*kw taps multiplies a strided view of the input by a
per-channel weight and accumulates into the output.

Each tap is two NumPy calls whose innermost loop runs along the last axis. In NCHW
that is an output row, which in the late stages of a mobile network is only 7 or 14
pixels long, so the calls spend their time in loop overhead. There the taps run on
an NHWC copy instead, whose innermost axis is the channels (hundreds long), and the
result is transposed back; the two transposes cost less than the short loops.
"""

from __future__ import annotations

import numpy as np

NHWC_MAX_WIDTH = 28
"""Output rows this short or shorter make the NHWC taps pay (measured at 7 to 112)."""


def depthwise_conv2d(x: np.ndarray, taps: np.ndarray, stride: tuple[int, int],
                     dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Depthwise convolution of padded NCHW ``x`` with ``taps`` of shape (C, kh, kw); a new
    contiguous NCHW array."""
    if out_hw[1] <= NHWC_MAX_WIDTH:
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        out = _accumulate_taps(nhwc, taps.transpose(1, 2, 0), stride, dilation, out_hw, spatial_axis=1)
        return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
    return _accumulate_taps(x, taps[..., None, None], stride, dilation, out_hw, spatial_axis=2)


def _accumulate_taps(x: np.ndarray, weights: np.ndarray, stride: tuple[int, int],
                     dilation: tuple[int, int], out_hw: tuple[int, int], spatial_axis: int) -> np.ndarray:
    """Sum over taps (i, j) of the strided window of ``x`` times ``weights[:, i, j]`` (NCHW)
    or ``weights[i, j]`` (NHWC); ``spatial_axis`` is where the height axis of ``x`` is."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    kh, kw = (weights.shape[1:3] if spatial_axis == 2 else weights.shape[:2])
    lead = (slice(None),) * spatial_axis
    out = scratch = None
    for i in range(kh):
        for j in range(kw):
            window = x[lead + (slice(i * dh, i * dh + sh * (oh - 1) + 1, sh),
                               slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))]
            weight = weights[:, i, j] if spatial_axis == 2 else weights[i, j]
            if out is None:
                out = np.multiply(window, weight)
                scratch = np.empty_like(out)
            else:
                np.multiply(window, weight, out=scratch)
                out += scratch
    return out
