"""F.pad: constant, reflect, replicate and circular padding; negative amounts crop.

pnnx writes a padding function, and a padding module called at the top level, as F.pad:

    F.pad  F.pad_0  1 1 0 1 mode=constant pad=(1,2,3,4) value=0.0

where ``pad`` lists (before, after) amounts from the last dimension backwards and
``value`` is None unless the model gave one. A padding module held by a model keeps
its own type, its mode in the name and its amounts as ``padding`` (an int pads every side):

    nn.ZeroPad2d  _conv_stem.static_padding  1 1 0 1 padding=(0,1,0,1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.padding import pad_last_dims
from kuiperinfer.layers.base import NonParamLayer, declared_rank
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

_MODES = ("constant", "reflect", "replicate", "circular")
_MODULE_MODES = {"Zero": "constant", "Constant": "constant", "Reflection": "reflect",
                 "Replication": "replicate", "Circular": "circular"}
_MODULES = [f"nn.{kind}Pad{rank}d" for kind in _MODULE_MODES for rank in (1, 2, 3)]


@register_layer("F.pad", *_MODULES)
class Pad(NonParamLayer):
    """Pad (or crop) the trailing dimensions of the input."""

    def __init__(self, layer_name: str, pads: tuple[tuple[int, int], ...], mode: str, value: float):
        super().__init__(layer_name)
        self.pads, self.mode, self.value = pads, mode, value

    @staticmethod
    def read_params(op: RuntimeOperator) -> tuple[tuple[tuple[int, int], ...], str, float]:
        """``op``'s (before, after) amounts in dimension order, its mode and its value, checked."""
        if op.type == "F.pad":
            amounts = op.param_ints("pad", status=Status.kParameterMissingPadding)
            mode = op.param_str("mode", Status.kParameterMissingPadding, default="constant")
        else:
            kind, rank = op.type[3:].split("Pad")
            amounts = op.param_ints("padding", 2 * int(rank[0]), Status.kParameterMissingPadding)
            mode = _MODULE_MODES[kind]
        if mode not in _MODES:
            raise op.error(f"unsupported mode {mode!r}, expected one of {_MODES}", Status.kParameterInvalidValue)
        if len(amounts) % 2:
            raise op.error(f"pad {amounts} must have an even number of values", Status.kParameterMissingPadding)
        if op.input_operands_seq and len(amounts) > 2 * len(op.input_operands_seq[0].shapes):
            raise op.error(f"pad {amounts} pads more dimensions than the input's "
                           f"{len(op.input_operands_seq[0].shapes)}", Status.kParameterMissingPadding)
        # (last dim before, last dim after, second-last before, ...) -> pairs in dimension order
        pairs = tuple(zip(amounts[0::2], amounts[1::2]))[::-1]
        return pairs, mode, op.param_float("value", Status.kParameterInvalidValue, default=0.0)

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Pad:
        layer = cls(op.name, *cls.read_params(op))
        layer.batch_independent = len(layer.pads) < declared_rank(op)  # dimension 0 is not padded
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if self.mode in ("reflect", "circular"):
            # PyTorch pads at most size - 1 by reflection and size by wrapping (numpy would repeat)
            room = 1 if self.mode == "reflect" else 0
            sizes = x.shape[x.ndim - len(self.pads):]
            if any(max(pair) > size - room for pair, size in zip(self.pads, sizes)):
                raise InferError(f"{self.mode} padding {self.pads} does not fit input of shape {x.shape}",
                                 status=InferStatus.kInferFailedOutputSizeError)
        return [pad_last_dims(x, self.pads, self.mode, self.value)]
