"""Convolution and transposed convolution, 1-D and 2-D.

* nn.Conv1d / nn.Conv2d / F.conv1d / F.conv2d: im2col plus one GEMM per group;
  depthwise convolutions take a dedicated kernel.
* nn.ConvTranspose1d / nn.ConvTranspose2d / F.conv_transpose1d / F.conv_transpose2d:
  one GEMM per group plus col2im, then the padding is cropped off; with a stride equal
  to the kernel and nothing else (learned 2x upsampling), one GEMM in channels-last memory
  whose rows fill separate output blocks.

1-D operators run the 2-D code on inputs of unit height: a 1-D kernel of width k is a
2-D kernel of size (1, k) with stride 1, dilation 1 and no padding along the height.
Parameters are read and weights packed once, at build time: ``forward`` only pads,
unfolds and multiplies. The helpers that read per-axis parameters and lift 1-D arrays
to 2-D are shared with the pooling layers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.blockwise_transposed import blockwise_conv_transpose2d, pack_blockwise_weight
from kuiperinfer.kernels.col2im import col2im
from kuiperinfer.kernels.compiled import direct as compiled_direct
from kuiperinfer.kernels.compiled import epilogue as compiled_epilogue
from kuiperinfer.kernels.compiled.depthwise import CompiledDepthwise, Form
from kuiperinfer.kernels.depthwise import DepthwiseWeight, depthwise_conv2d
from kuiperinfer.kernels.depthwise_stripes import depthwise_in_stripes
from kuiperinfer.kernels.elementwise import Epilogue, InplaceActivation
from kuiperinfer.kernels.elementwise import product_epilogue as reference_epilogue
from kuiperinfer.kernels.im2col import (
    PLANAR_MAX_CHANNELS,
    WHOLE_BYTES,
    im2col_conv2d,
    output_size,
    pack_planar_weight,
    pack_weight,
    planar_conv2d,
)
from kuiperinfer.kernels.layout import is_channels_last, nchw, nhwc, pad_nhwc
from kuiperinfer.kernels.matrix.convolution import DirectInt8Convolution, ProductConvolution
from kuiperinfer.kernels.matrix.int8 import weight_scales
from kuiperinfer.kernels.matrix.precision import FP32, Precision
from kuiperinfer.kernels.matrix.products import Product, ProductCall, ProductEpilogue, Requantize, quantize_activations
from kuiperinfer.kernels.matrix.winograd import TiledWinograd
from kuiperinfer.kernels.padding import PAD_MODES, pad_last_dims
from kuiperinfer.kernels.parallel import threads_for
from kuiperinfer.kernels.windows import as_batched
from kuiperinfer.kernels.winograd import winograd_conv3x3, winograd_pays, winograd_weight
from kuiperinfer.layers.base import Layer, ParamLayer, batched, functional, requantize_for
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

# -- 1-D operators on the 2-D code -----------------------------------------------------

def spatial_rank(op: RuntimeOperator) -> int:
    """Number of spatial axes the operator sweeps: 1 for the ``*1d`` types, else 2."""
    return 1 if op.type.endswith("1d") else 2


def spatial_ints(op: RuntimeOperator, key: str, rank: int, neutral: int, status: Status,
                 default: tuple[int, ...] | None = None) -> tuple[int, int]:
    """Per-axis int parameter ``key`` as (height, width); 1-D operators get height ``neutral``.

    ``default`` (``rank`` values) is used when the parameter is absent or None; without
    one the parameter is required.
    """
    if default is None:
        values = op.param_ints(key, rank, status)
    else:
        values = op.param_ints(key, rank, status, default=default)
    return (neutral,) * (2 - rank) + tuple(values)


def as_2d(x: np.ndarray, rank: int, what: str) -> tuple[np.ndarray, bool]:
    """The input of a ``rank``-D operator (``what``, for errors) as NCHW: (N, C, L) becomes
    the view (N, C, 1, L), and an unbatched (C, ...) input, which PyTorch accepts, gains a
    batch of one. Returns the view and whether the input came unbatched."""
    x, unbatched = as_batched(x, rank, what)
    return (x[:, :, None, :] if rank == 1 else x), unbatched


def bound_key(inputs: Sequence[Any]) -> tuple[object, ...]:
    """What a layer's bound call for its input (and residual, the second input, if any) is found by:
    their shapes, strides and types."""
    x = inputs[0]
    if len(inputs) < 2:
        return x.shape, x.strides, x.dtype
    residual = inputs[1]
    return x.shape, x.strides, x.dtype, residual.shape, residual.strides, residual.dtype


def from_2d(y: np.ndarray, rank: int, unbatched: bool) -> np.ndarray:
    """Undo :func:`as_2d` on an output: (N, C, 1, L) becomes (N, C, L), and an unbatched
    input's output loses its batch of one."""
    y = y[:, :, 0, :] if rank == 1 else y
    return y[0] if unbatched else y


