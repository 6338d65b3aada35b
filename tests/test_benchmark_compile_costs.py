"""The compile-cost benchmark: a cold process compiles the kernels, a warm one loads them all,
one without Numba has none."""

import re

from benchmarks.compile_costs import measure_model, report
from benchmarks.engines import pnnx_file
from benchmarks.models import MODELS

CALLED_BY_KERNELS = {"kuiperinfer.kernels.compiled.activation.finish_row",
                     "kuiperinfer.kernels.compiled.direct.direct_rows"}   # by direct_parts
"""Kernels only other kernels call: compiled with them, and inside their machine code in the
cache, so a warm process never loads them on their own."""


def test_cold_process_compiles_warm_process_loads_and_reference_has_no_kernels(tmp_path):
    param = str(pnnx_file(MODELS["efficientnet_lite0"], tmp_path))
    result = measure_model("efficientnet_lite0", param, [1])
    cold, warm, reference = result["cold"], result["warm"], result["without_numba"]
    assert cold["kernels"] and all(k["compiled"] >= 1 and k["seconds"] > 0 for k in cold["kernels"])
    assert {k["kernel"] for k in warm["kernels"]} == {k["kernel"] for k in cold["kernels"]} - CALLED_BY_KERNELS
    assert CALLED_BY_KERNELS <= {k["kernel"] for k in cold["kernels"]}
    assert all(k["cache_hits"] >= 1 and k["compiled"] == 0 and k["seconds"] == 0 for k in warm["kernels"])
    assert reference["kernels"] == []
    table = report({"efficientnet_lite0": result})
    assert re.search(r"\| efficientnet_lite0 \| [1-9]\d* \| [\d.]+ \| [\d.]+ \| [\d.]+ \| b1 [\d.]+ \| b1 [\d.]+ \| "
                     r"b1 [\d.]+ \|", table)
    assert re.search(r"`depthwise\.depthwise_rows_5x5` \| 1 \|", table)   # compiled once per kernel size
