"""Creating and converting tensors: zeros_like/ones_like/full_like, zeros/ones/full,
new_zeros/new_ones, empty/empty_like/new_empty, arange, fill, clone and copy, and dtype
casts (``Tensor.to``, ``Tensor.type_as``).

PyTorch leaves the values of ``torch.empty``, ``empty_like`` and ``Tensor.new_empty``
undefined; here they are zeros, so that runs are deterministic.

pnnx names dtypes as PyTorch prints them (``dtype=torch.float``, ``torch.long``,
``torch.half``); ``dtype=None`` means "as the input" for the ``*_like`` and ``new_*``
forms, and float32 (or the fill value's type) for ``torch.zeros``/``ones``/``full``.

pnnx folds these operators into constants (``pnnx.Attribute``) when the shape is fixed
at export; they survive in exports with dynamic shapes. It also removes casts to and
from float16 (it exports float16 models as float32). A ``torch.half`` cast that does reach
us is honoured: the result is a float16 array, and later NumPy arithmetic on it works in
float32 and rounds each result back to float16.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.comparison import Argument
from kuiperinfer.pnnx.dtypes import DATA_TYPES, numpy_dtype
from kuiperinfer.pnnx.param_file import DEFAULT_MAX_TENSOR_BYTES
from kuiperinfer.runtime.batching import Batch
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

_TORCH_DTYPES: dict[str, np.dtype] = {t.torch: t.numpy for t in DATA_TYPES if t.numpy is not None}
"""``torch.float`` -> float32, ``torch.long`` -> int64, ...: the names pnnx writes."""


def dtype_param(op: RuntimeOperator) -> np.dtype | None:
    """The NumPy dtype of the ``dtype=torch.X`` parameter; None when absent or None."""
    name = op.param_value("dtype")
    if name is None:
        return None
    if name not in _TORCH_DTYPES:
        raise op.error(f"unsupported dtype {name!r} (NumPy has no such type; supported: "
                       f"{', '.join(sorted(_TORCH_DTYPES))})", Status.kParameterInvalidValue)
    return _TORCH_DTYPES[name]


@register_layer("Tensor.to", "Tensor.type")
class Cast(NonParamLayer):
    """Convert to ``dtype`` as PyTorch does: floats to integers truncate toward zero,
    anything to bool tests for non-zero. ``dtype=None`` (a device move) changes nothing."""

    batch_independent = True

    def __init__(self, layer_name: str, dtype: np.dtype | None):
        super().__init__(layer_name)
        self.dtype = dtype

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Cast:
        return cls(op.name, dtype_param(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [x if self.dtype is None else x.astype(self.dtype, copy=False)]


@register_layer("Tensor.type_as")
class TypeAs(NonParamLayer):
    """Convert the input to the dtype of the second input (``$other``)."""

    def __init__(self, layer_name: str, other: int):
        super().__init__(layer_name)
        self.other = other

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> TypeAs:
        other = op.input_index("other", 1)
        if other is None:
            raise op.error("missing input 'other'", Status.kParameterMissingUnknown)
        return cls(op.name, other)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [inputs[0].astype(inputs[self.other].dtype, copy=False)]


_FILL_VALUES = {"zeros": 0, "ones": 1, "empty": 0}


def _fill_value(op: RuntimeOperator) -> Argument:
    """0 for zeros and empty, 1 for ones; for full, ``fill_value``: a parameter (``inf`` and
    ``nan`` too) or an input ``$fill_value`` (a size read at run time, say)."""
    kind = op.type.rsplit(".", 1)[-1].removeprefix("new_").removesuffix("_like")
    if kind in _FILL_VALUES:
        return Argument(None, _FILL_VALUES[kind])
    value = Argument.of(op, "fill_value")
    if value.absent:
        raise op.error("parameter 'fill_value' is None", Status.kParameterInvalidValue)
    return value


def _scalar(value: Any) -> Any:
    """A fill value given as a number or as a one-element array."""
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise InferError(f"the fill value must have one element, got shape {value.shape}",
                             status=InferStatus.kInferFailedOutputSizeError)
        return value.reshape(()).item()
    return value


@register_layer("torch.zeros_like", "torch.ones_like", "torch.full_like", "torch.empty_like")
class FullLike(NonParamLayer):
    """A tensor of the input's shape filled with one value, in ``dtype`` or the input's dtype."""

    batch_independent = True

    def __init__(self, layer_name: str, value: Argument, dtype: np.dtype | None):
        super().__init__(layer_name)
        self.value, self.dtype = value, dtype
        self.whole_inputs = () if value.index is None else (value.index,)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FullLike:
        return cls(op.name, _fill_value(op), dtype_param(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.full(x.shape, _scalar(self.value.get(inputs)), dtype=x.dtype if self.dtype is None else self.dtype)]


@register_layer("torch.zeros", "torch.ones", "torch.full", "torch.empty", "Tensor.new_zeros",
                "Tensor.new_ones", "Tensor.new_empty")
class Full(NonParamLayer):
    """A tensor of a given ``size`` filled with one value. The size is a parameter or an
    input ``$size`` (a shape computed at run time). Without ``dtype``, PyTorch picks the
    input's dtype (``new_*``), the fill value's (``full``) or float32; pnnx records the
    result in the output's dtype, which is used here."""

    def __init__(self, layer_name: str, value: Argument, dtype: np.dtype,
                 size: tuple[int, ...] | None, size_input: int | None):
        super().__init__(layer_name)
        self.value, self.dtype, self.size, self.size_input = value, dtype, size, size_input

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Full:
        size = op.param_ints("size", status=Status.kParameterMissingShape, default=None)
        size_input = None
        if size is None:
            size_input = op.input_index("size", 1 if op.type.startswith("Tensor.") else 0)
            if size_input is None:
                raise op.error("missing parameter 'size'", Status.kParameterMissingShape)
        dtype = dtype_param(op)
        if dtype is None and op.output_operands:
            dtype = numpy_dtype(op.output_operands[0].type)
        if dtype is None:
            dtype = np.dtype(np.float32)
        if size is not None and (min(size, default=0) < 0
                                 or math.prod(size) * dtype.itemsize > DEFAULT_MAX_TENSOR_BYTES):
            raise op.error(f"size {size} is negative or over the limit of {DEFAULT_MAX_TENSOR_BYTES} bytes",
                           Status.kParameterInvalidValue)
        return cls(op.name, _fill_value(op), dtype, size, size_input)

    def batch_flow(self, inputs: Sequence[Batch]) -> Batch | None:
        """A size computed at run time that starts with the batch size makes a batch; a fixed
        one the same tensor whatever the batch (``new_zeros`` reads its input's dtype only)."""
        value = Batch.SHARED if self.value.index is None else inputs[self.value.index]
        size = Batch.SHARED if self.size_input is None else inputs[self.size_input]
        if value is not Batch.SHARED or size is Batch.ROWS:
            return None
        return Batch.ROWS if size is Batch.SIZE else Batch.SHARED

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        size = self.size if self.size_input is None else tuple(int(s) for s in inputs[self.size_input])
        return [np.full(size, _scalar(self.value.get(inputs)), dtype=self.dtype)]


