"""Attention: F.scaled_dot_product_attention, nn.MultiheadAttention and ``kuiper.Attention``.

All reduce to one kernel, :func:`attention`: ``softmax(q k^T * scale + mask) v`` over
the last two dimensions, with every leading (batch, head) dimension handled by one
batched matmul, or its compiled twin (:mod:`kuiperinfer.kernels.compiled.attention`) for
(batch, heads, rows, depth) operands. Masks are turned into an additive float mask first
(0 to keep a score, -inf to block it); the two PyTorch operators read bool masks the
opposite way round. ``kuiper.Attention`` is what the optimiser makes of the products,
scaling, mask and softmax pnnx writes for hand-written attention (timm's, BERT's).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.compiled import attention as compiled_attention
from kuiperinfer.kernels.matrix.precision import FP32, Precision
from kuiperinfer.kernels.matrix.products import FMA256, FMA512, ProductEpilogue, fp32_kernel
from kuiperinfer.layers.base import Layer, NonParamLayer, declared_rank
from kuiperinfer.layers.linear import linear
from kuiperinfer.layers.softmax import softmax
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

NEG_INF = np.float32(-np.inf)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
              scale: float, safe: bool) -> tuple[np.ndarray, np.ndarray]:
    """Scaled dot-product attention of q (..., L, E), k (..., S, E), v (..., S, Ev).

    ``mask`` is an additive float mask broadcastable to (..., L, S). A query whose
    keys are all blocked gets all-zero weights when ``safe`` (PyTorch's SDPA kernels)
    and NaN otherwise (MultiheadAttention when it returns its weights).
    Returns the output (..., L, Ev) and the weights (..., L, S).
    """
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    if scale != 1.0:
        scores *= np.float32(scale)
    if mask is not None:
        scores = scores + mask
    weights = softmax(scores, -1)
    if safe and mask is not None:
        blocked = np.isneginf(scores).all(axis=-1, keepdims=True)
        if blocked.any():
            weights = np.where(blocked, np.float32(0), weights)
    return np.matmul(weights, v), weights


def attention_compiles(options: BuildOptions) -> bool:
    """Whether attention runs compiled here: compiled kernels asked for, on a CPU whose float32
    products take FMA tiles (the compiled attention's, the 256-bit ones, need AVX2 and FMA)."""
    return options.compiled and fp32_kernel() in (FMA512, FMA256)


def fast_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, scale: float,
                   safe: bool, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`attention`'s output through the compiled kernel where q, k and v are float32
    (batch, heads, rows, depth) arrays of one batch and head count (views with a contiguous
    last dimension will do), else through :func:`attention`. ``out`` (batch, heads, queries,
    value depth), a view if need be, receives the output when given."""
    if (q.ndim == k.ndim == v.ndim == 4 and q.shape[:2] == k.shape[:2] == v.shape[:2]
            and k.shape[2] == v.shape[2] and q.shape[3] == k.shape[3]
            and all(x.dtype == np.float32 and x.strides[-1] == 4 for x in (q, k, v))
            and (mask is None or mask.ndim <= 4)):
        if out is None:
            out = np.empty((*q.shape[:3], v.shape[3]), np.float32)
        compiled_attention.attention(q, k, v, out, None if mask is None else compiled_attention.Mask.of(mask),
                                     scale, safe)
        return out
    result = attention(q, k, v, mask, scale, safe)[0]
    if out is not None:
        out[...] = result
        return out
    return result


def additive_mask(mask: np.ndarray, true_keeps: bool) -> np.ndarray:
    """A float mask to add to the scores: a bool mask becomes 0 (kept) / -inf (blocked).

    ``true_keeps``: True marks the positions that take part (SDPA), or, when False,
    the ones that are blocked (MultiheadAttention).
    """
    if mask.dtype == np.bool_:
        return np.where(mask != true_keeps, NEG_INF, np.float32(0))
    return mask.astype(np.float32, copy=False)


def causal_mask(target: int, source: int) -> np.ndarray:
    """The additive mask letting query i see keys 0..i (aligned top-left, as PyTorch)."""
    return np.triu(np.full((target, source), NEG_INF), 1)


@register_layer("F.scaled_dot_product_attention")
class ScaledDotProductAttention(NonParamLayer):
    """F.scaled_dot_product_attention(query, key, value, attn_mask, is_causal, scale, enable_gqa).

    ``dropout_p`` is ignored: at inference nothing is dropped.
    """


    def __init__(self, layer_name: str, is_causal: bool, scale: float | None, enable_gqa: bool,
                 compiled: bool = False):
        super().__init__(layer_name)
        self.is_causal, self.scale, self.enable_gqa = is_causal, scale, enable_gqa
        self.compiled = compiled

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ScaledDotProductAttention:
        if len(op.input_operands_seq) not in (3, 4):
            raise op.error(f"expected query, key, value and an optional attn_mask, got "
                           f"{len(op.input_operands_seq)} inputs", Status.kParameterInvalidValue)
        scale = op.param_float("scale", default=None)
        if scale is not None and scale <= 0:
            raise op.error(f"scale must be positive, got {scale}", Status.kParameterMissingScale)
        layer = cls(op.name, op.param_bool("is_causal", default=False), scale,
                    op.param_bool("enable_gqa", default=False), attention_compiles(options))
        layer.batch_independent = declared_rank(op) >= 3   # (N, ..., L, E): the batch is not a sequence
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        q, k, v = inputs[:3]
        mask = additive_mask(inputs[3], true_keeps=True) if len(inputs) > 3 else None
        if self.is_causal:
            causal = causal_mask(q.shape[-2], k.shape[-2])
            mask = causal if mask is None else mask + causal
        if self.enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
            if q.shape[-3] % k.shape[-3]:
                raise InferError(f"enable_gqa: {q.shape[-3]} query heads are not a multiple of "
                                 f"{k.shape[-3]} key heads", status=InferStatus.kInferFailedChannelParameterError)
            groups = q.shape[-3] // k.shape[-3]
            k, v = np.repeat(k, groups, axis=-3), np.repeat(v, groups, axis=-3)
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(q.shape[-1])
        if self.compiled:
            return [fast_attention(q, k, v, mask, scale, safe=True)]
        return [attention(q, k, v, mask, scale, safe=True)[0]]


@dataclass(frozen=True)
class Projection:
    """One GEMM over one input of MultiheadAttention, giving the q, k and/or v it feeds."""

    source: int
    """Index of the input among query/key/value inputs."""
    roles: str
    """Which of "q", "k", "v" the columns hold, in order."""
    multiply: Callable[[np.ndarray], np.ndarray]
    """The product (:func:`weight_product`) of (..., in_features) to (..., len(roles) * embed_dim)."""


def weight_product(weight: np.ndarray, bias: np.ndarray | None, precision: Precision,
                   reference: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``x @ weight.T + bias`` over the last dimension of ``x`` in ``precision``: float32
    products of the transposed weight packed once, or the product of a reduced precision."""
    product = precision.product(weight.T, ProductEpilogue(bias), reference)
    if product is None:
        weight_t = np.ascontiguousarray(weight.T)
        return lambda x: linear(x, weight_t, bias)
    return lambda x: product(x.reshape(-1, x.shape[-1])).reshape(*x.shape[:-1], product.out_features)


@register_layer("nn.MultiheadAttention")
class MultiheadAttention(Layer):
    """nn.MultiheadAttention: projections, attention per head, output projection.

    The projection weights are packed at build time into one GEMM per distinct input
    (self-attention projects q, k and v with a single (E, 3E) matrix), in the operator's
    precision; attention scales the scores by 1/sqrt(head_dim).

    What pnnx writes, and how it is read:

    * Inputs: query only (self-attention), query and key=value, or query, key,
      value; pnnx merges repeated inputs, so ``m(x, x, y)`` is written like ``m(x, y, y)``.
    * One mask input at most. A mask that is a model constant or a bool tensor is put
      *first* by pnnx, unnamed or with ``$attn_mask`` on the wrong operand: a first
      input that is bool, or whose recorded shape is not the output's (the output has
      the query's shape), is taken as the mask.
    * pnnx writes ``key_padding_mask`` as ``$attn_mask`` too; a mask shaped (N, S)
      rather than (L, S) (or (S,) for unbatched inputs) is read as the key padding mask.
    * With ``need_weights=True`` pnnx writes a second output, the attention weights,
      averaged over the heads unless the recorded output has a head dimension.
    """

    compiled = False
    """Whether attention without its weights goes through the compiled kernel."""
    precision = FP32
    """What the projections compute (the attention between them stays fp32)."""

    def __init__(self, layer_name: str, num_heads: int, batch_first: bool,
                 projections: tuple[Projection, ...], out_projection: Callable[[np.ndarray], np.ndarray],
                 bias_kv: tuple[np.ndarray, np.ndarray] | None, add_zero_attn: bool,
                 mask_at: int | None, key_padding: bool, need_weights: bool, average_weights: bool):
        super().__init__(layer_name)
        self.num_heads, self.batch_first = num_heads, batch_first
        self.projections, self.out_projection = projections, out_projection
        self.bias_kv, self.add_zero_attn = bias_kv, add_zero_attn
        self.mask_at, self.key_padding = mask_at, key_padding
        self.need_weights, self.average_weights = need_weights, average_weights

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> MultiheadAttention:
        embed = op.param_int("embed_dim", Status.kParameterMissingInChannel)
        heads = op.param_int("num_heads", Status.kParameterMissingGroups)
        if heads < 1 or embed % heads:
            raise op.error(f"embed_dim {embed} is not divisible by num_heads {heads}", Status.kParameterInvalidValue)
        kdim, vdim = op.param_int("kdim", default=embed), op.param_int("vdim", default=embed)
        use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("in_proj_bias"))

        precision, reference = options.precision_of(op.name), not options.compiled
        if op.has_weight("in_proj_weight"):
            wq, wk, wv = np.split(op.weight("in_proj_weight", (3 * embed, embed)), 3)
        else:
            wq, wk, wv = (op.weight(f"{role}_proj_weight", (embed, dim))
                          for role, dim in (("q", embed), ("k", kdim), ("v", vdim)))
        biases = (np.split(op.weight("in_proj_bias", (3 * embed,), Status.kAttrMissingBias), 3)
                  if use_bias else [None, None, None])
        weights = {"q": (wq, biases[0]), "k": (wk, biases[1]), "v": (wv, biases[2])}

        out_bias = op.weight("out_proj.bias", (embed,), Status.kAttrMissingBias) if use_bias else None
        out_projection = weight_product(op.weight("out_proj.weight", (embed, embed)), out_bias, precision, reference)
        bias_kv = None
        if op.param_bool("add_bias_kv", default=op.has_weight("bias_k")):
            bias_kv = (op.weight("bias_k", (1, 1, embed)), op.weight("bias_v", (1, 1, embed)))

        mask_at = _mask_position(op)
        sources = [i for i in range(len(op.input_operands_seq)) if i != mask_at]
        if not 1 <= len(sources) <= 3:
            raise op.error(f"expected query, key and value inputs, got {len(sources)}", Status.kParameterInvalidValue)
        roles = {1: ("qkv",), 2: ("q", "kv"), 3: ("q", "k", "v")}[len(sources)]
        projections = tuple(_pack(source, role, weights, precision, reference) for source, role in enumerate(roles))

        batch_first = op.param_bool("batch_first", default=False)
        query_shape = op.input_operands_seq[sources[0]].shapes
        key_padding = mask_at is not None and _is_key_padding(op.input_operands_seq[mask_at].shapes,
                                                              query_shape, batch_first)
        need_weights = len(op.output_operands) == 2
        average = not (need_weights and len(op.output_operands[1].shapes) == len(query_shape) + 1)
        layer = cls(op.name, heads, batch_first, projections, out_projection, bias_kv,
                    op.param_bool("add_zero_attn", default=False), mask_at, key_padding, need_weights, average)
        layer.compiled, layer.precision = attention_compiles(options), precision
        # batch-first (N, L, E) sequences with no mask or a key padding mask (N, S): each sample
        # alone; an attention mask of (N * heads, L, S) would mix the batch with the heads
        layer.batch_independent = batch_first and len(query_shape) == 3 and (mask_at is None or key_padding)
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        sources = [x for i, x in enumerate(inputs) if i != self.mask_at]
        batched = sources[0].ndim == 3
        if sources[0].ndim not in (2, 3) or any(x.ndim != sources[0].ndim for x in sources):
            raise InferError(f"query, key and value must all be (L, E) or all batched, got shapes "
                             f"{[x.shape for x in sources]}", status=InferStatus.kInferFailedDimensionParameterError)
        sources = [self._to_batch_first(x, batched) for x in sources]
        projected: dict[str, np.ndarray] = {}
        for p in self.projections:
            projected.update(zip(p.roles, np.split(p.multiply(sources[p.source]), len(p.roles), axis=-1)))
        q, k, v = projected["q"], projected["k"], projected["v"]
        n, embed = q.shape[0], q.shape[-1]
        if self.bias_kv is not None:
            k, v = (np.concatenate([x, np.broadcast_to(b, (n, 1, embed))], axis=1)
                    for x, b in zip((k, v), self.bias_kv))
        q, k, v = (self._split_heads(x) for x in (q, k, v))
        if self.add_zero_attn:
            k, v = (np.concatenate([x, np.zeros((*x.shape[:2], 1, x.shape[3]), x.dtype)], axis=2)
                    for x in (k, v))
        mask = None
        if self.mask_at is not None:
            mask = self._mask(inputs[self.mask_at], n, q.shape[2], k.shape[2])
        scale = 1.0 / math.sqrt(embed // self.num_heads)
        if self.compiled and not self.need_weights:
            out, weights = fast_attention(q, k, v, mask, scale, safe=True), None
        else:
            out, weights = attention(q, k, v, mask, scale, safe=not self.need_weights)
        out = self.out_projection(out.transpose(0, 2, 1, 3).reshape(n, -1, embed))
        if not batched:
            out = out[0]
        elif not self.batch_first:
            out = out.swapaxes(0, 1)
        outputs = [out]
        if self.need_weights:
            if self.average_weights:
                weights = weights.mean(axis=1)
            outputs.append(weights if batched else weights[0])
        return outputs

    def _to_batch_first(self, x: np.ndarray, batched: bool) -> np.ndarray:
        """(N, L, E) from (L, E), (L, N, E) or (N, L, E)."""
        if not batched:
            return x[None]
        return x if self.batch_first else x.swapaxes(0, 1)

    def _split_heads(self, x: np.ndarray) -> np.ndarray:
        """(N, L, E) -> (N, heads, L, E / heads)."""
        n, length, embed = x.shape
        return x.reshape(n, length, self.num_heads, embed // self.num_heads).transpose(0, 2, 1, 3)

    def _mask(self, mask: np.ndarray, n: int, target: int, source: int) -> np.ndarray:
        """The mask input as an additive mask broadcastable to (N, heads, L, S).

        bias_k/bias_v and the zero attention add key columns at the end that every
        query may see: the mask gets zero columns for them.
        """
        mask = additive_mask(mask, true_keeps=False)
        if self.key_padding:
            mask = mask.reshape(-1, 1, 1, mask.shape[-1])
        elif mask.ndim == 3 and mask.shape[0] == n * self.num_heads:
            mask = mask.reshape(n, self.num_heads, *mask.shape[1:])
        added = (self.bias_kv is not None) + self.add_zero_attn
        expected = (n, self.num_heads, target, source - added)
        if (mask.ndim not in (2, 4) or mask.shape[-1] != expected[-1]
                or any(m not in (1, e) for m, e in zip(mask.shape[::-1], expected[::-1]))):
            raise InferError(f"attention mask of shape {mask.shape} does not fit batch {n}, {target} queries "
                             f"and {source - added} keys", status=InferStatus.kInferFailedDimensionParameterError)
        return np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, added)]) if added else mask


