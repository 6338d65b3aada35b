"""Shape operators: flatten, reshape, reshape_as, permute, transpose, squeeze, expand,
repeat, repeat_interleave, flip, roll, as_strided, channel shuffle; and Tensor.size.

All but repeat, repeat_interleave, roll, as_strided and channel shuffle return views of
their input; no data is copied.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer, declared_rank, keeps_batch
from kuiperinfer.layers.comparison import Argument
from kuiperinfer.pnnx.param_file import DEFAULT_MAX_TENSOR_BYTES
from kuiperinfer.runtime.batching import Batch
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


@register_layer("torch.flatten", "Tensor.flatten", "nn.Flatten")
class Flatten(NonParamLayer):
    """Merge dimensions start_dim..end_dim into one."""

    shape_only = True

    def __init__(self, layer_name: str, start_dim: int, end_dim: int):
        super().__init__(layer_name)
        self.start_dim, self.end_dim = start_dim, end_dim

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Flatten:
        default_start = 1 if op.type == "nn.Flatten" else 0
        layer = cls(op.name, op.param_int("start_dim", Status.kParameterMissingDim, default=default_start),
                    op.param_int("end_dim", Status.kParameterMissingDim, default=-1))
        layer.batch_independent = keeps_batch(op, layer.start_dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.ndim == 0:
            return [x.reshape(1)]
        start, end = self.start_dim % x.ndim, self.end_dim % x.ndim
        return [x.reshape(*x.shape[:start], -1, *x.shape[end + 1:])]


def exported_batch(op: RuntimeOperator) -> int | None:
    """The batch size (first dimension) pnnx recorded for the operator's first input, if known.

    A fixed shape parameter starting with it usually came from ``x.size(0)`` at export
    time; such a size should follow the batch of the actual input instead.
    """
    declared = op.input_operands_seq[0].shapes if op.input_operands_seq else []
    return declared[0] if declared and declared[0] > 0 else None


@register_layer("Tensor.reshape", "Tensor.view", "torch.reshape")
class Reshape(NonParamLayer):
    """Reshape to a fixed ``shape`` parameter, or to a shape given as inputs at run time.

    When the fixed shape keeps the exported batch size in front (``(1,-1)`` for a
    model exported at batch 1), the batch size follows the actual input instead.
    """

    shape_only = True

    def __init__(self, layer_name: str, shape: tuple[int, ...] | None, batch_follows: bool):
        super().__init__(layer_name)
        self.shape, self.batch_follows = shape, batch_follows
        self.batch_independent = batch_follows  # each sample reshaped alone

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Reshape:
        shape = op.param_ints("shape", status=Status.kParameterMissingShape, default=None)
        if shape is None:
            if len(op.input_operands_seq) < 2:
                raise op.error("missing parameter 'shape'", Status.kParameterMissingShape)
            return cls(op.name, None, False)
        batch = exported_batch(op)
        layer = cls(op.name, shape, batch is not None and len(shape) > 1 and shape[0] == batch)
        declared = op.input_operands_seq[0].shapes
        if shape[0] == -1 and len(shape) > 1 and len(declared) > 1 and min(declared[1:]) > 0 and min(shape[1:]) > 0:
            # a free batch and a fixed size per sample: each sample is reshaped alone
            layer.batch_independent = math.prod(shape[1:]) == math.prod(declared[1:])
        return layer

    def batch_flow(self, inputs: Sequence[Batch]) -> Batch | None:
        """A batched input reshaped to a shape computed at run time that starts with its
        batch size (``[size(@0,0),-1]``) keeps its samples apart."""
        if self.shape is None:
            shape_keeps_batch = inputs[1:2] == [Batch.SIZE] and all(r is Batch.SHARED for r in inputs[2:])
            return Batch.ROWS if inputs[0] is Batch.ROWS and shape_keeps_batch else None
        return super().batch_flow(inputs)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if self.shape is None:
            rest = inputs[1:]
            shape = tuple(rest[0]) if len(rest) == 1 and np.ndim(rest[0]) == 1 else tuple(rest)
            shape = tuple(int(d) for d in shape)
        elif self.batch_follows and x.ndim > 0:
            shape = (x.shape[0],) + self.shape[1:]
        else:
            shape = self.shape
        try:
            return [x.reshape(shape)]
        except ValueError:
            raise InferError(f"cannot reshape input of shape {x.shape} to {shape}",
                             status=InferStatus.kInferFailedOutputSizeError) from None


@register_layer("Tensor.reshape_as")
class ReshapeAs(NonParamLayer):
    """``x.reshape_as(other)``: ``x`` in the shape of the second input ``$other``."""

    shape_only = True

    def __init__(self, layer_name: str, other: int):
        super().__init__(layer_name)
        self.other = other

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ReshapeAs:
        other = op.input_index("other", 1)
        if other is None or other >= len(op.input_operands_seq):
            raise op.error("missing input 'other'", Status.kParameterMissingShape)
        return cls(op.name, other)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, shape = inputs[0], np.shape(inputs[self.other])
        try:
            return [x.reshape(shape)]
        except ValueError:
            raise InferError(f"cannot reshape input of shape {x.shape} as {shape}",
                             status=InferStatus.kInferFailedOutputSizeError) from None


@register_layer("Tensor.permute", "torch.permute")
class Permute(NonParamLayer):
    """Reorder the dimensions (a view): output dimension i is input dimension ``dims[i]``."""

    shape_only = True

    def __init__(self, layer_name: str, dims: tuple[int, ...]):
        super().__init__(layer_name)
        self.dims = dims
        self.batch_independent = dims[0] % len(dims) == 0  # the batch stays in front

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Permute:
        dims = op.param_ints("dims", status=Status.kParameterMissingDim)
        if sorted(d % len(dims) for d in dims) != list(range(len(dims))):
            raise op.error(f"dims {dims} are not a permutation", Status.kParameterInvalidValue)
        return cls(op.name, dims)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [np.transpose(inputs[0], self.dims)]


@register_layer("torch.transpose", "Tensor.transpose", "torch.t", "Tensor.t")
class Transpose(NonParamLayer):
    """Swap two dimensions (a view). ``t()`` swaps the two dimensions of a matrix and
    leaves vectors and scalars as they are."""

    shape_only = True

    def __init__(self, layer_name: str, dim0: int, dim1: int):
        super().__init__(layer_name)
        self.dim0, self.dim1 = dim0, dim1

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Transpose:
        if op.type in ("torch.t", "Tensor.t"):
            return cls(op.name, 0, -1)
        layer = cls(op.name, op.param_int("dim0", Status.kParameterMissingDim),
                    op.param_int("dim1", Status.kParameterMissingDim))
        layer.batch_independent = keeps_batch(op, layer.dim0) and keeps_batch(op, layer.dim1)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.swapaxes(x, self.dim0, self.dim1) if x.ndim else x]


@register_layer("torch.unflatten", "Tensor.unflatten", "nn.Unflatten")
class Unflatten(NonParamLayer):
    """Split dimension ``dim`` into ``sizes`` (one of them may be -1)."""

    shape_only = True

    def __init__(self, layer_name: str, dim: int, sizes: tuple[int, ...]):
        super().__init__(layer_name)
        self.dim, self.sizes = dim, sizes

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Unflatten:
        key = "unflattened_size" if op.type == "nn.Unflatten" else "sizes"
        sizes = op.param_ints(key, status=Status.kParameterMissingShape)
        if sizes.count(-1) > 1:
            raise op.error(f"sizes {sizes} contain -1 more than once", Status.kParameterInvalidValue)
        return cls(op.name, op.param_int("dim", Status.kParameterMissingDim), sizes)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        dim = self.dim % x.ndim
        shape = x.shape[:dim] + self.sizes + x.shape[dim + 1:]
        try:
            return [x.reshape(shape)]
        except ValueError:
            raise InferError(f"cannot unflatten dimension {self.dim} of input {x.shape} into {self.sizes}",
                             status=InferStatus.kInferFailedOutputSizeError) from None


@register_layer("torch.squeeze", "Tensor.squeeze")
class Squeeze(NonParamLayer):
    """Drop dimensions of size 1: all of them, or those among ``dim`` (an int or a tuple).
    As in PyTorch, a listed dimension whose size is not 1 is kept."""

    shape_only = True

    def __init__(self, layer_name: str, dims: tuple[int, ...] | None):
        super().__init__(layer_name)
        self.dims = dims

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Squeeze:
        return cls(op.name, op.param_ints("dim", status=Status.kParameterMissingDim, default=None))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        dims = range(x.ndim) if self.dims is None else self.dims
        return [np.squeeze(x, axis=tuple(d for d in dims if x.shape[d] == 1))]


@register_layer("torch.unsqueeze", "Tensor.unsqueeze")
class Unsqueeze(NonParamLayer):
    """Insert a dimension of size 1 at ``dim`` (negative counts from the end of the result)."""

    shape_only = True

    def __init__(self, layer_name: str, dim: int):
        super().__init__(layer_name)
        self.dim = dim

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Unsqueeze:
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim))
        layer.batch_independent = keeps_batch(op, layer.dim, new_dim=True)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [np.expand_dims(inputs[0], self.dim)]


@register_layer("Tensor.expand", "Tensor.expand_as")
class Expand(NonParamLayer):
    """Broadcast to ``sizes`` without copying (a read-only view); -1 keeps a dimension.

    The sizes are a parameter, an input ``$sizes`` (a shape computed at run time) or,
    for ``expand_as``, the shape of the second input. A fixed first size equal to the
    exported batch size of a same-rank input follows the actual batch (it becomes -1).
    """

    def __init__(self, layer_name: str, sizes: tuple[int, ...] | None, sizes_input: int | None = None,
                 like_input: int | None = None):
        super().__init__(layer_name)
        self.sizes, self.sizes_input, self.like_input = sizes, sizes_input, like_input

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Expand:
        if op.type == "Tensor.expand_as":
            other = op.input_index("other", 1)
            if other is None:
                raise op.error("missing input 'other'", Status.kParameterMissingShape)
            return cls(op.name, None, like_input=other)
        if not op.has_param("sizes"):
            sizes_input = op.input_index("sizes", 1)
            if sizes_input is None:
                raise op.error("missing parameter 'sizes'", Status.kParameterMissingShape)
            layer = cls(op.name, None, sizes_input=sizes_input)
            # as many dimensions out as in: the batch stays dimension 0 (its size from a shape
            # computed on the same chunk of the batch)
            layer.batch_independent = 0 < len(op.input_operands_seq[0].shapes) == len(op.output_operands[0].shapes)
            return layer
        sizes = op.param_ints("sizes", status=Status.kParameterMissingShape)
        batch = exported_batch(op)
        if len(sizes) == declared_rank(op) and sizes[0] == batch:
            sizes = (-1,) + sizes[1:]
        layer = cls(op.name, sizes)
        layer.batch_independent = len(sizes) == declared_rank(op) and sizes[0] == -1
        return layer

    def batch_flow(self, inputs: Sequence[Batch]) -> Batch | None:
        """Sizes computed at run time that start with the batch size (``[size(@0,0),-1,-1]``)
        expand a batched input, or a shared one (a class token), to the batch."""
        if self.sizes_input is not None:
            others = [r for i, r in enumerate(inputs) if i != self.sizes_input]
            if inputs[self.sizes_input] is Batch.SIZE and Batch.SIZE not in others and self.batch_independent:
                return Batch.ROWS
            if inputs[self.sizes_input] is not Batch.SHARED:
                return None
        return super().batch_flow(inputs)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if self.like_input is not None:
            sizes = inputs[self.like_input].shape
        elif self.sizes_input is not None:
            sizes = tuple(int(s) for s in inputs[self.sizes_input])
        else:
            sizes = self.sizes
        new = len(sizes) - x.ndim
        shape = tuple(x.shape[i - new] if s == -1 and i >= new else s for i, s in enumerate(sizes))
        try:
            return [np.broadcast_to(x, shape)]
        except ValueError:
            raise InferError(f"cannot expand input of shape {x.shape} to {tuple(sizes)}",
                             status=InferStatus.kInferFailedOutputSizeError) from None


@register_layer("Tensor.repeat", "torch.tile", "Tensor.tile")
class Repeat(NonParamLayer):
    """Tile the input ``sizes`` times along each dimension (leading sizes add dimensions).
    ``torch.tile`` is the same with ``dims``, padded with ones on the left."""

    def __init__(self, layer_name: str, sizes: tuple[int, ...]):
        super().__init__(layer_name)
        self.sizes = sizes

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Repeat:
        key = "sizes" if op.type == "Tensor.repeat" else "dims"
        return cls(op.name, op.param_ints(key, status=Status.kParameterMissingShape))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [np.tile(inputs[0], self.sizes)]


@register_layer("torch.repeat_interleave")
class RepeatInterleave(NonParamLayer):
    """Repeat each element ``repeats`` times along ``dim`` (over the flattened input when
    ``dim`` is None): ``repeats`` is a number or a tensor input ``$repeats`` holding one
    count per element (or one count for all)."""

    def __init__(self, layer_name: str, repeats: Argument, dim: int | None):
        super().__init__(layer_name)
        self.repeats, self.dim = repeats, dim

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> RepeatInterleave:
        repeats = Argument.of(op, "repeats", 1)
        if repeats.index is None and (isinstance(repeats.value, bool) or not isinstance(repeats.value, int)
                                      or repeats.value < 0):
            raise op.error(f"parameter 'repeats' is {repeats.value!r}, expected a count >= 0",
                           Status.kParameterInvalidValue)
        dim = op.param_value("dim")
        if dim is not None:
            dim = op.param_int("dim", Status.kParameterMissingDim)
        layer = cls(op.name, repeats, dim)
        layer.batch_independent = dim is not None and keeps_batch(op, dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, repeats = inputs[0], np.asarray(self.repeats.get(inputs))
        if repeats.dtype.kind not in "iu" or repeats.ndim > 1 or (repeats.size and repeats.min() < 0):
            raise InferError(f"repeat_interleave: repeats must be counts >= 0 (a number or a vector), "
                             f"got {repeats.dtype} of shape {repeats.shape}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        if self.dim is None or x.ndim == 0:
            x = x.reshape(-1)
        if not -x.ndim <= (self.dim or 0) < x.ndim:
            raise InferError(f"repeat_interleave: dim {self.dim} is out of range for an input of {x.ndim} "
                             f"dimensions", status=InferStatus.kInferFailedDimensionParameterError)
        axis = (self.dim or 0) % x.ndim
        length = x.shape[axis]
        if repeats.size not in (1, length):
            raise InferError(f"repeat_interleave: {repeats.size} repeats for a dimension of size {length}",
                             status=InferStatus.kInferFailedOutputSizeError)
        repeated = int(repeats.sum()) * (length if repeats.size == 1 else 1)
        if repeated * (x.size // max(length, 1)) * x.itemsize > DEFAULT_MAX_TENSOR_BYTES:
            raise InferError("repeat_interleave: the result would be too large",
                             status=InferStatus.kInferFailedOutputSizeError)
        return [np.repeat(x, repeats.reshape(-1), axis=axis)]


@register_layer("torch.as_strided")
class AsStrided(NonParamLayer):
    """``torch.as_strided(x, size, stride, storage_offset)``: the elements of the contiguous
    input at ``storage_offset + sum(i_k * stride[k])``, in the shape ``size``.

    Every position is checked against the input's size at run time, so that a model
    cannot read outside the array (NumPy's as_strided would). pnnx drops a non-zero
    ``storage_offset`` when it exports; one written in the file is honoured."""

    def __init__(self, layer_name: str, size: tuple[int, ...], stride: tuple[int, ...], offset: int):
        super().__init__(layer_name)
        self.size, self.stride, self.offset = size, stride, offset

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AsStrided:
        size = op.param_ints("size", status=Status.kParameterMissingShape)
        stride = op.param_ints("stride", len(size), Status.kParameterMissingStride)
        offset = op.param_int("storage_offset", Status.kParameterInvalidValue, default=0)
        if min(size, default=0) < 0 or min(stride, default=0) < 0 or offset < 0:
            raise op.error(f"size {size}, stride {stride} and storage_offset {offset} must not be negative",
                           Status.kParameterInvalidValue)
        if math.prod(size) * 8 > DEFAULT_MAX_TENSOR_BYTES:
            raise op.error(f"size {size} is over the limit of {DEFAULT_MAX_TENSOR_BYTES} bytes",
                           Status.kParameterInvalidValue)
        return cls(op.name, size, stride, offset)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        flat = np.ascontiguousarray(inputs[0]).reshape(-1)
        if math.prod(self.size) == 0:
            return [np.zeros(self.size, dtype=flat.dtype)]
        last = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride))
        if last >= flat.size:
            raise InferError(f"as_strided: size {self.size}, stride {self.stride} and storage_offset "
                             f"{self.offset} reach element {last} of an input of {flat.size} elements",
                             status=InferStatus.kInferFailedOutputSizeError)
        view = np.lib.stride_tricks.as_strided(flat[self.offset:], self.size,
                                               tuple(s * flat.itemsize for s in self.stride), writeable=False)
        return [view.copy()]


@register_layer("torch.flip", "Tensor.flip")
class Flip(NonParamLayer):
    """Reverse the order along each of ``dims`` (a view)."""

    def __init__(self, layer_name: str, dims: tuple[int, ...]):
        super().__init__(layer_name)
        self.dims = dims

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Flip:
        return cls(op.name, op.param_ints("dims", status=Status.kParameterMissingDim))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [np.flip(inputs[0], self.dims)]


@register_layer("torch.roll", "Tensor.roll")
class Roll(NonParamLayer):
    """Rotate elements by ``shifts`` along ``dims``; without dims, over the flattened input."""

    def __init__(self, layer_name: str, shifts: tuple[int, ...], dims: tuple[int, ...] | None):
        super().__init__(layer_name)
        self.shifts, self.dims = shifts, dims

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Roll:
        shifts = op.param_ints("shifts", status=Status.kParameterMissingShape)
        dims = op.param_ints("dims", status=Status.kParameterMissingDim, default=None)
        if len(shifts) != (1 if dims is None else len(dims)):
            raise op.error(f"shifts {shifts} do not match dims {dims}", Status.kParameterInvalidValue)
        return cls(op.name, shifts, dims)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        if self.dims is None:
            return [np.roll(inputs[0], self.shifts[0])]
        return [np.roll(inputs[0], self.shifts, self.dims)]


def _run_time_int(value: Any, what: str) -> int:
    """An int argument computed in the graph: a Python int or a one-element integer array."""
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iu":
        value = int(value.reshape(-1)[0])
    if type(value) is not int:
        raise InferError(f"{what} must be an int, got {value!r}",
                         status=InferStatus.kInferFailedDimensionParameterError)
    return value


@register_layer("nn.ChannelShuffle", "aten::channel_shuffle", "aten::native_channel_shuffle")
class ChannelShuffle(NonParamLayer):
    """ShuffleNet's channel shuffle: the channels (dimension 1) as ``groups`` rows of
    ``C / groups``, read column by column. pnnx writes the module as ``nn.ChannelShuffle``
    (``groups=``) and F.channel_shuffle as the TorchScript ``aten::channel_shuffle``, whose
    second input is the groups (a ``pnnx.Expression`` of one int)."""

    def __init__(self, layer_name: str, groups: int | None):
        super().__init__(layer_name)
        self.groups = groups
        self.whole_inputs = () if groups is not None else (1,)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ChannelShuffle:
        if op.type == "nn.ChannelShuffle":
            groups = op.param_int("groups", Status.kParameterMissingGroups)
            if groups < 1:
                raise op.error(f"groups {groups} must be positive", Status.kParameterMissingGroups)
            layer = cls(op.name, groups)
            layer.batch_independent = declared_rank(op) >= 3   # the channels are dimension 1
            return layer
        if len(op.input_operands_seq) != 2:
            raise op.error(f"{op.type} takes the input and the groups, got {len(op.input_operands_seq)} inputs",
                           Status.kParameterMissingGroups)
        layer = cls(op.name, None)
        layer.batch_independent = declared_rank(op) >= 3
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        groups = self.groups if self.groups is not None else _run_time_int(inputs[1], "groups")
        if x.ndim < 3 or groups < 1 or x.shape[1] % groups:
            raise InferError(f"cannot shuffle the channels of shape {x.shape} in {groups} groups",
                             status=InferStatus.kInferFailedChannelParameterError)
        n, c = x.shape[:2]
        grouped = x.reshape(n, groups, c // groups, *x.shape[2:])
        return [np.ascontiguousarray(grouped.swapaxes(1, 2)).reshape(x.shape)]


@register_layer("Tensor.size")
class Size(NonParamLayer):
    """``x.size(dim)``: one dimension's size as a Python int (``dim`` a parameter, or a second
    input where the model computed it); without ``dim``, every size as a tuple of ints,
    as ``torch.Size`` is. pnnx writes sizes almost always into ``pnnx.Expression``s
    (``size(@0,1)``); ``Tensor.size`` is the form its sources name for the rest."""

    def __init__(self, layer_name: str, dim: int | None, dim_input: bool, rank: int = 0):
        super().__init__(layer_name)
        self.dim, self.dim_input = dim, dim_input
        self.rank = rank
        """How many dimensions pnnx recorded for the input (0: unknown)."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Size:
        if len(op.input_operands_seq) not in (1, 2):
            raise op.error(f"Tensor.size takes the tensor and at most a dim, got {len(op.input_operands_seq)} inputs",
                           Status.kParameterMissingDim)
        dim_input = len(op.input_operands_seq) == 2
        dim = None if dim_input else op.param_int("dim", Status.kParameterMissingDim, default=None)
        return cls(op.name, dim, dim_input, declared_rank(op))

    def batch_flow(self, inputs: Sequence[Batch]) -> Batch | None:
        """The batch size for dimension 0 (or the whole shape), shared for the others."""
        if self.dim_input or inputs[0] is not Batch.ROWS:
            return None
        if self.dim is None or self.dim == 0 or (self.rank and self.dim + self.rank == 0):
            return Batch.SIZE
        return Batch.SHARED if self.dim > 0 or self.rank else None

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        dim = _run_time_int(inputs[1], "dim") if self.dim_input else self.dim
        if dim is None:
            return [tuple(int(d) for d in x.shape)]
        if not -x.ndim <= dim < x.ndim:
            raise InferError(f"dimension {dim} is out of range for a tensor of shape {x.shape}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        return [int(x.shape[dim])]
