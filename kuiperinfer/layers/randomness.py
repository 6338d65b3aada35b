"""Random operators: ``torch.randn``, ``torch.randn_like``, ``torch.normal`` (pnnx's names)
and ``torch.rand_like``, ``torch.randint_like``, ``torch.normal`` of tensors (which pnnx
leaves as the TorchScript ``aten::`` operators).

They run on NumPy's generator (PCG64), so their values cannot match PyTorch's: a model
that draws noise at inference (a VAE's sampling, a diffusion step) gets noise of the same
distribution, shape and dtype, not the same numbers. Each operator has a generator of
its own, seeded from the graph's seed (``kuiperinfer.load(..., seed=0)``) and its name,
and draws new values at every call, as PyTorch does: the same model loaded with the same
seed and options gives the same sequence of outputs. (Loading runs the graph once to
warm it up, which draws once; threads running one graph at once share the generators,
in whatever order they come.) The whole batch is drawn in one call.

pnnx turns random calls whose shape is fixed at export into constants (``pnnx.Attribute``):
their values were drawn once, by PyTorch, when the model was exported.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.comparison import Argument
from kuiperinfer.layers.creation import dtype_param
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.pnnx.param_file import DEFAULT_MAX_TENSOR_BYTES
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


def generator(op: RuntimeOperator, options: BuildOptions) -> np.random.Generator:
    """The operator's own generator: seeded from the graph's seed and the operator's name."""
    return np.random.default_rng([options.seed & (2**64 - 1), zlib.crc32(op.name.encode("utf-8", "replace"))])


def _output_dtype(op: RuntimeOperator, default: Any = np.float32) -> np.dtype:
    """The dtype pnnx recorded for the output (the ``dtype`` parameter first, when there is one)."""
    dtype = dtype_param(op)
    if dtype is None and op.output_operands:
        dtype = numpy_dtype(op.output_operands[0].type)
    return np.dtype(default if dtype is None else dtype)


def _shape(size: Any) -> tuple[int, ...]:
    """A size given at run time, checked: non-negative and within the tensor size limit."""
    shape = tuple(int(s) for s in np.asarray(size).reshape(-1))
    if min(shape, default=0) < 0 or math.prod(shape) * 8 > DEFAULT_MAX_TENSOR_BYTES:
        raise InferError(f"size {shape} is negative or too large", status=InferStatus.kInferFailedOutputSizeError)
    return shape


def _floating(dtype: np.dtype, what: str) -> np.dtype:
    if dtype.kind != "f":
        raise InferError(f"{what} makes floating-point values, not {dtype}",
                         status=InferStatus.kInferFailedOperationUnknown)
    return dtype


def _standard_normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """N(0, 1) samples; NumPy draws float32 and float64 directly, other floats via float32."""
    draw = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)
    return rng.standard_normal(shape, dtype=draw).astype(dtype, copy=False)


class RandomLayer(NonParamLayer):
    """A layer drawing from its own generator."""

    def __init__(self, layer_name: str, rng: np.random.Generator, dtype: np.dtype | None):
        super().__init__(layer_name)
        self.rng, self.dtype = rng, dtype


@register_layer("torch.randn")
class Randn(RandomLayer):
    """``torch.randn(size)``: standard normal values; the size is a parameter or an input ``$size``."""

    def __init__(self, layer_name: str, rng: np.random.Generator, dtype: np.dtype,
                 size: tuple[int, ...] | None, size_input: int | None):
        super().__init__(layer_name, rng, dtype)
        self.size, self.size_input = size, size_input

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Randn:
        size = op.param_ints("size", status=Status.kParameterMissingShape, default=None)
        size_input = None
        if size is None:
            size_input = op.input_index("size", 0)
            if size_input is None or size_input >= len(op.input_operands_seq):
                raise op.error("missing parameter 'size'", Status.kParameterMissingShape)
        elif min(size, default=0) < 0 or math.prod(size) * 8 > DEFAULT_MAX_TENSOR_BYTES:
            raise op.error(f"size {size} is negative or over the limit", Status.kParameterInvalidValue)
        return cls(op.name, generator(op, options), _output_dtype(op), size, size_input)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        size = self.size if self.size_input is None else _shape(inputs[self.size_input])
        return [_standard_normal(self.rng, size, _floating(self.dtype, "randn"))]


