"""im2col compiled: the columns of a convolution's windows for the matrix engine's products.

The columns of a stripe of output rows are copied from the channels-last (NHWC) input
itself, padding included: a window's taps that fall outside the image take the padding's
value (the zero point of uint8 activations, zero otherwise), so the input is never copied
padded first. With one group and no dilation the ``kw`` taps of a window row are one
contiguous run of the input, copied in one loop. Any element type: uint8 activations,
bfloat16 bit patterns (uint16), float32.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.jit import kernel


@kernel
def window_columns(x: np.ndarray, image: int, row0: int, rows: int, out_width: int,
                   kernel_hw: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
                   top_left: tuple[int, int], channels: tuple[int, int], fill: np.generic, out: np.ndarray) -> None:
    """``out`` (rows * out_width, kh * kw * C) = the windows of output rows ``row0`` to
    ``row0 + rows`` of ``image`` of the NHWC ``x``, each window's taps (i, j) in order and the
    channels ``channels`` (start, count) of each; taps outside ``x`` are ``fill`` (of ``out``'s
    type)."""
    _, h, w, c = x.shape
    (kh, kw), (sh, sw), (dh, dw), (top, left) = kernel_hw, stride, dilation, top_left
    first, count = channels
    run = kw * count
    for r in range(rows):
        y0 = (row0 + r) * sh - top
        for ox in range(out_width):
            target = out[r * out_width + ox]
            x0 = ox * sw - left
            whole = dw == 1 and count == c and x0 >= 0 and x0 + kw <= w
            for i in range(kh):
                y = y0 + i * dh
                row = target[i * run:(i + 1) * run]
                if y < 0 or y >= h:
                    row[:] = fill
                elif whole:
                    source = x[image, y].reshape(-1)[x0 * c:x0 * c + run]
                    for k in range(run):
                        row[k] = source[k]
                else:
                    for j in range(kw):
                        xx = x0 + j * dw
                        tap = row[j * count:(j + 1) * count]
                        if xx < 0 or xx >= w:
                            tap[:] = fill
                        else:
                            pixel = x[image, y, xx]
                            for k in range(count):
                                tap[k] = pixel[first + k]
