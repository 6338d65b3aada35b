"""The matrix engine's kernels as test parameters, each marked to run where this CPU (and
Numba's target) has its instructions and to say in the report why it did not elsewhere."""

from __future__ import annotations

import pytest

from kuiperinfer.kernels.compiled.tiles import target_features
from kuiperinfer.kernels.matrix.features import detect, request_tile_state
from kuiperinfer.kernels.matrix.products import (
    AMX_BF16,
    AMX_FEATURES,
    AMX_INT8,
    AVX2,
    AVX512_BF16,
    BF16_WIDENED,
    FMA256,
    FMA512,
    VNNI,
)

HERE = detect()
COMPILABLE = target_features()
needs_vnni = pytest.mark.skipif(not (HERE.avx512_vnni and "avx512vnni" in COMPILABLE),
                                reason="this CPU (or Numba's target) has no AVX512-VNNI (vpdpbusd)")
needs_avx2 = pytest.mark.skipif(not (HERE.avx2 and "avx2" in COMPILABLE),
                                reason="this CPU (or Numba's target) has no AVX2 (vpmaddwd)")
needs_bf16 = pytest.mark.skipif(not (HERE.avx512_bf16 and "avx512bf16" in COMPILABLE),
                                reason="this CPU (or Numba's target) has no AVX512-BF16 (vdpbf16ps)")
needs_avx512f = pytest.mark.skipif(not (HERE.avx512f and "avx512f" in COMPILABLE),
                                   reason="this CPU (or Numba's target) has no AVX-512 F")
needs_fma = pytest.mark.skipif(not (HERE.avx2 and HERE.fma and {"avx2", "fma"} <= COMPILABLE),
                               reason="this CPU (or Numba's target) has no AVX2 and FMA")
AMX = HERE.amx_int8 and HERE.amx_bf16 and AMX_FEATURES <= COMPILABLE and request_tile_state()
needs_amx = pytest.mark.skipif(not (AMX and HERE.avx512_vnni and HERE.avx512_bf16),
                               reason="this CPU (or Linux, or Numba's target) has no AMX tiles (tdpbusd, tdpbf16ps)")
INT8_KERNELS = [pytest.param(AMX_INT8, marks=needs_amx, id="amx-int8"), pytest.param(VNNI, marks=needs_vnni, id="vnni"),
                pytest.param(AVX2, marks=needs_avx2, id="avx2")]
BF16_KERNELS = [pytest.param(AMX_BF16, marks=needs_amx, id="amx-bf16"),
                pytest.param(AVX512_BF16, marks=needs_bf16, id="avx512-bf16"), pytest.param(BF16_WIDENED, id="widened")]
FP32_KERNELS = [pytest.param(FMA512, marks=needs_avx512f, id="fma512"), pytest.param(FMA256, marks=needs_fma, id="fma256")]
