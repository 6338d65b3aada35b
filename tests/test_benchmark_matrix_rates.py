"""The matrix engine's rates: the zoo's products found by hooks, every kernel's call running
and computing the product, the table."""

import numpy as np
import pytest

from benchmarks import int8_avx2, matrix_rates


def test_the_products_of_a_network_are_its_convolutions_and_linear_layers():
    shapes = matrix_rates.product_shapes("resnet18", 2)
    assert shapes[(2 * 112 * 112, 3 * 7 * 7, 64)] == 1               # the stem, as im2col multiplies it
    assert shapes[(2 * 56 * 56, 64 * 9, 64)] == 4
    assert shapes[(2, 512, 1000)] == 1                              # the classifier
    assert sum(shapes.values()) == 21
    depthwise_free = matrix_rates.product_shapes("mobilenetv3", 1)
    assert all(k >= 16 or m == 1 for m, k, n in depthwise_free)      # no product of K = 9 (a 3x3 depthwise)


def test_every_kernel_runs_the_product_with_its_epilogue():
    calls = matrix_rates.kernels(5, 7, 9, np.random.default_rng(0))
    assert "fp32" in calls and any(name.startswith("bf16") for name in calls)
    for call in calls.values():
        out = call()
        assert out is None or (out.shape == (5, 9) and out.min() >= 0)   # ReLU fused


def test_the_table_has_a_column_per_kernel():
    table = matrix_rates.markdown([("resnet18", 1, 1, {"fp32": 50.4, "int8 AVX2": 90.0}),
                                   ("resnet18", 1, 2, {"fp32": 80.0})])
    assert table.splitlines()[0] == "| network | batch | threads | fp32 GOP/s | int8 AVX2 GOP/s |"
    assert table.splitlines()[2:] == ["| resnet18 | 1 | 1 | 50 | 90 |", "| resnet18 | 1 | 2 | 80 |  |"]


def test_the_avx2_remedies_table_says_which_are_exact():
    table = int8_avx2.markdown([("widen", [117.2, 116.0, 110.4], True), ("maddubs", [102.0, 107.0, 96.0], False)])
    assert table.splitlines()[2:] == ["| widen | yes | 117 | 116 | 110 |", "| maddubs | no | 102 | 107 | 96 |"]


def test_the_shape_table_has_a_row_per_product_and_the_network_rate_sums_their_times():
    times = [((49, 576, 96), 2, {"fp32": 2.0e-5, "fp32 tiles": 1.0e-5}), ((1, 576, 1024), 1, {"fp32": 1.0e-4})]
    table = matrix_rates.shape_table([("mobilenetv3", 1, 1, times)])
    assert table.splitlines()[0] == "| network | batch | threads | M x K x N | count | fp32 GMAC/s | fp32 tiles GMAC/s |"
    assert table.splitlines()[2:] == ["| mobilenetv3 | 1 | 1 | 49x576x96 | 2 | 135.5 | 271.0 |",
                                      "| mobilenetv3 | 1 | 1 | 1x576x1024 | 1 | 5.9 |  |"]
    rates = matrix_rates.network_rates(times)
    assert rates["fp32"] == pytest.approx(2 * (2 * 49 * 576 * 96 + 576 * 1024) / (2 * 2.0e-5 + 1.0e-4) / 1e9)


def test_only_the_chosen_precisions_are_timed():
    seconds = matrix_rates.time_shape((5, 7, 9), 1, 1, np.random.default_rng(0), ("fp32",))
    assert "fp32" in seconds and all(name.startswith("fp32") for name in seconds)
