"""Layer, NonParamLayer and ParamLayer: the computation behind each operator.

A layer is made from its operator by the classmethod :meth:`Layer.create` (KuiperInfer's
``GetInstance``), which reads and checks the parameters, reads the optimiser's plan for the
operator (``op.plan``: what it fused in and which forms it chose, a frozen dataclass
defined beside the layer that reads it, such as
:class:`~kuiperinfer.layers.convolution.ConvolutionPlan`), picks its kernels once (compiled
or NumPy reference, and the precision of its products, as the graph's
:class:`~kuiperinfer.runtime.options.BuildOptions` say) and prepares the weights, so that
:meth:`Layer.forward` receives typed values and pre-packed weights. ``forward`` is pure: the
input values in, the output values out, on whole batches; the graph's execution loop owns
the values of a run and hands each layer its inputs.

Class-level facts let the optimiser ask what a type is without building its layer
(:meth:`LayerRegisterer.layer_class <kuiperinfer.runtime.registry.LayerRegisterer.layer_class>`):
:attr:`Layer.shape_only`, :attr:`Layer.joins`, :meth:`Layer.takes_activation`, :meth:`Layer.input_product`, and
the activation layers' :meth:`~kuiperinfer.layers.activation.InplaceActivationLayer.activation_of`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus, WeightError
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.matrix.precision import Int8
from kuiperinfer.kernels.matrix.products import Requantize
from kuiperinfer.runtime.batching import Batch
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions


class Layer:
    """Base class of all layers."""

    batch_independent: bool = False
    """True when sample ``i`` of every output depends only on sample ``i`` of the inputs
    (dimension 0 is the batch in and out), so that slices of a batch may run separately.
    Layers whose parameters or input ranks decide it (a ``dim`` that may be 0, an input that
    may come unbatched) set it per instance in ``create``; the default, False, keeps the
    batch whole. The graph's analysis (:mod:`kuiperinfer.runtime.batching`) reads it through
    :meth:`batch_flow`."""

    whole_inputs: tuple[int, ...] = ()
    """The inputs every sample reads whole (a functional convolution's weight and bias),
    unlike the rest, whose dimension 0 is the batch or broadcasts against it."""

    shape_only: ClassVar[bool] = False
    """True when the layer only rearranges the elements of its one input (reshape, view,
    permute, ...): an elementwise function gives the same values before it as after."""

    monotone: ClassVar[bool] = False
    """True when each value of the layer's one output is one of its input's, picked by
    comparing them (max pooling): a non-decreasing elementwise function, such as int8's
    quantization, gives the same values before it as after."""

    joins: ClassVar[bool] = False
    """True when the layer places the values of all its inputs, unchanged, side by side in its
    one output (a concatenation): an elementwise function applied to each input alike gives
    the same values as applied to the output."""

    plan_class: ClassVar[type | None] = None
    """The class of the plan that ``create`` reads from ``op.plan``; None for layers the
    optimiser never plans for."""

    products: tuple[str, ...] = ()
    """The pnnx operators whose products by a weight the layer computes in the graph's
    precision (its own name; a fused operator's, the names of the operators it replaces):
    ``int8`` quantizes each by its calibrated range, so the table names exactly these."""

    def __init__(self, layer_name: str):
        self.layer_name = layer_name

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Layer:
        """Build the layer for ``op``, reading its parameters and weights, with the graph's
        build ``options`` (raises LayerCreateError)."""
        raise NotImplementedError(f"{cls.__name__} does not implement create()")

    @classmethod
    def takes_activation(cls, op: RuntimeOperator) -> bool:
        """Whether the layer of ``op`` returns a new float array nothing else holds, on which
        an activation the optimiser plans (``op.plan``) is applied in place."""
        return False

    @classmethod
    def input_product(cls, op: RuntimeOperator) -> str | None:
        """The product (by the name its precision is asked for) whose activations are ``op``'s
        first input, which int8 takes as uint8 in that product's form; None where the layer
        reads its first input otherwise."""
        return None

    @classmethod
    def residual_input(cls, op: RuntimeOperator) -> int | None:
        """The input of ``op`` that the layer's int8 product adds in its epilogue (its
        residual), which it takes as uint8 in any product's input form; None if none."""
        return None

    def batch_flow(self, inputs: Sequence[Batch]) -> Batch | None:
        """What the outputs are to the batch, given what the inputs are (some of them
        ``ROWS``): ``ROWS`` when the layer keeps the samples apart, None when it mixes them.
        Layers that read or make batch sizes (``SIZE``) override it."""
        return Batch.ROWS if self.batch_independent and Batch.SIZE not in inputs else None

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        """Compute the outputs from the inputs (arrays, or Python values such as shapes)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.layer_name!r})"


@dataclass(frozen=True)
class ActivationPlan:
    """The plan of a layer that applies an activation in place on its fresh output
    (nn.Linear, pnnx.Expression)."""

    activation: InplaceActivation | None = None


def requantize_for(options: BuildOptions, name: str | None) -> Requantize | None:
    """The uint8 form the int8 product of the pnnx operator ``name`` takes its input in, where
    a plan hands an output on to it (``quantized_for``); None without one."""
    precision = None if name is None else options.precision_of(name)
    return precision.requantize if isinstance(precision, Int8) else None


def declared_rank(op: RuntimeOperator) -> int:
    """How many dimensions pnnx recorded for the operator's first input (0 if unknown)."""
    return len(op.input_operands_seq[0].shapes) if op.input_operands_seq else 0


def batched(op: RuntimeOperator, spatial: int) -> bool:
    """Whether a convolution's or pooling's input has a batch: pnnx recorded ``spatial + 2``
    dimensions. PyTorch also takes these layers unbatched, and dimension 0 is then the channels."""
    return declared_rank(op) == spatial + 2


def functional(layer: Layer, op: RuntimeOperator, batch_independent: bool) -> Layer:
    """A functional layer (``F.linear``, ``F.conv2d``, ...), whose inputs after the first are
    its weights: every sample reads them whole."""
    layer.batch_independent = batch_independent
    layer.whole_inputs = tuple(range(1, len(op.input_operands_seq)))
    return layer


def keeps_batch(op: RuntimeOperator, dim: int, new_dim: bool = False) -> bool:
    """Whether ``dim`` (negative: from the end of the first input, one further for a
    ``new_dim`` such as stack's) leaves the batch dimension 0 alone: for ``batch_independent``."""
    if dim < 0:
        dim += declared_rank(op) + new_dim
    return dim > 0 and declared_rank(op) >= 2


class NonParamLayer(Layer):
    """A layer without weights (activations, pooling, shape operators)."""


class ParamLayer(Layer):
    """A layer with a weight and an optional bias (convolution, linear, normalisation).

    Subclasses that keep the weights in a prepared form (a packed GEMM matrix, a folded
    scale) override :meth:`pack` and call it at the end of their ``__init__``, once their
    own fields are set; :meth:`set_weights` and :meth:`set_bias` call it again.
    """

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None = None):
        super().__init__(layer_name)
        self._weight = np.ascontiguousarray(weight, dtype=np.float32)
        self._bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)

    def weights(self) -> np.ndarray:
        """The weight, in PyTorch's layout. Layers built from a model read it straight from
        the model file, read-only: :meth:`set_weights` replaces it."""
        return self._weight

    def bias(self) -> np.ndarray | None:
        """The bias, or None for a layer without one."""
        return self._bias

    def set_weights(self, weight: Any) -> None:
        """Replace the weight (same shape; a Tensor or anything array-like) and repack."""
        self._weight = self._checked(np.asarray(weight, dtype=np.float32), self._weight, "weight")
        self.pack()

    def set_bias(self, bias: Any) -> None:
        """Replace the bias (same shape; a Tensor or anything array-like) and repack."""
        if self._bias is None:
            raise WeightError(f"layer {self.layer_name!r} has no bias",
                              status=ParseParameterAttrStatus.kAttrMissingBias)
        self._bias = self._checked(np.asarray(bias, dtype=np.float32), self._bias, "bias")
        self.pack()

    def _checked(self, new: np.ndarray, old: np.ndarray, what: str) -> np.ndarray:
        if new.size == old.size and new.shape != old.shape:
            new = new.reshape(old.shape)
        if new.shape != old.shape:
            raise WeightError(f"layer {self.layer_name!r}: new {what} has shape {new.shape}, "
                              f"expected {old.shape}", status=ParseParameterAttrStatus.kAttrWrongSize)
        return np.ascontiguousarray(new)

    def pack(self) -> None:
        """Derive the forms ``forward`` uses from the weights (none by default)."""
