"""Matrix products: torch.matmul/mm/bmm/mv, torch.addmm/baddbmm and torch.einsum; and
F.pairwise_distance.

pnnx writes ``a @ b``, ``Tensor.matmul`` and ``torch.linalg.matmul`` as torch.matmul,
and ``Tensor.mm``/``Tensor.bmm``/``Tensor.addmm`` as their torch.* forms. All of them
are one ``np.matmul``: NumPy follows the same rules as PyTorch for 1-D operands
(a vector is promoted to a matrix and the added dimension removed again) and for
broadcasting the leading batch dimensions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer, declared_rank
from kuiperinfer.layers.reduction import Norm
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with PyTorch's rank rules, an InferError naming both shapes on a mismatch."""
    if a.ndim == 0 or b.ndim == 0:
        raise InferError(f"matmul needs operands of at least one dimension, got {a.shape} and {b.shape}",
                         status=InferStatus.kInferFailedDimensionParameterError)
    inner = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if a.shape[-1] != inner:
        raise InferError(f"cannot multiply shapes {a.shape} and {b.shape}: inner sizes "
                         f"{a.shape[-1]} and {inner} differ",
                         status=InferStatus.kInferFailedDimensionParameterError)
    try:
        return np.asarray(np.matmul(a, b))  # asarray: vector @ vector is a 0-d array, not a scalar
    except ValueError:
        raise InferError(f"batch dimensions of {a.shape} and {b.shape} do not broadcast",
                         status=InferStatus.kInferFailedDimensionParameterError) from None


@register_layer("torch.matmul", "torch.mm", "torch.bmm", "torch.mv")
class MatMul(NonParamLayer):
    """The matrix product of two inputs (``$input`` and ``$other``/``$mat2``/``$vec``)."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> MatMul:
        if len(op.input_operands_seq) != 2:
            raise op.error(f"expected 2 inputs, got {len(op.input_operands_seq)}", Status.kParameterInvalidValue)
        return cls(op.name)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return [matmul(inputs[0], inputs[1])]


@register_layer("torch.addmm", "torch.baddbmm")
class AddMatMul(NonParamLayer):
    """``beta * input + alpha * (mat1 @ mat2)``; with beta = 0 the input is ignored (as PyTorch)."""

    def __init__(self, layer_name: str, alpha: float, beta: float):
        super().__init__(layer_name)
        self.alpha, self.beta = alpha, beta

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> AddMatMul:
        if len(op.input_operands_seq) != 3:
            raise op.error(f"expected 3 inputs (input, mat1, mat2), got {len(op.input_operands_seq)}",
                           Status.kParameterInvalidValue)
        return cls(op.name, op.param_float("alpha", default=1.0), op.param_float("beta", default=1.0))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        added, mat1, mat2 = inputs
        out = matmul(mat1, mat2)
        if self.alpha != 1.0:
            out *= np.float32(self.alpha)
        if self.beta != 0.0:
            out += added if self.beta == 1.0 else np.float32(self.beta) * added
        return [out]


@register_layer("torch.einsum")
class Einsum(NonParamLayer):
    """torch.einsum on the equation pnnx wrote (letters renamed to i, j, k, ...).

    pnnx drops ``...`` from equations with an ``->`` (``...ij,...jk->...ik`` becomes
    ``ik,kj->ij``); :func:`restore_ellipsis` puts it back from the recorded shapes.
    """

    def __init__(self, layer_name: str, equation: str):
        super().__init__(layer_name)
        self.equation = equation

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Einsum:
        equation = op.param_str("equation", Status.kParameterMissingExpr).replace(" ", "")
        terms = equation.partition("->")[0].split(",")
        if len(terms) != len(op.input_operands_seq):
            raise op.error(f"equation {equation!r} has {len(terms)} operands, the operator has "
                           f"{len(op.input_operands_seq)} inputs", Status.kParameterInvalidValue)
        shapes = [tuple(o.shapes) for o in op.input_operands_seq]
        output = tuple(op.output_operands[0].shapes) if op.output_operands else ()
        restored = restore_ellipsis(equation, shapes, output)
        if restored is None:
            raise op.error(f"equation {equation!r} does not fit the input shapes {shapes} and output "
                           f"shape {output} (pnnx drops '...' from einsum equations; no placement of "
                           f"it fits)", Status.kParameterInvalidValue)
        return cls(op.name, restored)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        try:
            out = np.einsum(self.equation, *inputs, optimize=len(inputs) > 1)
        except ValueError as exc:
            shapes = ", ".join(str(x.shape) for x in inputs)
            raise InferError(f"einsum {self.equation!r} on shapes {shapes}: {exc}",
                             status=InferStatus.kInferFailedDimensionParameterError) from None
        return [np.asarray(out)]


def restore_ellipsis(equation: str, shapes: Sequence[tuple[int, ...]],
                     output: tuple[int, ...]) -> str | None:
    """``equation`` with ``...`` put back where pnnx dropped it, or None if nothing fits.

    An input term with fewer letters than its operand has dimensions lost an
    ellipsis, and so did an output with fewer letters than the recorded output.
    Every placement is tried, leading first (the usual ``...ij`` form), and the
    first one that agrees with all recorded shapes is taken. Equations that already
    fit, keep their ``...``, or whose shapes pnnx did not fully record are returned
    unchanged.
    """
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    recorded = all(shapes) and output and min(min(s) for s in (*shapes, output)) >= 0
    if not arrow or "..." in equation or not recorded:
        return equation

    def placements(term: str, rank: int) -> list[str]:
        if rank <= len(term):
            return [term]
        return [term[:i] + "..." + term[i:] for i in range(len(term) + 1)]

    options = [placements(t, len(s)) for t, s in zip(terms, shapes)] + [placements(rhs, len(output))]
    if all(len(o) == 1 for o in options):
        return equation
    for *candidate_terms, candidate_rhs in itertools.product(*options):
        if _einsum_shape(candidate_terms, candidate_rhs, shapes) == output:
            return ",".join(candidate_terms) + "->" + candidate_rhs
    return None


def _einsum_shape(terms: Sequence[str], rhs: str, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The output shape of the einsum ``terms->rhs`` on operands of ``shapes``, or None if they disagree."""
    sizes: dict[str, int] = {}
    batch: tuple[int, ...] = ()
    for term, shape in zip(terms, shapes):
        letters = term.replace("...", "")
        extra = len(shape) - len(letters)
        if extra < 0 or (extra > 0 and "..." not in term):
            return None
        at = term.find("...") if "..." in term else len(letters)
        for letter, size in zip(letters, shape[:at] + shape[at + extra:]):
            if sizes.setdefault(letter, size) != size:
                return None
        try:
            batch = np.broadcast_shapes(batch, shape[at:at + extra])
        except ValueError:
            return None
    head, ellipsis, tail = rhs.partition("...")
    if any(letter not in sizes for letter in head + tail):
        return None
    return (tuple(sizes[c] for c in head) + (batch if ellipsis else ())
            + tuple(sizes[c] for c in tail))


