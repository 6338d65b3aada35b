"""The benchmark's memory probe and its tables."""

import multiprocessing
from pathlib import Path

from benchmarks.__main__ import markdown, summary
from benchmarks.engines import memory_use
from benchmarks.models import MODELS

MB = 1 << 20


def engine_result(median, loaded, peak):
    return {"median_ms": median, "p90_ms": median * 1.5, "min_ms": median * 0.9, "runs_ms": [median],
            "threads": "2 workers", "loaded_memory_bytes": loaded, "peak_memory_added_bytes": peak}


def report(busy=0, kernels=()):
    case = {"model": "m", "batch": 1, "ratio_vs_onnxruntime": 1.5, "ratio_vs_torch": 0.5,
            "max_abs_diff": {"kuiperinfer_vs_onnxruntime": 1e-6, "kuiperinfer_vs_torch": 2e-6},
            "kuiperinfer": engine_result(3.0, 40 * MB, 5 * MB), "onnxruntime": engine_result(2.0, 50 * MB, None),
            "torch": engine_result(6.0, None, 30 * MB)}
    failed = {"model": "x", "batch": 8, "ratio_vs_onnxruntime": None, "ratio_vs_torch": None,
              "max_abs_diff": {"onnxruntime_vs_torch": 1e-7},
              "kuiperinfer": {"error": "UnsupportedOperator: nn.Foo\n(no layer)"},
              "onnxruntime": engine_result(2.0, 50 * MB, 1 * MB), "torch": engine_result(6.0, 10 * MB, 30 * MB)}
    return {"command": "python -m benchmarks", "threads": None, "busy": busy, "runs": 3, "block": 2, "warmup": 1,
            "machine": {"cpu": "cpu", "cpus": 2, "numpy": "2", "blas": "blas", "onnxruntime": "1", "torch": "2"},
            "kernels": list(kernels), "cases": [case, failed]}


def model_table(text):
    return [line for line in text.splitlines() if line.startswith("| model") or line.startswith("| m ")
            or line.startswith("| x ") or line.startswith("|---|---:|---:|---:")]


def test_table_has_a_cell_for_every_column_and_marks_what_was_not_measured():
    text = markdown(report())
    header, rule, row, failed = model_table(text)
    assert rule.count("|") == row.count("|") == failed.count("|") == header.count("|")
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[:8] == ["m", "1", "3.0 (2.7)", "4.5", "2.0 (1.8)", "3.0", "6.0 (5.4)", "9.0"]
    assert cells[8:] == ["1.50", "0.50", "40 / 50 / -", "5 / - / 30", "1.0e-06 / 2.0e-06"]


def test_a_failed_engine_is_marked_in_its_row_and_explained_below():
    text = markdown(report())
    cells = [cell.strip() for cell in model_table(text)[3].split("|")[1:-1]]
    assert cells[2:4] == ["failed (1)", "-"]
    assert cells[8:10] == ["-", "-"]
    assert "1. x batch 8, kuiperinfer: UnsupportedOperator: nn.Foo (no layer)" in text.splitlines()


def test_header_names_the_mode_and_the_kernel_rates_come_first():
    quiet = markdown(report())
    assert "Mode: quiet machine" in quiet and "Kernel rates" not in quiet
    kernel = {"name": "gemm", "seconds": 1e-3, "macs": 10**7, "values": 0, "gmacs_per_s": 10.0, "ns_per_value": None}
    busy = markdown(report(busy=2, kernels=[kernel]))
    assert "Mode: shared machine, 2 CPU-bound processes running beside the timing" in busy
    assert busy.index("| gemm | 10.00 GMAC/s | 1000.0 |") < busy.index("| model |")


def test_summary_gives_median_p90_and_min_in_milliseconds():
    result = summary([0.001 * t for t in range(1, 11)])
    assert (result["median_ms"], result["min_ms"]) == (5.5, 1.0)
    assert abs(result["p90_ms"] - 9.1) < 1e-9


def growth_of_a_second_copy(param: str, copy_dir: str) -> int:
    """How far loading ``param`` grows the resident set in a process that has loaded a copy of
    the same model (other files) before: that first load paid for what a process pays once,
    the compiled kernels among it, so what is left is the model's own weights."""
    import shutil

    import kuiperinfer
    from kuiperinfer.benchmark import resident_bytes

    source = Path(param)
    for path in (source, source.with_suffix(".bin")):
        shutil.copy(path, Path(copy_dir) / path.name)
    first = kuiperinfer.load(Path(copy_dir) / source.name)
    before = resident_bytes()
    second = kuiperinfer.load(param)
    growth = resident_bytes() - before
    del first, second
    return growth


def test_loading_the_bundled_model_holds_no_more_than_the_file_and_one_packed_copy(tmp_path):
    """The weight file mapped in and the packed weights (about 2.4 times the file here; 3.4
    when every layer also kept a decoded copy of its weight)."""
    model = MODELS["efficientnet_lite0"]
    param = model.bundled_param()
    weights = param.with_suffix(".bin").stat().st_size
    with multiprocessing.get_context("spawn").Pool(1) as pool:      # a fresh allocator
        use = pool.apply(memory_use, ("kuiperinfer", model.name, 1, str(param), "unused.onnx", 1, 1))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        growth = pool.apply(growth_of_a_second_copy, (str(param), str(tmp_path)))
    assert 0.5 * weights < growth < 2.8 * weights
    assert use["loaded"] >= growth and use["peak_added"] >= 0
