"""Which matrix instructions this CPU has.

Linux reports the CPU's features as flags in ``/proc/cpuinfo``; the ones the matrix engine
cares for are the AMX tiles and their bf16 and int8 products (``amx_tile``, ``amx_bf16``,
``amx_int8``), AVX-512's bf16 dot product (``avx512_bf16``), the int8 dot products of
VNNI (``avx512_vnni``, ``avx_vnni``) and AVX2's integer products (``avx2``). A precision's
``products`` says which of them this machine has for it
(:func:`kuiperinfer.kernels.matrix.precision.precision`).

A process may use the AMX tiles only after asking Linux for their state
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, :func:`request_tile_state`): the
products ask when they choose the tiles; a forked process inherits the answer, a new one (a
Ray worker) asks again when it loads its model.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class MatrixFeatures:
    """The matrix instructions of a CPU."""

    amx_bf16: bool = False
    amx_int8: bool = False
    avx512_bf16: bool = False
    vnni: bool = False
    """int8 dot products (``vpdpbusd``), in AVX-512 or in AVX."""
    avx512_vnni: bool = False
    """int8 dot products on 512-bit vectors (what the VNNI kernels run on)."""
    avx2: bool = False
    """AVX2's integer products (``vpmaddwd``), the floor of the int8 kernels."""
    avx512f: bool = False
    """float32 multiply-adds on 512-bit vectors (AVX-512 F)."""
    fma: bool = False
    """float32 multiply-adds on 256-bit vectors (FMA3, with AVX2 the floor of the float32 kernels)."""

    @classmethod
    def from_flags(cls, flags: frozenset[str]) -> MatrixFeatures:
        tiles = "amx_tile" in flags
        return cls(amx_bf16=tiles and "amx_bf16" in flags, amx_int8=tiles and "amx_int8" in flags,
                   avx512_bf16="avx512_bf16" in flags, vnni=bool({"avx512_vnni", "avx_vnni"} & flags),
                   avx512_vnni="avx512_vnni" in flags, avx2="avx2" in flags, avx512f="avx512f" in flags,
                   fma="fma" in flags)

    @property
    def bf16_products(self) -> str | None:
        """The fastest instructions multiplying bf16 here: ``"AMX"``, ``"AVX512-BF16"`` or None."""
        return "AMX" if self.amx_bf16 else "AVX512-BF16" if self.avx512_bf16 else None


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in the text of ``/proc/cpuinfo``."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


@cache
def detect() -> MatrixFeatures:
    """This machine's matrix instructions (none where ``/proc/cpuinfo`` cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as file:
            return MatrixFeatures.from_flags(cpu_flags(file.read()))
    except OSError:
        return MatrixFeatures()


SYS_ARCH_PRCTL = 158
"""arch_prctl's system call number on x86-64 Linux."""
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

_GRANTED: dict[int, bool] = {}
"""Per process id, whether Linux granted the tile state."""


def request_tile_state() -> bool:
    """Ask Linux, once per process, for the AMX tile state; whether this process may use
    the tiles (False on a CPU without AMX or a kernel that refuses)."""
    pid = os.getpid()
    if pid not in _GRANTED:
        features = detect()
        tiles = features.amx_bf16 or features.amx_int8
        _GRANTED[pid] = tiles and _arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    return _GRANTED[pid]


def _arch_prctl(code: int, argument: int) -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(code), ctypes.c_ulong(argument)))
    except (OSError, AttributeError):
        return -1
