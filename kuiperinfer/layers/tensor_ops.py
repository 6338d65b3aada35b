"""Joining and splitting tensors: cat, stack, split, tensor_split, chunk, unbind.

Split outputs are views of the input: the pieces share its memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.layout import concatenate_channels, is_channels_last
from kuiperinfer.kernels.matrix.products import Requantize, quantize_activations
from kuiperinfer.layers.base import NonParamLayer, keeps_batch, requantize_for
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


class DimLayer(NonParamLayer):
    """A layer working along one dimension ``dim``."""

    def __init__(self, layer_name: str, dim: int):
        super().__init__(layer_name)
        self.dim = dim


def _tensor_list(inputs: Sequence[Any]) -> Sequence[np.ndarray]:
    """The tensors to join: the inputs, or the one list a prim::ListConstruct made of them."""
    return inputs[0] if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)) else inputs


@dataclass(frozen=True)
class JoinPlan:
    """The optimiser's plan for a concatenation in an int8 graph."""

    quantized_for: str | None = None
    """The pnnx operator whose int8 product (with any others of the same input range) alone
    reads the joined value, whose float32 inputs the join quantizes into that product's uint8
    form as it joins them: the product then takes them as they are (the same numbers)."""


@register_layer("torch.cat", "torch.concat", "torch.concatenate")
class Cat(DimLayer):
    """Join tensors along ``dim``; images joined along their channels stay channels-last, and
    uint8 values (an int8 graph's, of one form) stay uint8. With a ``quantize`` form (a
    :class:`JoinPlan`'s), float32 tensors are quantized into it as they are joined."""

    joins = True
    plan_class = JoinPlan

    def __init__(self, layer_name: str, dim: int, quantize: Requantize | None = None, compiled: bool = False):
        super().__init__(layer_name, dim)
        self.quantize, self.compiled = quantize, compiled

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Cat:
        plan = op.plan or JoinPlan()
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim),
                    requantize_for(options, plan.quantized_for), options.compiled)
        layer.batch_independent = keeps_batch(op, layer.dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        tensors = _tensor_list(inputs)
        if self.quantize is not None:   # uint8 tensors arrive in the form already (the optimiser's invariant)
            form = self.quantize
            tensors = [t if t.dtype == np.uint8 else quantize_activations(t, form.scale, form.zero_point, self.compiled)
                       for t in tensors]
        if self.dim in (1, -3) and all(isinstance(t, np.ndarray) and is_channels_last(t) for t in tensors) \
                and len({(t.dtype, t.shape[0], *t.shape[2:]) for t in tensors}) == 1:
            return [concatenate_channels(tensors)]     # the channels of images, kept channels-last
        return [np.concatenate(tensors, axis=self.dim)]


@register_layer("torch.stack")
class Stack(DimLayer):
    """Join same-shaped tensors along a new dimension ``dim``."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Stack:
        return cls(op.name, op.param_int("dim", Status.kParameterMissingDim, default=0))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [np.stack(_tensor_list(inputs), axis=self.dim)]


@register_layer("torch.split", "Tensor.split")
class Split(DimLayer):
    """torch.split by a piece size or by a list of section sizes."""

    def __init__(self, layer_name: str, dim: int, sections: int | tuple[int, ...]):
        super().__init__(layer_name, dim)
        self.sections = sections

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Split:
        key = "split_size_or_sections" if op.has_param("split_size_or_sections") else "indices"
        if not op.has_param(key):
            raise op.error("missing parameter 'split_size_or_sections'", Status.kParameterMissingShape)
        sections = op.param_ints(key, status=Status.kParameterMissingShape)
        if isinstance(op.param_value(key), int):  # one piece size, not a list of sections
            sections = sections[0]
        if sections == 0 or (isinstance(sections, tuple) and min(sections, default=0) < 0):
            raise op.error(f"{key} {sections} must be a positive size or sizes >= 0",
                           Status.kParameterInvalidValue)
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim, default=0), sections)
        layer.batch_independent = keeps_batch(op, layer.dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        length = x.shape[self.dim]
        if isinstance(self.sections, int):
            bounds = list(range(self.sections, length, self.sections))
        else:
            if sum(self.sections) != length:
                raise InferError(f"sections {self.sections} do not add up to dimension {self.dim} "
                                 f"of input {x.shape}", status=InferStatus.kInferFailedOutputSizeError)
            bounds = list(np.cumsum(self.sections)[:-1])
        return np.split(x, bounds, axis=self.dim)


@register_layer("torch.chunk", "Tensor.chunk")
class Chunk(DimLayer):
    """torch.chunk: pieces of ceil(length / chunks), the last possibly smaller."""

    def __init__(self, layer_name: str, dim: int, chunks: int):
        super().__init__(layer_name, dim)
        self.chunks = chunks

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Chunk:
        chunks = op.param_int("chunks", Status.kParameterMissingShape)
        if chunks < 1:
            raise op.error(f"chunks must be positive, got {chunks}", Status.kParameterInvalidValue)
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim, default=0), chunks)
        layer.batch_independent = keeps_batch(op, layer.dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        length = x.shape[self.dim]
        size = -(-length // self.chunks)
        return np.split(x, list(range(size, length, size)), axis=self.dim)


@register_layer("torch.tensor_split", "Tensor.tensor_split")
class TensorSplit(DimLayer):
    """torch.tensor_split into ``sections`` near-equal pieces (the first ``length % sections``
    one longer), or at the ``indices`` (positions where a new piece starts)."""

    def __init__(self, layer_name: str, dim: int, sections: int | None, indices: tuple[int, ...] | None):
        super().__init__(layer_name, dim)
        self.sections, self.indices = sections, indices

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> TensorSplit:
        dim = op.param_int("dim", Status.kParameterMissingDim, default=0)
        if op.has_param("indices"):
            return cls(op.name, dim, None, op.param_ints("indices", status=Status.kParameterMissingShape))
        sections = op.param_int("sections", Status.kParameterMissingShape)
        if sections < 1:
            raise op.error(f"sections must be positive, got {sections}", Status.kParameterInvalidValue)
        return cls(op.name, dim, sections, None)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if self.indices is not None:
            return np.split(x, list(self.indices), axis=self.dim)
        return np.array_split(x, self.sections, axis=self.dim)


@register_layer("torch.unbind", "Tensor.unbind")
class Unbind(DimLayer):
    """The slices ``x.select(dim, i)``, one output each (views).

    pnnx also writes ``x[0], x[1], ...`` covering a whole dimension as one unbind; at
    export batch 1 that is ``x[0]`` alone, an unbind with a single output. So the
    layer yields as many slices as the operator has outputs: all of them for a true
    unbind, the first ones when the dimension grew with the batch.
    """

    def __init__(self, layer_name: str, dim: int, count: int):
        super().__init__(layer_name, dim)
        self.count = count

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Unbind:
        return cls(op.name, op.param_int("dim", Status.kParameterMissingDim, default=0), len(op.output_operands))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.shape[self.dim] < self.count:
            raise InferError(f"cannot unbind {self.count} slices from dimension {self.dim} of input {x.shape}",
                             status=InferStatus.kInferFailedOutputSizeError)
        return list(np.moveaxis(x, self.dim, 0)[:self.count])
