"""Transposed convolution whose stride equals its kernel, on channels-last (NHWC) memory.

U-Net's and feature pyramids' learned upsampling (``nn.ConvTranspose2d(c, c // 2, 2,
stride=2)``) has no padding, dilation or groups and a stride equal to its kernel: every
input pixel's contribution fills its own kh x kw block of output pixels, and no two
blocks overlap. Nothing needs summing (as :mod:`~kuiperinfer.kernels.col2im` does for
the general case): in NHWC memory it is one product per block of input rows,

    (pixels, C_in) @ (C_in, kh*kw*C_out) -> (pixels, kh, kw, C_out),

whose rows, with the bias added while they are in cache, are copied into their blocks
of the NHWC output. The blocks of rows may be shared among threads
(:mod:`~kuiperinfer.kernels.parallel`).
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.layout import nhwc
from kuiperinfer.kernels.parallel import even_step, run_parts, threads_for

BLOCK_BYTES = 1 << 20
"""Bytes of products made at a time: a block of input rows whose products stay in cache
while the bias is added and they are copied into their output blocks."""


def pack_blockwise_weight(weight: np.ndarray) -> np.ndarray:
    """A transposed convolution's (C_in, C_out, kh, kw) weight as the (C_in, kh*kw*C_out)
    operand of :func:`blockwise_conv_transpose2d`."""
    return np.require(weight.transpose(0, 2, 3, 1).reshape(weight.shape[0], -1), np.float32, "CA")


def blockwise_conv_transpose2d(x: np.ndarray, packed: np.ndarray, kernel: tuple[int, int],
                               bias: np.ndarray | None = None) -> np.ndarray:
    """Transposed convolution of NCHW ``x`` (any memory layout) with stride ``kernel`` and a
    :func:`pack_blockwise_weight` operand; a new contiguous (N, H*kh, W*kw, C_out) array."""
    n, c, h, w = x.shape
    kh, kw = kernel
    k = packed.shape[1] // (kh * kw)
    source = nhwc(x)
    out = np.empty((n, h, kh, w, kw, k), dtype=np.float32)
    work = n * h * w * c * packed.shape[1]
    threads = threads_for(work)
    step = even_step(h, BLOCK_BYTES // (w * packed.shape[1] * packed.itemsize), threads, n)

    def multiply(block: tuple[int, int]) -> None:
        image, start = block
        rows = source[image, start:start + step]
        product = np.matmul(rows.reshape(-1, c), packed).reshape(rows.shape[0], w, kh, kw, k)
        if bias is not None:
            product += bias
        np.copyto(out[image, start:start + step], product.transpose(0, 2, 1, 3, 4))

    run_parts([(image, start) for image in range(n) for start in range(0, h, step)], work, multiply)
    return out.reshape(n, h * kh, w * kw, k)
