"""bfloat16, the NumPy reference: float32 rounded to its upper 16 bits, and split into parts.

bfloat16 keeps float32's sign and 8 exponent bits and 7 of its 23 mantissa bits, so a
float32 rounds to it by rounding away its lower 16 bits, to nearest with ties to even, as
PyTorch's ``tensor.bfloat16()`` does; NaN stays NaN, and what rounds beyond the largest
bfloat16 becomes infinity. The product of two bfloat16 values is exact in float32, so a
bf16 product accumulated in float32 differs from a float32 one only by the rounding of its
inputs (about 2^-9 of each).

A float32 is also the sum of bfloat16 parts, ``x = hi + lo (+ ...)``: each part is the
rounding of what the parts before it left, so two parts hold 16 of the mantissa bits and
three all 24. The products of part pairs ``(i, j)`` with ``i + j < parts`` (three for two
parts: hi*hi + hi*lo + lo*hi) recover a float32 product to about 2^-16, or 2^-24.
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


def split_bf16(x: np.ndarray, parts: int) -> list[np.ndarray]:
    """``x`` (float32) as ``parts`` bfloat16 parts whose sum is ``x`` to about 2^(-8 parts)."""
    x = np.asarray(x, dtype=np.float32)
    pieces, rest = [], x
    for _ in range(parts):
        part = round_bf16(rest)
        pieces.append(part)
        rest = rest - part
    return pieces


def split_product(a: np.ndarray, b: np.ndarray, parts: int) -> np.ndarray:
    """``a @ b`` from bfloat16 parts of both, the products of part pairs ``(i, j)`` with
    ``i + j < parts`` accumulated in float32: what the matrix engine computes for an
    fp32-accurate product made of bf16 ones."""
    a_parts, b_parts = split_bf16(a, parts), split_bf16(b, parts)
    out = None
    for i in range(parts):
        for j in range(parts - i):
            product = np.matmul(a_parts[i], b_parts[j])
            out = product if out is None else out + product
    return out
