"""Pooling windows: output sizes as PyTorch computes them, max over strided taps,
and adaptive pooling as products with averaging matrices."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def pool_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int,
                     ceil_mode: bool) -> int:
    """PyTorch's pooling output length; with ceil_mode the last window must start inside."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def pad_for_pooling(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                    padding: tuple[int, int], dilation: tuple[int, int],
                    out_hw: tuple[int, int], value: float) -> np.ndarray:
    """Pad H and W with ``value`` so that every one of the ``out_hw`` windows lies inside."""
    n, c, h, w = x.shape
    need_h = (out_hw[0] - 1) * stride[0] + dilation[0] * (kernel[0] - 1) + 1
    need_w = (out_hw[1] - 1) * stride[1] + dilation[1] * (kernel[1] - 1) + 1
    bottom, right = max(need_h - h - padding[0], 0), max(need_w - w - padding[1], 0)
    if not (padding[0] or padding[1] or bottom or right):
        return x
    out = np.full((n, c, padding[0] + h + bottom, padding[1] + w + right), value, dtype=x.dtype)
    out[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + w] = x
    return out


def max_pool2d(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], dilation: tuple[int, int], ceil_mode: bool) -> np.ndarray:
    """Max pooling of NCHW ``x``; padding counts as -inf, NaN propagates as in PyTorch."""
    oh = pool_output_size(x.shape[2], kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
    ow = pool_output_size(x.shape[3], kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
    if oh < 1 or ow < 1:
        raise ValueError(f"input {x.shape} is too small for kernel {kernel} with padding {padding}")
    xp = pad_for_pooling(x, kernel, stride, padding, dilation, (oh, ow), -np.inf)
    out = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            y0, x0 = i * dilation[0], j * dilation[1]
            window = xp[:, :, y0: y0 + stride[0] * (oh - 1) + 1: stride[0],
                        x0: x0 + stride[1] * (ow - 1) + 1: stride[1]]
            if out is None:
                out = window.copy()
            else:
                np.maximum(out, window, out=out)
    return out


@lru_cache(maxsize=256)
def adaptive_average_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) matrix whose row i averages PyTorch's adaptive window i."""
    matrix = np.zeros((out, size), dtype=np.float32)
    for i in range(out):
        start, end = (i * size) // out, -((-(i + 1) * size) // out)
        matrix[i, start:end] = 1.0 / (end - start)
    matrix.setflags(write=False)
    return matrix


def adaptive_avg_pool2d(x: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Adaptive average pooling of NCHW ``x`` to ``out_hw``."""
    h, w = x.shape[-2:]
    oh, ow = out_hw
    if (oh, ow) == (1, 1):
        return x.mean(axis=(-2, -1), keepdims=True, dtype=np.float32).astype(x.dtype, copy=False)
    if h % oh == 0 and w % ow == 0:
        blocks = x.reshape(*x.shape[:-2], oh, h // oh, ow, w // ow)
        return blocks.mean(axis=(-3, -1), dtype=np.float32).astype(x.dtype, copy=False)
    rows = np.matmul(adaptive_average_matrix(h, oh), x)
    return np.matmul(rows, adaptive_average_matrix(w, ow).T)
