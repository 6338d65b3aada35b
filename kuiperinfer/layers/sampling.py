"""Sampling at computed positions (spatial transformers, optical-flow warps, deformable
attention): F.grid_sample and F.affine_grid.

``F.grid_sample(input, grid)`` reads ``input`` (N, C, H, W) at the positions of ``grid``
(N, Ho, Wo, 2), given as (x, y) in [-1, 1] across the input; 5-D inputs (N, C, D, H, W)
take a grid (N, Do, Ho, Wo, 3) of (x, y, z). pnnx writes ``mode`` (bilinear, nearest,
bicubic: 4-D only), ``padding_mode`` (zeros, border, reflection) and ``align_corners``.

A normalised coordinate ``g`` along an axis of ``size`` becomes the pixel coordinate
``(g + 1) / 2 * (size - 1)`` with ``align_corners`` (-1 and 1 are the centres of the
corner pixels) and ``((g + 1) * size - 1) / 2`` without (they are the corner pixels'
outer edges). Then, as PyTorch does:

* ``border`` clamps the coordinate into ``[0, size - 1]``; ``reflection`` mirrors it at
  the corner pixels' centres (align_corners) or outer edges (without), then clamps;
  ``zeros`` leaves it, and every tap outside the input reads 0;
* ``bilinear`` blends the 2 (4, 8) neighbours by their distances; ``nearest`` takes the
  closest, rounding halves to even; ``bicubic`` blends 4 x 4 neighbours with the cubic
  convolution kernel (A = -0.75), each neighbour's coordinate padded on its own.

``F.affine_grid(theta, size)`` is the grid of an affine map: every output pixel's
normalised (x, y[, z], 1) times ``theta`` (N, 2, 3) or (N, 3, 4). pnnx writes ``size``
as recorded at export; its batch is taken from ``theta``, so any batch size runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

MODES = ("bilinear", "nearest", "bicubic")
PADDING_MODES = ("zeros", "border", "reflection")
CUBIC_A = -0.75


def _fail(message: str) -> InferError:
    return InferError(message, status=InferStatus.kInferFailedDimensionParameterError)


def unnormalize(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Normalised coordinates in [-1, 1] to pixel coordinates along an axis of ``size``."""
    if align_corners:
        return (g + 1) / 2 * (size - 1)
    return ((g + 1) * size - 1) / 2


def reflect(coordinate: np.ndarray, twice_low: int, twice_high: int) -> np.ndarray:
    """Mirror ``coordinate`` back and forth into ``[twice_low / 2, twice_high / 2]``."""
    if twice_low == twice_high:
        return np.zeros_like(coordinate)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    distance = np.abs(coordinate - low)
    extra = np.fmod(distance, span)
    flips = np.floor(distance / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low)


def pad_coordinate(coordinate: np.ndarray, size: int, padding_mode: str, align_corners: bool) -> np.ndarray:
    """``border`` and ``reflection`` bring a pixel coordinate into the input; ``zeros`` keeps it."""
    if padding_mode == "border":
        return np.clip(coordinate, 0, size - 1)
    if padding_mode == "reflection":
        if align_corners:
            coordinate = reflect(coordinate, 0, 2 * (size - 1))
        else:
            coordinate = reflect(coordinate, -1, 2 * size - 1)
        return np.clip(coordinate, 0, size - 1)
    return coordinate


def gather(x: np.ndarray, taps: Sequence[np.ndarray]) -> np.ndarray:
    """``x`` (N, C, *sizes) read at integer ``taps`` (one (N, *out) array per spatial axis):
    (N, C, *out), 0 where a tap falls outside."""
    n, c, *sizes = x.shape
    inside = np.ones(taps[0].shape, bool)
    flat = np.zeros(taps[0].shape, np.int64)
    for tap, size in zip(taps, sizes):
        inside &= (tap >= 0) & (tap < size)
        flat = flat * size + np.clip(tap, 0, size - 1)
    values = np.take_along_axis(x.reshape(n, c, -1), flat.reshape(n, 1, -1), axis=2)
    values = values.reshape(n, c, *taps[0].shape[1:])
    return values * inside[:, None]


def cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """The cubic convolution weights of the four neighbours at -1, 0, 1, 2 for offset ``t`` in [0, 1)."""
    def near(s):   # |s| <= 1
        return ((CUBIC_A + 2) * s - (CUBIC_A + 3)) * s * s + 1

    def far(s):    # 1 < |s| < 2
        return ((CUBIC_A * s - 5 * CUBIC_A) * s + 8 * CUBIC_A) * s - 4 * CUBIC_A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align_corners: bool) -> np.ndarray:
    """F.grid_sample of NC(D)HW ``x`` at ``grid`` (N, *out, rank); float32."""
    rank = x.ndim - 2
    sizes = x.shape[2:]
    x = x.astype(np.float32, copy=False)
    grid = grid.astype(np.float32, copy=False)
    # the grid lists (x, y[, z]): reversed, one normalised coordinate per axis (d, h, w)
    coordinates = [unnormalize(grid[..., rank - 1 - axis], sizes[axis], align_corners) for axis in range(rank)]
    if mode == "bicubic":
        floors = [np.floor(c) for c in coordinates]
        weights = [cubic_weights(c - f) for c, f in zip(coordinates, floors)]
        out = 0
        for offsets in itertools.product(range(4), repeat=rank):
            taps = [pad_coordinate(f + o - 1, size, padding_mode, align_corners)
                    for f, o, size in zip(floors, offsets, sizes)]
            weight = np.prod([w[o] for w, o in zip(weights, offsets)], axis=0)
            out = out + gather(x, [t.astype(np.int64) for t in taps]) * weight[:, None]
        return out.astype(np.float32)
    coordinates = [pad_coordinate(c, size, padding_mode, align_corners) for c, size in zip(coordinates, sizes)]
    if mode == "nearest":
        return gather(x, [np.rint(c).astype(np.int64) for c in coordinates])
    floors = [np.floor(c) for c in coordinates]
    fractions = [c - f for c, f in zip(coordinates, floors)]
    out = 0
    for corner in itertools.product((0, 1), repeat=rank):
        weight = np.prod([fr if side else 1 - fr for fr, side in zip(fractions, corner)], axis=0)
        out = out + gather(x, [(f + side).astype(np.int64) for f, side in zip(floors, corner)]) * weight[:, None]
    return out.astype(np.float32)


