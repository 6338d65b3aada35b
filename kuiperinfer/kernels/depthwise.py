"""Depthwise convolution (one filter per channel), by two methods.

GEMM as in im2col serves depthwise convolution badly (a 1 x 9 by 9 x P product per
channel). Instead:

* wide outputs: each of the kh*kw taps multiplies a strided view of the input by a
  per-channel weight and accumulates into the output (two NumPy calls per tap, whose
  inner loops run along an output row);
* narrow outputs (the late stages of mobile networks, rows of 7 to 28 pixels, where
  those calls spend their time in loop overhead): each kernel row ``i`` becomes a banded
  (Toeplitz) matrix per channel, ``B[i, c, j * dilation + x * stride, x] = w[c, i, j]``,
  so that ``out[c, y, :] = sum_i x[c, y * stride + i * dilation, :] @ B[i, c]``: kh
  batched matrix products over all channels at once. It spends more multiplications
  (padded width times output width per row instead of kw times output width) but in
  a few large BLAS calls.
"""

from __future__ import annotations

import numpy as np

BANDED_MAX_WIDTH = 28
"""Output widths up to this take the banded products (measured on 7 to 112 wide outputs)."""
_MEMO_LIMIT = 8


class DepthwiseWeight:
    """Depthwise taps (C, kh, kw) with their banded matrices, made once per input width."""

    def __init__(self, taps: np.ndarray):
        self.taps = np.ascontiguousarray(taps, dtype=np.float32)
        self._bands: dict[tuple[int, int, int, int], np.ndarray] = {}

    def bands(self, in_width: int, out_width: int, stride: int, dilation: int) -> np.ndarray:
        """The (kh, C, in_width, out_width) banded matrices (remembered for a few widths;
        filling the memo from several threads at once only computes one twice)."""
        key = (in_width, out_width, stride, dilation)
        bands = self._bands.get(key)
        if bands is None:
            if len(self._bands) >= _MEMO_LIMIT:
                self._bands.clear()
            bands = self._bands[key] = banded_matrices(self.taps, in_width, out_width, stride, dilation)
        return bands


def banded_matrices(taps: np.ndarray, in_width: int, out_width: int, stride: int,
                    dilation: int) -> np.ndarray:
    """``B`` (kh, C, in_width, out_width) with ``B[i, c, j * dilation + x * stride, x] = taps[c, i, j]``."""
    c, kh, kw = taps.shape
    bands = np.zeros((kh, c, in_width, out_width), dtype=np.float32)
    columns = np.arange(out_width)
    for j in range(kw):
        bands[:, :, columns * stride + j * dilation, columns] = taps[:, :, j].T[:, :, None]
    return bands


def depthwise_conv2d(x: np.ndarray, weight: DepthwiseWeight, stride: tuple[int, int],
                     dilation: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """Depthwise convolution of padded NCHW ``x``; a new contiguous NCHW array."""
    if out_hw[1] <= BANDED_MAX_WIDTH:
        bands = weight.bands(x.shape[3], out_hw[1], stride[1], dilation[1])
        return _banded(x, bands, stride[0], dilation[0], out_hw[0])
    return _taps(x, weight.taps, stride, dilation, out_hw)


def _banded(x: np.ndarray, bands: np.ndarray, stride: int, dilation: int, out_height: int) -> np.ndarray:
    """Sum over kernel rows of (C, N * OH, W) row blocks times the (C, W, OW) bands."""
    n, c, _, width = x.shape
    by_channel = x.transpose(1, 0, 2, 3)                      # (C, N, H, W), a view
    out = None
    for i, band in enumerate(bands):
        rows = by_channel[:, :, i * dilation: i * dilation + stride * (out_height - 1) + 1: stride]
        product = np.matmul(rows.reshape(c, n * out_height, width), band)
        out = product if out is None else np.add(out, product, out=out)
    return np.ascontiguousarray(out.reshape(c, n, out_height, -1).transpose(1, 0, 2, 3))


def _taps(x: np.ndarray, taps: np.ndarray, stride: tuple[int, int], dilation: tuple[int, int],
          out_hw: tuple[int, int]) -> np.ndarray:
    """Sum over taps (i, j) of the strided window of ``x`` times the per-channel ``taps[:, i, j]``."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    kh, kw = taps.shape[1:]
    out = scratch = None
    for i in range(kh):
        for j in range(kw):
            window = x[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            weight = taps[:, i, j, None, None]
            if out is None:
                out = np.multiply(window, weight)
                scratch = np.empty_like(out)
            else:
                np.multiply(window, weight, out=scratch)
                out += scratch
    return out