def _pack(source: int, roles: str, weights: dict[str, tuple[np.ndarray, np.ndarray | None]], precision: Precision,
          reference: bool) -> Projection:
    """The Projection of input ``source`` computing ``roles`` (for example "kv") in one GEMM."""
    biases = [weights[r][1] for r in roles]
    bias = None if biases[0] is None else np.concatenate(biases)
    return Projection(source, roles, weight_product(np.concatenate([weights[r][0] for r in roles]), bias, precision,
                                                    reference))


def _mask_position(op: RuntimeOperator) -> int | None:
    """Which input of a MultiheadAttention operator is the mask (see the class docstring)."""
    operands = op.input_operands_seq
    first, output = operands[0], tuple(op.output_operands[0].shapes)
    if len(operands) > 1 and (numpy_dtype(first.type) == np.bool_
                              or (first.shapes and output and tuple(first.shapes) != output)):
        return 0
    return op.input_index("attn_mask")


def _is_key_padding(mask_shape: Sequence[int], query_shape: Sequence[int], batch_first: bool) -> bool:
    """Whether a mask of ``mask_shape`` is a key_padding_mask ((N, S), or (S,) unbatched)."""
    if not mask_shape or not query_shape:
        return False
    if len(query_shape) == 2:
        return len(mask_shape) == 1
    target = query_shape[1] if batch_first else query_shape[0]
    return len(mask_shape) == 2 and target >= 0 and mask_shape[0] != target