@register_layer("torch.randn_like")
class RandnLike(RandomLayer):
    """``torch.randn_like(x)``: standard normal values in the shape of ``x`` (and its dtype,
    unless ``dtype`` says otherwise)."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> RandnLike:
        return cls(op.name, generator(op, options), dtype_param(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        dtype = _floating(np.dtype(x.dtype if self.dtype is None else self.dtype), "randn_like")
        return [_standard_normal(self.rng, x.shape, dtype)]


@register_layer("torch.normal", "aten::normal")
class Normal(RandomLayer):
    """Normal values of mean ``mean`` and standard deviation ``std`` (numbers, or tensors
    broadcast together).

    pnnx writes ``x.normal_(mean, std)`` as ``torch.normal`` with ``$input`` (whose shape
    and dtype the result takes) and ``mean``/``std``, and ``torch.normal(mean, std)`` of
    tensors as ``aten::normal(mean, std, generator)``, its numbers made by ``pnnx.Expression``.
    """

    def __init__(self, layer_name: str, rng: np.random.Generator, dtype: np.dtype,
                 like: int | None, mean: Argument, std: Argument):
        super().__init__(layer_name, rng, dtype)
        self.like, self.mean, self.std = like, mean, std

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Normal:
        if op.type == "aten::normal":
            if len(op.input_operands_seq) != 3:
                raise op.error(f"aten::normal takes 3 inputs (mean, std, generator), got "
                               f"{len(op.input_operands_seq)}", Status.kParameterInvalidValue)
            return cls(op.name, generator(op, options), _output_dtype(op), None, Argument(0), Argument(1))
        like = op.input_index("input", 0)
        if like is None or like >= len(op.input_operands_seq):
            raise op.error("missing input 'input'", Status.kParameterMissingUnknown)
        if op.param_value("generator") is not None:
            raise op.error("a generator object cannot be stored in a model", Status.kParameterInvalidValue)
        mean, std = Argument.of(op, "mean", default=0.0), Argument.of(op, "std", default=1.0)
        for name, argument in (("mean", mean), ("std", std)):
            if argument.index is None and (isinstance(argument.value, bool)
                                           or not isinstance(argument.value, (int, float))):
                raise op.error(f"parameter {name!r} is {argument.value!r}, expected a number",
                               Status.kParameterInvalidValue)
        return cls(op.name, generator(op, options), dtype_param(op), like, mean, std)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        mean, std = np.asarray(self.mean.get(inputs)), np.asarray(self.std.get(inputs))
        if std.size and np.nanmin(std) < 0:
            raise InferError("normal: std must be >= 0", status=InferStatus.kInferFailedOperationUnknown)
        if self.like is None:
            shape, dtype = np.broadcast_shapes(mean.shape, std.shape), self.dtype
        else:
            x = inputs[self.like]
            shape, dtype = x.shape, np.dtype(x.dtype if self.dtype is None else self.dtype)
        dtype = _floating(dtype, "normal")
        try:
            values = mean + std * _standard_normal(self.rng, _shape(shape), dtype)
        except ValueError:
            raise InferError(f"normal: mean {mean.shape} and std {std.shape} do not broadcast to {shape}",
                             status=InferStatus.kInferFailedOutputSizeError) from None
        return [values.astype(dtype, copy=False)]


@register_layer("aten::rand_like", "aten::randint_like")
class RandLike(RandomLayer):
    """``torch.rand_like(x)`` (uniform in [0, 1)) and ``torch.randint_like(x, low, high)``
    (integers in [low, high)), in the shape of ``x`` and the dtype pnnx recorded. pnnx
    leaves them as ``aten::`` operators whose arguments (low, high, dtype, layout,
    device, ...) are inputs made by ``pnnx.Expression``."""

    def __init__(self, layer_name: str, rng: np.random.Generator, dtype: np.dtype,
                 bounds: tuple[Argument, Argument] | None):
        super().__init__(layer_name, rng, dtype)
        self.bounds = bounds

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> RandLike:
        count = len(op.input_operands_seq)
        bounds = None
        if op.type == "aten::randint_like":
            if count not in (7, 8):
                raise op.error(f"aten::randint_like takes 7 or 8 inputs, got {count}", Status.kParameterInvalidValue)
            bounds = (Argument(1), Argument(2)) if count == 8 else (Argument(None, 0), Argument(1))
        elif count != 6:
            raise op.error(f"aten::rand_like takes 6 inputs, got {count}", Status.kParameterInvalidValue)
        return cls(op.name, generator(op, options), _output_dtype(op), bounds)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        shape = np.shape(inputs[0])
        if self.bounds is None:
            dtype = _floating(self.dtype, "rand_like")
            draw = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)
            return [self.rng.random(shape, dtype=draw).astype(dtype, copy=False)]
        low, high = (int(np.asarray(b.get(inputs)).reshape(-1)[0]) for b in self.bounds)
        if low >= high:
            raise InferError(f"randint_like: low {low} must be below high {high}",
                             status=InferStatus.kInferFailedOperationUnknown)
        return [self.rng.integers(low, high, shape).astype(self.dtype)]
