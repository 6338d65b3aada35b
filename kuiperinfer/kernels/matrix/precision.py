"""Precisions: what the products of a graph compute, chosen by the user when loading.

The products a precision changes are those of the layers that hold weights: convolutions
(but depthwise ones), transposed convolutions, linear layers (and, for ``bf16``,
nn.MultiheadAttention's projections). Everything else stays float32: depthwise
convolutions, products of two activations (torch.matmul, attention's scores and weighted
sums), normalisations, activations, the additions between layers, the biases.

* ``fp32``, the default: every product in float32, as PyTorch computes it.
* ``bf16``: the products take their inputs, activations and weights, rounded to bfloat16
  (:func:`~kuiperinfer.kernels.matrix.bf16.round_bf16`) and accumulate in float32, as
  OpenVINO's bf16 mode and PyTorch's autocast multiply.
* ``int8``: the products take uint8 activations (one scale and zero point per operator,
  from a calibration table) and int8 weights (one scale per output channel, symmetric),
  as onnxruntime's static quantization with per-channel weights does
  (:mod:`~kuiperinfer.kernels.matrix.int8`); an operator the table leaves out stays fp32.

The numbers are the same on every machine; a CPU that multiplies bf16 (AMX, AVX512-BF16) or
int8 (AMX-INT8, VNNI) is where a reduced precision can be fast. Until kuiperinfer's kernels
use those instructions, the inputs are rounded (or quantized and dequantized) and multiplied
in float32, slower than ``fp32``: it previews the precision's accuracy.

Each operator holds a :class:`Precision` (the graph's, or an :class:`Int8` of its own
calibrated range), which its layer asks for its weights when it is built
(:meth:`Precision.weight`) and for its activations on every call
(:meth:`Precision.activations`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuiperinfer.errors import KuiperError
from kuiperinfer.kernels.matrix import int8
from kuiperinfer.kernels.matrix.bf16 import round_bf16
from kuiperinfer.kernels.matrix.features import MatrixFeatures, detect

PRECISIONS = ("fp32", "bf16", "int8")


@dataclass(frozen=True)
class Precision:
    """What a graph's products compute (:attr:`name`) and how this machine computes it
    (:attr:`products`); this base class is ``fp32``, which leaves the arrays as they are."""

    name: str = "fp32"
    products: str = "float32 products"

    def weight(self, weight: np.ndarray, axis: int = 0) -> np.ndarray:
        """A product's weight in this precision, at build time (``axis``: its output channels)."""
        return weight

    def activations(self, x: np.ndarray) -> np.ndarray:
        """A product's activations in this precision, on every call."""
        return x


@dataclass(frozen=True)
class BFloat16(Precision):
    """``bf16``: inputs rounded to bfloat16, float32 accumulation."""

    name: str = "bf16"

    def weight(self, weight: np.ndarray, axis: int = 0) -> np.ndarray:
        return round_bf16(weight)

    def activations(self, x: np.ndarray) -> np.ndarray:
        return round_bf16(x) if x.dtype == np.float32 else x


@dataclass(frozen=True)
class Int8(Precision):
    """``int8`` for one operator: activations quantized to uint8 with ``scale`` and
    ``zero_point``, weights to int8 with a symmetric scale per output channel."""

    name: str = "int8"
    scale: float = 1.0
    zero_point: int = 0

    def weight(self, weight: np.ndarray, axis: int = 0) -> np.ndarray:
        return int8.dequantize_weight(*int8.quantize_weight(weight, axis), axis)

    def activations(self, x: np.ndarray) -> np.ndarray:
        if x.dtype != np.float32:
            return x
        return int8.dequantize(int8.quantize(x, self.scale, self.zero_point), self.scale, self.zero_point)


FP32 = Precision()


def precision(name: str, features: MatrixFeatures | None = None) -> Precision:
    """The graph-wide precision ``name`` on a machine with ``features`` (this one's by
    default). For ``int8``, the operators take an :class:`Int8` each from the calibration."""
    if name not in PRECISIONS:
        raise KuiperError(f"precision must be one of {PRECISIONS}, got {name!r}")
    if name == "fp32":
        return FP32
    found = features or detect()
    hardware = found.bf16_products if name == "bf16" else ("AMX-INT8" if found.amx_int8 else
                                                           "VNNI" if found.vnni else None)
    what = "bf16 inputs" if name == "bf16" else "int8 activations and weights, dequantized,"
    if hardware is None:
        wanting = "neither AMX nor AVX512-BF16" if name == "bf16" else "neither AMX-INT8 nor VNNI"
        how = (f"{what} multiplied in float32: this CPU has no {name} products ({wanting}), so {name} "
               f"previews its accuracy and runs slower than fp32")
    else:
        how = (f"{what} multiplied in float32: this CPU multiplies {name} ({hardware}), which kuiperinfer's "
               f"kernels do not use yet, so {name} runs slower than fp32")
    return BFloat16(products=how) if name == "bf16" else Precision("int8", how)
