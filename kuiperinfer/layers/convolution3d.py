"""3-D convolution and transposed convolution (video and volumetric models).

* nn.Conv3d / F.conv3d: the input is padded (in ``padding_mode``), unfolded into columns,
  one row per output voxel holding its ``C/groups * kd * kh * kw`` window
  (:func:`~kuiperinfer.kernels.windows.im2col`), and multiplied by the weight, one
  ``np.matmul`` for all groups and images.
* nn.ConvTranspose3d / F.conv_transpose3d: the adjoint. Each input voxel times the
  weight gives a ``kd * kh * kw`` block per output channel; the blocks are added into
  the output at ``stride`` steps (:func:`~kuiperinfer.kernels.windows.col2im`), then
  the ``padding`` is cropped off both ends and ``output_padding`` adds to the far end.

pnnx writes the module types with the weight (and bias) stored (``@weight``), the
functions with them as inputs (``$weight``, ``$bias``; ``bias=None`` when absent).
``padding`` is three ints, or ``same``/``valid``; with a ``padding_mode`` other than
zeros pnnx writes the six amounts the module hands ``F.pad`` (``(1,2,3)`` becomes
``(3,3,2,2,1,1)``, last axis first; ``same`` becomes its amounts) unless all are equal.
PyTorch also accepts an unbatched ``(C, D, H, W)`` input; so do these layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.padding import PAD_MODES, pad_last_dims
from kuiperinfer.kernels.windows import as_batched, col2im, im2col, sweep_output
from kuiperinfer.layers.base import Layer, ParamLayer, declared_rank, functional
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

RANK = 3
Triple = tuple[int, int, int]


def _triple(op: RuntimeOperator, key: str, default: int, status: Status) -> Triple:
    return op.param_ints(key, RANK, status, default=(default,) * RANK)


@dataclass(frozen=True)
class Geometry3d:
    """How a 3-D convolution sweeps its input: everything but the weights."""

    kernel: Triple
    stride: Triple
    dilation: Triple
    padding: tuple[tuple[int, int], ...]
    """(before, after) per axis: equal unless ``padding="same"`` needs an odd total."""
    padding_mode: str
    groups: int

    @classmethod
    def from_operator(cls, op: RuntimeOperator, kernel: Sequence[int], transposed: bool = False) -> Geometry3d:
        kernel = tuple(kernel)
        stride = _triple(op, "stride", 1, Status.kParameterMissingStride)
        dilation = _triple(op, "dilation", 1, Status.kParameterMissingUnknown)
        groups = op.param_int("groups", Status.kParameterMissingGroups, default=1)
        mode = op.param_str("padding_mode", Status.kParameterMissingPadding, default="zeros")
        if mode not in PAD_MODES or (transposed and mode != "zeros"):
            raise op.error(f"unsupported padding_mode {mode!r}"
                           + (" (transposed convolution pads with zeros only)" if transposed else ""),
                           Status.kParameterMissingPadding)
        if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1 or groups < 1:
            raise op.error(f"kernel {kernel}, stride {stride}, dilation {dilation} and groups {groups} "
                           f"must be positive", Status.kParameterInvalidValue)
        padding: Any = op.param_value("padding", (0,) * RANK)
        if "padding" in op.params and op.param_text("padding") == "()":
            padding = "same"  # pnnx's form of padding="same" with a padding_mode
        if isinstance(padding, str):
            if transposed or padding not in ("same", "valid"):
                raise op.error(f"unsupported padding {padding!r}", Status.kParameterMissingPadding)
            if padding == "same" and max(stride) > 1:
                raise op.error("padding='same' needs stride 1 (as in PyTorch)", Status.kParameterMissingPadding)
            totals = [d * (k - 1) if padding == "same" else 0 for d, k in zip(dilation, kernel)]
            pads = tuple((t // 2, t - t // 2) for t in totals)
        else:
            amounts = op.param_ints("padding", status=Status.kParameterMissingPadding, default=(0,) * RANK)
            if len(amounts) == 2 * RANK:
                # with a padding_mode other than zeros pnnx writes the module's F.pad amounts,
                # (before, after) pairs from the last axis backwards
                pads = tuple(zip(amounts[0::2], amounts[1::2]))[::-1]
            else:
                pads = tuple((p, p) for p in _triple(op, "padding", 0, Status.kParameterMissingPadding))
            if min(min(pair) for pair in pads) < 0:
                raise op.error(f"padding {amounts} must not be negative", Status.kParameterMissingPadding)
        return cls(kernel, stride, dilation, pads, mode, groups)

    def output_sizes(self, x: np.ndarray) -> Triple:
        """Output (depth, height, width) of the convolution of NCDHW ``x``."""
        out = tuple(sweep_output(size + before + after, k, s, d) for size, (before, after), k, s, d
                    in zip(x.shape[2:], self.padding, self.kernel, self.stride, self.dilation))
        if min(out) < 1:
            raise InferError(f"input {x.shape} is too small for kernel {self.kernel} with padding "
                             f"{self.padding} and dilation {self.dilation}",
                             status=InferStatus.kInferFailedOutputSizeError)
        return out


def _check_channels(x: np.ndarray, expected: int) -> None:
    if x.shape[1] != expected:
        raise InferError(f"input of shape {x.shape} has {x.shape[1]} channels, the weight expects {expected}",
                         status=InferStatus.kInferFailedChannelParameterError)


def _check_padding_fits(x: np.ndarray, geometry: Geometry3d) -> None:
    """PyTorch reflects at most ``size - 1`` and wraps at most ``size`` elements (NumPy would
    go on reflecting): more is an error there, and here."""
    room = {"reflect": 1, "circular": 0}.get(geometry.padding_mode)
    if room is not None and any(max(pads) > size - room for pads, size in zip(geometry.padding, x.shape[2:])):
        raise InferError(f"{geometry.padding_mode} padding {geometry.padding} does not fit input of shape "
                         f"{x.shape}", status=InferStatus.kInferFailedOutputSizeError)


def _with_bias(out: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    if bias is not None:
        out += np.asarray(bias, np.float32).reshape(-1, 1, 1, 1)
    return out


def conv3d(x: np.ndarray, gemm: np.ndarray, bias: np.ndarray | None, geometry: Geometry3d) -> np.ndarray:
    """3-D convolution of NCDHW ``x`` with :func:`pack_weight`'s operand ``gemm``
    ``(groups, C/groups * kd*kh*kw, Cout/groups)``; a new NCDHW array."""
    groups, rows, per_group = gemm.shape
    _check_channels(x, groups * rows // math.prod(geometry.kernel))
    out_sizes = geometry.output_sizes(x)
    _check_padding_fits(x, geometry)
    padded = pad_last_dims(x.astype(np.float32, copy=False), geometry.padding, geometry.padding_mode)
    cols = im2col(padded, geometry.kernel, geometry.stride, geometry.dilation, out_sizes)  # (N, P, C*K)
    n, positions = cols.shape[:2]
    cols = cols.reshape(n, positions, groups, rows).transpose(0, 2, 1, 3)                 # (N, G, P, C/G*K)
    out = np.matmul(cols, gemm)                                                            # (N, G, P, Cout/G)
    out = out.transpose(0, 1, 3, 2).reshape(n, groups * per_group, *out_sizes)
    return _with_bias(out, bias)


def pack_weight(weight: np.ndarray, groups: int) -> np.ndarray:
    """(Cout, Cin/groups, kd, kh, kw) -> the GEMM operand (groups, Cin/groups*kd*kh*kw, Cout/groups)."""
    c_out = weight.shape[0]
    return np.ascontiguousarray(weight.reshape(groups, c_out // groups, -1).transpose(0, 2, 1), np.float32)


def conv_transpose3d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geometry: Geometry3d,
                     output_padding: Triple) -> np.ndarray:
    """Transposed 3-D convolution of NCDHW ``x`` with a (Cin, Cout/groups, kd, kh, kw) weight."""
    groups = geometry.groups
    c_in, per_group = weight.shape[:2]
    _check_channels(x, c_in)
    n, sizes = x.shape[0], x.shape[2:]
    kernel = geometry.kernel
    # every input voxel's contribution: (N, G, Cout/G * K, D*H*W)
    operand = weight.reshape(groups, c_in // groups, per_group * math.prod(kernel)).transpose(0, 2, 1)
    cols = np.matmul(operand, x.astype(np.float32, copy=False).reshape(n, groups, c_in // groups, -1))
    cols = cols.reshape(n, groups * per_group, *kernel, *sizes)
    full = tuple((size - 1) * s + d * (k - 1) + 1 + extra for size, s, d, k, extra
                 in zip(sizes, geometry.stride, geometry.dilation, kernel, output_padding))
    out = col2im(cols, geometry.stride, geometry.dilation, full)
    crop = tuple(slice(before, size - before) for (before, _), size in zip(geometry.padding, full))
    if any(c.stop - c.start < 1 for c in crop):
        raise InferError(f"input {x.shape} is too small for padding {geometry.padding}",
                         status=InferStatus.kInferFailedOutputSizeError)
    return _with_bias(np.ascontiguousarray(out[(Ellipsis, *crop)]), bias)


def _read_channels(op: RuntimeOperator, groups: int) -> tuple[int, int]:
    c_in = op.param_int("in_channels", Status.kParameterMissingInChannel)
    c_out = op.param_int("out_channels", Status.kParameterMissingOutChannel)
    if c_in < 1 or c_out < 1 or c_in % groups or c_out % groups:
        raise op.error(f"in_channels {c_in} and out_channels {c_out} must be positive and divisible by "
                       f"groups {groups}", Status.kParameterMissingGroups)
    return c_in, c_out


def _read_bias(op: RuntimeOperator, c_out: int) -> np.ndarray | None:
    use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("bias"))
    return op.weight("bias", (c_out,), Status.kAttrMissingBias, copy=False) if use_bias else None


def _read_output_padding(op: RuntimeOperator, geometry: Geometry3d) -> Triple:
    extra = _triple(op, "output_padding", 0, Status.kParameterMissingPadding)
    if any(e < 0 or e >= max(s, d) for e, s, d in zip(extra, geometry.stride, geometry.dilation)):
        raise op.error(f"output_padding {extra} must be smaller than stride {geometry.stride} "
                       f"or dilation {geometry.dilation}", Status.kParameterInvalidValue)
    return extra


def _weight_operand_kernel(op: RuntimeOperator) -> Triple:
    """Kernel size of F.conv3d / F.conv_transpose3d, from the recorded shape of its weight input."""
    index = op.input_index("weight", 1)
    if index is None or index >= len(op.input_operands_seq):
        raise op.error(f"{op.type} needs the weight as an input", Status.kAttrMissingWeight)
    shape = op.input_operands_seq[index].shapes
    if len(shape) != RANK + 2 or min(shape) < 1:
        raise op.error(f"weight operand has shape {shape}, expected 5 known dimensions",
                       Status.kParameterMissingKernel)
    return tuple(shape[2:])


def _run_weight_and_bias(inputs: Sequence[Any], geometry: Geometry3d,
                         bias_input: int | None) -> tuple[np.ndarray, Any]:
    """The weight (checked against the kernel recorded at export and the groups) and the
    optional bias of a functional convolution, given as its inputs at run time."""
    weight = np.asarray(inputs[1], np.float32)
    if weight.ndim != RANK + 2 or tuple(weight.shape[2:]) != geometry.kernel:
        raise InferError(f"weight of shape {weight.shape} does not fit kernel {geometry.kernel}",
                         status=InferStatus.kInferFailedWeightParameterError)
    if weight.shape[0] % geometry.groups:
        raise InferError(f"weight of shape {weight.shape} does not split into {geometry.groups} groups",
                         status=InferStatus.kInferFailedWeightParameterError)
    bias = inputs[bias_input] if bias_input is not None and bias_input < len(inputs) else None
    return weight, bias


def _unbatched_result(out: np.ndarray, unbatched: bool) -> np.ndarray:
    return out[0] if unbatched else out


@register_layer("nn.Conv3d")
class Convolution3d(ParamLayer):
    """nn.Conv3d with the weight (and bias) stored in the model."""

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None, geometry: Geometry3d):
        super().__init__(layer_name, weight, bias)
        self.geometry = geometry
        self.pack()

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Convolution3d:
        kernel = op.param_ints("kernel_size", RANK, Status.kParameterMissingKernel)
        geometry = Geometry3d.from_operator(op, kernel)
        c_in, c_out = _read_channels(op, geometry.groups)
        weight = op.weight("weight", (c_out, c_in // geometry.groups, *kernel), copy=False)
        layer = cls(op.name, weight, _read_bias(op, c_out), geometry)
        layer.batch_independent = declared_rank(op) == RANK + 2  # an unbatched input's dim 0 is channels
        return layer

    def pack(self) -> None:
        self._gemm = pack_weight(self._weight, self.geometry.groups)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_batched(inputs[0], RANK, "conv3d")
        return [_unbatched_result(conv3d(x, self._gemm, self._bias, self.geometry), unbatched)]


@register_layer("F.conv3d")
class FunctionalConvolution3d(Layer):
    """F.conv3d, whose weight (and bias) arrive as inputs."""

    def __init__(self, layer_name: str, geometry: Geometry3d, bias_input: int | None):
        super().__init__(layer_name)
        self.geometry, self.bias_input = geometry, bias_input

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FunctionalConvolution3d:
        geometry = Geometry3d.from_operator(op, _weight_operand_kernel(op))
        return functional(cls(op.name, geometry, op.input_index("bias", 2)), op, declared_rank(op) == RANK + 2)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_batched(inputs[0], RANK, "conv3d")
        weight, bias = _run_weight_and_bias(inputs, self.geometry, self.bias_input)
        out = conv3d(x, pack_weight(weight, self.geometry.groups), bias, self.geometry)
        return [_unbatched_result(out, unbatched)]


@register_layer("nn.ConvTranspose3d")
class TransposedConvolution3d(ParamLayer):
    """nn.ConvTranspose3d with the weight (Cin, Cout/groups, kd, kh, kw) and bias stored."""

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None, geometry: Geometry3d,
                 output_padding: Triple):
        super().__init__(layer_name, weight, bias)
        self.geometry, self.output_padding = geometry, output_padding

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> TransposedConvolution3d:
        kernel = op.param_ints("kernel_size", RANK, Status.kParameterMissingKernel)
        geometry = Geometry3d.from_operator(op, kernel, transposed=True)
        output_padding = _read_output_padding(op, geometry)
        c_in, c_out = _read_channels(op, geometry.groups)
        weight = op.weight("weight", (c_in, c_out // geometry.groups, *kernel), copy=False)
        layer = cls(op.name, weight, _read_bias(op, c_out), geometry, output_padding)
        layer.batch_independent = declared_rank(op) == RANK + 2
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_batched(inputs[0], RANK, "conv_transpose3d")
        out = conv_transpose3d(x, self._weight, self._bias, self.geometry, self.output_padding)
        return [_unbatched_result(out, unbatched)]


@register_layer("F.conv_transpose3d")
class FunctionalTransposedConvolution3d(Layer):
    """F.conv_transpose3d, whose weight (and bias) arrive as inputs."""

    def __init__(self, layer_name: str, geometry: Geometry3d, output_padding: Triple, bias_input: int | None):
        super().__init__(layer_name)
        self.geometry, self.output_padding, self.bias_input = geometry, output_padding, bias_input

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FunctionalTransposedConvolution3d:
        geometry = Geometry3d.from_operator(op, _weight_operand_kernel(op), transposed=True)
        layer = cls(op.name, geometry, _read_output_padding(op, geometry), op.input_index("bias", 2))
        return functional(layer, op, declared_rank(op) == RANK + 2)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, unbatched = as_batched(inputs[0], RANK, "conv_transpose3d")
        weight, bias = _run_weight_and_bias(inputs, self.geometry, self.bias_input)
        out = conv_transpose3d(x, weight, bias, self.geometry, self.output_padding)
        return [_unbatched_result(out, unbatched)]
