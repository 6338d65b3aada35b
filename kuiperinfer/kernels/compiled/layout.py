"""An NCHW array copied channels-last, compiled: how a convolution through columns takes the
graph's row-major input (:mod:`kuiperinfer.kernels.layout` explains the layout).

NumPy's copy of the transposed view gathers the values one at a time (0.29 ms for one
224 x 224 RGB image on a Zen 4); :func:`channels_last_rows` writes each output row from the
input's rows of that height, one channel at a time (0.055 ms). Blocks of rows go to the run's
threads.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.jit import kernel
from kuiperinfer.kernels.parallel import PART_WORK, compiled_parts

COMPILED_COPY_WORK = 4
"""Multiply-adds a value this copy moves counts as in the sharing rule: a quarter of
:data:`kuiperinfer.kernels.layout.COPY_WORK`, NumPy's copy, as it runs about four times
as fast."""


@kernel
def channels_last_rows(x: np.ndarray, out: np.ndarray, step: int, first: int, last: int) -> None:
    """The blocks of ``step`` rows ``first:last`` (image * H + row) of the C-contiguous
    (N, H, W, C) ``out`` = the (N, C, H, W) ``x``."""
    _, c, h, w = x.shape
    for r in range(first * step, min(last * step, out.shape[0] * h)):
        image, y = r // h, r % h
        row = out[image, y].reshape(-1)
        for k in range(c):
            plane = x[image, k, y]
            for j in range(w):
                row[j * c + k] = plane[j]


def channels_last(x: np.ndarray) -> np.ndarray:
    """The (N, C, H, W) ``x`` as a C-contiguous (N, H, W, C) array: its view where ``x`` is
    channels-last already, else a copy."""
    source = x.transpose(0, 2, 3, 1)
    if source.flags.c_contiguous:
        return source
    out = np.empty(source.shape, x.dtype)
    rows, work = source.shape[0] * source.shape[1], x.size * COMPILED_COPY_WORK
    step = -(-rows // max(1, min(rows, work // PART_WORK)))
    compiled_parts(channels_last_rows).run(-(-rows // step), work, (x, out, step), ())
    return out
