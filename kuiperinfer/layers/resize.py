"""Resizing layers: interpolation (nn.Upsample, F.interpolate and relatives) and pixel shuffle.

pnnx rewrites most resizes before writing them; what reaches the .param file is

    F.upsample_nearest  ... scale_factor=(2.0,2.0)              nn.Upsample(), nearest
    F.upsample          ... align_corners=False mode=bilinear size=(9,4)
    F.interpolate       ... mode=nearest-exact recompute_scale_factor=False scale_factor=(1.7,1.7)

(F.interpolate stays when it has a mode or a recompute_scale_factor F.upsample lacks;
mode='area' becomes F.adaptive_avg_pool2d). A size computed from the input's shape is
frozen into ``size=`` at export. The layer follows PyTorch: with ``size`` the scales come
from the sizes; with ``scale_factor`` the output is ``floor(size * scale)`` and the
scale factor itself maps coordinates, unless ``recompute_scale_factor`` asks for the
scales to be derived from the sizes again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.interpolate import interpolate
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

# PyTorch mode -> (interpolation kernel, number of spatial axes it needs; None: any)
_MODES = {
    "nearest": ("nearest", None),
    "nearest-exact": ("nearest-exact", None),
    "linear": ("linear", 1),
    "bilinear": ("linear", 2),
    "trilinear": ("linear", 3),
    "bicubic": ("cubic", 2),
}

# Spellings whose mode and align_corners are fixed by the name rather than by parameters.
_FIXED_MODES = {
    "F.upsample_nearest": ("nearest", False),
    "nn.UpsamplingNearest2d": ("nearest", False),
    "F.upsample_bilinear": ("bilinear", True),
    "nn.UpsamplingBilinear2d": ("bilinear", True),
}


@register_layer("F.interpolate", "F.upsample", "F.upsample_nearest", "F.upsample_bilinear",
                "nn.Upsample", "nn.UpsamplingNearest2d", "nn.UpsamplingBilinear2d")
class Interpolate(NonParamLayer):
    """Resize the spatial axes of an (N, C, *spatial) input to a size or by a scale factor."""

    batch_independent = True

    def __init__(self, layer_name: str, mode: str, align_corners: bool,
                 size: tuple[int, ...] | None, scale_factor: tuple[float, ...] | None,
                 recompute_scale_factor: bool):
        super().__init__(layer_name)
        self.kernel_mode, self.align_corners = _MODES[mode][0], align_corners
        self.size, self.scale_factor = size, scale_factor
        self.recompute_scale_factor = recompute_scale_factor

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Interpolate:
        if op.type in _FIXED_MODES:
            mode, align_corners = _FIXED_MODES[op.type]
        else:
            mode = op.param_str("mode", Status.kParameterMissingResizeMode, default="nearest")
            align_corners = op.param_bool("align_corners", default=False)
        if mode not in _MODES:
            raise op.error(f"unsupported mode {mode!r}, expected one of {tuple(_MODES)}",
                           Status.kParameterMissingResizeMode)
        if op.param_bool("antialias", default=False):
            raise op.error("antialias=True is not supported", Status.kParameterInvalidValue)
        needed = _MODES[mode][1]
        shapes = op.input_operands_seq[0].shapes if op.input_operands_seq else []
        rank = len(shapes) - 2 if shapes else needed  # None: known only at run time
        if needed not in (None, rank):
            raise op.error(f"mode {mode!r} needs {needed} spatial axes, the input has {rank}",
                           Status.kParameterMissingResizeMode)
        size, scale = _read_size_or_scale(op, rank)
        return cls(op.name, mode, align_corners, size, scale,
                   op.param_bool("recompute_scale_factor", default=False))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        spatial = x.shape[2:]
        given = self.size if self.size is not None else self.scale_factor
        if len(given) != len(spatial):
            raise InferError(f"input of shape {x.shape} does not have {len(given)} spatial axes",
                             status=InferStatus.kInferFailedInputEmpty)
        if self.size is not None:
            out_size, scales = self.size, (None,) * len(spatial)
        else:
            out_size = tuple(math.floor(d * s) for d, s in zip(spatial, self.scale_factor))
            scales = (None,) * len(spatial) if self.recompute_scale_factor else self.scale_factor
            if min(out_size) < 1:
                raise InferError(f"scale_factor {self.scale_factor} resizes {x.shape} to nothing",
                                 status=InferStatus.kInferFailedOutputSizeError)
        return [interpolate(x, out_size, self.kernel_mode, self.align_corners, scales)]


def _read_size_or_scale(op: RuntimeOperator, rank: int | None
                        ) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None]:
    """The ``size`` or the ``scale_factor`` (exactly one is given), one value per spatial axis."""
    if (op.param_value("size") is None) == (op.param_value("scale_factor") is None):
        raise op.error("exactly one of size and scale_factor must be given", Status.kParameterMissingScale)
    if op.param_value("size") is not None:
        size = op.param_ints("size", rank, Status.kParameterMissingOutHW)
        if min(size) < 1:
            raise op.error(f"size {size} must be positive", Status.kParameterMissingOutHW)
        return size, None
    scale = op.param_floats("scale_factor", Status.kParameterMissingScale)
    if len(scale) == 1 and rank:
        scale = scale * rank
    if min(scale) <= 0 or len(scale) != (rank or len(scale)):
        raise op.error(f"scale_factor {scale} must be one positive number per spatial axis",
                       Status.kParameterMissingScale)
    return None, scale


@register_layer("nn.PixelShuffle", "F.pixel_shuffle")
class PixelShuffle(NonParamLayer):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): each group of r*r channels becomes an r x r block."""

    def __init__(self, layer_name: str, factor: int):
        super().__init__(layer_name)
        self.factor = factor

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> PixelShuffle:
        return cls(op.name, _read_factor(op, "upscale_factor"))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, r = inputs[0], self.factor
        *lead, c, h, w = _check_divisible(x, r, channels=True)
        blocks = x.reshape(*lead, c // (r * r), r, r, h, w)
        k = len(lead)
        blocks = blocks.transpose(*range(k), k, k + 3, k + 1, k + 4, k + 2)
        return [blocks.reshape(*lead, c // (r * r), h * r, w * r)]


@register_layer("nn.PixelUnshuffle", "F.pixel_unshuffle")
class PixelUnshuffle(NonParamLayer):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W): the inverse of :class:`PixelShuffle`."""

    def __init__(self, layer_name: str, factor: int):
        super().__init__(layer_name)
        self.factor = factor

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> PixelUnshuffle:
        return cls(op.name, _read_factor(op, "downscale_factor"))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, r = inputs[0], self.factor
        *lead, c, h, w = _check_divisible(x, r, channels=False)
        blocks = x.reshape(*lead, c, h // r, r, w // r, r)
        k = len(lead)
        blocks = blocks.transpose(*range(k), k, k + 2, k + 4, k + 1, k + 3)
        return [blocks.reshape(*lead, c * r * r, h // r, w // r)]


def _read_factor(op: RuntimeOperator, key: str) -> int:
    factor = op.param_int(key, Status.kParameterMissingScale)
    if factor < 1:
        raise op.error(f"{key} {factor} must be positive", Status.kParameterMissingScale)
    return factor


def _check_divisible(x: np.ndarray, r: int, channels: bool) -> tuple[int, ...]:
    """The shape of ``x``, checked to have C divisible by r*r (shuffle) or H, W by r (unshuffle)."""
    if x.ndim < 3:
        raise InferError(f"input of shape {x.shape} needs at least 3 dimensions",
                         status=InferStatus.kInferFailedInputEmpty)
    c, h, w = x.shape[-3:]
    if (c % (r * r) if channels else h % r or w % r):
        what = f"channels by {r * r}" if channels else f"height and width by {r}"
        raise InferError(f"input of shape {x.shape} does not divide its {what}",
                         status=InferStatus.kInferFailedChannelParameterError)
    return x.shape
