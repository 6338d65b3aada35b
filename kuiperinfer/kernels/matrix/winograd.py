"""Winograd F(4x4, 3x3) on the matrix engine's float32 tiles: fp32's 3x3 stride-1
convolutions with enough output tiles, in compiled parts (:mod:`kuiperinfer.kernels.compiled.winograd`).

The transformed weight's 36 matrices are packed once, as the float32 tiles read them: at
load where Winograd pays at the shape pnnx recorded, else on the first call that takes it (a
network's 7 x 7 layers, whose calls go to the columns, never hold them); a call cuts the
output's tiles and channels into parts (:func:`winograd_parts`) that the run's threads take,
each transformed, multiplied and transformed back in one compiled call, the epilogue fused.
A call with too few tiles for Winograd to pay
(:func:`~kuiperinfer.kernels.winograd.winograd_pays`) goes to the float32 tiles' columns.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kuiperinfer.kernels.compiled.activation import ActivationCode
from kuiperinfer.kernels.compiled.layout import channels_last
from kuiperinfer.kernels.compiled.vectors import LANES
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.jit import KernelAddress, empty, kernel_array, scratch
from kuiperinfer.kernels.layout import nhwc
from kuiperinfer.kernels.matrix.convolution import ProductConvolution
from kuiperinfer.kernels.matrix.products import ProductKernel, pack, tile_shape, whole_strips
from kuiperinfer.kernels.parallel import compiled_parts, kinds_of, threads_for
from kuiperinfer.kernels.resident import resident
from kuiperinfer.kernels.winograd import CHANNELS_PER_TILE, tile_counts, winograd_pays, winograd_weight

BLOCK_BYTES = 1 << 20
"""Bytes of transformed tiles (V and M) a part holds at most, where the tile rows allow."""
PARTS = 2
"""What the number of a call's parts is a multiple of, where it has more than one: the cores
of the machines it was tuned on."""

Padding = tuple[tuple[int, int], tuple[int, int]]


def winograd_parts(tiles: int, channels: int, out_channels: int, kernel: ProductKernel) -> np.ndarray:
    """How a call of ``tiles`` output tiles is cut into parts: rows of (first tile, stop tile,
    first column, stop column, first strip, stop strip). Few tiles for the output channels
    (:data:`~kuiperinfer.kernels.winograd.CHANNELS_PER_TILE`) cut the channels in
    :data:`PARTS`, each part reading its share of the transformed weight; otherwise the tiles
    go in blocks of at most :data:`BLOCK_BYTES` of V and M (at least a tile's rows each), in a
    multiple of :data:`PARTS`. The cut does not depend on the threads, and neither do the sums
    (a row's sums depend on the tile that computes it)."""
    rows, strips, lanes = tile_shape(kernel)
    panels = -(-out_channels // (strips * lanes))
    if tiles * CHANNELS_PER_TILE <= out_channels:
        tile_blocks, column_blocks = 1, min(panels, PARTS)
    else:
        step = max(rows, BLOCK_BYTES // (36 * 4 * (channels + out_channels)))
        tile_blocks = min(max(-(-tiles // step), PARTS), max(1, tiles // rows))
        tile_blocks += -tile_blocks % PARTS if tile_blocks > 1 else 0
        column_blocks = 1
    table = []
    for i in range(tile_blocks):
        for j in range(column_blocks):
            strip0 = strips * (panels * j // column_blocks)
            strip1 = min(-(-out_channels // lanes), strips * (panels * (j + 1) // column_blocks))
            table.append((tiles * i // tile_blocks, tiles * (i + 1) // tile_blocks, strip0 * lanes,
                          min(out_channels, strip1 * lanes), strip0, strip1))
    return np.array(table, np.int64)


class TiledWinograd:
    """A 3x3, stride-1 convolution of ``padding`` by Winograd F(4x4, 3x3) of its (K, C, 3, 3)
    ``weight``: the transformed weight (36, C, K; :func:`~kuiperinfer.kernels.winograd.winograd_weight`,
    ``transformed`` where made already, then packed at once) packed for the float32 tiles of
    ``kernel``, then the ``bias``, the ``activation`` and, where a call gives one, the residual
    and its ``residual_activation``; called as a :class:`~.convolution.ProductConvolution`
    is. ``few_tiles`` makes the convolution that computes calls of too few tiles (on first
    need, unless made already)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, activation: InplaceActivation | None,
                 residual_activation: InplaceActivation | None, padding: Padding, kernel: ProductKernel,
                 few_tiles: Callable[[], ProductConvolution], transformed: np.ndarray | None = None):
        from kuiperinfer.kernels.compiled.products import BLOCKS, epilogue_numbers
        from kuiperinfer.kernels.compiled.winograd import run_winograd_parts

        self.out_channels, self.in_channels = weight.shape[:2]
        self.padding, self.kernel, self._few_tiles, self._made = padding, kernel, few_tiles, None
        self._weight, self._packed = weight, None
        if transformed is not None:
            self._packed = self._pack(transformed)
        self.bias = np.zeros(self.out_channels, np.float32) if bias is None else np.array(bias, np.float32)
        first, second = ActivationCode.of(activation), ActivationCode.of(residual_activation)
        self.codes = np.array([first.code, second.code], np.int64)
        self.limits = np.array([first.a, first.b, second.a, second.b], np.float32)
        self._zeros = whole_strips(np.zeros(self.out_channels, np.float32), kernel)
        self._plain = epilogue_numbers(ActivationCode(), ActivationCode(), 1.0, 0, 1.0, 0)
        rows, no_rows = np.empty((2, 36, self.in_channels), np.float32)[:, 0], np.empty((0, 0), np.float32)
        self._product = KernelAddress(BLOCKS[kernel.dot], rows, np.empty(1, np.float32), np.empty((1, 4), np.int64),
                                      0, 0, (0, 0), self._zeros, no_rows, rows, self._plain)
        self._parts = compiled_parts(run_winograd_parts, per_thread=True)
        self._plans: dict[int, tuple[np.ndarray, int]] = {}
        self._kinds: dict[bool, object] = {}
        self._no_residual = np.empty((0, 0, 0, 0), np.float32)

    def _pack(self, transformed: np.ndarray) -> np.ndarray:
        return resident(np.stack([pack(matrix, self.kernel)[0] for matrix in transformed])).view(np.float32)

    @property
    def packed(self) -> np.ndarray:
        """The 36 matrices of the transformed weight, as the float32 tiles read them (made on
        first need; threads asking at once may each make them, all alike)."""
        packed = self._packed
        if packed is None:
            packed = self._packed = self._pack(winograd_weight(self._weight))
        return packed

    @property
    def nbytes(self) -> int:
        """Bytes of the packed weights, once made (and of the few tiles' convolution, once made)."""
        return (0 if self._packed is None else self._packed.nbytes) + (0 if self._made is None else self._made.nbytes)

    @property
    def made_few_tiles(self) -> ProductConvolution | None:
        """The convolution of the calls with too few tiles, where made already."""
        return self._made

    def few_tiles(self) -> ProductConvolution:
        """The convolution of the calls with too few tiles (made on first need; threads asking
        at once may each make one, all alike)."""
        made = self._made
        if made is None:
            made = self._made = self._few_tiles()
        return made

    def __call__(self, x: np.ndarray, residual: np.ndarray | None = None, residual_scale: float = 1.0,
                 residual_zero_point: int = 0) -> np.ndarray:
        """The convolution of float32 NCHW ``x`` (any memory layout), with the float32
        ``residual`` (NCHW, the output's shape) where given: a new (N, OH, OW, K) array."""
        n, c, h, w = x.shape
        (top, bottom), (left, right) = self.padding
        out_hw = (h + top + bottom - 2, w + left + right - 2)
        if not winograd_pays(n, c, out_hw):
            return self.few_tiles()(x, residual, residual_scale, residual_zero_point)
        th, tw = tile_counts(out_hw)
        tiles, k = n * th * tw, self.out_channels
        work = 36 * tiles * c * k
        threads = threads_for(work)
        plan = self._plans.get(tiles)
        if plan is None:
            table = winograd_parts(tiles, c, k, self.kernel)
            slot = 36 * LANES + int((36 * (table[:, 1] - table[:, 0]) * (c + table[:, 3] - table[:, 2])).max())
            plan = self._plans[tiles] = (table, slot)
        table, slot = plan
        out = empty((n, *out_hw, k))
        added = self._no_residual if residual is None else kernel_array(nhwc(residual))
        head = (self._product.address, self._product.type, kernel_array(channels_last(x)), self.packed,
                table, (th, tw), (top, left), out, self.bias, added, self.codes, self.limits, self._zeros,
                self._plain, scratch((min(threads, len(table)) * slot,)), slot, 0)
        kinds = self._kinds.get(residual is None)
        if kinds is None:
            kinds = self._kinds[residual is None] = kinds_of(head)
        self._parts.run(len(table), work, head, (), kinds)
        return out

