"""PyTorch's quantized operators, refused on purpose.

pnnx exports a model quantized with ``torch.ao.quantization`` as ``nn.quantized.*``
modules, ``torch.quantize_per_tensor``/``torch.dequantize`` and friends, whose weights
are int8 with per-tensor or per-channel scales. kuiperinfer quantizes a float model itself
(``precision="int8"`` with a calibration table from ``kuiper quantize``), but it does not
read PyTorch's quantized operators: running them would mean emulating PyTorch's integer
kernels and their rounding. So each of these types is registered, with a layer that
refuses to be built: the model fails to load, and ``kuiper check`` lists every such
operator, with the reason below, instead of an "unknown operator". The way out is to
export the float model, before ``torch.ao.quantization.convert``, and load it with
``precision="int8"``.
"""

from __future__ import annotations

from typing import ClassVar

from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

QUANTIZED_REASON = ("PyTorch's quantized operators are not supported: export the float model (before "
                    "torch.ao.quantization.convert) and load it with precision='int8' and a calibration table "
                    "from `kuiper quantize`")


@register_layer("nn.quantized.Conv2d", "nn.quantized.Linear", "nn.quantized.Quantize", "nn.quantized.DeQuantize",
                "nn.quantized.cat", "nn.intrinsic.quantized.ConvReLU2d", "nn.intrinsic.quantized.LinearReLU",
                "torch.quantize_per_tensor", "torch.dequantize")
class Quantized(NonParamLayer):
    """Refuses to be built (see the module's docstring)."""

    refused: ClassVar[str] = QUANTIZED_REASON
    """Why the type is refused: the operator table (docs/operators.md) shows it."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Quantized:
        raise op.error(f"{op.type}: {QUANTIZED_REASON}", Status.kParameterInvalidValue)
