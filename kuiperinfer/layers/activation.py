"""Elementwise activations: each a pure function of one array, made once per operator.

pnnx writes most activations as ``F.<name>`` (it rewrites ``torch.x`` and ``Tensor.x``
to the functional form) and as ``nn.<Name>`` when the model holds the module. The
parameters are PyTorch's keyword arguments; pnnx writes whole numbers as ints
(``F.softplus beta=1 threshold=20``, ``F.hardtanh max_val=1 min_val=-1``), which
``param_float`` accepts. The stable formulas live in :mod:`kuiperinfer.kernels.elementwise`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels import elementwise
from kuiperinfer.kernels.compiled.activation import ActivationCode
from kuiperinfer.kernels.compiled.epilogue import activate
from kuiperinfer.layers.base import NonParamLayer, ParamLayer, declared_rank, functional, keeps_batch
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

EXACT = ("relu", "clip", "leaky_relu", "hardsigmoid", "hardswish")
"""The activations the compiled pass computes as PyTorch does for every input."""
ROW_ZEROS = np.zeros(1024, np.float32)
"""The zero bias of :func:`~kuiperinfer.kernels.compiled.epilogue.activate`'s rows."""


class ActivationLayer(NonParamLayer):
    """Applies ``function`` to its single input. Subclasses supply :meth:`function`."""

    batch_independent = True

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ActivationLayer:
        return cls(op.name)

    def function(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [self.function(inputs[0])]


class InplaceActivationLayer(ActivationLayer):
    """An activation with an in-place kernel, which the graph optimiser can fuse into the
    layer producing its input. With the compiled kernels a float32 array goes through one
    compiled pass (:func:`~kuiperinfer.kernels.compiled.epilogue.activate`, the epilogues'
    code); else it computes :meth:`inplace` on a copy of the input (:meth:`reference`)."""

    code: ActivationCode | None = None
    """The activation's code for the compiled pass, for those it computes exactly (the
    piecewise-linear ones; sigmoid and SiLU use an approximation of tanh there that is not
    PyTorch's at extreme values); None: the NumPy reference."""

    def inplace(self) -> elementwise.InplaceActivation:
        raise NotImplementedError

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> InplaceActivationLayer:
        layer = cls.read(op)
        activation = layer.inplace()
        if options.compiled and activation.name in EXACT:
            layer.code = ActivationCode.of(activation)
        return layer

    @classmethod
    def read(cls, op: RuntimeOperator) -> InplaceActivationLayer:
        """The layer of ``op`` as its parameters say (raises LayerCreateError)."""
        return cls(op.name)

    @classmethod
    def activation_of(cls, op: RuntimeOperator) -> elementwise.InplaceActivation:
        """The in-place activation ``op`` computes, from its parameters (raises LayerCreateError)."""
        return cls.read(op).inplace()

    def function(self, x: np.ndarray) -> np.ndarray:
        if self.code is not None and type(x) is np.ndarray and x.dtype == np.float32 and x.ndim \
                and x.flags.c_contiguous:
            out = np.empty_like(x)
            activate(x.reshape(-1), out.reshape(-1), ROW_ZEROS, *self.code)
            return out
        return self.reference(x)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return self.inplace()(x.astype(np.result_type(x, np.float32)))


@register_layer("nn.ReLU", "F.relu", "torch.relu", "Tensor.relu", "F.relu_", "torch.relu_")
class ReLU(InplaceActivationLayer):
    def inplace(self) -> elementwise.InplaceActivation:
        return elementwise.InplaceActivation("relu")


@register_layer("nn.Sigmoid", "F.sigmoid", "torch.sigmoid", "Tensor.sigmoid")
class Sigmoid(InplaceActivationLayer):
    def inplace(self) -> elementwise.InplaceActivation:
        return elementwise.InplaceActivation("sigmoid")

    def reference(self, x: np.ndarray) -> np.ndarray:
        return elementwise.sigmoid(x)   # its first pass makes the copy


@register_layer("nn.Tanh", "F.tanh", "torch.tanh", "Tensor.tanh")
class Tanh(ActivationLayer):
    def function(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(x)


@register_layer("nn.Hardtanh", "F.hardtanh")
class Hardtanh(InplaceActivationLayer):
    """Clamps to [min_val, max_val]."""

    def __init__(self, layer_name: str, min_val: float = -1.0, max_val: float = 1.0):
        super().__init__(layer_name)
        self.min_val, self.max_val = min_val, max_val

    @classmethod
    def read(cls, op: RuntimeOperator) -> Hardtanh:
        min_val = op.param_float("min_val", default=-1.0)
        max_val = op.param_float("max_val", default=1.0)
        if min_val > max_val:
            raise op.error(f"min_val {min_val} is greater than max_val {max_val}", Status.kParameterInvalidValue)
        return cls(op.name, min_val, max_val)

    def inplace(self) -> elementwise.InplaceActivation:
        return elementwise.InplaceActivation("clip", (self.min_val, self.max_val))


@register_layer("nn.ReLU6", "F.relu6")
class ReLU6(Hardtanh):
    """Hardtanh with fixed bounds 0 and 6."""

    @classmethod
    def read(cls, op: RuntimeOperator) -> ReLU6:
        return cls(op.name, 0.0, 6.0)


@register_layer("nn.LeakyReLU", "F.leaky_relu")
class LeakyReLU(InplaceActivationLayer):
    """x where x > 0, negative_slope * x elsewhere (pnnx also writes nn.PReLU() with one
    parameter this way)."""

    def __init__(self, layer_name: str, negative_slope: float = 0.01):
        super().__init__(layer_name)
        self.negative_slope = negative_slope

    @classmethod
    def read(cls, op: RuntimeOperator) -> LeakyReLU:
        return cls(op.name, op.param_float("negative_slope", default=0.01))

    def inplace(self) -> elementwise.InplaceActivation:
        return elementwise.InplaceActivation("leaky_relu", (self.negative_slope,))


@register_layer("nn.RReLU", "F.rrelu")
class RReLU(LeakyReLU):
    """Randomized leaky ReLU; at inference its slope is the mean of lower and upper."""

    @classmethod
    def read(cls, op: RuntimeOperator) -> RReLU:
        lower = op.param_float("lower", default=1.0 / 8)
        upper = op.param_float("upper", default=1.0 / 3)
        return cls(op.name, (lower + upper) / 2)


def prelu(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x where x > 0, weight * x elsewhere; ``weight`` has one value or one per channel (dim 1)."""
    if weight.size != 1:
        if x.ndim < 2 or x.shape[1] != weight.size:
            raise InferError(f"PReLU weight has {weight.size} values, the input of shape {x.shape} "
                             f"needs one or one per channel (dim 1)",
                             status=InferStatus.kInferFailedChannelParameterError)
        weight = weight.reshape((-1,) + (1,) * (x.ndim - 2))
    return np.where(x > 0, x, x * weight)


@register_layer("nn.PReLU")
class PReLU(ParamLayer):
    """PReLU with its learned ``@weight`` (num_parameters values: 1 or one per channel)."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> PReLU:
        count = op.param_int("num_parameters", default=1)
        return cls(op.name, op.weight("weight", (count,)))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [prelu(inputs[0], self._weight)]


@register_layer("F.prelu", "torch.prelu")
class FunctionalPReLU(NonParamLayer):
    """F.prelu(input, weight) with the weight as the second input."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FunctionalPReLU:
        if len(op.input_operands_seq) != 2:
            raise op.error(f"{op.type} needs the input and the weight as inputs", Status.kAttrMissingWeight)
        return functional(cls(op.name), op, declared_rank(op) >= 1)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [prelu(inputs[0], np.asarray(inputs[1]))]


@register_layer("nn.ELU", "F.elu")
class ELU(ActivationLayer):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""

    def __init__(self, layer_name: str, alpha: float = 1.0):
        super().__init__(layer_name)
        self.alpha = alpha

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ELU:
        return cls(op.name, op.param_float("alpha", default=1.0))

    def function(self, x: np.ndarray) -> np.ndarray:
        return elementwise.elu(x, self.alpha)


@register_layer("nn.SELU", "F.selu", "torch.selu")
class SELU(ActivationLayer):
    """scale * ELU(x, alpha) with the fixed constants of self-normalising networks."""

    ALPHA = 1.6732632423543772848170429916717
    SCALE = 1.0507009873554804934193349852946

    def function(self, x: np.ndarray) -> np.ndarray:
        y = elementwise.elu(x, self.ALPHA)
        y *= self.SCALE
        return y


@register_layer("nn.CELU", "F.celu", "torch.celu")
class CELU(ActivationLayer):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) = alpha * ELU(x / alpha, 1)."""

    def __init__(self, layer_name: str, alpha: float = 1.0):
        super().__init__(layer_name)
        self.alpha = alpha

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> CELU:
        alpha = op.param_float("alpha", default=1.0)
        if alpha == 0:
            raise op.error("alpha cannot be 0 for CELU", Status.kParameterInvalidValue)
        return cls(op.name, alpha)

    def function(self, x: np.ndarray) -> np.ndarray:
        return np.where(x > 0, x, self.alpha * np.expm1(np.minimum(x, 0) / self.alpha))


@register_layer("nn.GELU", "F.gelu")
class GELU(ActivationLayer):
    """x * Phi(x); ``approximate`` is "none" (exact, with erf) or "tanh".

    Not an :class:`InplaceActivationLayer`: only the producers whose compiled kernels
    finish rows with :func:`~kuiperinfer.kernels.compiled.activation.finish_row` take it,
    which the optimiser asks with :meth:`activation_of` (nn.Linear, the feed-forward
    layer of a transformer)."""


    def __init__(self, layer_name: str, approximate: str = "none", compiled: bool = False):
        super().__init__(layer_name)
        self.approximate = approximate
        self.compiled = compiled
        self._kernel = elementwise.gelu_tanh if approximate == "tanh" else elementwise.gelu
        self._code = ActivationCode.of(self.inplace())

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> GELU:
        approximate = op.param_str("approximate", default="none")
        if approximate not in ("none", "tanh"):
            raise op.error(f"approximate must be 'none' or 'tanh', not {approximate!r}",
                           Status.kParameterInvalidValue)
        return cls(op.name, approximate, options.compiled)

    def inplace(self) -> elementwise.InplaceActivation:
        return elementwise.InplaceActivation("gelu_tanh" if self.approximate == "tanh" else "gelu")

    @classmethod
    def activation_of(cls, op: RuntimeOperator) -> elementwise.InplaceActivation:
        """The in-place activation ``op`` computes, from its parameters (raises LayerCreateError)."""
        return cls.create(op, BuildOptions()).inplace()

    def function(self, x: np.ndarray) -> np.ndarray:
        if not self.compiled or x.ndim == 0 or x.dtype != np.float32:
            return self._kernel(x)
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        activate(x.reshape(-1), out.reshape(-1), ROW_ZEROS, *self._code)
        return out


@register_layer("nn.SiLU", "F.silu")
class SiLU(InplaceActivationLayer):
    """x * sigmoid(x) (also called swish)."""

    def inplace(self) -> elementwise.InplaceActivation:
        return elementwise.InplaceActivation("silu")


@register_layer("nn.Mish", "F.mish")
class Mish(ActivationLayer):
    """x * tanh(softplus(x))."""

    def function(self, x: np.ndarray) -> np.ndarray:
        y = np.tanh(elementwise.softplus(x))
        y *= x
        return y


@register_layer("nn.Hardsigmoid", "F.hardsigmoid")
class Hardsigmoid(InplaceActivationLayer):
    """relu6(x + 3) / 6."""

    def inplace(self) -> elementwise.InplaceActivation:
        return elementwise.InplaceActivation("hardsigmoid")


@register_layer("nn.Hardswish", "F.hardswish")
class Hardswish(InplaceActivationLayer):
    """x * relu6(x + 3) / 6."""

    def inplace(self) -> elementwise.InplaceActivation:
        return elementwise.InplaceActivation("hardswish")


@register_layer("nn.Softplus", "F.softplus")
class Softplus(ActivationLayer):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""

    def __init__(self, layer_name: str, beta: float = 1.0, threshold: float = 20.0):
        super().__init__(layer_name)
        self.beta, self.threshold = beta, threshold

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Softplus:
        beta = op.param_float("beta", default=1.0)
        if beta == 0:
            raise op.error("beta cannot be 0 for Softplus", Status.kParameterInvalidValue)
        return cls(op.name, beta, op.param_float("threshold", default=20.0))

    def function(self, x: np.ndarray) -> np.ndarray:
        scaled = x * self.beta
        return np.where(scaled > self.threshold, x, elementwise.softplus(scaled) / self.beta)


@register_layer("nn.Softsign", "F.softsign")
class Softsign(ActivationLayer):
    """x / (1 + |x|)."""

    def function(self, x: np.ndarray) -> np.ndarray:
        return x / (np.abs(x) + 1)


@register_layer("nn.LogSigmoid", "F.logsigmoid")
class LogSigmoid(ActivationLayer):
    def function(self, x: np.ndarray) -> np.ndarray:
        return elementwise.log_sigmoid(x)


@register_layer("nn.Threshold", "F.threshold", "torch.threshold")
class Threshold(ActivationLayer):
    """``value`` where x <= threshold, x elsewhere (NaN stays NaN, as in PyTorch)."""

    def __init__(self, layer_name: str, threshold: float, value: float):
        super().__init__(layer_name)
        self.threshold, self.value = threshold, value

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Threshold:
        return cls(op.name, op.param_float("threshold"), op.param_float("value"))

    def function(self, x: np.ndarray) -> np.ndarray:
        return np.where(x <= self.threshold, np.float32(self.value), x)


class ShrinkLayer(ActivationLayer):
    """A shrink activation with threshold ``lambd``."""

    def __init__(self, layer_name: str, lambd: float = 0.5):
        super().__init__(layer_name)
        self.lambd = lambd

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ShrinkLayer:
        lambd = op.param_float("lambd", default=0.5)
        if lambd < 0:
            raise op.error(f"lambd {lambd} must not be negative", Status.kParameterInvalidValue)
        return cls(op.name, lambd)


@register_layer("nn.Hardshrink", "F.hardshrink")
class Hardshrink(ShrinkLayer):
    """0 where |x| <= lambd, x elsewhere."""

    def function(self, x: np.ndarray) -> np.ndarray:
        return np.where(np.abs(x) <= self.lambd, np.float32(0), x)


@register_layer("nn.Softshrink", "F.softshrink")
class Softshrink(ShrinkLayer):
    """x moved towards 0 by lambd, and 0 within [-lambd, lambd]."""

    def function(self, x: np.ndarray) -> np.ndarray:
        return x - np.clip(x, -self.lambd, self.lambd)


@register_layer("nn.Tanhshrink", "F.tanhshrink")
class Tanhshrink(ActivationLayer):
    """x - tanh(x)."""

    def function(self, x: np.ndarray) -> np.ndarray:
        return x - np.tanh(x)


@register_layer("nn.GLU", "F.glu")
class GLU(ActivationLayer):
    """Gated linear unit: the first half of ``dim`` times the sigmoid of the second half."""

    def __init__(self, layer_name: str, dim: int = -1):
        super().__init__(layer_name)
        self.dim = dim

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> GLU:
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim, default=-1))
        layer.batch_independent = keeps_batch(op, layer.dim)
        return layer

    def function(self, x: np.ndarray) -> np.ndarray:
        if x.shape[self.dim] % 2:
            raise InferError(f"GLU halves dimension {self.dim} of input {x.shape}, which must be even",
                             status=InferStatus.kInferFailedDimensionParameterError)
        a, b = np.split(x, 2, axis=self.dim)
        y = elementwise.sigmoid(b)
        y *= a
        return y
