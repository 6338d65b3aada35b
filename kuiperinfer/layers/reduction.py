"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, topk, std/var, norm,
logsumexp, and the running cumsum/cumprod.

pnnx writes ``dim`` as a tuple (``dim=(1)``), as an int (``torch.prod dim=1``), as
``None`` or not at all when every dimension is reduced; negative dims count from the
end. A reduction over every dimension without keepdim gives a 0-dim array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer, keeps_batch
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

Axes = tuple[int, ...] | None


def _axes(op: RuntimeOperator) -> Axes:
    """The reduced dimensions; None for all of them (``dim`` absent, ``None`` or ``()``)."""
    dims = op.param_ints("dim", status=Status.kParameterMissingDim, default=None)
    return dims or None


def keeps_samples_apart(op: RuntimeOperator, axes: Axes) -> bool:
    """Whether reducing over ``axes`` (None: everything) leaves the batch, dimension 0, alone."""
    return axes is not None and all(keeps_batch(op, axis) for axis in axes)


class ReduceLayer(NonParamLayer):
    """Reduces over ``axes`` (None: all), keeping them as size 1 with ``keepdim``."""

    def __init__(self, layer_name: str, axes: Axes, keepdim: bool):
        super().__init__(layer_name)
        self.axes, self.keepdim = axes, keepdim

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ReduceLayer:
        layer = cls(op.name, _axes(op), op.param_bool("keepdim", default=False))
        layer.batch_independent = keeps_samples_apart(op, layer.axes)
        return layer


# NumPy's accumulating reductions, which take a dtype like PyTorch's ``dtype=``.
_ACCUMULATE: dict[str, Callable[..., Any]] = {"sum": np.sum, "mean": np.mean, "prod": np.prod}
_EXTREME: dict[str, Callable[..., Any]] = {"amax": np.amax, "amin": np.amin}


@register_layer("torch.sum", "torch.mean", "torch.prod", "torch.amax", "torch.amin")
class Reduce(ReduceLayer):
    """sum / mean / prod / amax / amin over ``dim``.

    pnnx drops the ``dtype=`` argument of sum/mean/prod but records the output dtype
    (``torch.mean(x, 1, dtype=torch.float64)`` writes no dtype and a ``f64`` output), so
    the accumulating reductions compute in the declared output dtype. They also give
    PyTorch's int64 for sums of bools and integers.
    """

    def __init__(self, layer_name: str, axes: Axes, keepdim: bool, function: Callable[..., Any],
                 dtype: np.dtype | None):
        super().__init__(layer_name, axes, keepdim)
        self.function, self.dtype = function, dtype

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Reduce:
        name = op.type.rsplit(".", 1)[-1]
        if name in _EXTREME:
            function, dtype = _EXTREME[name], None
        else:
            function = _ACCUMULATE[name]
            dtype = numpy_dtype(op.output_operands[0].type) if op.output_operands else None
        layer = cls(op.name, _axes(op), op.param_bool("keepdim", default=False), function, dtype)
        layer.batch_independent = keeps_samples_apart(op, layer.axes)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        extra = {} if self.dtype is None else {"dtype": self.dtype}
        return [np.asarray(self.function(inputs[0], axis=self.axes, keepdims=self.keepdim, **extra))]


@register_layer("torch.logsumexp")
class LogSumExp(ReduceLayer):
    """log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the maximum, so it
    neither overflows nor underflows; all -inf gives -inf and any +inf gives +inf."""

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        m = np.amax(x, axis=self.axes, keepdims=True)
        m = np.where(np.isfinite(m), m, 0).astype(x.dtype, copy=False)
        with np.errstate(divide="ignore"):
            out = np.log(np.sum(np.exp(x - m), axis=self.axes, keepdims=True)) + m
        if not self.keepdim:
            out = np.squeeze(out, axis=self.axes)
        return [np.asarray(out)]


@register_layer("torch.std", "torch.var")
class Variance(ReduceLayer):
    """Standard deviation or variance with Bessel's ``correction`` (the divisor is N - correction).

    pnnx writes ``unbiased=True/False``, ``unbiased=0`` (from ``correction=0``) or
    ``correction=c``.
    """

    def __init__(self, layer_name: str, axes: Axes, keepdim: bool, correction: float, root: bool):
        super().__init__(layer_name, axes, keepdim)
        self.correction, self.root = correction, root

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Variance:
        if op.has_param("correction"):
            correction = op.param_float("correction", Status.kParameterInvalidValue)
        else:
            correction = float(op.param_int("unbiased", Status.kParameterInvalidValue, default=1))
        layer = cls(op.name, _axes(op), op.param_bool("keepdim", default=False), correction,
                    op.type == "torch.std")
        layer.batch_independent = keeps_samples_apart(op, layer.axes)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        function = np.std if self.root else np.var
        with np.errstate(divide="ignore", invalid="ignore"):
            out = function(inputs[0], axis=self.axes, ddof=self.correction, keepdims=self.keepdim)
        return [np.asarray(out)]


