"""RuntimeAttribute: an operator's weight (KuiperInfer's RuntimeAttribute).

The raw bytes stay where the PNNX reader left them (a zero-copy view into the
memory-mapped ``.pnnx.bin``); :meth:`RuntimeAttribute.get` decodes them to an array
in the type a layer asks for, once, when the layer is built, or hands out the stored
values themselves when they already have that type and the layer only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuiperinfer.pnnx.ir import Attribute

RuntimeDataType = int
"""pnnx's dtype code of an operand or attribute (1 = f32, 3 = f16, ... see pnnx.dtypes)."""


@dataclass
class RuntimeAttribute:
    """A weight: raw little-endian bytes, a shape and pnnx's dtype code."""

    attribute: Attribute

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.attribute.shape)

    @property
    def type(self) -> RuntimeDataType:
        return self.attribute.type

    def get(self, dtype: np.dtype | type = np.float32, copy: bool = True) -> np.ndarray:
        """The weight decoded to a new, aligned, writable array of ``dtype``; with
        ``copy=False``, the stored values themselves when they are of ``dtype`` (a read-only
        view of the archive, which costs no memory of its own), else a read-only copy."""
        values = self.attribute.numpy()
        if not copy and values.dtype == np.dtype(dtype):
            return values
        decoded = np.array(values, dtype=dtype, copy=True)
        decoded.flags.writeable = copy
        return decoded
