"""Normalisation layers: batch, layer, group, instance and RMS normalisation, F.normalize.

All of them compute ``(x - mean) / sqrt(var + eps)`` (biased variance, as PyTorch) and
then an optional affine ``* weight + bias``; they differ in the axes the statistics
are taken over and whether those statistics are stored (BatchNorm, InstanceNorm with
``track_running_stats``: folded into one scale and shift at build time) or computed
from the input (the rest).

pnnx gives a weight (or bias, running statistic) in one of three ways: as a stored
attribute (``@weight``, from nn modules, and from F.* calls on constants, which pnnx
turns into modules), as a named input (``$weight=1``, F.* calls on computed tensors),
or not at all (``weight=None``). :class:`TensorArgument` reads all three.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus, WeightError
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.compiled.normalization import layer_norm
from kuiperinfer.layers.base import Layer, NonParamLayer, ParamLayer, batched, declared_rank
from kuiperinfer.layers.reduction import Norm
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


@dataclass(frozen=True, eq=False)
class TensorArgument:
    """An optional tensor argument: a stored ``value``, the input at ``input_index``, or absent."""

    value: np.ndarray | None = None
    input_index: int | None = None

    @classmethod
    def read(cls, op: RuntimeOperator, name: str, shape: Sequence[int] | None = None,
             required: bool = False, status: Status = Status.kAttrMissingWeight) -> TensorArgument:
        """Find ``name`` among ``op``'s attributes (checking ``shape``), then its named inputs."""
        if op.has_weight(name):
            return cls(value=op.weight(name, shape, status))
        if name in op.input_names:
            return cls(input_index=op.input_names.index(name))
        if required:
            raise WeightError(f"missing {name!r}: neither an attribute @{name} nor an input ${name}",
                              op.name, op.type, status)
        return cls()

    def get(self, inputs: Sequence[Any]) -> np.ndarray | None:
        """The tensor for this run (None when absent)."""
        return self.value if self.input_index is None else np.asarray(inputs[self.input_index])


def whole_inputs(*arguments: TensorArgument) -> tuple[int, ...]:
    """The inputs among ``arguments``: weights and statistics every sample reads whole."""
    return tuple(a.input_index for a in arguments if a.input_index is not None)


def standardize(x: np.ndarray, axes: int | tuple[int, ...], eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) with the statistics taken over ``axes``; a new array."""
    centered = x - x.mean(axis=axes, keepdims=True)
    var = np.square(centered).mean(axis=axes, keepdims=True)
    var += eps
    centered /= np.sqrt(var, out=var)
    return centered


def per_channel(values: np.ndarray, ndim: int) -> np.ndarray:
    """A (C,) vector shaped to broadcast along dimension 1 of an ``ndim``-d array."""
    return values.reshape((-1,) + (1,) * (ndim - 2))


def affine(y: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """``y * weight + bias`` in place on ``y`` (an array the caller owns); either may be absent."""
    if weight is not None:
        y *= weight
    if bias is not None:
        y += bias
    return y


def fold_batch_norm(mean: np.ndarray, var: np.ndarray, weight: np.ndarray | None,
                    bias: np.ndarray | None, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel scale and shift with ``x * scale + shift == (x - mean) / sqrt(var + eps) * weight + bias``.

    Folded in float64, returned in float32.
    """
    scale = 1.0 / np.sqrt(np.asarray(var, np.float64) + eps)
    if weight is not None:
        scale *= weight
    shift = -np.asarray(mean, np.float64) * scale
    if bias is not None:
        shift += bias
    return scale.astype(np.float32), shift.astype(np.float32)