@register_layer("torch.norm")
class Norm(ReduceLayer):
    """The vector p-norm over ``dim`` (all elements when None): (sum |x|^p)^(1/p).

    ``p`` is a number, ``inf``/``-inf`` (max/min of |x|), 0 (count of non-zeros) or
    ``fro`` (the 2-norm of the elements). torch.linalg.vector_norm is written this way too.
    """

    def __init__(self, layer_name: str, axes: Axes, keepdim: bool, p: float):
        super().__init__(layer_name, axes, keepdim)
        self.p = p

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Norm:
        p = 2.0 if op.param_value("p") == "fro" else op.param_number("p", default=2.0)
        if not isinstance(p, (int, float)) or isinstance(p, bool) or math.isnan(p):
            raise op.error(f"unsupported norm p={op.param_value('p')!r}", Status.kParameterInvalidValue)
        layer = cls(op.name, _axes(op), op.param_bool("keepdim", default=False), float(p))
        layer.batch_independent = keeps_samples_apart(op, layer.axes)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x, p = inputs[0], self.p
        reduce = {"axis": self.axes, "keepdims": self.keepdim}
        a = np.abs(x)
        if p == math.inf:
            out = np.amax(a, **reduce)
        elif p == -math.inf:
            out = np.amin(a, **reduce)
        elif p == 0:
            out = np.sum(x != 0, dtype=x.dtype, **reduce)
        elif p == 1:
            out = np.sum(a, **reduce)
        elif p == 2:
            out = np.sqrt(np.sum(a * a, **reduce))
        else:
            out = np.sum(a ** np.asarray(p, dtype=x.dtype), **reduce) ** np.asarray(1 / p, dtype=x.dtype)
        return [np.asarray(out)]


@register_layer("torch.max", "torch.min")
class MaxMin(ReduceLayer):
    """torch.max / torch.min: over everything (one output), or along ``dim`` giving the
    values and their int64 indices (the first occurrence; NaN counts as the extreme).
    pnnx leaves out the indices output when nothing uses it."""

    def __init__(self, layer_name: str, dim: int | None, keepdim: bool, largest: bool, with_indices: bool):
        super().__init__(layer_name, None if dim is None else (dim,), keepdim)
        self.dim, self.largest, self.with_indices = dim, largest, with_indices

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> MaxMin:
        dim = op.param_int("dim", Status.kParameterMissingDim, default=None)
        layer = cls(op.name, dim, op.param_bool("keepdim", default=False), op.type == "torch.max",
                    dim is not None and len(op.output_operands) > 1)
        layer.batch_independent = keeps_samples_apart(op, layer.axes)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if self.dim is None:
            return [np.asarray(np.amax(x) if self.largest else np.amin(x))]
        arg = np.argmax if self.largest else np.argmin
        indices = arg(x, axis=self.dim, keepdims=True)
        values = np.take_along_axis(x, indices, axis=self.dim)
        if not self.keepdim:
            values, indices = np.squeeze(values, self.dim), np.squeeze(indices, self.dim)
        if not self.with_indices:
            return [values]
        return [values, indices.astype(np.int64, copy=False)]


@register_layer("torch.argmax", "torch.argmin")
class ArgMaxMin(ReduceLayer):
    """The int64 index of the first maximum/minimum along ``dim``, or in the flattened
    input when dim is None (with keepdim, every dimension is kept as size 1)."""

    def __init__(self, layer_name: str, dim: int | None, keepdim: bool, largest: bool):
        super().__init__(layer_name, None if dim is None else (dim,), keepdim)
        self.dim, self.largest = dim, largest

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ArgMaxMin:
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim, default=None),
                    op.param_bool("keepdim", default=False), op.type == "torch.argmax")
        layer.batch_independent = keeps_samples_apart(op, layer.axes)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        arg = np.argmax if self.largest else np.argmin
        return [np.asarray(arg(inputs[0], axis=self.dim, keepdims=self.keepdim), dtype=np.int64)]


@register_layer("torch.topk")
class TopK(NonParamLayer):
    """The ``k`` largest (or smallest) values along ``dim`` and their int64 indices.

    Values come out sorted, best first (also for ``sorted=False``, whose order PyTorch
    leaves unspecified). NaN counts as larger than any number, as in PyTorch. Of equal
    values (NaNs included) the earlier comes first; PyTorch leaves that order unspecified.
    """

    def __init__(self, layer_name: str, k: int, dim: int, largest: bool):
        super().__init__(layer_name)
        self.k, self.dim, self.largest = k, dim, largest

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> TopK:
        k = op.param_int("k", Status.kParameterInvalidValue)
        if k < 0:
            raise op.error(f"k must not be negative, got {k}", Status.kParameterInvalidValue)
        layer = cls(op.name, k, op.param_int("dim", Status.kParameterMissingDim, default=-1),
                    op.param_bool("largest", default=True))
        layer.batch_independent = keeps_batch(op, layer.dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if self.largest:
            # Descending, NaN first, ties in input order: sort the reversed input stably
            # (ascending, NaN last), reverse that order and map positions back.
            n = x.shape[self.dim]
            order = n - 1 - np.flip(np.argsort(np.flip(x, self.dim), axis=self.dim, kind="stable"), self.dim)
        else:
            order = np.argsort(x, axis=self.dim, kind="stable")
        indices = np.take(order, np.arange(self.k), axis=self.dim)
        return [np.take_along_axis(x, indices, axis=self.dim), indices.astype(np.int64, copy=False)]


@register_layer("torch.cumsum", "torch.cumprod")
class Cumulative(NonParamLayer):
    """Running sum or product along ``dim``, in the output dtype pnnx recorded (int64 for
    bool and integer inputs, as in PyTorch)."""

    def __init__(self, layer_name: str, dim: int, function: Callable[..., np.ndarray], dtype: np.dtype | None):
        super().__init__(layer_name)
        self.dim, self.function, self.dtype = dim, function, dtype

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Cumulative:
        function = np.cumsum if op.type == "torch.cumsum" else np.cumprod
        dtype = numpy_dtype(op.output_operands[0].type) if op.output_operands else None
        layer = cls(op.name, op.param_int("dim", Status.kParameterMissingDim), function, dtype)
        layer.batch_independent = keeps_batch(op, layer.dim)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [self.function(inputs[0], axis=self.dim, dtype=self.dtype)]
