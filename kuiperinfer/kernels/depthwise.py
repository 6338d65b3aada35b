"""Depthwise convolution (one filter per channel) as batched products with banded matrices.

GEMM as in im2col serves depthwise convolution badly (a 1 x 9 by 9 x P product per
channel), and a sum over the kernel's taps (multiply a strided view by a per-channel
weight, accumulate) makes 2 * kh * kw passes over the output in NumPy calls whose
inner loops are a row of 7 to 112 pixels.

Here each kernel row ``i`` becomes one banded (Toeplitz) matrix per channel,
``B[i, c, x * stride + j * dilation, x] = w[c, i, j]``, and the output rows are
``out[c, y, :] = sum_i x[c, y * stride + i * dilation, :] @ B[i, c]``: kh batched
matrix products over all channels, rows and images at once. The band spends more
multiplications than the taps (its input width instead of kw per output), so wide
outputs are cut into blocks of a few columns that share one small band, each block
reading only the input columns under it. Channels go a block at a time, so that the
input and the partial sums of a block stay in cache over the kernel rows.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

BLOCK_WIDTH = 14
"""Output columns per block (narrower rows are one block). Measured on EfficientNet-Lite0's and
MobileNetV3's shapes, stride 1 and 2, 14 to 112 wide: 14 beat 8, 28 and whole rows."""
CHANNEL_BLOCK_BYTES = 1 << 20
"""Input bytes convolved at a time (a block of channels that stays in cache over the kernel rows)."""
_MEMO_LIMIT = 8


class DepthwiseWeight:
    """Depthwise taps (C, kh, kw) with their banded matrices, made once per block shape."""

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
    n, c, height, width = x.shape
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    kh, kw = weight.taps.shape[1:]
    block = min(ow, BLOCK_WIDTH)
    blocks = -(-ow // block)
    block_width = (block - 1) * sw + (kw - 1) * dw + 1
    need = (blocks - 1) * block * sw + block_width
    if need > width:  # the last block runs past the input: zeros there feed only cropped outputs
        x = np.concatenate([x, np.zeros((n, c, height, need - width), x.dtype)], axis=3)
    bands = weight.bands(block_width, block, sw, dw)
    s_n, s_c, s_h, s_w = x.strides
    out = np.empty((c, n * oh * blocks, block), dtype=np.float32)
    product = np.empty_like(out)
    step = max(1, CHANNEL_BLOCK_BYTES // (n * height * x.shape[3] * x.itemsize))
    for start in range(0, c, step):  # a block of channels at a time, to stay in cache
        stop = min(start + step, c)
        for i, band in enumerate(bands):
            # (channels, N, OH, blocks, block_width): the input columns of each output block
            rows = as_strided(x[:, start:stop, i * dh:], (stop - start, n, oh, blocks, block_width),
                              (s_c, s_n, s_h * sh, s_w * sw * block, s_w), writeable=False)
            rows = rows.reshape(stop - start, n * oh * blocks, block_width)
            target = out[start:stop] if i == 0 else product[start:stop]
            np.matmul(rows, band[start:stop], out=target)
            if i:
                out[start:stop] += target
    out = out.reshape(c, n, oh, blocks * block)[..., :ow].transpose(1, 0, 2, 3)
    return np.ascontiguousarray(out)
