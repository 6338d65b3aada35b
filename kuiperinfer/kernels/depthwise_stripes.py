"""Depthwise convolution one stripe of rows at a time, optionally of a 1x1 convolution's output.

MobileNet and EfficientNet blocks expand their channels with a 1x1 (pointwise)
convolution and filter each expanded channel with a depthwise one. Computed one after
the other, the expanded tensor, the largest of the block (96 x 112 x 112 per image in
EfficientNet-Lite0), is written to memory whole, copied once more with a zero border
for the depthwise kernel, and read back. Here it exists only a stripe at a time:

* A stripe buffer holds the zero-padded rows that ``stripe`` output rows of the
  depthwise convolution read, with its columns split into as many phases as the width
  stride (:func:`~kuiperinfer.kernels.depthwise.phased_rows`), so that every tap of a
  strided convolution reads contiguous runs too.
* For each stripe, the pointwise product (and its epilogue) fills the rows the buffer
  does not hold yet, straight from the input; without a pointwise convolution the rows
  are copied from the input. The rows above and below the input are zero. The rows the
  previous stripe shares with this one (``kh - sh`` of them) move to the top of the
  buffer rather than being made again.
* The depthwise kernel then makes the stripe's output rows and applies its epilogue
  while they are in cache.

The buffer is about ``STRIPE_BYTES``, so everything between the input and the output
stays in the core's cache; peak memory holds one buffer per thread instead of a padded
copy of the whole input (and, with a pointwise convolution, the expanded tensor).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kuiperinfer.kernels.depthwise import DepthwiseWeight, phased_rows
from kuiperinfer.kernels.parallel import run_parts, threads_for

STRIPE_BYTES = 1 << 20
"""Size of a stripe buffer: large enough that the per-stripe overhead is small, small
enough that a stripe stays in the core's cache."""

Epilogue = Callable[..., object] | None


