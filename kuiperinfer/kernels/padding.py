"""Padding of the trailing dimensions of an array in PyTorch's four modes.

A negative amount crops, as in ``F.pad``: PyTorch crops first and then pads what is
left, so reflections, edges and wrap-arounds are taken from the cropped array.
"""

from __future__ import annotations

import numpy as np

# PyTorch's padding_mode / F.pad mode -> numpy.pad mode
NUMPY_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
PAD_MODES = ("zeros", "constant", *NUMPY_MODES)


def pad_last_dims(x: np.ndarray, pads: tuple[tuple[int, int], ...], mode: str = "zeros",
                  value: float = 0.0) -> np.ndarray:
    """Pad the last ``len(pads)`` dimensions by ``(before, after)`` each; negative amounts crop.

    ``mode`` is ``zeros``/``constant`` (fill with ``value``), ``reflect``, ``replicate``
    or ``circular``. Returns ``x`` itself when there is nothing to pad.
    """
    lead = x.ndim - len(pads)
    if any(before < 0 or after < 0 for before, after in pads):
        kept = tuple(slice(max(-before, 0), d - max(-after, 0))
                     for d, (before, after) in zip(x.shape[lead:], pads))
        x = x[(slice(None),) * lead + kept]
        pads = tuple((max(before, 0), max(after, 0)) for before, after in pads)
    if not any(before or after for before, after in pads):
        return x
    if mode in ("zeros", "constant"):
        shape = x.shape[:lead] + tuple(d + b + a for d, (b, a) in zip(x.shape[lead:], pads))
        out = np.full(shape, value, dtype=x.dtype)
        inner = (slice(None),) * lead + tuple(slice(b, b + d) for d, (b, a) in zip(x.shape[lead:], pads))
        out[inner] = x
        return out
    return np.pad(x, ((0, 0),) * lead + tuple(pads), mode=NUMPY_MODES[mode])