@register_layer("F.grid_sample")
class GridSample(NonParamLayer):
    """F.grid_sample: the input read at the grid's positions."""

    batch_independent = True

    def __init__(self, layer_name: str, mode: str, padding_mode: str, align_corners: bool):
        super().__init__(layer_name)
        self.mode, self.padding_mode, self.align_corners = mode, padding_mode, align_corners

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> GridSample:
        if len(op.input_operands_seq) != 2:
            raise op.error(f"F.grid_sample takes the input and the grid, got {len(op.input_operands_seq)} inputs",
                           Status.kParameterInvalidValue)
        mode = op.param_str("mode", Status.kParameterMissingResizeMode, default="bilinear")
        padding_mode = op.param_str("padding_mode", Status.kParameterMissingPadding, default="zeros")
        if mode not in MODES or padding_mode not in PADDING_MODES:
            raise op.error(f"mode {mode!r} and padding_mode {padding_mode!r} must be one of {MODES} and "
                           f"{PADDING_MODES}", Status.kParameterInvalidValue)
        return cls(op.name, mode, padding_mode, op.param_bool("align_corners", default=False))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, grid = inputs
        rank = x.ndim - 2
        if rank not in (2, 3) or grid.ndim != x.ndim or grid.shape[0] != x.shape[0] or grid.shape[-1] != rank:
            raise _fail(f"grid_sample takes a 4-D or 5-D input and a grid (N, ..., {max(rank, 2)}) of its batch, "
                        f"got {x.shape} and {grid.shape}")
        if self.mode == "bicubic" and rank != 2:
            raise _fail("bicubic grid sampling takes 4-D input only (as in PyTorch)")
        if min(x.shape[2:], default=0) < 1:
            raise _fail(f"input of shape {x.shape} is empty")
        return [grid_sample(x, grid, self.mode, self.padding_mode, self.align_corners)]


def base_coordinates(steps: int, align_corners: bool) -> np.ndarray:
    """The normalised coordinates of ``steps`` pixel centres along an axis."""
    if steps <= 1:
        return np.zeros(max(steps, 0), np.float32)
    line = np.linspace(-1, 1, steps, dtype=np.float32)
    return line if align_corners else line * np.float32((steps - 1) / steps)


@register_layer("F.affine_grid")
class AffineGrid(NonParamLayer):
    """F.affine_grid: the sampling grid of the affine maps ``theta`` over an output of ``size``."""

    batch_independent = True

    def __init__(self, layer_name: str, size: tuple[int, ...] | None, size_input: int | None, align_corners: bool):
        super().__init__(layer_name)
        self.size, self.size_input, self.align_corners = size, size_input, align_corners

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AffineGrid:
        size_input = op.input_index("size")
        size = None
        if size_input is None:
            size = op.param_ints("size", status=Status.kParameterMissingShape)
            if len(size) not in (4, 5) or min(size) < 1:
                raise op.error(f"size {size} must be 4 or 5 positive sizes (N, C, [D,] H, W)",
                               Status.kParameterMissingShape)
        theta = op.input_index("theta", 0)
        if theta != 0 or len(op.input_operands_seq) not in (1, 2):
            raise op.error("F.affine_grid takes theta as its first input", Status.kParameterInvalidValue)
        return cls(op.name, size, size_input, op.param_bool("align_corners", default=False))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        theta = np.asarray(inputs[0])
        size = self.size if self.size_input is None else inputs[self.size_input]
        size = size.tolist() if isinstance(size, np.ndarray) else list(size)
        rank = len(size) - 2
        if rank not in (2, 3) or not all(type(s) is int and s >= 1 for s in size):
            raise _fail(f"size {size} must be 4 or 5 positive sizes")
        if theta.ndim != 3 or theta.shape[1:] != (rank, rank + 1):
            raise _fail(f"theta of shape {theta.shape} is not (N, {rank}, {rank + 1}) for size {size}")
        spatial = size[2:]
        # (*spatial, rank + 1): (x, y[, z], 1) at every output pixel, x along the last axis
        axes = [base_coordinates(s, self.align_corners) for s in spatial]
        mesh = np.meshgrid(*axes, indexing="ij")
        base = np.stack([*mesh[::-1], np.ones(spatial, np.float32)], axis=-1)
        grid = base.reshape(-1, rank + 1) @ theta.astype(np.float32).transpose(0, 2, 1)
        return [grid.reshape(theta.shape[0], *spatial, rank).astype(np.float32, copy=False)]
