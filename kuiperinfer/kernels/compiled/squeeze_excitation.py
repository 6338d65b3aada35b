"""Squeeze-and-excitation in one compiled call per image: ``x * expand(reduce(mean of x))``.

The compiled twin of :class:`kuiperinfer.layers.fused.SqueezeExcitation`'s NumPy path
(:func:`~kuiperinfer.kernels.pooling.global_avg_pool2d`, two products with their
epilogues, a broadcast multiplication). On channels-last (N, H*W, C) input each step is a
loop along the contiguous channels: the mean adds the pixels' channel rows, the two
products add rows of the (C, R) and (R, C) weights scaled by one value each, and the gate
multiplies every pixel's channel row into a fresh output. One call replaces about six
NumPy calls, which at these sizes (a few thousand values) cost more than the arithmetic.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.compiled.activation import finish_row
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue
from kuiperinfer.kernels.jit import inline, kernel, kernel_array


@inline
def add_scaled_rows(vector: np.ndarray, matrix: np.ndarray, out: np.ndarray) -> None:
    """``out = vector @ matrix``, one scaled row of ``matrix`` added at a time."""
    for q in range(out.shape[0]):
        out[q] = 0
    for i in range(matrix.shape[0]):
        v = vector[i]
        row = matrix[i]
        for q in range(out.shape[0]):
            out[q] += v * row[q]


@kernel
def squeeze_excitation(x: np.ndarray, reduce: np.ndarray, reduce_bias: np.ndarray, reduce_code: int,
                       reduce_a: np.float32, reduce_b: np.float32, expand: np.ndarray, expand_bias: np.ndarray,
                       expand_code: int, expand_a: np.float32, expand_b: np.float32, out: np.ndarray) -> None:
    """``out[n] = x[n] * gate[n]`` for every image of ``x`` (N, P, C) with
    ``gate = act2(act1(mean(x[n]) @ reduce + b1) @ expand + b2)``; ``reduce`` is (C, R)."""
    n, pixels, c = x.shape
    mean = np.empty(c, np.float32)
    hidden = np.empty(reduce.shape[1], np.float32)
    gate = np.empty(c, np.float32)
    scale = np.float32(1) / np.float32(pixels)
    for image in range(n):
        for q in range(c):
            mean[q] = 0
        for p in range(pixels):
            row = x[image, p]
            for q in range(c):
                mean[q] += row[q]
        for q in range(c):
            mean[q] *= scale
        add_scaled_rows(mean, reduce, hidden)
        finish_row(hidden, reduce_bias, reduce_code, reduce_a, reduce_b)
        add_scaled_rows(hidden, expand, gate)
        finish_row(gate, expand_bias, expand_code, expand_a, expand_b)
        for p in range(pixels):
            source, target = x[image, p], out[image, p]
            for q in range(c):
                target[q] = source[q] * gate[q]


class CompiledSqueezeExcitation:
    """The gate's two 1x1 convolutions as the (C, R) and (R, C) matrices of their products
    with their compiled epilogues (bias and activation), for :func:`squeeze_excitation`."""

    def __init__(self, reduce: np.ndarray, reduce_epilogue: CompiledEpilogue, expand: np.ndarray,
                 expand_epilogue: CompiledEpilogue):
        self.reduce = kernel_array(reduce)
        self.expand = kernel_array(expand)
        self._reduce = (reduce_epilogue.bias, *reduce_epilogue.code)
        self._expand = (expand_epilogue.bias, *expand_epilogue.code)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The gated NHWC ``x`` (N, H, W, C; C-contiguous, writable, float32) as a new array."""
        n, h, w, c = x.shape
        out = np.empty_like(x)
        squeeze_excitation(x.reshape(n, h * w, c), self.reduce, *self._reduce, self.expand, *self._expand,
                           out.reshape(n, h * w, c))
        return out

