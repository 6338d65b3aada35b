"""im2col compiled: the columns of a convolution's windows for the matrix engine's products.

The columns of a stripe of output rows are copied from the channels-last (NHWC)
activations, padding included: a window's taps that fall outside the image take the
padding's value (the zero point of uint8 activations, zero otherwise), so the input is
never copied padded first. A tap's channels are one contiguous run, and with one group and
no dilation so are the ``kw`` taps of a window row: each run is one ``memcpy``. Any element
type: uint8 activations, bfloat16 bit patterns (uint16), float32. On compiled tiles the
stripes of a convolution are made and multiplied in compiled parts (:func:`column_stripes`),
no Python between a stripe's columns and its product.
"""

from __future__ import annotations

import numpy as np

from kuiperinfer.kernels.jit import AVAILABLE, kernel

if AVAILABLE:
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    from kuiperinfer.kernels.jit import function_at

    @intrinsic
    def copy_values(typingctx, target, target_start, source, source_start, count):  # noqa: ANN001, ANN201
        """``target[target_start:target_start + count] = source[source_start:...]`` as one
        ``llvm.memcpy`` (1-D arrays of one type that do not overlap): several times faster
        than a loop, which LLVM cannot vectorise for fear the two overlap."""
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            pointers = [builder.gep(context.make_array(signature.args[i])(context, builder, args[i]).data,
                                    [args[i + 1]]) for i in (0, 2)]
            size = context.get_constant(types.intp, signature.args[0].dtype.bitwidth // 8)
            cgutils.raw_memcpy(builder, pointers[0], pointers[1], args[4], size)
            return context.get_dummy_value()
        return types.void(target, target_start, source, source_start, count), codegen


@kernel
def window_columns(x: np.ndarray, image: int, row0: int, rows: int, out_width: int, kernel_hw: tuple[int, int],
                   stride: tuple[int, int], dilation: tuple[int, int], top_left: tuple[int, int],
                   channels: tuple[int, int], fill: np.generic, out: np.ndarray) -> None:
    """``out`` (rows * out_width, kh * kw * C), C-contiguous, = the windows of output rows
    ``row0`` to ``row0 + rows`` of ``image`` of the C-contiguous NHWC ``x``, the padding
    ``top_left`` before its first row and column; each window's taps (i, j) in order, and
    of each the channels ``channels`` (start, count); taps outside the image are ``fill``
    (of ``out``'s type)."""
    _, h, w, c = x.shape
    s_n, s_h = h * w * c, w * c
    (kh, kw), (sh, sw), (dh, dw), (top, left) = kernel_hw, stride, dilation, top_left
    first, count = channels
    run = kw * count
    runs = dw == 1 and count == c
    source, target = x.reshape(-1), out.reshape(-1)
    o = 0
    for r in range(rows):
        y0 = (row0 + r) * sh - top
        for ox in range(out_width):
            x0 = ox * sw - left
            inside = x0 >= 0 and x0 + (kw - 1) * dw < w
            for i in range(kh):
                y = y0 + i * dh
                if y < 0 or y >= h:
                    for k in range(run):
                        target[o + k] = fill
                elif runs and inside:
                    copy_values(target, o, source, image * s_n + y * s_h + x0 * c, run)
                else:
                    for j in range(kw):
                        xx = x0 + j * dw
                        tap = o + j * count
                        if xx < 0 or xx >= w:
                            for k in range(count):
                                target[tap + k] = fill
                        else:
                            copy_values(target, tap, source, image * s_n + y * s_h + xx * c + first, count)
                o += run


@kernel
def column_stripes(product_at, product_type, x, out_hw, kernel_hw, stride, dilation, top_left, fill, before,  # noqa: ANN001
                   after, residual, out, numbers, strips, table, buffers, slot, thread, first, last) -> None:
    """Parts ``first:last`` of a single-group convolution through its columns on compiled
    tiles, as the pool's threads take them (:class:`~kuiperinfer.kernels.parallel.CompiledParts`):
    each row of ``table`` (image, first output row, rows) is a stripe whose columns
    (:func:`window_columns`, into thread ``thread``'s ``slot`` values of ``buffers``, of the
    type of ``x``) the product at ``product_at`` multiplies by its weights (``before`` and
    ``after``: the tuples of its arguments around the parts and columns, ``strips`` strips)
    into its rows of ``out`` (N * OH * OW, K; ``out_hw`` is (OH, OW)), its epilogue
    (``numbers``, the ``residual``'s rows where not empty) fused."""
    product = function_at(product_at, product_type)
    c, k = x.shape[3], out.shape[1]
    oh, ow = out_hw
    depth = kernel_hw[0] * kernel_hw[1] * c
    whole = np.empty((1, 4), np.int64)
    for part in range(first, last):
        image, row0, rows = table[part]
        pixels = rows * ow
        columns = buffers[thread * slot:thread * slot + pixels * depth].reshape((pixels, depth))
        window_columns(x, image, row0, rows, ow, kernel_hw, stride, dilation, top_left, (0, c), fill, columns)
        start = (image * oh + row0) * ow
        whole[0, 0], whole[0, 1], whole[0, 2], whole[0, 3] = 0, pixels, 0, strips
        added = residual[start:start + pixels] if residual.size else residual
        product(columns, *before, whole, 0, 1, (0, k), *after, added, out[start:start + pixels], numbers)
