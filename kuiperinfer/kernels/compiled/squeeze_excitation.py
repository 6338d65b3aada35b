"""Squeeze-and-excitation in one compiled call per image: ``x * expand(reduce(mean of x))``.

The compiled twin of :class:`kuiperinfer.layers.fused.SqueezeExcitation`'s NumPy path
(:func:`~kuiperinfer.kernels.pooling.global_avg_pool2d`, two products with their
epilogues, a broadcast multiplication). On channels-last (N, H*W, C) input each step is a
loop along the contiguous channels: the mean adds the pixels' channel rows as the compiled
global average pooling does (:func:`~.pooling.channel_means`), the two
products add rows of the (C, R) and (R, C) weights scaled by one value each, and the gate
multiplies every pixel's channel row into a fresh output. One call replaces about six
NumPy calls, which at these sizes (a few thousand values) cost more than the arithmetic.

Its int8 form (:class:`CompiledInt8SqueezeExcitation`) computes the gate's two products as
the int8 products do, quantized activations times int8 weights summed exactly in int32, to
the same numbers, in the same one call.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kuiperinfer.kernels.compiled.activation import ActivationCode, finish_row
from kuiperinfer.kernels.compiled.epilogue import CompiledEpilogue, requantized
from kuiperinfer.kernels.compiled.pooling import channel_means
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.jit import compiled_for, inline, kernel, kernel_array


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
    mean, block = np.empty(c, np.float32), np.empty(c, np.float32)
    hidden = np.empty(reduce.shape[1], np.float32)
    gate = np.empty(c, np.float32)
    for image in range(n):
        channel_means(x, image, mean, block)
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
        self._kernel = None
        """:func:`squeeze_excitation`'s machine code for its arguments' types, found on the first
        call (Numba's dispatch would type the twelve arguments again on every call)."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The gated NHWC ``x`` (N, H, W, C; C-contiguous, writable, float32) as a new array."""
        n, h, w, c = x.shape
        out = np.empty_like(x)
        arguments = (x.reshape(n, h * w, c), self.reduce, *self._reduce, self.expand, *self._expand,
                     out.reshape(n, h * w, c))
        if self._kernel is None:
            self._kernel = compiled_for(squeeze_excitation, *arguments)
        self._kernel(*arguments)
        return out



@inline
def int8_gate(values: np.ndarray, product: tuple, shifted: np.ndarray, sums: np.ndarray, out: np.ndarray) -> None:
    """``out`` = the int8 ``product`` (an :meth:`Int8Gate.arguments`) of float32 ``values``:
    quantized as :func:`~.products.quantize_values` does, less the zero point (in
    ``shifted``), times the int8 weight (K, N), summed exactly in int32 (in ``sums``),
    times the columns' scale, then ``activation(y + bias)``: the product's numbers to the bit."""
    input_scale, input_zero, weight, scale, bias, code, a, b = product
    for i in range(values.shape[0]):
        q = requantized(values[i], input_scale, input_zero)
        shifted[i] = np.int32(q) - np.int32(input_zero)
    add_scaled_rows(shifted, weight, sums)
    for j in range(sums.shape[0]):
        out[j] = np.float32(sums[j]) * scale[j]
    finish_row(out, bias, code, a, b)


@kernel
def int8_squeeze_excitation(x: np.ndarray, reduce: tuple, expand: tuple, out: np.ndarray) -> None:
    """``out[n] = x[n] * gate[n]`` for every image of ``x`` (N, P, C), with the gate's two
    int8 products (:func:`int8_gate`) of its channels' mean (:func:`~.pooling.channel_means`,
    as the compiled global average pooling computes it); the reduced channels go to the
    expanding product in its input form."""
    n, pixels, c = x.shape
    r = reduce[2].shape[1]
    mean, block = np.empty(c, np.float32), np.empty(c, np.float32)
    hidden = np.empty(r, np.float32)
    gate = np.empty(c, np.float32)
    shifted = np.empty(max(c, r), np.int32)
    sums = np.empty(max(c, r), np.int32)
    for image in range(n):
        channel_means(x, image, mean, block)
        int8_gate(mean, reduce, shifted, sums[:r], hidden)
        int8_gate(hidden, expand, shifted, sums[:c], gate)
        for p in range(pixels):
            source, target = x[image, p], out[image, p]
            for q in range(c):
                target[q] = source[q] * gate[q]


class Int8Gate(NamedTuple):
    """One int8 product of a squeeze-and-excitation gate (see :func:`int8_gate`)."""

    weight: np.ndarray
    input_scale: float
    input_zero_point: int
    scale: np.ndarray
    bias: np.ndarray | None
    activation: InplaceActivation | None

    def arguments(self) -> tuple:
        """What :func:`int8_gate` takes: the input's scale and zero point, the int8 weight,
        the columns' scale and bias, the activation's code and parameters."""
        bias = np.zeros(self.weight.shape[1], np.float32) if self.bias is None else self.bias
        return (np.float32(self.input_scale), np.float32(self.input_zero_point),
                np.ascontiguousarray(self.weight, np.int8), kernel_array(self.scale), kernel_array(bias),
                *ActivationCode.of(self.activation))


class CompiledInt8SqueezeExcitation:
    """The gate's two 1x1 convolutions as int8 products, each an int8 weight (K, N) with its
    activations' scale and zero point, the scale of each output column (the activations'
    times the weight's), bias and activation, for :func:`int8_squeeze_excitation`."""

    def __init__(self, reduce: Int8Gate, expand: Int8Gate):
        self._reduce, self._expand = reduce.arguments(), expand.arguments()
        self._kernel = None
        """:func:`int8_squeeze_excitation`'s machine code for its arguments' types, found on the
        first call."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The gated NHWC ``x`` (N, H, W, C; C-contiguous, writable, float32) as a new array."""
        n, h, w, c = x.shape
        out = np.empty_like(x)
        arguments = (x.reshape(n, h * w, c), self._reduce, self._expand, out.reshape(n, h * w, c))
        if self._kernel is None:
            self._kernel = compiled_for(int8_squeeze_excitation, *arguments)
        self._kernel(*arguments)
        return out