@register_layer("F.pairwise_distance")
class PairwiseDistance(NonParamLayer):
    """``||x1 - x2 + eps||_p`` over the last dimension, the inputs broadcast against each
    other (as PyTorch, ``eps`` is added to the difference, keeping the norm away from 0).
    ``p`` may be any number, ``inf``/``-inf`` or 0 (the count of non-zeros)."""

    def __init__(self, layer_name: str, p: float, eps: float, keepdim: bool):
        super().__init__(layer_name)
        self.eps = eps
        self.norm = Norm(layer_name, (-1,), keepdim, p)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> PairwiseDistance:
        if len(op.input_operands_seq) != 2:
            raise op.error(f"expected 2 inputs (x1, x2), got {len(op.input_operands_seq)}",
                           Status.kParameterInvalidValue)
        p = op.param_number("p", default=2.0)
        eps = op.param_number("eps", default=1e-6)
        for name, value in (("p", p), ("eps", eps)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
                raise op.error(f"{name} must be a number, not {op.param_value(name)!r}", Status.kParameterInvalidValue)
        layer = cls(op.name, float(p), float(eps), op.param_bool("keepdim", default=False))
        layer.batch_independent = min(len(o.shapes) for o in op.input_operands_seq) >= 2 and declared_rank(op) >= 2
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x1, x2 = inputs
        try:
            difference = np.subtract(x1, x2)
        except ValueError:
            raise InferError(f"shapes {x1.shape} and {x2.shape} do not broadcast",
                             status=InferStatus.kInferFailedDimensionParameterError) from None
        if difference.ndim == 0:
            raise InferError("pairwise_distance needs inputs of at least one dimension",
                             status=InferStatus.kInferFailedDimensionParameterError)
        difference += np.asarray(self.eps, difference.dtype)
        return self.norm.forward([difference])
