"""The matrix engine's rates: the zoo's products found by hooks, every kernel's call running
and computing the product, the table."""

import numpy as np

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