@register_layer("Tensor.fill")
class Fill(NonParamLayer):
    """``x.fill_(value)``: a new tensor of the input's shape and dtype holding ``value`` (a
    number, or a one-element input ``$value``). The input itself is left as it is."""

    batch_independent = True

    def __init__(self, layer_name: str, value: Argument):
        super().__init__(layer_name)
        self.value = value
        self.whole_inputs = () if value.index is None else (value.index,)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Fill:
        value = Argument.of(op, "value", 1)
        if value.absent:
            raise op.error("missing 'value'", Status.kParameterMissingUnknown)
        return cls(op.name, value)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, value = inputs[0], np.asarray(self.value.get(inputs))
        if value.size != 1:
            raise InferError(f"fill: the value must have one element, got shape {value.shape}",
                             status=InferStatus.kInferFailedOutputSizeError)
        return [np.full(x.shape, value.reshape(()), dtype=x.dtype)]


@register_layer("torch.clone", "Tensor.clone")
class Clone(NonParamLayer):
    """``torch.clone(x)``: the same values. Layers never modify their inputs, so the input
    itself serves; a ``memory_format`` changes nothing but the memory layout."""

    batch_independent = True

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Clone:
        op.param_str("memory_format", Status.kParameterInvalidValue, default=None)
        return cls(op.name)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [inputs[0]]