def depthwise_in_stripes(x: np.ndarray, depthwise: DepthwiseWeight, stride: tuple[int, int],
                         padding: tuple[tuple[int, int], tuple[int, int]], out_hw: tuple[int, int],
                         epilogue: Epilogue = None, pointwise: np.ndarray | None = None,
                         pointwise_epilogue: Epilogue = None) -> np.ndarray:
    """Depthwise convolution (zero ``padding``, ``stride``, no dilation) of the NHWC ``x``
    (N, H, W, C; any strides) or, given ``pointwise`` (C, E), of the 1x1 convolution of
    ``x`` by it, each followed by its epilogue in place; a new contiguous (N, OH, OW, E)
    array.

    Images too large for one buffer go a stripe of output rows at a time; smaller ones go
    several whole images at a time. The images, or the parts of a single image's rows,
    may be shared among threads (:mod:`~kuiperinfer.kernels.parallel`).
    """
    n, h, w, c_in = x.shape
    channels = c_in if pointwise is None else pointwise.shape[1]
    (top, bottom), (left, right) = padding
    kh, kw = depthwise.taps.shape[:2]
    oh, ow = out_hw
    out = np.empty((n, oh, ow, channels), dtype=np.float32)
    work = n * oh * ow * channels * kh * kw + (0 if pointwise is None else n * h * w * c_in * channels)
    threads = threads_for(work)
    row_bytes = (left + w + right) * channels * out.itemsize
    stripe = max(1, min(oh, (STRIPE_BYTES // row_bytes - kh) // stride[0] + 1))
    if n < threads:       # a part of each image's rows for every thread
        parts = [(slice(i, i + 1), oh * t // threads, oh * (t + 1) // threads)
                 for i in range(n) for t in range(threads)]
    elif stripe == oh:    # whole images, as many as fit, but a part for every thread
        images = max(1, min(STRIPE_BYTES // ((top + h + bottom) * row_bytes), n // threads))
        parts = [(slice(i, i + images), 0, oh) for i in range(0, n, images)]
    else:
        parts = [(slice(i, i + 1), 0, oh) for i in range(n)]

    def run(part: tuple[slice, int, int]) -> None:
        images, first, stop = part
        stripes = _Stripes(x[images], channels, depthwise, stride, padding, stripe, pointwise, pointwise_epilogue)
        for y in range(first, stop, stripe):
            rows = out[images, y:min(stop, y + stripe)]
            stripes.compute(y, rows)
            if epilogue is not None:
                epilogue(rows)

    run_parts(parts, work, run)
    return out


class _Stripes:
    """The stripe buffer of a block of images (B, H, W, C), walked down their output rows
    by one thread."""

    def __init__(self, images: np.ndarray, channels: int, depthwise: DepthwiseWeight, stride: tuple[int, int],
                 padding: tuple[tuple[int, int], tuple[int, int]], stripe: int, pointwise: np.ndarray | None,
                 pointwise_epilogue: Epilogue):
        self.images, self.pointwise, self.pointwise_epilogue = images, pointwise, pointwise_epilogue
        self.depthwise, self.stride = depthwise, stride
        count, _, w, _ = images.shape
        (self.top, _), (left, right) = padding
        self.kernel_height = depthwise.taps.shape[0]
        phases = stride[1]
        rows = (stripe - 1) * stride[0] + self.kernel_height
        self.buffer = np.empty((count, rows, phases, -(-(left + w + right) // phases), channels), dtype=np.float32)
        # the image's column j is padded column left + j: phase (left + j) % phases
        self.columns = [(q, (left + j) // phases, slice(j, None, phases))
                        for q, j in ((q, (q - left) % phases) for q in range(phases)) if j < w]
        # zeroed once, not whole: the border columns (and those past the last phase) stay
        # zero, and _fill writes every other column of every row it hands on
        filled = {q: (start, start + len(range(w)[columns])) for q, start, columns in self.columns}
        for q in range(phases):
            first, end = filled.get(q, (0, 0))
            self.buffer[:, :, q, :first] = 0
            self.buffer[:, :, q, end:] = 0
        self.products = None if pointwise is None else np.empty((count * rows * w, channels), dtype=np.float32)
        self.held = (0, 0)
        """The padded rows [start, stop) the buffer holds, from its top."""

    def compute(self, y: int, out_rows: np.ndarray) -> None:
        """Output rows ``y`` to ``y + rows`` into ``out_rows``, a contiguous (B, rows, OW, C)
        array (a single image's rows, or all rows of whole images)."""
        first = y * self.stride[0]
        stop = (y + out_rows.shape[1] - 1) * self.stride[0] + self.kernel_height
        held_start, held_stop = self.held
        keep = max(0, held_stop - first)          # rows the previous stripe already made
        if keep:
            self.buffer[:, :keep] = self.buffer[:, first - held_start:held_stop - held_start]
        self._fill(first + keep, stop, keep)
        self.held = (first, stop)
        phased_rows(self.buffer[:, :stop - first], self.depthwise, self.stride[0], 1, out_rows)(slice(None))

    def _fill(self, start: int, stop: int, at: int) -> None:
        """Padded rows [start, stop) into the buffer from row ``at``: the images' rows (or
        their pointwise product), zeros above and below the images."""
        count, h, w, c_in = self.images.shape
        low, high = max(start - self.top, 0), min(stop - self.top, h)   # image rows
        if high <= low:
            self.buffer[:, at:at + stop - start] = 0
            return
        above = low + self.top - start
        self.buffer[:, at:at + above] = 0
        self.buffer[:, at + above + high - low:at + stop - start] = 0
        rows = self.images[:, low:high]
        if self.pointwise is not None:
            products = self.products[:count * (high - low) * w]
            np.matmul(rows.reshape(-1, c_in), self.pointwise, out=products)
            if self.pointwise_epilogue is not None:
                self.pointwise_epilogue(products)
            rows = products.reshape(count, high - low, w, -1)
        target = self.buffer[:, at + above:at + above + high - low]
        for phase, start_column, columns in self.columns:
            source = rows[:, :, columns]
            target[:, :, phase, start_column:start_column + source.shape[2]] = source
