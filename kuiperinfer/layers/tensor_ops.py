"""Joining and splitting tensors: torch.cat, torch.split, torch.chunk.

Split outputs are views of the input: the pieces share its memory.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kuiperinfer.errors import InferError, InferStatus, ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.layers.registry import register_layer
from kuiperinfer.runtime.operator import RuntimeOperator


class DimLayer(NonParamLayer):
    """A layer working along one dimension ``dim``."""

    def __init__(self, layer_name: str, dim: int):
        super().__init__(layer_name)
        self.dim = dim


@register_layer("torch.cat", "torch.concat", "torch.concatenate")
class Cat(DimLayer):
    @classmethod
    def create(cls, op: RuntimeOperator) -> "Cat":
        return cls(op.name, op.param_int("dim", Status.kParameterMissingDim))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        arrays = inputs[0] if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)) else inputs
        return [np.concatenate(arrays, axis=self.dim)]



@register_layer("torch.split", "Tensor.split")
class Split(DimLayer):
    """torch.split by a piece size or by a list of section sizes."""

    def __init__(self, layer_name: str, dim: int, sections: int | tuple[int, ...]):
        super().__init__(layer_name, dim)
        self.sections = sections

    @classmethod
    def create(cls, op: RuntimeOperator) -> "Split":
        sections = op.param_value("split_size_or_sections")
        if sections is None:
            sections = op.param_value("indices")
        if sections is None:
            raise op.error("missing parameter 'split_size_or_sections'", Status.kParameterMissingShape)
        sections = sections if isinstance(sections, int) else tuple(sections)
        return cls(op.name, op.param_int("dim", Status.kParameterMissingDim, default=0), sections)

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
    def create(cls, op: RuntimeOperator) -> "Chunk":
        chunks = op.param_int("chunks", Status.kParameterMissingShape)
        if chunks < 1:
            raise op.error(f"chunks must be positive, got {chunks}", Status.kParameterInvalidValue)
        return cls(op.name, op.param_int("dim", Status.kParameterMissingDim, default=0), chunks)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        length = x.shape[self.dim]
        size = -(-length // self.chunks)
        return np.split(x, list(range(size, length, size)), axis=self.dim)
