"""Depthwise convolution (one filter per channel) on channels-last (NHWC) input.

GEMM serves depthwise convolution badly: per channel it is a (P, kh*kw) by (kh*kw, 1)
product. Here it is one ``np.einsum`` over a zero-copy strided view of the windows, in
one of two forms:

* **Rows** (stride 1 along the width): in NHWC the output row ``out[n, y]`` read as one
  vector of OW*C values is ``sum_ij x[n, y*sh + i*dh, j*dw : j*dw + OW] * tile(taps[i, j])``,
  every operand a contiguous run of OW*C values, so the contraction's inner loop is a
  whole output row and each tap is one fused multiply-add pass over it. A stride ``s``
  along the width first splits the columns into ``s`` phases (one copy of the input);
  tap ``j`` then reads phase ``j % s`` at offset ``j // s``, which is again a contiguous
  run, and the taps become (kh, s, ceil(kw / s)) with zeros where ``j >= kw``.
* **Pixels**: ``out[n, y, x, c] = sum_ij window[n, y, x, i, j, c] * taps[i, j, c]``, whose
  inner loop runs along the C channels of one pixel. It wins for a strided width with
  many channels, where the phase copy and the zero taps cost more than short loops.

Zero-padded, undilated convolutions (nearly all) go a stripe of rows at a time through
:mod:`~kuiperinfer.kernels.depthwise_stripes`, which writes its stripes already split into
phases and so always takes the row form (:func:`phased_rows`); :func:`depthwise_conv2d`
computes the others from a padded copy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kuiperinfer.kernels.parallel import run_parts, threads_for

PIXELS_MIN_CHANNELS = 96
"""Channels from which a convolution strided along the width takes the pixel form, whose
short loops over the channels then cost less than the phase copy and zero taps of rows."""
_MEMO_LIMIT = 8


def takes_pixels(channels: int, stride: tuple[int, int], dilation: tuple[int, int]) -> bool:
    """Whether :func:`depthwise_rows` computes in the pixel form (else in whole rows)."""
    return stride[1] > 1 and (dilation[1] > 1 or channels >= PIXELS_MIN_CHANNELS)


class DepthwiseWeight:
    """A (C, 1, kh, kw) depthwise weight as taps (kh, kw, C), with the tiled row taps of
    :func:`phased_rows` made once per output width and stride: at build time for the
    output width the model was exported with (``out_width``) when the convolution computes
    in rows (``in_rows``), else on first use."""

    def __init__(self, weight: np.ndarray, out_width: int | None = None, stride: tuple[int, int] = (1, 1),
                 in_rows: bool = False):
        self.taps = np.require(weight[:, 0].transpose(1, 2, 0), np.float32, "CA")
        self._rows: dict[tuple[int, int], np.ndarray] = {}
        if out_width is not None and in_rows:
            self.row_taps(out_width, stride[1])

    def row_taps(self, out_width: int, stride: int) -> np.ndarray:
        """(kh, stride, ceil(kw / stride), OW*C): tap ``j`` at [:, j % stride, j // stride], each
        repeated across the output width (remembered for a few widths; filling the memo from
        several threads at once only computes one twice)."""
        key = (out_width, stride)
        rows = self._rows.get(key)
        if rows is None:
            kh, kw, c = self.taps.shape
            phased = np.zeros((kh, stride * -(-kw // stride), c), dtype=np.float32)
            phased[:, :kw] = self.taps
            phased = phased.reshape(kh, -1, stride, c).transpose(0, 2, 1, 3)   # (kh, stride, kw', C)
            if len(self._rows) >= _MEMO_LIMIT:
                self._rows.clear()
            rows = self._rows[key] = np.ascontiguousarray(np.tile(phased, out_width))
        return rows


def depthwise_conv2d(x: np.ndarray, weight: DepthwiseWeight, stride: tuple[int, int],
                     dilation: tuple[int, int], out_hw: tuple[int, int],
                     epilogue: Callable[..., object] | None = None) -> np.ndarray:
    """Depthwise convolution of padded NHWC ``x``, then ``epilogue`` in place; a new
    contiguous (N, OH, OW, C) array. The output rows may be shared among threads
    (:mod:`~kuiperinfer.kernels.parallel`)."""
    n, _, _, c = x.shape
    (oh, ow), (kh, kw) = out_hw, weight.taps.shape[:2]
    out = np.empty((n, oh, ow, c), dtype=np.float32)
    compute = depthwise_rows(x, weight, stride, dilation, out)

    def compute_rows(part: slice) -> None:
        compute(part)
        if epilogue is not None:
            epilogue(out[:, part])

    work = n * oh * ow * c * kh * kw
    threads = threads_for(work)
    run_parts([slice(oh * i // threads, oh * (i + 1) // threads) for i in range(threads)], work, compute_rows)
    return out


def depthwise_rows(x: np.ndarray, weight: DepthwiseWeight, stride: tuple[int, int],
                   dilation: tuple[int, int], out: np.ndarray) -> Callable[[slice], None]:
    """The depthwise convolution of padded NHWC ``x`` into the contiguous NHWC ``out`` as a
    function that computes the output rows it is given (a slice), in the calling thread."""
    n, _, _, c = x.shape
    (sh, sw), (dh, dw), (_, oh, ow, _) = stride, dilation, out.shape
    kh, kw = weight.taps.shape[:2]
    if takes_pixels(c, stride, dilation):
        s_n, s_h, s_w, s_c = x.strides
        windows = as_strided(x, (n, oh, ow, kh, kw, c), (s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c),
                             writeable=False)

        def pixels(part: slice) -> None:
            np.einsum("nyxijc,ijc->nyxc", windows[:, part], weight.taps, out=out[:, part])
        return pixels

    if sw > 1:
        return phased_rows(phase_columns(x, sw), weight, sh, dh, out)
    return phased_rows(x[:, :, None], weight, sh, dh, out, column_step=dw)


def phase_columns(x: np.ndarray, stride: int) -> np.ndarray:
    """NHWC ``x`` with its columns split into ``stride`` phases: a new (N, H, stride, W', C)
    array ``phased[n, h, q, m] = x[n, h, m * stride + q]``, zero past the last column."""
    n, h, width, c = x.shape
    phased = np.zeros((n, h, stride, -(-width // stride), c), dtype=np.float32)
    for q in range(stride):
        columns = x[:, :, q::stride]
        phased[:, :, q, :columns.shape[2]] = columns
    return phased


def phased_rows(phased: np.ndarray, weight: DepthwiseWeight, stride: int, dilation: int, out: np.ndarray,
                column_step: int = 1) -> Callable[[slice], None]:
    """The row form over an input whose columns are split into as many phases as the width
    stride (``phased``, (N, H, sw, W', C); one phase for stride 1), into the contiguous NHWC
    ``out``, as a function computing the output rows it is given. ``stride`` and
    ``dilation`` are along the height; ``column_step`` is the width dilation of a single
    phase."""
    n, _, sw, _, c = phased.shape
    _, oh, ow, _ = out.shape
    kh = weight.taps.shape[0]
    taps = weight.row_taps(ow, sw)
    s_n, s_h, s_q, s_w, s_c = phased.strides
    rows = as_strided(phased, (n, kh, sw, taps.shape[2], oh, ow * c),
                      (s_n, s_h * dilation, s_q, s_w * column_step, s_h * stride, s_c), writeable=False)
    out_rows = out.reshape(n, oh, ow * c)

    def whole_rows(part: slice) -> None:
        np.einsum("niqjyp,iqjp->nyp", rows[..., part, :], taps, out=out_rows[:, part])
    return whole_rows
