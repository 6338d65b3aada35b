"""bfloat16, the NumPy reference: float32 rounded to its upper 16 bits.

bfloat16 keeps float32's sign and 8 exponent bits and 7 of its 23 mantissa bits, so a
float32 rounds to it by rounding away its lower 16 bits, to nearest with ties to even, as
PyTorch's ``tensor.bfloat16()`` does; NaN stays NaN, and what rounds beyond the largest
bfloat16 becomes infinity. The product of two bfloat16 values is exact in float32, so a
bf16 product accumulated in float32 differs from a float32 one only by the rounding of its
inputs (about 2^-9 of each).
"""

from __future__ import annotations

import numpy as np

LOW_BITS = np.uint32(0x7FFF)
UPPER = np.uint32(0xFFFF0000)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """``x`` (float32) rounded to bfloat16, as float32 values in the memory layout of ``x``."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = (bits + (LOW_BITS + ((bits >> 16) & 1))) & UPPER
    out = rounded.view(np.float32)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = np.nan
    return out