# -- geometry ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ConvGeometry:
    """How a 2-D convolution sweeps its input: everything but the weights."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[tuple[int, int], tuple[int, int]]  # (top, bottom), (left, right)
    padding_mode: str
    groups: int

    @classmethod
    def from_operator(cls, op: RuntimeOperator, kernel: tuple[int, ...]) -> ConvGeometry:
        """Read stride, dilation, padding, padding_mode and groups; ``kernel`` has one size per axis."""
        rank = len(kernel)
        kernel = (1,) * (2 - rank) + tuple(kernel)
        stride = spatial_ints(op, "stride", rank, 1, Status.kParameterMissingStride, (1,) * rank)
        dilation = spatial_ints(op, "dilation", rank, 1, Status.kParameterMissingUnknown, (1,) * rank)
        groups = op.param_int("groups", Status.kParameterMissingGroups, default=1)
        mode = op.param_str("padding_mode", Status.kParameterMissingPadding, default="zeros")
        if mode not in PAD_MODES:
            raise op.error(f"unsupported padding_mode {mode!r}", Status.kParameterMissingPadding)
        if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1 or groups < 1:
            raise op.error(f"kernel {kernel}, stride {stride}, dilation {dilation} and groups {groups} "
                           f"must be positive", Status.kParameterInvalidValue)
        padding = op.param_value("padding", (0,) * rank)
        if "padding" in op.params and op.param_text("padding") == "()":
            # pnnx writes nn.Conv1d/2d(padding="same", padding_mode="reflect") as padding=()
            padding = "same"
        if isinstance(padding, str):
            if padding == "valid":
                pads = ((0, 0), (0, 0))
            elif padding == "same":
                totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
                pads = tuple((t // 2, t - t // 2) for t in totals)
            else:
                raise op.error(f"unsupported padding {padding!r}", Status.kParameterMissingPadding)
        else:
            ph, pw = spatial_ints(op, "padding", rank, 0, Status.kParameterMissingPadding, (0,) * rank)
            if min(ph, pw) < 0:
                raise op.error(f"padding {padding} must not be negative", Status.kParameterMissingPadding)
            pads = ((ph, ph), (pw, pw))
        return cls(kernel, stride, dilation, pads, mode, groups)

    def winograd_applies(self) -> bool:
        """Whether Winograd F(4x4, 3x3) computes this convolution: 3x3, stride 1, dilation 1,
        one group, zero padding."""
        return (self.kernel == (3, 3) and self.stride == (1, 1) and self.dilation == (1, 1)
                and self.groups == 1 and self.padding_mode in ("zeros", "constant"))

    def blockwise_transposed(self, output_padding: tuple[int, int]) -> bool:
        """Whether a transposed convolution of this geometry fills separate output blocks
        (:mod:`kuiperinfer.kernels.blockwise_transposed`): stride equal to the kernel, no
        padding, dilation, groups or output padding."""
        return (self.stride == self.kernel and self.padding == ((0, 0), (0, 0)) and self.dilation == (1, 1)
                and self.groups == 1 and output_padding == (0, 0))

    def in_stripes(self) -> bool:
        """Whether a depthwise convolution of this geometry goes a stripe of rows at a time
        (:mod:`kuiperinfer.kernels.depthwise_stripes`): zero padding, no dilation."""
        return self.padding_mode in ("zeros", "constant") and self.dilation == (1, 1)

    def computes_directly(self, in_channels: int, out_channels: int) -> bool:
        """Whether the compiled direct convolution (:mod:`kuiperinfer.kernels.compiled.direct`)
        computes a convolution of this geometry and these channels: one group of at most
        its few input channels and a vector's output channels or more, zero padding, a kernel
        larger than 1x1 of at most its taps."""
        return (self.groups == 1 and in_channels <= compiled_direct.MAX_CHANNELS
                and out_channels >= compiled_direct.LANES and self.padding_mode in ("zeros", "constant")
                and self.kernel != (1, 1) and in_channels * self.kernel[0] * self.kernel[1] <= compiled_direct.MAX_TAPS)

    def pad_nhwc(self, x: np.ndarray) -> np.ndarray:
        """NCHW ``x`` (any memory layout) padded, as a contiguous NHWC array."""
        return pad_nhwc(x, self.padding, self.padding_mode)

    def output_hw(self, padded_hw: tuple[int, int]) -> tuple[int, int]:
        return (output_size(padded_hw[0], self.kernel[0], self.stride[0], self.dilation[0]),
                output_size(padded_hw[1], self.kernel[1], self.stride[1], self.dilation[1]))

    def transposed_output_hw(self, hw: tuple[int, int], output_padding: tuple[int, int]) -> tuple[int, int]:
        """Size of the uncropped output of a transposed convolution of an input of size ``hw``."""
        return tuple((size - 1) * s + d * (k - 1) + 1 + extra for size, s, d, k, extra in
                     zip(hw, self.stride, self.dilation, self.kernel, output_padding))


def _read_channels(op: RuntimeOperator, geometry: ConvGeometry) -> tuple[int, int]:
    """in_channels and out_channels of an nn.* convolution, checked against groups."""
    c_out = op.param_int("out_channels", Status.kParameterMissingOutChannel)
    c_in = op.param_int("in_channels", Status.kParameterMissingInChannel)
    if c_in % geometry.groups or c_out % geometry.groups:
        raise op.error(f"in_channels {c_in} and out_channels {c_out} must be divisible by "
                       f"groups {geometry.groups}", Status.kParameterMissingGroups)
    return c_in, c_out


def _read_bias(op: RuntimeOperator, c_out: int) -> np.ndarray | None:
    use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("bias"))
    return op.weight("bias", (c_out,), Status.kAttrMissingBias) if use_bias else None


def _recorded_output(op: RuntimeOperator) -> tuple[int, int, int]:
    """(batch, height, width) of the output pnnx recorded for ``op`` at export, 0 where it
    did not (a 1-D output has height 1)."""
    shape = op.output_operands[0].shapes if op.output_operands else []
    rank = spatial_rank(op)
    if len(shape) != rank + 2:
        return 0, 0, 0
    batch, height, width = (max(d, 0) for d in (shape[0], 1 if rank == 1 else shape[2], shape[-1]))
    return batch, height, width


def _weight_operand_kernel(op: RuntimeOperator) -> tuple[int, ...]:
    """Kernel size of an F.* convolution, from the recorded shape of its weight input."""
    rank = spatial_rank(op)
    if len(op.input_operands_seq) < 2:
        raise op.error(f"{op.type} needs the weight as its second input", Status.kAttrMissingWeight)
    shape = op.input_operands_seq[1].shapes
    if len(shape) != rank + 2 or min(shape[2:]) < 1:
        raise op.error(f"weight operand has shape {shape}, expected {rank + 2} dimensions",
                       Status.kParameterMissingKernel)
    return tuple(shape[2:])


def _check_weight(weight: np.ndarray, geometry: ConvGeometry, rank: int) -> np.ndarray:
    """A run-time weight input as 4-D, checked against the kernel size recorded at export."""
    if weight.ndim != rank + 2 or tuple(weight.shape[2:]) != geometry.kernel[2 - rank:]:
        raise InferError(f"weight of shape {weight.shape} does not fit kernel {geometry.kernel[2 - rank:]}",
                         status=InferStatus.kInferFailedWeightParameterError)
    return weight.reshape(*weight.shape[:2], *geometry.kernel)


def check_channels(x: np.ndarray, expected: int) -> None:
    if x.shape[1] != expected:
        raise InferError(f"input of shape {x.shape} has {x.shape[1]} channels, the weight expects "
                         f"{expected}", status=InferStatus.kInferFailedChannelParameterError)


# -- convolution -------------------------------------------------------------------------

def is_depthwise(weight: np.ndarray, groups: int) -> bool:
    """Whether a convolution with ``weight`` (Cout, Cin/groups, kh, kw) has one filter per channel."""
    return weight.shape[0] == groups and weight.shape[1] == 1


class PackedWeight:
    """A (Cout, Cin/groups, kh, kw) convolution weight in the forms its kernels take, made
    once at build time. Its public members:

    * :attr:`in_channels`, :attr:`out_channels`;
    * :attr:`depthwise`: the taps of a depthwise convolution (tiled for the ``recorded``
      output width with the stride of ``geometry``, when given), else None;
    * :attr:`compiled_depthwise`: with ``compiled``, the compiled depthwise kernel's weight
      with the bias and activation of the compiled ``epilogue``, where ``geometry`` lets it
      compute the convolution (zero padding, no dilation), else None;
    * :attr:`gemm`: the (groups, Cin/groups*kh*kw, Cout/groups) operand of im2col, and
      :attr:`matrix`, its one group as (Cin*kh*kw, Cout);
    * :attr:`direct`: with ``compiled``, the compiled direct convolution's weight with the
      bias and activation of the compiled ``epilogue``, where ``geometry`` lets it compute
      the convolution (:meth:`ConvGeometry.computes_directly`), else None;
    * :attr:`planar`: the operand of the planar columns, for very few input channels;
    * :attr:`winograd`: the transformed weight of Winograd, where :attr:`takes_winograd`.

    ``recorded`` is the output's (batch, height, width) at export (0 where unknown). When
    Winograd computes that shape, and so every larger batch, the GEMM operand is made only
    if a call needs it (a smaller image), else the transformed weight is: the weight is not
    held twice more than it must be.
    Every form is of ``scale`` times the weight
    (:func:`product_epilogue` says why).
    """

    def __init__(self, weight: np.ndarray, groups: int, winograd: bool = False,
                 geometry: ConvGeometry | None = None, recorded: tuple[int, int, int] = (0, 0, 0),
                 scale: float = 1.0,
                 epilogue: Epilogue | compiled_epilogue.CompiledEpilogue | None = None, compiled: bool = False):
        self.in_channels = weight.shape[1] * groups
        self.out_channels = weight.shape[0]
        self._weight, self._groups, self._scale = weight, groups, scale
        scaled = self._scaled()
        self.depthwise = self.compiled_depthwise = None
        if is_depthwise(weight, groups):
            in_stripes = geometry is not None and geometry.in_stripes()
            self.depthwise = DepthwiseWeight(scaled, recorded[2] or None, geometry.stride if geometry else (1, 1),
                                             in_stripes and not compiled)
            if compiled and in_stripes:
                self.compiled_depthwise = CompiledDepthwise(self.depthwise.taps, epilogue)
        self.direct = None
        if compiled and geometry is not None and geometry.computes_directly(self.in_channels, self.out_channels):
            self.direct = compiled_direct.CompiledDirect(scaled, epilogue)
        few = groups == 1 and weight.shape[1] <= PLANAR_MAX_CHANNELS and self.direct is None
        self.planar = pack_planar_weight(scaled) if few else None
        self.takes_winograd = winograd
        """Whether calls of enough tiles take Winograd."""
        winograd_at_export = (winograd and min(recorded) > 0
                              and winograd_pays(recorded[0], self.in_channels, recorded[1:]))
        self._winograd = winograd_weight(scaled) if winograd_at_export else None
        self._gemm = None
        if self.depthwise is None and self.direct is None and not winograd_at_export:
            self._gemm = pack_weight(scaled, groups)

    def _scaled(self) -> np.ndarray:
        return self._weight if self._scale == 1 else self._weight * np.float32(self._scale)

    @property
    def gemm(self) -> np.ndarray:
        """The GEMM operand of im2col (made on first use if not at build time; threads
        asking at once may each make it, and all get the same values)."""
        gemm = self._gemm
        if gemm is None:
            gemm = self._gemm = pack_weight(self._scaled(), self._groups)
        return gemm

    @property
    def winograd(self) -> np.ndarray:
        """The transformed weight of Winograd (made on first use if not at build time, as :attr:`gemm`)."""
        transformed = self._winograd
        if transformed is None:
            transformed = self._winograd = winograd_weight(self._scaled())
        return transformed

    @property
    def holds_winograd(self) -> bool:
        """Whether the transformed weight is held (made at build, or since on first use)."""
        return self._winograd is not None

    @property
    def holds_gemm(self) -> bool:
        """Whether the GEMM operand is held (made at build, or since on first use)."""
        return self._gemm is not None

    def drop_gemm(self) -> None:
        """Let go of the GEMM operand where another form computes the convolution (made again
        on first use, should anything ask for it)."""
        self._gemm = None

    @property
    def matrix(self) -> np.ndarray:
        """The GEMM operand of a single-group convolution, (Cin*kh*kw, Cout)."""
        if self._groups != 1:
            raise ValueError(f"a convolution of {self._groups} groups has no single GEMM matrix")
        return self.gemm[0]


def product_epilogue(bias: np.ndarray | None, channels: int, activation: InplaceActivation | None,
                     compiled: bool) -> tuple[np.float32, Epilogue | compiled_epilogue.CompiledEpilogue]:
    """The epilogue of a product of ``channels`` output channels that ``bias`` and then
    ``activation`` follow, and the scale its weights take: the compiled epilogue does it all
    in one pass; the reference halves the weights for an activation that starts by halving
    (:func:`kuiperinfer.kernels.elementwise.product_epilogue`)."""
    if compiled:
        return np.float32(1), compiled_epilogue.CompiledEpilogue(bias, channels, activation)
    return reference_epilogue(bias, activation)


class PointwiseProduct:
    """A 1x1, stride-1, single-group convolution as a product of rows of pixels: (P, Cin) rows
    times the (Cin, Cout) weight, then the bias and activation, in its :attr:`precision`, as
    the nn.Conv2d computes it. The fused operators compute their 1x1 convolutions through it:
    by :attr:`product` (its epilogue fused; ``requantize``, for an int8 product, hands its
    output on as uint8) in bf16 and int8, and in fp32 where ``tiles`` asks for the float32
    tiles and the load has them; otherwise by :attr:`matrix` and :attr:`epilogue` (in place)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, activation: InplaceActivation | None,
                 compiled: bool = False, precision: Precision = FP32, requantize: Requantize | None = None,
                 tiles: bool = False):
        if weight.ndim != 4 or weight.shape[2:] != (1, 1):
            raise ValueError(f"a 1x1 convolution's weight has shape (out, in, 1, 1), not {weight.shape}")
        self.out_channels, self.in_channels = weight.shape[:2]
        self.precision = precision
        """What the product computes."""
        matrix, epilogue = weight.reshape(weight.shape[:2]).T, ProductEpilogue(bias, activation, requantize=requantize)
        self.product = precision.product(matrix, epilogue, not compiled)
        if self.product is None and compiled and tiles:
            self.product = precision.float_product(matrix, epilogue)
        self.matrix = self.epilogue = None
        if self.product is None:
            scale, self.epilogue = product_epilogue(bias, weight.shape[0], activation, compiled)
            self.matrix = PackedWeight(weight, 1, scale=scale).matrix

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        if self.product is not None:
            return self.product(rows)
        out = np.matmul(rows, self.matrix)
        self.epilogue(out)
        return out


