"""A 1x1 convolution and the depthwise convolution that reads it, one stripe of rows at a time.

MobileNet and EfficientNet blocks expand their channels with a 1x1 (pointwise)
convolution and filter each expanded channel with a depthwise one. Computed one after
the other, the expanded tensor, the largest of the block (96 x 112 x 112 per image in
EfficientNet-Lite0), is written to memory whole, copied once more with a zero border
for the depthwise kernel, and read back. Here it exists only a stripe at a time:

* A stripe buffer holds the padded rows that ``stripe`` output rows of the depthwise
  convolution read, its left and right border columns zero.
* For each stripe, the pointwise product (and its epilogue) fills the rows the buffer
  does not hold yet, straight from the input; the rows above and below the input are
  zero. The rows the previous stripe shares with this one (``kh - sh`` of them) move
  to the top of the buffer rather than being computed again.
* The depthwise kernel then makes the stripe's output rows and applies its epilogue
  while they are in cache.

The buffer is about ``STRIPE_BYTES``, so everything between the input and the output
stays in the core's cache; peak memory holds one buffer per thread instead of two
copies of the expanded tensor.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kuiperinfer.kernels.depthwise import DepthwiseWeight, depthwise_rows
from kuiperinfer.kernels.parallel import run_parts, threads_for

STRIPE_BYTES = 1 << 20
"""Size of a stripe buffer: EfficientNet-Lite0's 16 -> 96 -> 3x3 stride-2 pair at 112 x 112
ran 11.0 ms unfused, 10.2 / 9.3 / 8.8 ms with stripes of 0.3 / 0.7 / 1.4 MB."""

Epilogue = Callable[..., object] | None


def pointwise_depthwise(x: np.ndarray, pointwise: np.ndarray, pointwise_epilogue: Epilogue,
                        depthwise: DepthwiseWeight, stride: tuple[int, int],
                        padding: tuple[tuple[int, int], tuple[int, int]], out_hw: tuple[int, int],
                        epilogue: Epilogue = None) -> np.ndarray:
    """Depthwise convolution (zero ``padding``, ``stride``) of the 1x1 convolution of the
    NHWC ``x`` (N, H, W, Cin) by ``pointwise`` (Cin, E), each followed by its epilogue in
    place; a new contiguous (N, OH, OW, E) array.

    Images too large for one buffer go a stripe of output rows at a time; smaller ones go
    several whole images at a time. The images, or the halves of a single image's rows,
    may be shared among threads (:mod:`~kuiperinfer.kernels.parallel`).
    """
    n, h, w, c_in = x.shape
    expanded = pointwise.shape[1]
    (top, bottom), (left, right) = padding
    kh, kw = depthwise.taps.shape[:2]
    oh, ow = out_hw
    out = np.empty((n, oh, ow, expanded), dtype=np.float32)
    work = n * h * w * c_in * expanded + n * oh * ow * expanded * kh * kw
    threads = threads_for(work)
    row_bytes = (left + w + right) * expanded * out.itemsize
    stripe = max(1, min(oh, (STRIPE_BYTES // row_bytes - kh) // stride[0] + 1))
    if stripe == oh:      # whole images, as many as fit, but a part for every thread
        images = max(1, min(STRIPE_BYTES // ((top + h + bottom) * row_bytes), -(-n // threads)))
        parts = [(slice(i, i + images), 0, oh) for i in range(0, n, images)]
    elif n >= threads:
        parts = [(slice(i, i + 1), 0, oh) for i in range(n)]
    else:
        parts = [(slice(0, 1), oh * i // threads, oh * (i + 1) // threads) for i in range(threads)]

    def run(part: tuple[slice, int, int]) -> None:
        images, first, stop = part
        stripes = _Stripes(x[images], pointwise, pointwise_epilogue, depthwise, stride, padding, stripe)
        for y in range(first, stop, stripe):
            rows = out[images, y:min(stop, y + stripe)]
            stripes.compute(y, rows)
            if epilogue is not None:
                epilogue(rows)

    run_parts(parts, work, run)
    return out


class _Stripes:
    """The stripe buffer of a block of images (B, H, W, Cin), walked down their output rows
    by one thread."""

    def __init__(self, images: np.ndarray, pointwise: np.ndarray, pointwise_epilogue: Epilogue,
                 depthwise: DepthwiseWeight, stride: tuple[int, int],
                 padding: tuple[tuple[int, int], tuple[int, int]], stripe: int):
        self.images, self.pointwise, self.pointwise_epilogue = images, pointwise, pointwise_epilogue
        self.depthwise, self.stride = depthwise, stride
        count, _, w, _ = images.shape
        (self.top, _), (self.left, right) = padding
        self.kernel_height = depthwise.taps.shape[0]
        expanded = pointwise.shape[1]
        rows = (stripe - 1) * stride[0] + self.kernel_height
        self.buffer = np.empty((count, rows, self.left + w + right, expanded), dtype=np.float32)
        self.buffer[:, :, :self.left] = 0
        self.buffer[:, :, self.left + w:] = 0
        self.products = np.empty((count * rows * w, expanded), dtype=np.float32)
        self.held = (0, 0)
        """The padded rows [start, stop) the buffer holds, from its top."""

    def compute(self, y: int, out_rows: np.ndarray) -> None:
        """Output rows ``y`` to ``y + rows`` into ``out_rows``, a contiguous (B, rows, OW, E)
        array (a single image's rows, or all rows of whole images)."""
        first = y * self.stride[0]
        stop = (y + out_rows.shape[1] - 1) * self.stride[0] + self.kernel_height
        held_start, held_stop = self.held
        keep = max(0, held_stop - first)          # rows the previous stripe already made
        if keep:
            self.buffer[:, :keep] = self.buffer[:, first - held_start:held_stop - held_start]
        self._fill(first + keep, stop, keep)
        self.held = (first, stop)
        depthwise_rows(self.buffer[:, :stop - first], self.depthwise, self.stride, (1, 1), out_rows)(slice(None))

    def _fill(self, start: int, stop: int, at: int) -> None:
        """Padded rows [start, stop) into the buffer from row ``at``: the pointwise product of
        the images' rows, zeros above and below the images."""
        count, h, w, c_in = self.images.shape
        interior = self.buffer[:, at:at + stop - start, self.left:self.left + w]
        low, high = max(start - self.top, 0), min(stop - self.top, h)   # image rows
        if high <= low:
            interior[:] = 0
            return
        above = low + self.top - start
        interior[:, :above] = 0
        interior[:, above + high - low:] = 0
        products = self.products[:count * (high - low) * w]
        np.matmul(self.images[:, low:high].reshape(-1, c_in), self.pointwise, out=products)
        if self.pointwise_epilogue is not None:
            self.pointwise_epilogue(products)
        interior[:, above:above + high - low] = products.reshape(count, high - low, w, -1)