@register_layer("Tensor.copy")
class Copy(NonParamLayer):
    """``x.copy_(src)``: ``src`` broadcast to the shape of ``$self`` and converted to its dtype."""

    def __init__(self, layer_name: str, target: int, src: int):
        super().__init__(layer_name)
        self.target, self.src = target, src

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Copy:
        target, src = op.input_index("self", 0), op.input_index("src", 1)
        if target is None or src is None or max(target, src) >= len(op.input_operands_seq):
            raise op.error("Tensor.copy needs the inputs 'self' and 'src'", Status.kParameterMissingUnknown)
        return cls(op.name, target, src)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        target, src = inputs[self.target], np.asarray(inputs[self.src])
        try:
            return [np.broadcast_to(src, target.shape).astype(target.dtype)]
        except ValueError:
            raise InferError(f"copy: src of shape {src.shape} does not broadcast to {target.shape}",
                             status=InferStatus.kInferFailedOutputSizeError) from None


@register_layer("torch.arange")
class Arange(NonParamLayer):
    """``torch.arange(start, end, step)``: each bound a parameter or an input (a size read
    at run time). Without ``dtype`` the result is int64 when every bound is an integer,
    float32 otherwise, as in PyTorch; the values are computed in float64 as PyTorch does,
    then converted."""

    def __init__(self, layer_name: str, start: Argument, end: Argument, step: Argument, dtype: np.dtype | None):
        super().__init__(layer_name)
        self.start, self.end, self.step, self.dtype = start, end, step, dtype

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Arange:
        start, end, step = (Argument.of(op, "start", default=0), Argument.of(op, "end"),
                            Argument.of(op, "step", default=1))
        for name, bound in (("start", start), ("end", end), ("step", step)):
            if bound.index is None and (isinstance(bound.value, bool) or not isinstance(bound.value, (int, float))
                                        or not math.isfinite(bound.value)):
                raise op.error(f"parameter {name!r} is {bound.value!r}, expected a finite number",
                               Status.kParameterInvalidValue)
        if step == Argument(None, 0):
            raise op.error("arange step cannot be zero", Status.kParameterInvalidValue)
        return cls(op.name, start, end, step, dtype_param(op))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        bounds = [np.asarray(b.get(inputs)).reshape(-1) for b in (self.start, self.end, self.step)]
        if any(b.size != 1 for b in bounds):
            raise InferError("arange: start, end and step must be single numbers",
                             status=InferStatus.kInferFailedOutputSizeError)
        start, end, step = (b[0].item() for b in bounds)
        dtype = self.dtype
        if dtype is None:
            integral = all(isinstance(b, (int, bool)) for b in (start, end, step))
            dtype = np.dtype(np.int64 if integral else np.float32)
        count = math.ceil((end - start) / step) if step else -1
        if step == 0 or not math.isfinite(count) or count > DEFAULT_MAX_TENSOR_BYTES // dtype.itemsize:
            raise InferError(f"arange({start}, {end}, {step}) is empty-stepped or too large",
                             status=InferStatus.kInferFailedOutputSizeError)
        if all(isinstance(b, int) for b in (start, end, step)) and dtype.kind in "iu":
            return [np.arange(start, end, step, dtype=dtype)]
        return [(start + step * np.arange(max(count, 0), dtype=np.float64)).astype(dtype)]
