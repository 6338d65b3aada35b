"""Layer, NonParamLayer and ParamLayer: the computation behind each operator.

As in the seeds, a layer has two forwards:

* :meth:`Layer.forward` takes the input arrays and returns the output arrays. Every
  layer implements it; it is pure (inputs in, outputs out) and works on whole batches.
* :meth:`Layer.forward_operator` gathers the inputs from the layer's
  :class:`RuntimeOperator`, calls :meth:`forward` and stores the outputs in the
  operator's output operands, where the consumers find them without a copy.

A layer is made from its operator by the classmethod :meth:`Layer.create` (the
seeds' ``GetInstance``), which reads and checks the parameters and prepares the
weights once, so that ``forward`` receives typed values and pre-packed weights.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from kuiperinfer.errors import InferError, InferStatus, WeightError, ParseParameterAttrStatus

if TYPE_CHECKING:
    from kuiperinfer.runtime.operator import RuntimeOperator


class Layer:
    """Base class of all layers."""

    batch_independent: bool = False
    """True when sample ``i`` of every output depends only on sample ``i`` of the inputs
    (dimension 0 is the batch in and out), so that slices of a batch may run separately.
    Layers whose parameters decide it (a ``dim`` that may be 0) set it per instance in
    ``create``. The graph splits a batch over its workers only if every layer reading a
    value derived from the inputs says so; the default, False, keeps the batch whole."""

    def __init__(self, layer_name: str):
        self.layer_name = layer_name
        self._runtime_operator: weakref.ref | None = None

    @classmethod
    def create(cls, op: "RuntimeOperator") -> "Layer":
        """Build the layer for ``op``, reading its parameters and weights (raises LayerCreateError)."""
        raise NotImplementedError(f"{cls.__name__} does not implement create()")

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        """Compute the outputs from the inputs (arrays, or Python values such as shapes)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    @property
    def runtime_operator(self) -> "RuntimeOperator":
        op = self._runtime_operator() if self._runtime_operator is not None else None
        if op is None:
            raise InferError(f"layer {self.layer_name!r} is not attached to a runtime operator")
        return op

    def set_runtime_operator(self, op: "RuntimeOperator") -> None:
        """Attach the layer to its operator (a weak reference, as in the seeds)."""
        self._runtime_operator = weakref.ref(op)

    def forward_operator(self) -> None:
        """Run on the operator's input operands and fill its output operands."""
        op = self.runtime_operator
        inputs = [operand.data for operand in op.input_operands_seq]
        if any(value is None for value in inputs):
            missing = [o.name for o in op.input_operands_seq if o.data is None]
            raise InferError(f"input operands {missing} have no data", op.name, op.type,
                             InferStatus.kInferFailedInputEmpty)
        outputs = self.forward(inputs)
        if len(outputs) != len(op.output_operands):
            raise InferError(f"layer produced {len(outputs)} outputs, the graph expects "
                             f"{len(op.output_operands)}", op.name, op.type,
                             InferStatus.kInferFailedOutputSizeError)
        for operand, value in zip(op.output_operands, outputs):
            operand.data = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.layer_name!r})"


def declared_rank(op: "RuntimeOperator") -> int:
    """How many dimensions pnnx recorded for the operator's first input (0 if unknown)."""
    return len(op.input_operands_seq[0].shapes) if op.input_operands_seq else 0


def keeps_batch(op: "RuntimeOperator", dim: int, new_dim: bool = False) -> bool:
    """Whether ``dim`` (negative: from the end of the first input, one further for a
    ``new_dim`` such as stack's) leaves the batch dimension 0 alone: for ``batch_independent``."""
    if dim < 0:
        dim += declared_rank(op) + new_dim
    return dim > 0 and declared_rank(op) >= 2


class NonParamLayer(Layer):
    """A layer without weights (activations, pooling, shape operators)."""


class ParamLayer(Layer):
    """A layer with a weight and an optional bias (convolution, linear, normalisation).

    Subclasses that keep the weights in a prepared form (a packed GEMM matrix, a
    folded scale) override :meth:`prepare`, which runs whenever weights change.
    """

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None = None):
        super().__init__(layer_name)
        self._weight = np.ascontiguousarray(weight, dtype=np.float32)
        self._bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
        self.prepare()

    def weights(self) -> np.ndarray:
        """The weight, in PyTorch's layout. Layers built from a model read it straight from
        the model file, read-only: :meth:`set_weights` replaces it."""
        return self._weight

    def bias(self) -> np.ndarray | None:
        """The bias, or None for a layer without one."""
        return self._bias

    def set_weights(self, weight: Any) -> None:
        """Replace the weight (same shape; a Tensor or anything array-like)."""
        self._weight = self._checked(np.asarray(weight, dtype=np.float32), self._weight, "weight")
        self.prepare()

    def set_bias(self, bias: Any) -> None:
        """Replace the bias (same shape; a Tensor or anything array-like)."""
        if self._bias is None:
            raise WeightError(f"layer {self.layer_name!r} has no bias",
                              status=ParseParameterAttrStatus.kAttrMissingBias)
        self._bias = self._checked(np.asarray(bias, dtype=np.float32), self._bias, "bias")
        self.prepare()

    def _checked(self, new: np.ndarray, old: np.ndarray, what: str) -> np.ndarray:
        if new.size == old.size and new.shape != old.shape:
            new = new.reshape(old.shape)
        if new.shape != old.shape:
            raise WeightError(f"layer {self.layer_name!r}: new {what} has shape {new.shape}, "
                              f"expected {old.shape}", status=ParseParameterAttrStatus.kAttrWrongSize)
        return np.ascontiguousarray(new)

    def prepare(self) -> None:
        """Derive the forms ``forward`` uses from the weights (called after every change)."""