@dataclass(frozen=True)
class AttentionPlan:
    """The plan of a ``kuiper.Attention`` operator: ``softmax(q k^T * scale + mask) v`` as
    pnnx writes it (torch.matmul with a transposed key, a scaling expression, an optional
    additive mask, F.softmax over the keys, torch.matmul with the values), in one operator
    reading q, k (not transposed), v and the mask, in that order, or ``packed``: one input
    holding them all."""

    TYPE: ClassVar[str] = "kuiper.Attention"
    scale: float = 1.0
    masked: bool = False
    """Whether the last input is an additive mask (broadcast to (batch, heads, queries, keys))."""
    packed: tuple[int, int] | None = None
    """(heads, head_dim) when the first input is a linear layer's (N, L, 3 * heads * head_dim)
    output holding q, k and v (timm's reshape, permute and unbind, absorbed)."""
    merge_heads: bool = False
    """Whether the output is (N, L, heads * value_dim), the heads side by side (the transpose
    and reshape after the product, absorbed), instead of (N, heads, L, value_dim)."""


@register_layer(AttentionPlan.TYPE)
class FusedAttention(Layer):
    """``softmax(q k^T * scale + mask) v`` that the optimiser fused (:class:`AttentionPlan`):
    inputs q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev) and the mask, or the packed
    (N, L, 3 * H * E) projection and the mask; output (N, H, L, Ev) or (N, L, H * Ev).
    F.softmax over a row of -inf only gives NaN, and so does this."""

    plan_class = AttentionPlan

    def __init__(self, layer_name: str, plan: AttentionPlan, compiled: bool = False):
        super().__init__(layer_name)
        self.plan, self.compiled = plan, compiled
        self.batch_independent = True   # the batch is dimension 0 of every input and of the output

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FusedAttention:
        if not isinstance(op.plan, AttentionPlan):
            raise op.error("kuiper.Attention is made by the optimiser and needs its plan",
                           Status.kParameterInvalidValue)
        return cls(op.name, op.plan, attention_compiles(options))

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        plan = self.plan
        mask = inputs[-1] if plan.masked else None
        if plan.packed is not None:
            heads, depth = plan.packed
            x = inputs[0]
            if x.ndim != 3 or x.shape[2] != 3 * heads * depth:
                raise InferError(f"packed q, k and v of shape {x.shape}, expected (N, L, {3 * heads * depth})",
                                 status=InferStatus.kInferFailedDimensionParameterError)
            packed = np.ascontiguousarray(x, np.float32).reshape(x.shape[0], x.shape[1], 3, heads, depth)
            q, k, v = (packed[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        else:
            q, k, v = inputs[:3]
        out = None
        if plan.merge_heads:
            if q.ndim != 4:
                raise InferError(f"attention with its heads side by side needs 4-d operands, got {q.shape}",
                                 status=InferStatus.kInferFailedDimensionParameterError)
            n, h, length, _ = q.shape
            merged = np.empty((n, length, h, v.shape[3]), np.float32)
            out = merged.transpose(0, 2, 1, 3)
        if self.compiled:
            y = fast_attention(q, k, v, mask, plan.scale, safe=False, out=out)
        else:
            y = attention(q, k, v, mask, plan.scale, safe=False)[0]
            if out is not None:
                out[...] = y
        if plan.merge_heads:
            return [merged.reshape(n, length, -1)]
        return [y]
