"""Separable interpolation as PyTorch's F.interpolate computes it (nearest, linear, cubic).

Every mode resamples one spatial axis at a time. For an axis of ``in_size`` samples
resampled to ``out_size``, a *table* lists for each output position the input positions
it reads (its taps) and their weights; resampling the axis is then one gather and one
multiply-add per tap, over the whole batch at once. Tables are computed once per
(sizes, scale, mode) and cached.

The source coordinate of output position ``i`` follows PyTorch (``UpSample.h``), in
float32 arithmetic as PyTorch does for float32 inputs, so that nearest-neighbour
indices round the same way:

* ``align_corners=True``: ``src = i * (in - 1) / (out - 1)``;
* otherwise ``src = (i + 0.5) * scale - 0.5`` where ``scale`` is ``1 / scale_factor``
  when a scale factor was given, else ``in / out``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from kuiperinfer.kernels.layout import is_channels_last, nchw, nhwc

CUBIC_A = -0.75
"""The cubic convolution coefficient PyTorch uses for bicubic interpolation."""

Table = tuple[np.ndarray, np.ndarray | None]
"""Per output position: input indices (out, taps) and weights (out, taps), or None for nearest."""


def _source_scale(in_size: int, out_size: int, scale_factor: float | None) -> np.float32:
    """PyTorch's ``compute_scales_value``: input step per output step, as float32."""
    if scale_factor is not None and scale_factor > 0:
        return np.float32(1.0 / scale_factor)
    return np.float32(in_size) / np.float32(out_size)


def _area_pixel_scale(in_size: int, out_size: int, align_corners: bool,
                      scale_factor: float | None) -> np.float32:
    """PyTorch's ``area_pixel_compute_scale`` (linear and cubic modes)."""
    if align_corners:
        return np.float32(in_size - 1) / np.float32(out_size - 1) if out_size > 1 else np.float32(0)
    return _source_scale(in_size, out_size, scale_factor)


def _source_coordinates(in_size: int, out_size: int, align_corners: bool,
                        scale_factor: float | None, cubic: bool) -> np.ndarray:
    """Real-valued source coordinate of every output position (float32)."""
    scale = _area_pixel_scale(in_size, out_size, align_corners, scale_factor)
    dst = np.arange(out_size, dtype=np.float32)
    if align_corners:
        return scale * dst
    src = scale * (dst + np.float32(0.5)) - np.float32(0.5)
    return src if cubic else np.maximum(src, np.float32(0))


