"""The graph optimiser's typed records: what it fused into an operator, or chose for it.

A pass that rewrites an operator attaches one record to it (``op.fusion``) and the layer's
``create`` reads it; an operator as pnnx wrote it has none. Each record says in one place
what the operator now computes:

* :class:`ActivationFusion` on nn.Linear and pnnx.Expression: an activation applied in
  place on the fresh output.
* :class:`ConvolutionFusion` on nn.Conv1d/nn.Conv2d (and, for its memory layout only,
  nn.ConvTranspose1d/2d): the activation after the bias, per-side padding from a folded
  padding operator, a residual added after the activation (and the activation after that),
  Winograd and channels-last memory.
* :class:`PointwiseDepthwiseFusion`, the record of a ``kuiper.PointwiseDepthwise``
  operator: a 1x1 convolution and the depthwise convolution that alone reads it.
* :class:`SqueezeExcitationFusion`, the record of a ``kuiper.SqueezeExcitation`` operator:
  ``x * expand(reduce(mean of x over H and W))`` with two 1x1 convolutions.
* :class:`AttentionFusion`, the record of a ``kuiper.Attention`` operator: scaled
  dot-product attention written out as products, a scaling, a mask and a softmax.
* :class:`LayerNormFusion` on nn.LayerNorm: the residual addition before it.
* :class:`KernelChoice` on any other layer that has compiled kernels.

Every record says whether the layer runs its compiled kernels (``compiled``, set by the
optimiser wherever Numba imported) or their NumPy references.

Weights travel in the records as the arrays the model file holds (read-only views of the
archive), never as renamed attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kuiperinfer.kernels.elementwise import InplaceActivation

Padding = tuple[tuple[int, int], tuple[int, int]]
"""(top, bottom), (left, right)."""


@dataclass(frozen=True)
class KernelChoice:
    """For a layer with nothing fused: whether it runs its compiled kernels."""

    compiled: bool = False


@dataclass(frozen=True)
class ActivationFusion:
    """An activation the layer applies in place on its fresh output."""

    activation: InplaceActivation | None = None
    compiled: bool = False


@dataclass(frozen=True)
class ConvolutionFusion:
    """What an nn.Conv1d/nn.Conv2d computes beyond pnnx's parameters."""

    activation: InplaceActivation | None = None
    """Applied in place after the bias."""
    padding: Padding | None = None
    """Zero padding per side, replacing the operator's own (a padding operator folded in)."""
    residual: bool = False
    """Whether the operator's second input is added to the output, after ``activation``."""
    residual_activation: InplaceActivation | None = None
    """Applied in place after the residual addition."""
    winograd: bool = False
    """Whether calls with enough tiles take Winograd F(4x4, 3x3)."""
    channels_last: bool = False
    """Whether the output stays in the channels-last memory the kernels compute in
    (:mod:`kuiperinfer.kernels.layout`) instead of being copied to row-major NCHW."""
    compiled: bool = False


@dataclass(frozen=True, eq=False)
class Pointwise:
    """A 1x1, stride-1, single-group convolution folded into a fused operator."""

    weight: np.ndarray
    """(out, in, 1, 1)."""
    bias: np.ndarray | None
    activation: InplaceActivation | None


@dataclass(frozen=True, eq=False)
class PointwiseDepthwiseFusion:
    """``depthwise(pointwise(x))``: the operator is the depthwise nn.Conv2d (its parameters
    and weight are the operator's own), reading the 1x1 convolution's input."""

    TYPE: ClassVar[str] = "kuiper.PointwiseDepthwise"
    pointwise: Pointwise
    depthwise: ConvolutionFusion
    compiled: bool = False


@dataclass(frozen=True, eq=False)
class SqueezeExcitationFusion:
    """``x * expand(reduce(mean of x over H and W))``: the operator is the global average
    pooling, reading ``x``."""

    TYPE: ClassVar[str] = "kuiper.SqueezeExcitation"
    reduce: Pointwise
    expand: Pointwise
    compiled: bool = False


@dataclass(frozen=True)
class AttentionFusion:
    """``softmax(q k^T * scale + mask) v`` as pnnx writes it (torch.matmul with a transposed
    key, a scaling expression, an optional additive mask, F.softmax over the keys,
    torch.matmul with the values), in one operator reading q, k (not transposed), v and
    the mask, in that order, or ``packed``: one input holding them all."""

    TYPE: ClassVar[str] = "kuiper.Attention"
    scale: float = 1.0
    masked: bool = False
    """Whether the last input is an additive mask (broadcast to (batch, heads, queries, keys))."""
    packed: tuple[int, int] | None = None
    """(heads, head_dim) when the first input is a linear layer's (N, L, 3 * heads * head_dim)
    output holding q, k and v (timm's reshape, permute and unbind, absorbed)."""
    merge_heads: bool = False
    """Whether the output is (N, L, heads * value_dim), the heads side by side (the transpose
    and reshape after the product, absorbed), instead of (N, heads, L, value_dim)."""
    compiled: bool = False


@dataclass(frozen=True)
class LayerNormFusion:
    """What an nn.LayerNorm computes beyond pnnx's parameters."""

    residual: bool = False
    """Whether it reads the two addends of an ``add(@0,@1)`` (absorbed) and normalises their sum."""
    sum_output: bool = False
    """Whether it also hands on the sum, as its second output, to the others that read it
    (a pre-norm transformer's running value)."""
    compiled: bool = False
