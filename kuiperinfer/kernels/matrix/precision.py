"""Precisions: what the products of a graph compute, chosen by the user when loading.

The products a precision changes are those of the layers that hold weights: convolutions
(but depthwise ones), transposed convolutions, linear layers (and, for ``bf16``,
nn.MultiheadAttention's projections). Everything else stays float32: depthwise
convolutions, products of two activations (torch.matmul, attention's scores and weighted
sums), normalisations, activations, the additions between layers, the biases.

* ``fp32``, the default: every product in float32, as PyTorch computes it; where the CPU has
  FMA (AVX-512, or AVX2 and FMA), the products of linear layers and of the convolutions
  computed as im2col or 1x1 products on the matrix engine's float32 tiles
  (:meth:`Precision.float_product`), which are measured faster there than BLAS, the others
  (Winograd, depthwise, direct) through their own kernels and BLAS (NumPy's matmul).
* ``bf16``: the products take their inputs, activations and weights, rounded to bfloat16
  (:func:`~kuiperinfer.kernels.matrix.bf16.round_bf16`) and accumulate in float32, as
  OpenVINO's bf16 mode and PyTorch's autocast multiply.
* ``int8``: the products take uint8 activations (one scale and zero point per operator,
  from a calibration table) and int8 weights (one scale per output channel, symmetric),
  as onnxruntime's static quantization with per-channel weights does
  (:mod:`~kuiperinfer.kernels.matrix.int8`), and sum them exactly, as integers; an
  operator the table leaves out stays fp32.

The numbers are the same on every machine; the CPU decides which kernel computes them
(:mod:`~kuiperinfer.kernels.matrix.products`: AMX, AVX512-VNNI or AVX2 for int8, AMX or
AVX512-BF16 for bf16, NumPy elsewhere). Each operator holds a :class:`Precision` (the graph's, or an
:class:`Int8` of its own calibrated range), which its layer asks for each product when it
is built (:meth:`Precision.product`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuiperinfer.errors import KuiperError
from kuiperinfer.kernels.matrix.features import MatrixFeatures, detect
from kuiperinfer.kernels.matrix.products import (
    AMX_BF16,
    AMX_INT8,
    AVX2,
    AVX512_BF16,
    BF16_WIDENED,
    NO_EPILOGUE,
    REFERENCE,
    VNNI,
    Bf16Product,
    Fp32Product,
    Int8Product,
    Product,
    ProductEpilogue,
    ProductKernel,
    Requantize,
    bf16_kernel,
    fp32_kernel,
    int8_kernel,
)

PRECISIONS = ("fp32", "bf16", "int8")


@dataclass(frozen=True)
class Precision:
    """What a graph's products compute (:attr:`name`) and how this machine computes it
    (:attr:`products`); this base class is ``fp32``, whose layers multiply in float32."""

    name: str = "fp32"
    products: str = "float32 products"
    float_tiles: ProductKernel | None = None
    """fp32's kernel for the products it computes on the float32 tiles, chosen once per load
    (:func:`precision`); None: all through BLAS."""

    def product(self, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE, reference: bool = False,
                scales: np.ndarray | None = None) -> Product | None:
        """The product of activations (M, K) by the float32 ``weight`` (K, N) in this
        precision, then ``epilogue``, made once when a layer is built: on this machine's
        kernel, or the NumPy ``reference``. ``scales``, int8's weight scale of each column
        where columns share their output channel's (a transposed convolution's taps):
        :func:`~kuiperinfer.kernels.matrix.int8.weight_scales`. None for fp32."""
        return None

    def float_product(self, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE) -> Fp32Product | None:
        """fp32's product of float32 activations (M, K) by ``weight`` (K, N) on the float32
        tiles, made once when a layer is built, for a layer whose products the tiles are
        measured faster on; None where this load has no tiles (the layer's BLAS path)."""
        return None if self.float_tiles is None else Fp32Product(weight, epilogue, self.float_tiles)


@dataclass(frozen=True)
class BFloat16(Precision):
    """``bf16``: inputs rounded to bfloat16, float32 accumulation."""

    name: str = "bf16"

    def product(self, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE, reference: bool = False,
                scales: np.ndarray | None = None) -> Product:
        return Bf16Product(weight, epilogue, BF16_WIDENED if reference else None)


@dataclass(frozen=True)
class Int8(Precision):
    """``int8`` for one operator: activations quantized to uint8 with ``scale`` and
    ``zero_point``, weights to int8 with a symmetric scale per output channel."""

    name: str = "int8"
    scale: float = 1.0
    zero_point: int = 0

    def product(self, weight: np.ndarray, epilogue: ProductEpilogue = NO_EPILOGUE, reference: bool = False,
                scales: np.ndarray | None = None) -> Product:
        return Int8Product.from_float(weight, self.scale, self.zero_point, epilogue, REFERENCE if reference else None,
                                      scales)

    @property
    def requantize(self) -> Requantize:
        """uint8 outputs in this operator's input form, for a producer that hands them on."""
        return Requantize(self.scale, self.zero_point)


FP32 = Precision()


def precision(name: str, features: MatrixFeatures | None = None, kernels: str = "compiled",
              compilable: frozenset[str] | None = None) -> Precision:
    """The graph-wide precision ``name`` on a machine with ``features`` (this one's by
    default) where Numba may compile ``compilable`` (this process's by default), its products
    on this machine's kernels or the NumPy ``"reference"`` ones. For ``int8``, the operators
    take an :class:`Int8` each from the calibration."""
    if name not in PRECISIONS:
        raise KuiperError(f"precision must be one of {PRECISIONS}, got {name!r}")
    found = features or detect()
    if name == "fp32":
        tiles = None if kernels == "reference" else fp32_kernel(found, compilable)
        if tiles is None or tiles.dot is None:
            return FP32
        return Precision(products=f"float32 products: linear layers and im2col convolutions on {tiles.name} "
                                  f"tiles", float_tiles=tiles)
    if name == "bf16":
        kernel = BF16_WIDENED if kernels == "reference" else bf16_kernel(found, compilable)
        how = (f"bf16 products on {kernel.name} ({INSTRUCTIONS[kernel.name]}), weights held as bfloat16"
               if kernel.dot is not None else
               f"bf16 weights (held as bfloat16) widened to float32 products: "
               f"{'the NumPy reference' if kernels == 'reference' else 'this CPU has no AVX512-BF16'}")
        return BFloat16(products=how)
    kernel = REFERENCE if kernels == "reference" else int8_kernel(found, compilable)
    if kernel.dot is not None:
        how = f"int8 products on {kernel.name} ({INSTRUCTIONS[kernel.name]}), weights held as int8"
    else:
        why = "asked for" if kernels == "reference" else "this CPU (or Numba) has neither AVX2 nor VNNI"
        how = f"int8 products in the NumPy reference: {why}"
    return Precision("int8", how)


INSTRUCTIONS = {AMX_INT8.name: "tdpbusd; vpdpbusd for a depth of at most 64", VNNI.name: "vpdpbusd",
                AVX2.name: "vpmaddwd", AMX_BF16.name: "tdpbf16ps", AVX512_BF16.name: "vdpbf16ps"}
"""The instructions each int8 and bf16 kernel multiplies with."""