def _index_and_lambda(src: np.ndarray, in_size: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's ``guard_index_and_lambda``: the tap left of ``src`` and the fraction past it."""
    index = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    fraction = np.clip(src - index, 0, 1).astype(np.float32)
    return index, fraction


@lru_cache(maxsize=256)
def nearest_table(in_size: int, out_size: int, scale_factor: float | None, exact: bool,
                  shortcuts: bool) -> Table:
    """Mode ``nearest`` (``floor(i * scale)``) or ``nearest-exact`` (``floor((i + 0.5) * scale)``).

    With ``shortcuts`` (PyTorch's 2-D nearest kernel, not its 1-D or 3-D one), equal
    sizes copy and doubled sizes read ``i // 2``, whatever the scale factor says.
    """
    dst = np.arange(out_size)
    scale = _source_scale(in_size, out_size, scale_factor)
    if exact:
        # PyTorch computes (i + 0.5) * scale in double and floors it as a float.
        src = np.floor(((dst + 0.5) * np.float64(scale)).astype(np.float32))
    elif shortcuts and out_size == in_size:
        src = dst
    elif shortcuts and out_size == 2 * in_size:
        src = dst >> 1
    else:
        src = np.floor(dst.astype(np.float32) * scale)
    index = np.minimum(src.astype(np.int64), in_size - 1)[:, None]
    index.setflags(write=False)
    return index, None


@lru_cache(maxsize=256)
def linear_table(in_size: int, out_size: int, scale_factor: float | None,
                 align_corners: bool) -> Table:
    """Mode ``linear``: two taps, the neighbours either side of the source coordinate."""
    if out_size == in_size:
        # PyTorch's shortcut: whatever the scale, equal sizes copy
        src = np.arange(out_size, dtype=np.float32)
    else:
        src = _source_coordinates(in_size, out_size, align_corners, scale_factor, cubic=False)
    left, fraction = _index_and_lambda(src, in_size)
    index = np.stack([left, np.minimum(left + 1, in_size - 1)], axis=1)
    weight = np.stack([1 - fraction, fraction], axis=1)
    index.setflags(write=False)
    weight.setflags(write=False)
    return index, weight


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution weights (A = -0.75) of the four taps at distances 1+t, t, 1-t, 2-t."""
    a = CUBIC_A

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)


@lru_cache(maxsize=256)
def cubic_table(in_size: int, out_size: int, scale_factor: float | None,
                align_corners: bool) -> Table:
    """Mode ``bicubic``: four taps around the source coordinate, clamped at the borders."""
    src = _source_coordinates(in_size, out_size, align_corners, scale_factor, cubic=True)
    left, fraction = _index_and_lambda(src, in_size)
    index = np.clip(left[:, None] + np.arange(-1, 3), 0, in_size - 1)
    weight = _cubic_weights(fraction.astype(np.float64)).astype(np.float32)
    index.setflags(write=False)
    weight.setflags(write=False)
    return index, weight


def resample_axis(x: np.ndarray, axis: int, table: Table) -> np.ndarray:
    """Resample ``x`` along ``axis`` with ``table`` (a gather, then a weighted sum of taps)."""
    index, weight = table
    if weight is None:
        return np.take(x, index[:, 0], axis=axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    out = np.take(x, index[:, 0], axis=axis)
    out *= weight[:, 0].reshape(shape)
    for tap in range(1, index.shape[1]):
        out += np.take(x, index[:, tap], axis=axis) * weight[:, tap].reshape(shape)
    return out


def interpolate(x: np.ndarray, out_size: Sequence[int], mode: str, align_corners: bool,
                scale_factors: Sequence[float | None]) -> np.ndarray:
    """Resize the trailing ``len(out_size)`` axes of ``x`` (N, C, *spatial) to ``out_size``.

    ``mode`` is ``nearest``, ``nearest-exact``, ``linear`` (any number of axes: linear,
    bilinear, trilinear) or ``cubic``; ``scale_factors[i]`` is the user's scale factor
    for axis i, or None to derive the scale from the sizes. A channels-last ``x`` gives
    a channels-last result.
    """
    lead = x.ndim - len(out_size)
    tables = []
    for axis, (size, scale) in enumerate(zip(out_size, scale_factors), start=lead):
        in_size = x.shape[axis]
        if mode in ("nearest", "nearest-exact"):
            tables.append(nearest_table(in_size, size, scale, mode == "nearest-exact", len(out_size) == 2))
        elif mode == "linear":
            tables.append(linear_table(in_size, size, scale, align_corners))
        else:
            tables.append(cubic_table(in_size, size, scale, align_corners))
    if is_channels_last(x) and not x.flags.c_contiguous:
        return nchw(_resample(nhwc(x), range(1, 3), tables))
    return _resample(x, range(lead, x.ndim), tables)


def repeat_factor(table: Table, in_size: int) -> int | None:
    """How many times a nearest-neighbour ``table`` over ``in_size`` samples repeats each
    of them in order (2 for a doubling), or None if it is not such a repetition."""
    index, weight = table
    if weight is not None:
        return None
    indices = index[:, 0]
    factor, remainder = divmod(len(indices), in_size)
    if remainder or not factor or not np.array_equal(indices, np.arange(len(indices)) // factor):
        return None
    return factor


def _resample(x: np.ndarray, axes: range, tables: Sequence[Table]) -> np.ndarray:
    """``x`` resampled along each of ``axes`` by its table. Nearest-neighbour tables that
    repeat every sample a whole number of times make one broadcast copy for all axes."""
    factors = [repeat_factor(table, x.shape[axis]) for axis, table in zip(axes, tables)]
    if all(factors):
        spread, repeated = [], []           # x as (.., H, 1, W, 1, ..) and the out as (.., H, fh, W, fw, ..)
        for axis, size in enumerate(x.shape):
            if axis in axes:
                factor = factors[axis - axes.start]
                spread += [size, 1]
                repeated += [size, factor]
            else:
                spread.append(size)
                repeated.append(size)
        out = np.empty(repeated, dtype=x.dtype)
        out[...] = x.reshape(spread)
        return out.reshape([size * factors[axis - axes.start] if axis in axes else size
                            for axis, size in enumerate(x.shape)])
    for axis, table in zip(axes, tables):
        x = resample_axis(x, axis, table)
    return x
