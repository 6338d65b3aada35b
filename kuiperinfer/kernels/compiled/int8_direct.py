"""The direct convolution of few input channels (:mod:`.direct`) for int8: the activations
less their zero point and the int8 weight, both held as float32, whose products and sums of a
few input channels' taps are integers float32 holds exactly, then the int8 products' epilogue
(:func:`~.products.finish`), so that the numbers are those of the int8 product of the
convolution's columns, to the bit. A module of its own: the products' kernels need Numba,
and the float32 direct convolution is imported without it.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.compiled.activation import NONE, ZERO
from kuiperinfer.kernels.compiled.direct import DirectWeight, padded_rows, row_sums
from kuiperinfer.kernels.compiled.products import finish
from kuiperinfer.kernels.jit import kernel, kernel_array


@kernel
def int8_direct_rows(x: np.ndarray, offsets: np.ndarray, weight: np.ndarray, scale: np.ndarray,
                     bias: np.ndarray, residual: np.ndarray, out: np.ndarray, y0: int, y1: int, sh: int, sw: int,
                     dh: int, top: int, left: int, rows: np.ndarray, sums: np.ndarray, numbers: np.ndarray,
                     biases: np.ndarray, scratch: np.ndarray) -> None:
    """:func:`~.direct.direct_rows` for int8: ``x`` holds the image's uint8 activations less their zero
    point and ``weight`` the int8 weight, both as float32, whose sums (at most 2^24 in
    magnitude) float32 holds exactly; each output row's sums, in ``sums`` (OW*K), are scaled
    by ``scale`` (K) and finished into ``out`` (OH*OW, K; uint8 or float32) by the int8
    products' epilogue (:func:`~.products.finish`, its ``numbers``, the ``residual``
    (OH*OW, K) or an empty array, ``biases`` the bias repeated OW times, ``scratch`` OW*K
    values): the numbers of the int8 product of the convolution's columns, to the bit."""
    k = out.shape[1]
    ow = sums.shape[0] // k
    rows[:] = 0
    for y in range(y0, y1):
        padded_rows(x, rows, y, sh, dh, top, left)
        row_sums(rows, offsets, weight, False, bias, sums, 0, ow, sw, NONE, ZERO, ZERO)
        for p in range(ow):
            for c in range(k):
                sums[p * k + c] *= scale[c]
        finish(sums, ow, k, 0, y * ow, 0, k, 0, bias, residual, out, numbers, True, biases, scratch)


class CompiledInt8Direct(DirectWeight):
    """An int8 convolution weight (K, C, kh, kw) of few input channels as the rows of
    :func:`int8_direct_rows`, with ``scale`` (K), the activations' scale times each output
    channel's weight scale, and ``bias`` (K), for zero padding."""

    def __init__(self, weight: np.ndarray, scale: np.ndarray, bias: np.ndarray):
        if weight.dtype != np.int8:
            raise ValueError(f"an int8 direct convolution's weight is int8, not {weight.dtype}")
        super().__init__(weight)
        self.scale, self.bias = kernel_array(scale), kernel_array(bias)

    def __call__(self, a: np.ndarray, zero_point: int, out_hw: tuple[int, int], stride: tuple[int, int],
                 dilation: tuple[int, int], padding: tuple[tuple[int, int], tuple[int, int]],
                 numbers: np.ndarray, residual: np.ndarray, out_dtype: type) -> np.ndarray:
        """The convolution of uint8 NCHW activations ``a`` (any memory layout) with
        ``zero_point``, finished by the int8 products' epilogue ``numbers`` (with the
        ``residual``, (N, OH*OW, K), or an empty array); a new (N, OH*OW, K) array of
        ``out_dtype`` (uint8 requantizes), bands of its rows shared among threads."""
        x = np.ascontiguousarray(a, np.float32)
        x -= np.float32(zero_point)   # exact: integers below 2^24
        (oh, ow), k = out_hw, self.weight.shape[1]
        out = np.empty((x.shape[0], oh * ow, k), out_dtype)
        biases = np.tile(self.bias, ow)

        def rows_of(image: int, first: int, stop: int, rows: np.ndarray, offsets: np.ndarray) -> None:
            added = residual[image] if residual.size else residual
            int8_direct_rows(x[image], offsets, self.weight, self.scale, self.bias, added, out[image], first, stop,
                             *stride, dilation[0], padding[0][0], padding[1][0], rows,
                             np.empty(ow * k, np.float32), numbers, biases, np.empty(ow * k, np.float32))

        self.share_rows(x, out_hw, stride, dilation, rows_of)
        return out
