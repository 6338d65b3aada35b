"""Softmax, LogSoftmax and Softmin along one dimension, computed stably.

Subtracting the maximum along ``dim`` first keeps ``exp`` from overflowing; pnnx
always writes ``dim`` (``nn.Softmax()`` without one gets PyTorch's implicit choice
written out), possibly negative.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.compiled.softmax import softmax_rows
from kuiperinfer.layers.base import NonParamLayer, keeps_batch
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """exp(x) / sum(exp(x)) along ``axis``."""
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted, out=shifted)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """x - log(sum(exp(x))) along ``axis``."""
    shifted = x - x.max(axis=axis, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted


class DimSoftmaxLayer(NonParamLayer):
    """A softmax-like function along ``dim``. Subclasses supply :meth:`function`."""

    def __init__(self, layer_name: str, dim: int):
        super().__init__(layer_name)
        self.dim = dim

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> DimSoftmaxLayer:
        dim = op.param_int("dim", Status.kParameterMissingDim)
        shape = op.input_operands_seq[0].shapes if op.input_operands_seq else []
        if shape and not -len(shape) <= dim < len(shape):
            raise op.error(f"dim {dim} is out of range for the {len(shape)}-d input {tuple(shape)}",
                           Status.kParameterMissingDim)
        layer = cls(op.name, dim)
        layer.batch_independent = keeps_batch(op, dim)
        return layer

    def function(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if not -x.ndim <= self.dim < x.ndim:
            raise InferError(f"dim {self.dim} is out of range for the input of shape {x.shape}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        return [self.function(x)]


@register_layer("nn.Softmax", "F.softmax", "torch.softmax", "Tensor.softmax")
class Softmax(DimSoftmaxLayer):
    """Over the last dimension of a float32 array, compiled
    (:func:`~kuiperinfer.kernels.compiled.softmax.softmax_rows`) when the optimiser chose it."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> DimSoftmaxLayer:
        layer = super().create(op, options)
        if options.compiled:
            layer.function = layer.compiled_function
        return layer

    def function(self, x: np.ndarray) -> np.ndarray:
        return softmax(x, self.dim)

    def compiled_function(self, x: np.ndarray) -> np.ndarray:
        """Rows of a float32 array's last dimension in one compiled call; the reference for the rest."""
        if x.dtype == np.float32 and x.ndim and self.dim % x.ndim == x.ndim - 1 and x.size:
            rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
            out = np.empty(x.shape, np.float32)
            softmax_rows(rows, out.reshape(rows.shape))
            return out
        return softmax(x, self.dim)


@register_layer("nn.Softmax2d")
class Softmax2d(Softmax):
    """Softmax over the channels of a (N, C, H, W) or (C, H, W) input: dim -3."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Softmax2d:
        return cls(op.name, -3)


@register_layer("nn.LogSoftmax", "F.log_softmax", "torch.log_softmax", "Tensor.log_softmax")
class LogSoftmax(DimSoftmaxLayer):
    def function(self, x: np.ndarray) -> np.ndarray:
        return log_softmax(x, self.dim)


@register_layer("nn.Softmin", "F.softmin")
class Softmin(DimSoftmaxLayer):
    """softmax(-x)."""

    def function(self, x: np.ndarray) -> np.ndarray:
        return softmax(np.negative(x), self.dim)
