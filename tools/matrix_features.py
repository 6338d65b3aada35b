"""This CPU's matrix instructions, and whether Linux lets this process use the AMX tiles.

    python -m tools.matrix_features

A process may use AMX tiles only after asking the kernel for their state
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); a forked process inherits it, a
new one (a Ray worker) asks again. No kernel of kuiperinfer uses the tiles yet; the first
that does takes :func:`request_tile_state` with it. The engine reads only which
instructions the CPU has (:mod:`kuiperinfer.kernels.matrix.features`).
"""

from __future__ import annotations

import ctypes
import os
import sys

from kuiperinfer.kernels.matrix.features import MatrixFeatures, detect

SYS_ARCH_PRCTL = 158
"""arch_prctl's system call number on x86-64 Linux."""
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

_GRANTED: dict[int, bool] = {}
"""Per process id, whether Linux granted the tile state."""


def describe(features: MatrixFeatures) -> str:
    """The matrix instructions present, by their names (``AMX-BF16, AVX512-BF16, VNNI``)."""
    names = [name for name, present in (("AMX-BF16", features.amx_bf16), ("AMX-INT8", features.amx_int8),
                                        ("AVX512-BF16", features.avx512_bf16), ("VNNI", features.vnni)) if present]
    return ", ".join(names) or "no matrix instructions (no AMX, AVX512-BF16 or VNNI)"


def request_tile_state() -> bool:
    """Ask Linux, once per process, for the AMX tile state; whether this process may use
    the tiles (False on a CPU without AMX or a kernel that refuses)."""
    pid = os.getpid()
    if pid not in _GRANTED:
        _GRANTED[pid] = detect().amx_bf16 and _arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    return _GRANTED[pid]


def _arch_prctl(code: int, argument: int) -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(code), ctypes.c_ulong(argument)))
    except (OSError, AttributeError):
        return -1


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
