"""The compile-cost benchmark: a cold process compiles the kernels, a warm one loads them all."""

import re

from benchmarks.compile_costs import report, run_child
from benchmarks.engines import pnnx_file
from benchmarks.models import MODELS


def test_cold_process_compiles_and_warm_process_compiles_nothing(tmp_path):
    models = [("efficientnet_lite0", str(pnnx_file(MODELS["efficientnet_lite0"], tmp_path)), [1])]
    cold = run_child(models, tmp_path / "kernels")
    warm = run_child(models, tmp_path / "kernels")
    assert cold["models"][0]["compiled"] >= 1 and warm["models"][0]["compiled"] == 0
    assert all(kernel["seconds"] > 0 for kernel in cold["kernels"])
    assert warm["kernels"] and all(kernel["cache_hits"] >= 1 and kernel["seconds"] == 0 for kernel in warm["kernels"])
    table = report(cold, warm)
    assert re.search(r"\| efficientnet_lite0 \| [1-9]\d* \| [\d.]+ \| [\d.]+ \| b1 [\d.]+ \| b1 [\d.]+ \|", table)
    assert "`depthwise.depthwise_rows`" in table
