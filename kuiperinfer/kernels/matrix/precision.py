"""Precisions: what the products of a graph compute, chosen by the user when loading.

* ``fp32``, the default: every product in float32, as PyTorch computes it.
* ``bf16``: the products of the layers that hold weights (convolutions but depthwise ones,
  linear layers, nn.MultiheadAttention's projections) take their inputs, activations and
  weights, rounded to bfloat16 (:func:`~kuiperinfer.kernels.matrix.bf16.round_bf16`) and
  accumulate in float32, as OpenVINO's bf16 mode and PyTorch's autocast multiply. The rest
  stays float32: depthwise convolutions, products of two activations (torch.matmul,
  attention's scores and weighted sums), normalisations, activations and the additions
  between layers. The numbers are the same on every machine; a CPU that multiplies bf16
  (AMX, AVX512-BF16) is where it can be fast. Until kuiperinfer's kernels use those
  instructions, the inputs are rounded and multiplied in float32, slower than ``fp32``: it
  previews bf16's accuracy.
* ``int8``: products of uint8 activations and int8 weights, which need the activations'
  ranges from calibration; not available yet.

A :class:`Precision` is chosen once per graph (:func:`precision`), and every layer that
multiplies takes its weights (:meth:`Precision.weight`, at build time) and its activations
(:meth:`Precision.activations`, per call) through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuiperinfer.errors import KuiperError
from kuiperinfer.kernels.matrix.bf16 import round_bf16
from kuiperinfer.kernels.matrix.features import MatrixFeatures, detect

PRECISIONS = ("fp32", "bf16", "int8")


@dataclass(frozen=True)
class Precision:
    """What a graph's products compute (:attr:`name`) and how this machine computes it
    (:attr:`products`)."""

    name: str = "fp32"
    products: str = "float32 products"

    @property
    def rounds(self) -> bool:
        """Whether product inputs are rounded to bfloat16."""
        return self.name == "bf16"

    def weight(self, weight: np.ndarray) -> np.ndarray:
        """A product's weight in this precision (at build time)."""
        return round_bf16(weight) if self.rounds else weight

    def activations(self, x: np.ndarray) -> np.ndarray:
        """A product's activations in this precision (per call; ``x`` itself for fp32)."""
        return round_bf16(x) if self.rounds and x.dtype == np.float32 else x


FP32 = Precision()


def precision(name: str, features: MatrixFeatures | None = None) -> Precision:
    """The precision ``name`` on a machine with ``features`` (this one's by default)."""
    if name not in PRECISIONS:
        raise KuiperError(f"precision must be one of {PRECISIONS}, got {name!r}")
    if name == "int8":
        raise KuiperError("precision 'int8' is not available yet: it needs the activations' ranges from "
                          "calibration; use 'fp32' or 'bf16'")
    if name == "fp32":
        return FP32
    hardware = (features or detect()).bf16_products
    if hardware is None:
        how = ("bf16 inputs multiplied in float32: this CPU has no bf16 products (neither AMX nor AVX512-BF16), "
               "so bf16 previews its accuracy and runs slower than fp32")
    else:
        how = (f"bf16 inputs multiplied in float32: this CPU multiplies bf16 ({hardware}), which kuiperinfer's "
               f"kernels do not use yet, so bf16 runs slower than fp32")
    return Precision(name, how)