class Conv2dKernel:
    """A 2-D convolution of NCHW input (any memory layout) with one packed weight, then the
    ``epilogue`` (bias and fused activation) in place; calling it gives a new NHWC (N, OH,
    OW, Cout) array, which :func:`~kuiperinfer.kernels.layout.nchw` views as NCHW.

    The way it computes is chosen once, from the weight and geometry (ncnn's
    ``create_pipeline``), as :attr:`compute`: the compiled depthwise kernel; a zero-padded,
    undilated depthwise convolution a stripe of rows at a time; any other depthwise one on
    its padded input; the compiled direct convolution for few input channels; Winograd
    where the weight has its transform; the planar columns for very few input channels;
    or im2col. Three of them depend on the call too, and hand it on
    when it does not suit them: Winograd to the next when the call has too few tiles to pay,
    the planar columns to im2col for a channels-last input, and a 1x1 convolution's one
    product (:meth:`pointwise`) to them when the call is too large for one thread and block.
    """

    def __init__(self, weight: PackedWeight, geometry: ConvGeometry, epilogue: Epilogue | None = None,
                 form: Form | None = None):
        self.weight, self.geometry, self.epilogue = weight, geometry, epilogue
        self.form = form
        """The uint8 form (scale, zero point) the compiled depthwise kernel stores its output
        in, or None for float32."""
        if weight.compiled_depthwise is not None:
            self.compute = self.compiled_depthwise
        elif weight.depthwise is not None:
            self.compute = self.depthwise_in_stripes if geometry.in_stripes() else self.depthwise
        elif weight.direct is not None:
            self.compute = self.direct
        else:
            self.compute = self.winograd if weight.takes_winograd else self.general
            if geometry.kernel == (1, 1) and geometry.stride == (1, 1) and geometry.groups == 1 \
                    and geometry.padding == ((0, 0), (0, 0)) and not weight.takes_winograd:
                self.compute = self.pointwise

    def __call__(self, x: np.ndarray) -> np.ndarray:
        check_channels(x, self.weight.in_channels)
        (top, bottom), (left, right) = self.geometry.padding
        hw = self.geometry.output_hw((x.shape[2] + top + bottom, x.shape[3] + left + right))
        if min(hw) < 1:
            raise InferError(f"input {x.shape} is too small for kernel {self.geometry.kernel} "
                             f"with padding {self.geometry.padding}", status=InferStatus.kInferFailedOutputSizeError)
        return self.compute(x, hw)

    def compiled_depthwise(self, x: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        # the bias and activation are the compiled kernel's own
        return self.weight.compiled_depthwise(nhwc(x), self.geometry.stride, self.geometry.padding, self.form)

    def direct(self, x: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        # the bias and activation are the compiled kernel's own
        g = self.geometry
        return self.weight.direct(x, hw, g.stride, g.dilation, g.padding)

    def depthwise_in_stripes(self, x: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        g = self.geometry
        return depthwise_in_stripes(nhwc(x), self.weight.depthwise, g.stride, g.padding, hw, self.epilogue)

    def depthwise(self, x: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        g = self.geometry
        return depthwise_conv2d(g.pad_nhwc(x), self.weight.depthwise, g.stride, g.dilation, hw, self.epilogue)

    def winograd(self, x: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        if winograd_pays(x.shape[0], x.shape[1], hw):
            return winograd_conv3x3(x, self.weight.winograd, self.geometry.padding, self.epilogue)
        return self.general(x, hw)

    def pointwise(self, x: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        """A 1x1 convolution of a channels-last float32 ``x`` small enough for one thread and
        one block, as one product and its epilogue (the general case's calls cost a third of
        the product at a depthwise network's small sizes); anything else goes the general way."""
        n, c, h, w = x.shape
        k = self.weight.out_channels
        if x.dtype != np.float32 or not is_channels_last(x) or n * h * w * k * 4 > WHOLE_BYTES \
                or threads_for(n * h * w * c * k) > 1:
            return self.general(x, hw)
        out = np.matmul(nhwc(x).reshape(-1, c), self.weight.matrix)
        self.epilogue(out)
        return out.reshape(n, h, w, k)

    def general(self, x: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        """The planar columns for a row-major input of very few channels, else im2col."""
        g = self.geometry
        if self.weight.planar is not None and x.flags.c_contiguous:
            padded = pad_last_dims(x, g.padding, g.padding_mode)
            return planar_conv2d(padded, self.weight.planar, g.kernel, g.stride, g.dilation, hw, self.epilogue)
        return im2col_conv2d(g.pad_nhwc(x), self.weight.gemm, g.kernel, g.stride, g.dilation, hw, self.epilogue)


def conv2d(x: np.ndarray, weight: PackedWeight, geometry: ConvGeometry,
           epilogue: Epilogue | None = None) -> np.ndarray:
    """2-D convolution of NCHW ``x`` by :class:`Conv2dKernel`, for a weight used once."""
    return Conv2dKernel(weight, geometry, epilogue)(x)


def add_residual(out: np.ndarray, residual: np.ndarray, activation: InplaceActivation | None,
                 compiled: bool = False) -> np.ndarray:
    """``activation(out + residual)``, in ``out`` (a fresh convolution output) unless the
    sum broadcasts to a larger shape; compiled, in one pass where both are channels-last
    arrays of one shape (as convolutions hand them on)."""
    if compiled and out.ndim == 4 and compiled_epilogue.add_residual(nhwc(out), nhwc(residual), activation):
        return out
    if np.broadcast_shapes(out.shape, residual.shape) == out.shape:
        out += residual
    else:
        out = out + residual
    return out if activation is None else activation(out)


Padding = tuple[tuple[int, int], tuple[int, int]]
"""(top, bottom), (left, right)."""


@dataclass(frozen=True)
class ConvolutionPlan:
    """The optimiser's plan for an nn.Conv1d/nn.Conv2d (and, for its memory layout only,
    nn.ConvTranspose1d/2d): what it computes beyond pnnx's parameters."""

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
    quantized_for: str | None = None
    """In int8, the pnnx operator whose int8 product alone reads the output (with any
    others of the same input range): the output is handed on as uint8 in that product's
    input form, requantized in this convolution's epilogue."""
    residual_quantized_for: str | None = None
    """In int8, the pnnx operator in whose product's input form the residual arrives as
    uint8 (its producer requantized it for that product): the epilogue dequantizes it so."""


NO_PLAN = ConvolutionPlan()


def depthwise_form(depthwise: CompiledDepthwise | None, requantize: Requantize | None) -> Form | None:
    """The uint8 form a compiled ``depthwise`` kernel stores its output in, where int8 hands
    it on so (``requantize``) and the kernel can (its activation computed in registers)."""
    if depthwise is None or requantize is None:
        return None
    return depthwise.form_of(requantize.scale, requantize.zero_point)


def requantized(out: np.ndarray, requantize: Requantize | None, compiled: bool) -> np.ndarray:
    """``out`` in the uint8 form ``requantize`` says, where a kernel that stores float32 only
    made it (as it is where it is uint8 already, or without a form)."""
    if requantize is None or out.dtype == np.uint8:
        return out
    return quantize_activations(out, requantize.scale, requantize.zero_point, compiled)


@register_layer("nn.Conv1d", "nn.Conv2d")
class Convolution(ParamLayer):
    """nn.Conv1d / nn.Conv2d with the weight (and bias) stored in the model, computing what
    the optimiser planned (:class:`ConvolutionPlan`) by the kernel chosen when it is packed."""

    plan_class = ConvolutionPlan

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None,
                 geometry: ConvGeometry, rank: int, plan: ConvolutionPlan = NO_PLAN,
                 recorded: tuple[int, int, int] = (0, 0, 0), compiled: bool = False, precision: Precision = FP32,
                 requantize: Requantize | None = None, residual_form: Requantize | None = None):
        super().__init__(layer_name, weight, bias)
        self.requantize = requantize
        """In int8, the form its output is handed on in (uint8), where the plan says so."""
        self.residual_form = residual_form
        """In int8, the form of a uint8 residual, where the plan says one arrives so."""
        if plan.padding is not None:
            geometry = replace(geometry, padding=plan.padding)
        self.geometry, self.rank, self.plan, self.compiled = geometry, rank, plan, compiled
        depthwise = is_depthwise(weight, geometry.groups)
        self.products = () if depthwise else (layer_name,)
        self.precision = FP32 if depthwise else precision
        """What the product computes; a depthwise convolution is no product and stays fp32."""
        self.recorded = recorded
        """The output's (batch, height, width) at export (0 where unknown), for which the
        weights are prepared (any other shape works too)."""
        self.winograd = plan.winograd and geometry.winograd_applies()
        """Whether calls with enough tiles run Winograd (the optimiser selects it)."""
        self.pack()

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Convolution:
        return cls.create_planned(op, options, op.plan or NO_PLAN)

    @classmethod
    def create_planned(cls, op: RuntimeOperator, options: BuildOptions, plan: ConvolutionPlan) -> Convolution:
        """The convolution whose parameters and weight ``op`` holds, computing ``plan`` (a
        fused operator's plan holds its convolution's)."""
        rank = spatial_rank(op)
        kernel = op.param_ints("kernel_size", rank, Status.kParameterMissingKernel)
        geometry = ConvGeometry.from_operator(op, kernel)
        c_in, c_out = _read_channels(op, geometry)
        weight = op.weight("weight", (c_out, c_in // geometry.groups, *kernel), copy=False)
        if plan.residual and len(op.input_operands_seq) != 2:
            raise op.error(f"a convolution adding a residual takes 2 inputs, not {len(op.input_operands_seq)}",
                           Status.kParameterInvalidValue)
        layer = cls(op.name, weight, _read_bias(op, c_out), geometry, rank, plan, _recorded_output(op),
                    options.compiled, options.precision_of(op.name), requantize_for(options, plan.quantized_for),
                    requantize_for(options, plan.residual_quantized_for))
        layer.batch_independent = batched(op, rank)
        return layer

    @classmethod
    def takes_activation(cls, op: RuntimeOperator) -> bool:
        return True

    @classmethod
    def input_product(cls, op: RuntimeOperator) -> str | None:
        return op.name

    @classmethod
    def residual_input(cls, op: RuntimeOperator) -> int | None:
        return 1 if (op.plan or NO_PLAN).residual else None

    def pack(self) -> None:
        weight_2d = self._weight.reshape(*self._weight.shape[:2], *self.geometry.kernel)
        self._bound: dict[tuple[object, ...], ProductCall] = {}
        """A 1x1 convolution's bound call on the compiled tiles for each shape, strides and type of
        its channels-last input (and residual), made on the first call."""
        if self.precision.name != "fp32":
            self.packed = self.epilogue = None
            self.kernel = product_convolution(weight_2d, self._bias, self.geometry, self.precision, ProductEpilogue(
                None, self.plan.activation, self.plan.residual_activation, self.requantize), self.compiled)
            return
        scale, epilogue = product_epilogue(self._bias, self._weight.shape[0], self.plan.activation, self.compiled)
        self.epilogue = epilogue
        """Bias and planned activation, applied in place on each block of output."""
        self.packed = PackedWeight(weight_2d, self.geometry.groups, self.winograd, self.geometry, self.recorded,
                                   scale, epilogue, self.compiled)
        """The weight in the form the kernels take (made again when the weights change)."""
        form = None if self.plan.residual else depthwise_form(self.packed.compiled_depthwise, self.requantize)
        self.kernel = Conv2dKernel(self.packed, self.geometry, epilogue, form)
        """The way this convolution computes, chosen for its weight and geometry (in bf16 and
        int8, and in fp32 for an im2col product on the float32 tiles, a
        :class:`~kuiperinfer.kernels.matrix.convolution.ProductConvolution`; Winograd on the
        float32 tiles, a :class:`~kuiperinfer.kernels.matrix.winograd.TiledWinograd`)."""
        if not self.compiled or self.precision.float_tiles is None or self.packed.planar is not None:
            return
        def on_tiles() -> ProductConvolution:
            return product_convolution(weight_2d, self._bias, self.geometry, self.precision, ProductEpilogue(
                None, self.plan.activation, self.plan.residual_activation), self.compiled, float_tiles=True)
        compute = self.kernel.compute.__func__
        if compute in (Conv2dKernel.general, Conv2dKernel.pointwise):
            self.kernel = on_tiles()
            self.packed.drop_gemm()     # the tiles hold the weight in their own packing
        elif compute is Conv2dKernel.winograd:
            pays = self.packed.holds_winograd    # Winograd pays at the recorded shape
            self.kernel = TiledWinograd(weight_2d, self._bias, self.plan.activation, self.plan.residual_activation,
                                        self.geometry.padding, self.precision.float_tiles, on_tiles,
                                        self.packed.winograd if pays else None)
            if not pays:                         # a small image: its calls go to the columns
                self.kernel.few_tiles()
            self.packed = self.epilogue = None   # the tiles hold the weights in their own packing

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        key = bound_key(inputs)
        bound = self._bound.get(key)
        if bound is not None:
            return [nchw(bound(nhwc(inputs[0]), nhwc(inputs[1]) if len(inputs) > 1 else None))]
        x, unbatched = as_2d(inputs[0], self.rank, f"conv{self.rank}d")
        if isinstance(self.kernel, (ProductConvolution, TiledWinograd)):
            out = from_2d(nchw(self._products(x, inputs[1] if self.plan.residual else None)), self.rank, unbatched)
        else:
            out = from_2d(nchw(self.kernel(x)), self.rank, unbatched)
            if self.plan.residual:
                out = add_residual(out, inputs[1], self.plan.residual_activation, self.compiled)
        out = requantized(out, self.requantize, self.compiled)
        if not self.plan.channels_last:
            out = np.ascontiguousarray(out)
        self._bind(inputs, key, out)
        return [out]

    def _bind(self, inputs: Sequence[Any], key: tuple[object, ...], out: np.ndarray) -> None:
        """Keep the bound call of a 1x1 convolution on the compiled tiles for inputs like these, where
        it takes them as they lie and gives the layer's output (``out``): a channels-last
        input, float32 or in the product's form, and residual of the output's shape, float32
        or uint8 in the form the plan says, and a channels-last output in the form handed on."""
        kernel, x = self.kernel, inputs[0]
        if not (isinstance(kernel, ProductConvolution) and kernel.pixel_rows and x.ndim == 4 and out.ndim == 4
                and is_channels_last(out) and x.dtype in (np.float32, kernel.products[0].in_dtype)
                and nhwc(x).flags.c_contiguous and out.dtype == kernel.products[0].out_dtype):
            return
        residual = inputs[1] if self.plan.residual else None
        form = (None, 1.0, 0)
        if residual is not None:
            if (residual.shape != out.shape or not nhwc(residual).flags.c_contiguous or not residual.flags.writeable
                    or residual.dtype != np.float32 and (residual.dtype != np.uint8 or self.residual_form is None)):
                return
            form = (residual.dtype.type, 1.0, 0) if residual.dtype == np.float32 else \
                (np.uint8, self.residual_form.scale, self.residual_form.zero_point)
        self._bound[key] = kernel.pointwise_call(nhwc(x).shape, x.dtype, *form)

    def _products(self, x: np.ndarray, residual: np.ndarray | None) -> np.ndarray:
        """The convolution by the products of its precision, the residual added in their epilogue."""
        check_channels(x, self.kernel.in_channels)
        if residual is None:
            return self.kernel(x)
        residual = as_2d(residual, self.rank, f"conv{self.rank}d")[0]
        n, _, h, w = x.shape
        (top, bottom), (left, right) = self.geometry.padding
        shape = (n, self.kernel.out_channels, *self.geometry.output_hw((h + top + bottom, w + left + right)))
        if residual.shape != shape:     # a residual of the output's shape passes as it is: a broadcast view
            residual = np.broadcast_to(residual, shape)   # is read-only, which the kernels copy
        if residual.dtype == np.uint8 and self.residual_form is not None:   # in int8, as its producer handed it on
            form = self.residual_form
            return self.kernel(x, residual, form.scale, form.zero_point)
        return self.kernel(x, np.asarray(residual, np.float32))


def product_convolution(weight: np.ndarray, bias: np.ndarray | None, geometry: ConvGeometry, precision: Precision,
                        epilogue: ProductEpilogue, compiled: bool, float_tiles: bool = False) -> ProductConvolution:
    """The convolution by a (Cout, Cin/groups, kh, kw) ``weight`` through the products of
    ``precision`` (one per group; fp32's on the ``float_tiles``), each with ``epilogue`` and
    its channels' ``bias``; compiled int8 computes a geometry the direct convolution takes
    (:meth:`ConvGeometry.computes_directly`: a stem) without columns where that is faster
    (:meth:`DirectInt8Convolution.pays`), to the same numbers."""
    matrices = pack_weight(weight, geometry.groups)
    width = matrices.shape[2]

    def product(matrix: np.ndarray, group: int) -> Product:
        channels = replace(epilogue, bias=None if bias is None else bias[group * width:(group + 1) * width])
        return precision.float_product(matrix, channels) if float_tiles else \
            precision.product(matrix, channels, not compiled)
    products = [product(matrix, group) for group, matrix in enumerate(matrices)]
    if compiled and precision.name == "int8" and products[0].kernel.dot is not None \
            and geometry.computes_directly(weight.shape[1], weight.shape[0]) \
            and DirectInt8Convolution.pays(weight.shape, products[0].kernel):
        return DirectInt8Convolution(products[0], weight, geometry.stride, geometry.dilation, geometry.padding)
    return ProductConvolution(products, geometry.kernel, geometry.stride, geometry.dilation, geometry.padding,
                              geometry.padding_mode, compiled)


@register_layer("F.conv1d", "F.conv2d")
class FunctionalConvolution(Layer):
    """F.conv1d / F.conv2d whose weight (and bias) arrive as inputs at run time."""

    def __init__(self, layer_name: str, geometry: ConvGeometry, rank: int, precision: Precision = FP32,
                 compiled: bool = False):
        super().__init__(layer_name)
        self.geometry, self.rank, self.precision, self.compiled = geometry, rank, precision, compiled

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FunctionalConvolution:
        rank = spatial_rank(op)
        layer = cls(op.name, ConvGeometry.from_operator(op, _weight_operand_kernel(op)), rank,
                    options.precision_of(op.name), options.compiled)
        return functional(layer, op, batched(op, rank))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_2d(inputs[0], self.rank, f"conv{self.rank}d")
        weight = _check_weight(inputs[1], self.geometry, self.rank)
        bias = inputs[2] if len(inputs) > 2 else None
        if self.precision.name != "fp32" and not is_depthwise(weight, self.geometry.groups):
            check_channels(x, weight.shape[1] * self.geometry.groups)
            out = product_convolution(weight, bias, self.geometry, self.precision, ProductEpilogue(), self.compiled)(x)
        else:
            out = conv2d(x, PackedWeight(weight, self.geometry.groups), self.geometry, Epilogue(bias))
        return [from_2d(np.ascontiguousarray(nchw(out)), self.rank, unbatched)]


# -- transposed convolution --------------------------------------------------------------

def pack_transposed_weight(weight: np.ndarray, groups: int) -> np.ndarray:
    """(Cin, Cout/groups, kh, kw) -> the GEMM operand (groups, Cout/groups*kh*kw, Cin/groups)."""
    c_in = weight.shape[0]
    per_group = weight.reshape(groups, c_in // groups, -1)
    return np.require(per_group.transpose(0, 2, 1), np.float32, "CA")


def pack_conv_transpose_weight(weight: np.ndarray, geometry: ConvGeometry,
                               output_padding: tuple[int, int]) -> np.ndarray:
    """A (Cin, Cout/groups, kh, kw) transposed-convolution weight as the GEMM operand
    :func:`conv_transpose2d` takes for ``geometry``."""
    if geometry.blockwise_transposed(output_padding):
        return pack_blockwise_weight(weight)
    return pack_transposed_weight(weight, geometry.groups)


def conv_transpose2d(x: np.ndarray, packed: np.ndarray, bias: np.ndarray | None,
                     geometry: ConvGeometry, output_padding: tuple[int, int]) -> np.ndarray:
    """Transposed 2-D convolution of NCHW ``x`` with a :func:`pack_transposed_weight` operand
    (or, for a :meth:`ConvGeometry.blockwise_transposed` geometry, a
    :func:`~kuiperinfer.kernels.blockwise_transposed.pack_blockwise_weight` operand, and
    then the result is in channels-last memory)."""
    if geometry.blockwise_transposed(output_padding):
        check_channels(x, packed.shape[0])
        return nchw(blockwise_conv_transpose2d(x, packed, geometry.kernel, bias))
    groups, rows, c_in_group = packed.shape
    check_channels(x, c_in_group * groups)
    n, _, h, w = x.shape
    kh, kw = geometry.kernel
    c_out = groups * rows // (kh * kw)
    cols = np.matmul(packed, x.reshape(n, groups, c_in_group, h * w))
    return fold_columns(cols.reshape(n, c_out, kh, kw, h, w), bias, geometry, output_padding)


def fold_columns(cols: np.ndarray, bias: np.ndarray | None, geometry: ConvGeometry,
                 output_padding: tuple[int, int]) -> np.ndarray:
    """A transposed convolution's NCHW output from its columns (N, Cout, kh, kw, H, W): the
    overlapping taps summed (col2im), the padding cropped off, the bias added."""
    h, w = cols.shape[4:]
    full_hw = geometry.transposed_output_hw((h, w), output_padding)
    out = col2im(cols, geometry.stride, geometry.dilation, full_hw)
    (top, _), (left, _) = geometry.padding
    oh, ow = full_hw[0] - 2 * top, full_hw[1] - 2 * left
    if oh < 1 or ow < 1:
        raise InferError(f"an input of {h}x{w} pixels is too small for padding {geometry.padding}",
                         status=InferStatus.kInferFailedOutputSizeError)
    out = out[:, :, top: top + oh, left: left + ow]
    if bias is not None:
        out += bias.reshape(-1, 1, 1)
    return out


class ProductTransposedConvolution:
    """A transposed convolution (not depthwise) by the products of a bf16 or int8 ``precision``,
    one per group: the input pixels' channels (N*H*W, Cin/groups) times the (Cin/groups,
    Cout/groups*kh*kw) weight, whose taps share their output channel's int8 scale. The
    overlapping taps' outputs are then summed as float32 (:func:`fold_columns`); with a
    blockwise geometry (stride equal to the kernel), where none overlap, each input pixel's
    block of outputs, bias included, is copied into place, as uint8 in the ``requantize``
    form where one is given (an int8 product alone reads the output). Calling it gives NCHW
    output (channels-last memory for the blockwise geometry)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, geometry: ConvGeometry,
                 output_padding: tuple[int, int], precision: Precision, compiled: bool,
                 requantize: Requantize | None = None):
        c_in, width, kh, kw = weight.shape
        self.geometry, self.output_padding, self.bias, self.in_channels = geometry, output_padding, bias, c_in
        self.blockwise = geometry.blockwise_transposed(output_padding)
        scales = weight_scales(weight, axis=1)
        if self.blockwise:   # columns (kh, kw, Cout): each input pixel's block in NHWC order
            matrices, scales = [pack_blockwise_weight(weight)], np.tile(scales, kh * kw)
            epilogue = ProductEpilogue(None if bias is None else np.tile(bias, kh * kw), requantize=requantize)
        else:                # columns (Cout/groups, kh, kw) per group
            matrices = weight.reshape(geometry.groups, c_in // geometry.groups, width * kh * kw)
            scales, epilogue = np.repeat(scales, kh * kw), ProductEpilogue()
        self.products = [precision.product(matrix, epilogue, not compiled, scales) for matrix in matrices]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        check_channels(x, self.in_channels)
        n, c, h, w = x.shape
        rows = np.ascontiguousarray(nhwc(self.products[0].activations(x))).reshape(n * h * w, c)
        kh, kw = self.geometry.kernel
        if self.blockwise:
            y = self.products[0](rows)
            k = y.shape[1] // (kh * kw)
            out = np.empty((n, h, kh, w, kw, k), y.dtype)
            np.copyto(out, y.reshape(n, h, w, kh, kw, k).transpose(0, 1, 3, 2, 4, 5))
            return nchw(out.reshape(n, h * kh, w * kw, k))
        group = c // len(self.products)
        cols = np.concatenate([product(rows[:, i * group:(i + 1) * group]) for i, product in enumerate(self.products)],
                              axis=1)
        cols = cols.reshape(n, h, w, -1, kh, kw).transpose(0, 3, 4, 5, 1, 2)
        return fold_columns(cols, self.bias, self.geometry, self.output_padding)


def _read_transposed_geometry(op: RuntimeOperator, kernel: tuple[int, ...]
                              ) -> tuple[ConvGeometry, tuple[int, int]]:
    """Geometry and output_padding of a transposed convolution (zero, numeric padding only)."""
    rank = len(kernel)
    if isinstance(op.param_value("padding"), str) or op.param_value("padding_mode", "zeros") != "zeros":
        raise op.error("transposed convolution takes numeric zero padding", Status.kParameterMissingPadding)
    geometry = ConvGeometry.from_operator(op, kernel)
    extra = spatial_ints(op, "output_padding", rank, 0, Status.kParameterMissingPadding, (0,) * rank)
    if any(e < 0 or e >= max(s, d) for e, s, d in zip(extra, geometry.stride, geometry.dilation)):
        raise op.error(f"output_padding {extra} must be smaller than stride {geometry.stride} "
                       f"or dilation {geometry.dilation}", Status.kParameterInvalidValue)
    return geometry, extra


@register_layer("nn.ConvTranspose1d", "nn.ConvTranspose2d")
class TransposedConvolution(ParamLayer):
    """nn.ConvTranspose1d / nn.ConvTranspose2d with the weight (and bias) stored in the model."""


    plan_class = ConvolutionPlan

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None,
                 geometry: ConvGeometry, output_padding: tuple[int, int], rank: int,
                 channels_last: bool = False, precision: Precision = FP32, compiled: bool = False,
                 requantize: Requantize | None = None):
        super().__init__(layer_name, weight, bias)
        self.geometry, self.output_padding, self.rank, self.compiled = geometry, output_padding, rank, compiled
        self.requantize = requantize
        """In int8, the uint8 form of the int8 products reading the output (a plan's
        ``quantized_for``), in which it is handed on: the blockwise geometry's product
        requantizes in its epilogue, the others' sums are quantized once summed."""
        depthwise = is_depthwise(weight, geometry.groups)
        self.products = () if depthwise else (layer_name,)
        self.precision = FP32 if depthwise else precision
        self.channels_last = channels_last
        """Whether an output computed in channels-last memory stays so (the optimiser
        selects it); otherwise it is copied to row-major NCHW."""
        self.pack()

    @classmethod
    def input_product(cls, op: RuntimeOperator) -> str | None:
        return op.name

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> TransposedConvolution:
        rank = spatial_rank(op)
        kernel = op.param_ints("kernel_size", rank, Status.kParameterMissingKernel)
        geometry, output_padding = _read_transposed_geometry(op, kernel)
        c_in, c_out = _read_channels(op, geometry)
        weight = op.weight("weight", (c_in, c_out // geometry.groups, *kernel), copy=False)
        plan = op.plan or NO_PLAN
        layer = cls(op.name, weight, _read_bias(op, c_out), geometry, output_padding, rank, plan.channels_last,
                    options.precision_of(op.name), options.compiled, requantize_for(options, plan.quantized_for))
        layer.batch_independent = batched(op, rank)
        return layer

    def pack(self) -> None:
        weight = self._weight.reshape(*self._weight.shape[:2], *self.geometry.kernel)
        if self.precision.name != "fp32":
            product = ProductTransposedConvolution(weight, self._bias, self.geometry, self.output_padding,
                                                   self.precision, self.compiled, self.requantize)
            self._kernel = self._quantized(product) if not product.blockwise else product
            return
        packed = pack_conv_transpose_weight(weight, self.geometry, self.output_padding)
        self._kernel = self._quantized(
            lambda x: conv_transpose2d(x, packed, self._bias, self.geometry, self.output_padding))

    def _quantized(self, kernel: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
        """``kernel``'s float32 output quantized into the :attr:`requantize` form, if there is one
        (summed overlapping taps, or fp32's; the blockwise product requantizes in its epilogue)."""
        form = self.requantize
        if form is None:
            return kernel
        return lambda x: quantize_activations(kernel(x), form.scale, form.zero_point, self.compiled)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_2d(inputs[0], self.rank, f"conv_transpose{self.rank}d")
        out = self._kernel(x)
        if not self.channels_last:
            out = np.ascontiguousarray(out)
        return [from_2d(out, self.rank, unbatched)]


@register_layer("F.conv_transpose1d", "F.conv_transpose2d")
class FunctionalTransposedConvolution(Layer):
    """F.conv_transpose1d / F.conv_transpose2d whose weight (and bias) arrive as inputs."""

    def __init__(self, layer_name: str, geometry: ConvGeometry, output_padding: tuple[int, int],
                 rank: int, precision: Precision = FP32, compiled: bool = False):
        super().__init__(layer_name)
        self.geometry, self.output_padding, self.rank = geometry, output_padding, rank
        self.precision, self.compiled = precision, compiled

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FunctionalTransposedConvolution:
        geometry, output_padding = _read_transposed_geometry(op, _weight_operand_kernel(op))
        rank = spatial_rank(op)
        return functional(cls(op.name, geometry, output_padding, rank, options.precision_of(op.name),
                              options.compiled), op, batched(op, rank))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_2d(inputs[0], self.rank, f"conv_transpose{self.rank}d")
        weight = _check_weight(inputs[1], self.geometry, self.rank)
        if weight.shape[0] % self.geometry.groups:
            raise InferError(f"weight of shape {weight.shape} does not split into "
                             f"{self.geometry.groups} groups",
                             status=InferStatus.kInferFailedWeightParameterError)
        bias = inputs[2] if len(inputs) > 2 else None
        if self.precision.name != "fp32" and not is_depthwise(weight, self.geometry.groups):
            out = ProductTransposedConvolution(weight, bias, self.geometry, self.output_padding, self.precision,
                                               self.compiled)(x)
        else:
            packed = pack_conv_transpose_weight(weight, self.geometry, self.output_padding)
            out = conv_transpose2d(x, packed, bias, self.geometry, self.output_padding)
        return [from_2d(np.ascontiguousarray(out), self.rank, unbatched)]