def channel_affine(y: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """:func:`affine` with one weight and one bias per channel (dimension 1), in place on ``y``."""
    return affine(y, None if weight is None else per_channel(weight, y.ndim),
                  None if bias is None else per_channel(bias, y.ndim))


def scale_shift_channels(x: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``x * scale + shift`` with one scale and shift per channel (dimension 1); a new array."""
    y = x * per_channel(scale, x.ndim)
    y += per_channel(shift, x.ndim)
    return y


def check_channels(x: np.ndarray, channels: int) -> None:
    """Raise InferError unless ``x`` has ``channels`` channels in dimension 1."""
    if x.ndim < 2 or x.shape[1] != channels:
        raise InferError(f"input of shape {x.shape} does not have {channels} channels in dimension 1",
                         status=InferStatus.kInferFailedChannelParameterError)


def read_eps(op: RuntimeOperator, default: float = 1e-5) -> float:
    """The ``eps`` parameter (``default`` when absent or None), checked to be non-negative."""
    eps = op.param_float("eps", Status.kParameterMissingEps, default=default)
    if not eps >= 0:
        raise op.error(f"eps {eps} must not be negative", Status.kParameterMissingEps)
    return eps


@register_layer("nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d")
class BatchNorm(ParamLayer):
    """Inference batch normalisation over dimension 1: y = x * scale + shift.

    ``weights()``/``bias()`` are PyTorch's gamma and beta; the running mean and
    variance are kept too, and :meth:`pack` folds all four with eps.
    """


    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray,
                 running_mean: np.ndarray, running_var: np.ndarray, eps: float):
        super().__init__(layer_name, weight, bias)
        self.running_mean, self.running_var, self.eps = running_mean, running_var, eps
        self.pack()

    @staticmethod
    def statistics(op: RuntimeOperator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """``op``'s weight, bias, running mean, running variance and eps, read and checked
        (the weight and bias are ones and zeros when the operator has no affine part)."""
        channels = op.param_int("num_features", Status.kParameterMissingNumFeatures)
        eps = read_eps(op)
        mean = op.weight("running_mean", (channels,), Status.kAttrMissingRunningMean)
        var = op.weight("running_var", (channels,), Status.kAttrMissingRunningVar)
        if op.param_bool("affine", default=op.has_weight("weight")):
            weight = op.weight("weight", (channels,))
            bias = op.weight("bias", (channels,), Status.kAttrMissingBias)
        else:
            weight, bias = np.ones(channels, np.float32), np.zeros(channels, np.float32)
        return weight, bias, mean, var, eps

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> BatchNorm:
        layer = cls(op.name, *cls.statistics(op))
        layer.batch_independent = declared_rank(op) >= 2   # (N, C, ...): the channels are dimension 1
        return layer

    def pack(self) -> None:
        self._scale, self._shift = fold_batch_norm(self.running_mean, self.running_var,
                                                   self._weight, self._bias, self.eps)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        check_channels(x, self._scale.size)
        return [scale_shift_channels(x, self._scale, self._shift)]


@register_layer("F.batch_norm")
class FunctionalBatchNorm(Layer):
    """F.batch_norm(input, running_mean, running_var, weight, bias, eps) in inference mode.

    The statistics arrive as inputs (constants become pnnx.Attribute operators), so
    they are folded on each run; that costs O(channels).
    """

    def __init__(self, layer_name: str, mean: TensorArgument, var: TensorArgument,
                 weight: TensorArgument, bias: TensorArgument, eps: float):
        super().__init__(layer_name)
        self.mean, self.var, self.weight, self.bias, self.eps = mean, var, weight, bias, eps
        self.whole_inputs = whole_inputs(mean, var, weight, bias)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FunctionalBatchNorm:
        layer = cls(op.name,
                    TensorArgument.read(op, "running_mean", required=True, status=Status.kAttrMissingRunningMean),
                    TensorArgument.read(op, "running_var", required=True, status=Status.kAttrMissingRunningVar),
                    TensorArgument.read(op, "weight"),
                    TensorArgument.read(op, "bias", status=Status.kAttrMissingBias),
                    read_eps(op))
        layer.batch_independent = declared_rank(op) >= 2   # (N, C, ...): the channels are dimension 1
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        scale, shift = fold_batch_norm(self.mean.get(inputs), self.var.get(inputs),
                                       self.weight.get(inputs), self.bias.get(inputs), self.eps)
        check_channels(x, scale.size)
        return [scale_shift_channels(x, scale, shift)]


class LastDimsNorm(Layer):
    """Normalises over the last ``len(normalized_shape)`` dimensions, then the optional
    weight and bias of shape ``normalized_shape``. Subclasses supply :meth:`normalize`."""

    default_eps = 1e-5

    def __init__(self, layer_name: str, normalized_shape: tuple[int, ...], eps: float,
                 weight: TensorArgument, bias: TensorArgument):
        super().__init__(layer_name)
        self.normalized_shape, self.eps, self.weight, self.bias = normalized_shape, eps, weight, bias
        self.axes = tuple(range(-len(normalized_shape), 0))
        self.whole_inputs = whole_inputs(weight, bias)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> LastDimsNorm:
        shape = op.param_ints("normalized_shape", status=Status.kParameterMissingShape)
        if not shape or min(shape) < 1:
            raise op.error(f"normalized_shape {shape} must be non-empty and positive",
                           Status.kParameterMissingShape)
        affine_weights = op.param_bool("elementwise_affine", default=False)
        layer = cls(op.name, shape, read_eps(op, cls.default_eps),
                    TensorArgument.read(op, "weight", shape, required=affine_weights),
                    TensorArgument.read(op, "bias", shape, status=Status.kAttrMissingBias))
        layer.batch_independent = declared_rank(op) > len(shape)   # the batch is not normalised
        return layer

    def normalize(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.shape[x.ndim - len(self.axes):] != self.normalized_shape:
            raise InferError(f"input of shape {x.shape} does not end in normalized_shape "
                             f"{self.normalized_shape}", status=InferStatus.kInferFailedDimensionParameterError)
        return [affine(self.normalize(x), self.weight.get(inputs), self.bias.get(inputs))]


@dataclass(frozen=True)
class LayerNormPlan:
    """The optimiser's plan for an nn.LayerNorm: what it computes beyond pnnx's parameters."""

    residual: bool = False
    """Whether it reads the two addends of an ``add(@0,@1)`` (absorbed) and normalises their sum."""
    sum_output: bool = False
    """Whether it also hands on the sum, as its second output, to the others that read it
    (a pre-norm transformer's running value)."""


@register_layer("nn.LayerNorm", "F.layer_norm")
class LayerNorm(LastDimsNorm):
    """(x - mean) / sqrt(var + eps) over the last dimensions; as planned (:class:`LayerNormPlan`),
    of the sum of its two inputs (also handed on when the plan says so)."""

    plan_class = LayerNormPlan
    plan = LayerNormPlan()
    compiled = False

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> LayerNorm:
        layer = super().create(op, options)
        layer.plan = op.plan or LayerNormPlan()
        layer.compiled = options.compiled
        size = math.prod(layer.normalized_shape)
        weight, bias = layer.weight.value, layer.bias.value
        if layer.weight.input_index is None and layer.bias.input_index is None:
            # writable copies: a read-only array (the model file's) would be another specialisation
            layer._weight = np.ones(size, np.float32) if weight is None else np.array(weight, np.float32).reshape(-1)
            layer._bias = np.zeros(size, np.float32) if bias is None else np.array(bias, np.float32).reshape(-1)
        elif layer.plan.residual:
            raise op.error("an added residual needs a stored weight and bias", Status.kParameterInvalidValue)
        return layer

    def normalize(self, x: np.ndarray) -> np.ndarray:
        return standardize(x, self.axes, self.eps)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        plan = self.plan
        if plan.residual:
            a, b = inputs[0], inputs[1]
            if not self.compiled or a.shape != b.shape or a.dtype != np.float32 or b.dtype != np.float32 \
                    or a.shape[a.ndim - len(self.axes):] != self.normalized_shape:
                total = np.asarray(a + b)
                out = super().forward([total])
                return out + [total] if plan.sum_output else out
        x = inputs[0]
        if not self.compiled or self.weight.input_index is not None or self.bias.input_index is not None \
                or x.dtype != np.float32 or x.shape[x.ndim - len(self.axes):] != self.normalized_shape:
            return super().forward(inputs)
        size = self._weight.size
        rows = np.ascontiguousarray(x).reshape(-1, size)
        out = np.empty(x.shape, np.float32)
        if not plan.residual:
            layer_norm(rows, rows, rows, out.reshape(-1, size), self._weight, self._bias, np.float32(self.eps), 0)
            return [out]
        other = np.ascontiguousarray(inputs[1]).reshape(-1, size)
        total = np.empty(x.shape, np.float32)
        layer_norm(rows, other, total.reshape(-1, size), out.reshape(-1, size), self._weight, self._bias,
                        np.float32(self.eps), 1)
        return [out, total] if plan.sum_output else [out]


@register_layer("nn.RMSNorm", "F.rms_norm")
class RMSNorm(LastDimsNorm):
    """x / sqrt(mean(x^2) + eps) over the last dimensions (no centring; a weight, no bias).

    pnnx writes ``eps=None`` for PyTorch's default, the machine epsilon of float32.
    """

    default_eps = float(np.finfo(np.float32).eps)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        mean_square = np.square(x).mean(axis=self.axes, keepdims=True)
        mean_square += self.eps
        return x / np.sqrt(mean_square, out=mean_square)


def recorded_channels(op: RuntimeOperator) -> int | None:
    """The channel count (dimension 1) pnnx recorded for the first input, if known."""
    shape = op.input_operands_seq[0].shapes if op.input_operands_seq else []
    return shape[1] if len(shape) > 1 and shape[1] > 0 else None


@register_layer("nn.GroupNorm", "F.group_norm")
class GroupNorm(Layer):
    """Splits the channels into ``num_groups`` groups and normalises each group of each
    sample over its channels and spatial positions; then a per-channel weight and bias."""

    def __init__(self, layer_name: str, num_groups: int, eps: float,
                 weight: TensorArgument, bias: TensorArgument):
        super().__init__(layer_name)
        self.num_groups, self.eps, self.weight, self.bias = num_groups, eps, weight, bias
        self.whole_inputs = whole_inputs(weight, bias)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> GroupNorm:
        groups = op.param_int("num_groups", Status.kParameterMissingGroups)
        # pnnx leaves num_channels out when affine=False; the recorded input shape has it.
        channels = op.param_int("num_channels", default=recorded_channels(op))
        if groups < 1 or (channels is not None and channels % groups):
            raise op.error(f"num_channels {channels} must be divisible by num_groups {groups}",
                           Status.kParameterMissingGroups)
        shape = None if channels is None else (channels,)
        layer = cls(op.name, groups, read_eps(op),
                    TensorArgument.read(op, "weight", shape, required=op.param_bool("affine", default=False)),
                    TensorArgument.read(op, "bias", shape, status=Status.kAttrMissingBias))
        layer.batch_independent = declared_rank(op) >= 2   # (N, C, ...): each sample's groups
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.ndim < 2 or x.shape[1] % self.num_groups:
            raise InferError(f"input of shape {x.shape} does not have a channel count divisible by "
                             f"num_groups {self.num_groups}", status=InferStatus.kInferFailedChannelParameterError)
        grouped = x.reshape(x.shape[0], self.num_groups, -1)
        y = standardize(grouped, -1, self.eps).reshape(x.shape)
        return [channel_affine(y, self.weight.get(inputs), self.bias.get(inputs))]


INSTANCE_NORM_SPATIAL_DIMS = {"nn.InstanceNorm1d": 1, "nn.InstanceNorm2d": 2, "nn.InstanceNorm3d": 3}


@register_layer(*INSTANCE_NORM_SPATIAL_DIMS, "F.instance_norm")
class InstanceNorm(Layer):
    """Normalises each channel of each sample over its spatial dimensions, then a
    per-channel weight and bias.

    With ``track_running_stats=True`` a module in eval mode uses its running statistics
    instead, which is batch normalisation: they are folded into a scale and shift once.
    The nn modules also take unbatched input, (C, L) for InstanceNorm1d and so on.
    """

    def __init__(self, layer_name: str, eps: float, weight: TensorArgument, bias: TensorArgument,
                 running: tuple[np.ndarray, np.ndarray] | None = None, unbatched_ndim: int | None = None):
        super().__init__(layer_name)
        self.eps, self.weight, self.bias = eps, weight, bias
        self.running = running
        """The folded (scale, shift) of the running statistics, or None to use the input's."""
        self.unbatched_ndim = unbatched_ndim
        self.whole_inputs = whole_inputs(weight, bias)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> InstanceNorm:
        eps = read_eps(op)
        channels = op.param_int("num_features", Status.kParameterMissingNumFeatures,
                                default=recorded_channels(op))
        shape = None if channels is None else (channels,)
        weight = TensorArgument.read(op, "weight", shape, required=op.param_bool("affine", default=False))
        bias = TensorArgument.read(op, "bias", shape, status=Status.kAttrMissingBias)
        spatial = INSTANCE_NORM_SPATIAL_DIMS.get(op.type)
        running = None
        if op.param_bool("track_running_stats", default=False):
            if weight.input_index is not None or bias.input_index is not None:
                raise op.error("running statistics with weight inputs are not supported",
                               Status.kAttrMissingWeight)
            mean = op.weight("running_mean", shape, Status.kAttrMissingRunningMean)
            var = op.weight("running_var", shape, Status.kAttrMissingRunningVar)
            running = fold_batch_norm(mean, var, weight.value, bias.value, eps)
        layer = cls(op.name, eps, weight, bias, running, None if spatial is None else spatial + 1)
        # unbatched, (C, L) for InstanceNorm1d, dimension 0 is the channels; F.instance_norm is batched
        layer.batch_independent = declared_rank(op) >= 3 if spatial is None else batched(op, spatial)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.ndim == self.unbatched_ndim:
            return [self.normalize(x[np.newaxis], inputs)[0]]
        return [self.normalize(x, inputs)]

    def normalize(self, x: np.ndarray, inputs: Sequence[Any]) -> np.ndarray:
        """Instance normalisation of batched (N, C, ...) ``x``."""
        if x.ndim < 3:
            raise InferError(f"input of shape {x.shape} has no spatial dimensions",
                             status=InferStatus.kInferFailedDimensionParameterError)
        if self.running is not None:
            check_channels(x, self.running[0].size)
            return scale_shift_channels(x, *self.running)
        y = standardize(x, tuple(range(2, x.ndim)), self.eps)
        return channel_affine(y, self.weight.get(inputs), self.bias.get(inputs))


@register_layer("F.normalize")
class Normalize(NonParamLayer):
    """x / max(||x||_p, eps), the p-norm taken over ``dim`` (an int or a tuple).

    pnnx recognises F.normalize as torch.norm(keepdim=True), clamp_min(eps) and a
    division; the norm here is that torch.norm layer.
    """

    def __init__(self, layer_name: str, p: float, dims: tuple[int, ...], eps: float):
        super().__init__(layer_name)
        self.norm = Norm(layer_name, dims, True, p)
        self.eps = eps

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Normalize:
        p = op.param_number("p", default=2.0)  # an infinite p is written as the word inf
        if p is None or isinstance(p, bool) or math.isnan(p):
            raise op.error(f"p must be a number, not {op.param_value('p')!r}", Status.kParameterInvalidValue)
        dims = op.param_ints("dim", status=Status.kParameterMissingDim, default=(1,))
        return cls(op.name, float(p), dims, read_eps(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        norm = self.norm.forward([x])[0]
        return [x / np.maximum(norm, self.eps, out=norm)]


@register_layer("nn.LocalResponseNorm", "F.local_response_norm")
class LocalResponseNorm(NonParamLayer):
    """AlexNet's normalisation across channels: ``x / (k + alpha * mean of x**2 over the size
    channels around) ** beta``, the window ``[c - size // 2, c + (size - 1) // 2]`` padded
    with zeros at both ends, the mean always over ``size`` (as PyTorch's average pooling
    with the padding counted). Inputs of 3 dimensions or more, channels in dimension 1."""


    def __init__(self, layer_name: str, size: int, alpha: float, beta: float, k: float):
        super().__init__(layer_name)
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> LocalResponseNorm:
        size = op.param_int("size", Status.kParameterInvalidValue)
        if size < 1:
            raise op.error(f"size {size} must be positive", Status.kParameterInvalidValue)
        layer = cls(op.name, size, op.param_float("alpha", Status.kParameterInvalidValue, default=1e-4),
                    op.param_float("beta", Status.kParameterInvalidValue, default=0.75),
                    op.param_float("k", Status.kParameterInvalidValue, default=1.0))
        layer.batch_independent = declared_rank(op) >= 3   # normalised across dimension 1, the channels
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.ndim < 3:
            raise InferError(f"local_response_norm needs 3 or more dimensions, got shape {x.shape}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        channels = x.shape[1]
        squares = np.square(x, dtype=np.float32)
        before, after = self.size // 2, (self.size - 1) // 2
        padded = np.pad(squares, ((0, 0), (before, after)) + ((0, 0),) * (x.ndim - 2))
        total = np.zeros_like(squares)
        for offset in range(self.size):  # the window's channels, one shift at a time
            total += padded[:, offset:offset + channels]
        divisor = total * np.float32(self.alpha / self.size) + np.float32(self.k)
        return [x / np.power(divisor, np.float32(self.beta))]
