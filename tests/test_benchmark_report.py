"""The benchmark's memory probe and its table."""

import multiprocessing

from benchmarks.__main__ import markdown
from benchmarks.engines import memory_use
from benchmarks.models import MODELS

MB = 1 << 20


def engine_result(median, loaded, peak):
    return {"median_ms": median, "min_ms": median * 0.9, "runs_ms": [median],
            "loaded_memory_bytes": loaded, "peak_memory_added_bytes": peak}


def test_table_has_a_cell_for_every_column_and_marks_what_was_not_measured():
    case = {"model": "m", "batch": 1, "floor_ms": 1.0, "ratio_vs_onnxruntime": 1.5, "floor_vs_onnxruntime": 0.5,
            "ratio_vs_torch": 0.5, "max_abs_diff_vs_onnxruntime": 1e-6, "max_abs_diff_vs_torch": 2e-6,
            "kuiperinfer": engine_result(3.0, 40 * MB, 5 * MB), "onnxruntime": engine_result(2.0, 50 * MB, None),
            "torch": engine_result(6.0, None, 30 * MB)}
    report = {"command": "python -m benchmarks", "threads": 2, "runs": 1,
              "machine": {"cpu": "cpu", "cpus": 2, "numpy": "2", "blas": "blas", "onnxruntime": "1", "torch": "2"},
              "kernel_rates": {"gemm": 4e10, "depthwise": 7e9},
              "cases": [case, {"model": "x", "batch": 8, "error": "unsupported operator"}]}
    header, rule, row, failed = markdown(report).splitlines()[2:]
    columns = header.count("|")
    assert rule.count("|") == row.count("|") == failed.count("|") == columns
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[:3] == ["m", "1", "3.0 (2.7)"]
    assert cells[9:11] == ["40 / 50 / -", "5 / - / 30"]


def test_loading_the_bundled_model_holds_no_more_than_the_file_and_one_packed_copy():
    """The weight file mapped in and the packed weights (about 2.4 times the file here; 3.4
    when every layer also kept a decoded copy of its weight)."""
    model = MODELS["efficientnet_lite0"]
    param = model.bundled_param()
    weights = param.with_suffix(".bin").stat().st_size
    with multiprocessing.get_context("spawn").Pool(1) as pool:      # a fresh allocator
        use = pool.apply(memory_use, ("kuiperinfer", model.name, 1, str(param), "unused.onnx", 1, 1))
    assert 0.5 * weights < use["loaded"] < 2.8 * weights
    assert use["peak_added"] >= 0
