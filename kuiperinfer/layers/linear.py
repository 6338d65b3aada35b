"""nn.Linear and F.linear on any number of leading dimensions, as one GEMM.

With its compiled kernels, nn.Linear computes into a fresh array in parts that the
engine's threads share (:mod:`~kuiperinfer.kernels.parallel`), each part's bias and fused
activation applied while it is in cache: blocks of rows, or for few rows (a sentence of
tokens, a batch of feature vectors) blocks of output features. A product of few rows
takes the time of reading its weight from memory, so it is computed transposed,
``W x^T``: each thread then reads whole rows of the (out, in) weight as the model stores
them, once, where ``x W^T`` has BLAS copy the weight into its own layout first. A single
row is a matrix-vector product, which reads the weight once either way and fastest in one
thread. Where the load has the matrix engine's float32 tiles
(:meth:`~kuiperinfer.kernels.matrix.precision.Precision.float_product`), the product is
theirs instead, its weight packed once and the epilogue in its tiles, for any number of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.compiled.activation import ActivationCode
from kuiperinfer.kernels.compiled.epilogue import finish_rows, finish_transposed
from kuiperinfer.kernels.elementwise import InplaceActivation
from kuiperinfer.kernels.matrix.precision import FP32, Precision
from kuiperinfer.kernels.matrix.products import ProductCall, ProductEpilogue, Requantize
from kuiperinfer.kernels.parallel import run_parts, threads_for
from kuiperinfer.layers.base import ActivationPlan, Layer, ParamLayer, declared_rank, functional, requantize_for
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


def check_features(x: np.ndarray, in_features: int) -> None:
    """Raise InferError unless the last dimension of ``x`` is ``in_features`` long."""
    if x.shape[-1:] != (in_features,):
        raise InferError(f"input of shape {x.shape} does not end in in_features={in_features}",
                         status=InferStatus.kInferFailedDimensionParameterError)


def linear(x: np.ndarray, weight_t: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``x @ weight_t + bias`` over the last dimension of ``x``; ``weight_t`` is (in, out)."""
    in_features = weight_t.shape[0]
    check_features(x, in_features)
    y = np.matmul(x.reshape(-1, in_features), weight_t)
    if bias is not None:
        y += bias
    return y.reshape(*x.shape[:-1], weight_t.shape[1])


FEW_ROWS = 100
"""Rows up to which a product of two rows or more is computed transposed, its output features shared among the
threads, and judged for sharing by its weight: as if it had FEW_ROWS rows, since its time is
the weight's reading rather than its multiply-adds."""
PARTS_PER_THREAD = 1
"""Parts a shared product is cut into per thread: one, since each part costs a hand-off and a
smaller product (ViT-Tiny at batch 1 on two threads: 22.7, 24.7, 27.0 ms with 1, 2, 3 parts
per thread; docs/performance.md)."""


