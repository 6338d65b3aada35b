"""This CPU's matrix instructions, and whether Linux lets this process use the AMX tiles.

    python -m tools.matrix_features

Linux lets a process use the AMX tiles once it asked for their state
(:func:`~kuiperinfer.kernels.matrix.features.request_tile_state`, which the AMX products call
when they are chosen); this asks as they would and says what Linux answered.
"""

from __future__ import annotations

import sys

from kuiperinfer.kernels.matrix.features import MatrixFeatures, detect, request_tile_state


def describe(features: MatrixFeatures) -> str:
    """The matrix instructions present, by their names (``AMX-BF16, AVX512-BF16, VNNI``)."""
    names = [name for name, present in (("AMX-BF16", features.amx_bf16), ("AMX-INT8", features.amx_int8),
                                        ("AVX512-BF16", features.avx512_bf16), ("VNNI", features.vnni)) if present]
    return ", ".join(names) or "no matrix instructions (no AMX, AVX512-BF16 or VNNI)"


def main() -> int:
    features = detect()
    print(f"matrix instructions: {describe(features)}")
    if features.amx_bf16:
        granted = request_tile_state()
        print(f"AMX tile state: {'granted' if granted else 'refused by the kernel'}")
    else:
        print("AMX tile state: not asked for (no AMX)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
