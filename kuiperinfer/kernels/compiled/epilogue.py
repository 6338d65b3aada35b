"""What follows a matrix product, in one pass over its rows: bias, activation, residual.

:class:`CompiledEpilogue` is the compiled twin of
:class:`~kuiperinfer.kernels.elementwise.Epilogue` (same call: a block of output pixels
whose last axis holds the output channels), and :func:`add_residual_rows` the twin of
adding a residual in place and applying the activation after it.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.compiled.activation import ActivationCode, finish_row
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.kernels.jit import inline, kernel

LOWEST, HIGHEST = np.float32(0), np.float32(255)
"""The range of uint8 activations, where quantized values are clipped."""


@inline
def requantized(v: np.float32, scale: np.float32, zero_point: np.float32) -> np.float32:
    """The float32 ``v`` quantized, ``clip(rint(v / scale) + zero_point, 0, 255)``, as a
    float32 (:func:`~kuiperinfer.kernels.matrix.int8.quantize`'s numbers)."""
    return min(max(np.rint(v / scale) + zero_point, LOWEST), HIGHEST)


@kernel
def finish_rows(out: np.ndarray, bias: np.ndarray, code: int, a: np.float32, b: np.float32) -> None:
    """``out = activation(out + bias)`` in place over every row of the (P, K) ``out``."""
    for i in range(out.shape[0]):
        finish_row(out[i], bias, code, a, b)


@kernel
def finish_transposed(out_t: np.ndarray, out: np.ndarray, bias: np.ndarray, start: int, stop: int, code: int,
                      a: np.float32, b: np.float32) -> None:
    """``out[:, start:stop] = activation(out_t[start:stop].T + bias[start:stop])``: rows
    ``start:stop`` of a product computed transposed, the (K, P) ``out_t``, into the (P, K) ``out``."""
    for j in range(start, stop):
        for i in range(out.shape[0]):
            out[i, j] = out_t[j, i]
    columns = bias[start:stop]
    for i in range(out.shape[0]):
        finish_row(out[i, start:stop], columns, code, a, b)


@kernel
def activate(x: np.ndarray, out: np.ndarray, zeros: np.ndarray, code: int, a: np.float32, b: np.float32) -> None:
    """``out = activation(x)`` over the flat arrays ``x`` and ``out``, a row of ``len(zeros)``
    values at a time (the zeros are :func:`finish_row`'s bias)."""
    step = zeros.shape[0]
    for start in range(0, x.shape[0], step):
        stop = min(x.shape[0], start + step)
        row = out[start:stop]
        row[:] = x[start:stop]
        finish_row(row, zeros, code, a, b)


@kernel
def add_residual_rows(out: np.ndarray, residual: np.ndarray, code: int, a: np.float32, b: np.float32) -> None:
    """``out = activation(out + residual)`` in place, both (P, K): the residual row is the bias
    :func:`finish_row` adds."""
    for i in range(out.shape[0]):
        finish_row(out[i], residual[i], code, a, b)


class CompiledEpilogue:
    """A bias along the last axis, then an activation, in place on each block of output rows
    (:class:`~kuiperinfer.kernels.elementwise.Epilogue`'s call); channel slices and blocks
    that are not one run of memory go to the reference."""

    def __init__(self, bias: np.ndarray | None, channels: int, activation: InplaceActivation | None):
        # a writable copy: a read-only array (the model file's) would be another specialisation
        self.bias = np.zeros(channels, np.float32) if bias is None else np.array(bias, np.float32)
        self.activation = activation
        self.code = ActivationCode.of(activation)
        self._reference = Epilogue(bias, activation)

    def __call__(self, block: np.ndarray, channels: slice = slice(None)) -> None:
        if channels != slice(None) or not block.flags.c_contiguous or block.shape[-1] != len(self.bias):
            self._reference(block, channels)
            return
        finish_rows(block.reshape(-1, block.shape[-1]), self.bias, *self.code)


def add_residual(out: np.ndarray, residual: np.ndarray, activation: InplaceActivation | None) -> bool:
    """``out = activation(out + residual)`` in place where both are C-contiguous arrays of one
    shape (NHWC or any other, the same); False, doing nothing, for any other pair."""
    if out.shape != residual.shape or not (out.flags.c_contiguous and residual.flags.c_contiguous) \
            or residual.dtype != np.float32 or out.ndim == 0:
        return False
    rows = out.reshape(-1, _row_length(out.size, out.shape[-1]))
    add_residual_rows(rows, residual.reshape(rows.shape), *ActivationCode.of(activation))
    return True


RESIDUAL_ROW = 1024
"""Values per row the residual is added over, about: the kernel's loop along a row of only
the channels (16 or 24 in a depthwise network's early blocks) costs more in its setup than
in its adds."""


def _row_length(size: int, channels: int) -> int:
    """The longest run of whole pixels, at most about :data:`RESIDUAL_ROW` values, that
    ``size`` values cut into evenly (``channels`` if no more fits)."""
    pixels = size // channels
    best = 1
    for count in range(1, max(1, RESIDUAL_ROW // channels) + 1):
        if pixels % count == 0:
            best = count
    return best * channels
