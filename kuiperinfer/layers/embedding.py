"""nn.Embedding and F.embedding: rows of a table picked by integer indices.

pnnx writes nn.Embedding (also for F.embedding on a module's own parameter) with
``num_embeddings``, ``embedding_dim`` and the ``@weight`` table, and F.embedding when
the table is an input. ``padding_idx`` only matters for training and pnnx does not
record it; ``max_norm`` is not recorded either, so a model relying on it is not
reproduced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import Layer, ParamLayer, declared_rank, functional
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


def embedding(indices: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[indices]``: shape ``indices.shape + (embedding_dim,)``; indices in [0, rows)."""
    if indices.dtype.kind not in "iu":
        raise InferError(f"embedding indices must be integers, got dtype {indices.dtype}")
    rows = table.shape[0]
    if indices.size and (indices.min() < 0 or indices.max() >= rows):
        bad = indices[(indices < 0) | (indices >= rows)]
        raise InferError(f"embedding index {int(bad.flat[0])} is out of range [0, {rows}) "
                         f"({bad.size} of {indices.size} indices are)",
                         status=InferStatus.kInferFailedDimensionParameterError)
    # indexing, not np.take: take copies a whole unaligned table (a model file's may be) first
    return table[indices]


@register_layer("nn.Embedding")
class Embedding(ParamLayer):
    """A lookup in the stored (num_embeddings, embedding_dim) table."""

    batch_independent = True   # row i of the output is the lookup of index i
    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Embedding:
        rows = op.param_int("num_embeddings", Status.kParameterMissingNumFeatures)
        dim = op.param_int("embedding_dim", Status.kParameterMissingOutChannel)
        return cls(op.name, op.weight("weight", (rows, dim), copy=False))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [embedding(inputs[0], self._weight)]


@register_layer("F.embedding")
class FunctionalEmbedding(Layer):
    """A lookup in a table that arrives as the second input."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FunctionalEmbedding:
        if len(op.input_operands_seq) != 2:
            raise op.error(f"F.embedding needs the indices and the weight as inputs, got "
                           f"{len(op.input_operands_seq)} inputs", Status.kAttrMissingWeight)
        return functional(cls(op.name), op, declared_rank(op) >= 1)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        indices, table = inputs
        if table.ndim != 2:
            raise InferError(f"embedding weight has shape {table.shape}, expected (num_embeddings, dim)",
                             status=InferStatus.kInferFailedWeightParameterError)
        return [embedding(indices, table)]
