"""Elementwise passes (quantizing, rounding to bfloat16) cut into parts that the run's
threads share, each part one compiled call of the pass over its run of values."""

from __future__ import annotations

from functools import cache
from typing import Any

from kuiperinfer.kernels.jit import kernel


@cache
def in_parts(fill: Any) -> Any:
    """The compiled ``parts(values, numbers, step, first, last, out)`` of the compiled pass
    ``fill(values, *numbers, out)``: the pass over parts ``first:last`` of the C-contiguous
    1-D ``values`` and ``out``, ``step`` values each (the last part what is left)."""

    def parts(values, numbers, step, first, last, out) -> None:  # noqa: ANN001
        for part in range(first, last):
            start = part * step
            stop = min(values.size, start + step)
            fill(values[start:stop], *numbers, out[start:stop])
    parts.__name__ = parts.__qualname__ = f"{fill.__name__}_in_parts"
    parts.__doc__ = f"{fill.__name__} over parts of its values."
    return kernel(parts)