def column_parts(columns: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` runs of columns, each a multiple of 16 long (whole vectors) but the last."""
    bounds = sorted({min(columns, -(-columns * i // parts // 16) * 16) for i in range(parts + 1)})
    return list(zip(bounds, bounds[1:]))


@dataclass(frozen=True)
class LinearPlan(ActivationPlan):
    """The plan of an nn.Linear: an activation applied in place on its output, and in int8
    the product it hands its output on to."""

    quantized_for: str | None = None
    """As :attr:`ConvolutionPlan.quantized_for <kuiperinfer.layers.convolution.ConvolutionPlan.quantized_for>`."""


@register_layer("nn.Linear")
class Linear(ParamLayer):
    """y = x W^T + b over the last dimension; W^T is packed once, contiguous (in bf16 and
    int8, the product of the precision, :attr:`product`)."""

    plan_class = LinearPlan

    def __init__(self, layer_name: str, weight: np.ndarray, bias: np.ndarray | None = None,
                 activation: InplaceActivation | None = None, compiled: bool = False, precision: Precision = FP32,
                 requantize: Requantize | None = None):
        super().__init__(layer_name, weight, bias)
        self.products = (layer_name,)
        self.precision = precision
        """What the product computes."""
        self.requantize = requantize
        """In int8, the form its output is handed on in (uint8), where the plan says so."""
        self.activation = activation
        """An activation the graph optimiser fused in, applied in place on the output."""
        self.compiled = compiled
        """Whether the bias and activation follow the product in one compiled pass."""
        self.pack()

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Linear:
        out_features = op.param_int("out_features", Status.kAttrMissingOutFeatures)
        in_features = op.param_int("in_features", Status.kParameterMissingInChannel)
        weight = op.weight("weight", (out_features, in_features), copy=False)
        use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("bias"))
        bias = op.weight("bias", (out_features,), Status.kAttrMissingBias) if use_bias else None
        plan = op.plan or LinearPlan()
        layer = cls(op.name, weight, bias, plan.activation, options.compiled, options.precision_of(op.name),
                    requantize_for(options, getattr(plan, "quantized_for", None)))
        layer.batch_independent = declared_rank(op) >= 2
        return layer

    @classmethod
    def takes_activation(cls, op: RuntimeOperator) -> bool:
        return True

    @classmethod
    def input_product(cls, op: RuntimeOperator) -> str | None:
        return op.name

    def pack(self) -> None:
        self._bound: dict[tuple[object, ...], ProductCall] = {}
        """The product's bound call on the compiled tiles for each shape, strides and type of
        C-contiguous input, made on the first call."""
        epilogue = ProductEpilogue(self._bias, self.activation, requantize=self.requantize)
        self.product = self.precision.product(self._weight.T, epilogue, not self.compiled)
        if self.product is None and self.compiled:
            self.product = self.precision.float_product(self._weight.T, epilogue)
        """The matrix engine's product: a reduced precision's, or fp32's on the float32 tiles
        where this load has them (None: fp32 through BLAS, below)."""
        if self.product is not None:
            self._compute = self._engine_product
            return
        self._matrix = self._weight
        self._weight_t = np.require(self._matrix.T, np.float32, "CA")
        # a writable copy: a read-only array (the model file's) would be another specialisation
        out_features = self._weight.shape[0]
        self._bias_row = np.zeros(out_features, np.float32) if self._bias is None else np.array(self._bias, np.float32)
        self._code = ActivationCode.of(self.activation)
        self._compute = self._compiled_product if self.compiled else self._reference_product
        """The kernel, chosen once: compiled epilogues or the NumPy reference."""

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        bound = self._bound.get((x.shape, x.strides, x.dtype))
        return [self._compute(x) if bound is None else bound(x)]

    def _engine_product(self, x: np.ndarray) -> np.ndarray:
        in_features = self.product.in_features
        check_features(x, in_features)
        out = self.product(x.reshape(-1, in_features)).reshape(*x.shape[:-1], self.product.out_features)
        if (self.product.kernel.dot is not None and x.ndim >= 1 and x.flags.c_contiguous and x.flags.writeable
                and x.dtype in (np.float32, self.product.in_dtype)):
            self._bound[x.shape, x.strides, x.dtype] = self.product.call(x.shape, x.dtype)
        return out

    def _reference_product(self, x: np.ndarray) -> np.ndarray:
        y = linear(x, self._weight_t, self._bias)
        return y if self.activation is None else self.activation(y)

    def _compiled_product(self, x: np.ndarray) -> np.ndarray:
        """Rows in blocks shared among the threads, the bias and activation fused in; a few
        rows as ``W x^T`` (:meth:`_few_rows`)."""
        in_features, out_features = self._weight_t.shape
        check_features(x, in_features)
        rows = x.reshape(-1, in_features)
        y = np.empty((rows.shape[0], out_features), np.float32)
        if 1 < len(rows) <= FEW_ROWS:
            self._few_rows(rows, y)
            return y.reshape(*x.shape[:-1], out_features)
        work = rows.size * out_features
        threads = threads_for(work)
        step = -(-len(rows) // (threads * PARTS_PER_THREAD)) if threads > 1 else max(1, len(rows))

        def block(start: int) -> None:
            np.matmul(rows[start:start + step], self._weight_t, out=y[start:start + step])
            finish_rows(y[start:start + step], self._bias_row, *self._code)
        run_parts(range(0, len(rows), step), work, block)
        return y.reshape(*x.shape[:-1], out_features)

    def _few_rows(self, rows: np.ndarray, y: np.ndarray) -> None:
        """``y = activation(rows W^T + b)`` computed as ``W rows^T``, blocks of output features
        shared among the threads."""
        weight = self._matrix
        rows_t = np.ascontiguousarray(rows.T)
        y_t = np.empty((weight.shape[0], len(rows)), np.float32)
        work = FEW_ROWS * weight.size
        threads = threads_for(work)

        def features(part: tuple[int, int]) -> None:
            np.matmul(weight[part[0]:part[1]], rows_t, out=y_t[part[0]:part[1]])
            finish_transposed(y_t, y, self._bias_row, part[0], part[1], *self._code)
        parts = column_parts(weight.shape[0], threads * PARTS_PER_THREAD) if threads > 1 else [(0, weight.shape[0])]
        run_parts(parts, work, features)


@register_layer("F.linear")
class FunctionalLinear(Layer):
    """F.linear whose weight (out, in) and optional bias arrive as inputs at run time.

    (pnnx turns F.linear on a module's own parameters into nn.Linear.)
    """

    precision = FP32
    """What the product computes."""
    compiled = False
    """Whether a reduced precision's product runs this machine's kernel (else NumPy's)."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FunctionalLinear:
        if len(op.input_operands_seq) not in (2, 3):
            raise op.error(f"F.linear needs the input, the weight and an optional bias as inputs, got "
                           f"{len(op.input_operands_seq)}", Status.kAttrMissingWeight)
        layer = cls(op.name)
        layer.precision, layer.compiled = options.precision_of(op.name), options.compiled
        return functional(layer, op, declared_rank(op) >= 2)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, weight = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        if weight.ndim != 2:
            raise InferError(f"F.linear weight has shape {weight.shape}, expected (out_features, in_features)",
                             status=InferStatus.kInferFailedWeightParameterError)
        product = self.precision.product(np.asarray(weight, np.float32).T, ProductEpilogue(bias), not self.compiled)
        if product is None:
            return [linear(x, weight.T, bias)]
        check_features(x, product.in_features)
        return [product(x.reshape(-1, product.in_features)).reshape(*x.shape[:-1], product.out_features)]
