"""The benchmark's memory probe and its tables."""

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from benchmarks.__main__ import markdown, relative_error, summary
from benchmarks.engines import memory_use
from benchmarks.models import MODELS

MB = 1 << 20


def row(engine, precision, median, loaded, peak, error, computes=None):
    return {"engine": engine, "precision": precision, "computes": computes or precision, "median_ms": median,
            "p90_ms": median * 1.5, "min_ms": median * 0.9, "runs_ms": [median], "threads": f"{engine} threads",
            "loaded_memory_bytes": loaded, "peak_memory_added_bytes": peak, "ratio_vs_onnxruntime": median / 2.0,
            "error_vs_torch": error}


def report(busy=0, kernels=(), skipped=(), agreement=(), calibration=None):
    case = {"model": "m", "batch": 1, "rows": [
        row("kuiperinfer", "fp32", 3.0, 40 * MB, 5 * MB, 1e-6), row("kuiperinfer", "bf16", 5.0, 40 * MB, 0, 2e-2),
        row("onnxruntime", "fp32", 2.0, 50 * MB, None, 2e-6),
        row("openvino", "default", 1.0, None, None, 3e-6, computes="fp32"),
        row("torch", "fp32", 6.0, None, 30 * MB, 0.0)]}
    if calibration:
        case["rows"][2:2] = [row("kuiperinfer", "int8", 7.0, 30 * MB, 6 * MB, 1e-1)]
        case["rows"].insert(4, row("onnxruntime", "int8", 1.5, 20 * MB, 1 * MB, 3e-1))
    failed = {"model": "x", "batch": 8, "rows": [
        {"engine": "kuiperinfer", "precision": "fp32", "failed": "UnsupportedOperator: nn.Foo\n(no layer)"},
        row("onnxruntime", "fp32", 2.0, 50 * MB, 1 * MB, None)]}
    return {"command": "python -m benchmarks", "threads": None, "busy": busy, "runs": 3, "block": 2, "warmup_runs": 1,
            "machine": {"cpu": "cpu", "cpus": 2, "numpy": "2", "blas": "blas", "onnxruntime": "1", "openvino": "3",
                        "torch": "2", "kuiperinfer_bf16": "bf16 inputs multiplied in float32",
                        "kuiperinfer_int8": "int8 activations and weights, dequantized, multiplied in float32"},
            "skipped": list(skipped), "calibration": calibration or {}, "kernels": list(kernels),
            "cases": [case, failed], "agreement": list(agreement)}


def model_table(text):
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("| model |")))
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines[start:end]]


def test_table_has_a_row_per_engine_and_precision_with_its_ratio_and_error():
    header, rule, *rows = model_table(markdown(report()))
    assert header == ["model", "batch", "engine", "precision", "ms median (min)", "ms p90", "/ ort fp32",
                      "MB loaded", "peak MB added", "error vs torch fp32"]
    assert all(len(cells) == len(header) for cells in [rule, *rows])
    assert rows[:5] == [
        ["m", "1", "kuiperinfer", "fp32", "3.0 (2.7)", "4.5", "1.50", "40", "5", "1.0e-06"],
        ["m", "1", "kuiperinfer", "bf16", "5.0 (4.5)", "7.5", "2.50", "40", "0", "2.0e-02"],
        ["m", "1", "onnxruntime", "fp32", "2.0 (1.8)", "3.0", "1.00", "50", "-", "2.0e-06"],
        ["m", "1", "openvino", "default (fp32)", "1.0 (0.9)", "1.5", "0.50", "-", "-", "3.0e-06"],
        ["m", "1", "torch", "fp32", "6.0 (5.4)", "9.0", "3.00", "-", "30", "0.0e+00"]]


def test_int8_rows_render_with_what_they_were_calibrated_on():
    text = markdown(report(calibration={"m": "its 2 photos, each blurred", "x": "16 random inputs", "y": "16 random inputs"}))
    rows = model_table(text)[2:]
    assert [cells[2:4] for cells in rows[:7]] == [["kuiperinfer", "fp32"], ["kuiperinfer", "bf16"],
                                                  ["kuiperinfer", "int8"], ["onnxruntime", "fp32"],
                                                  ["onnxruntime", "int8"], ["openvino", "default (fp32)"],
                                                  ["torch", "fp32"]]
    assert rows[2][4:] == ["7.0 (6.3)", "10.5", "3.50", "30", "6", "1.0e-01"]
    assert rows[4][4:] == ["1.5 (1.4)", "2.2", "0.75", "20", "1", "3.0e-01"]
    assert "kuiperinfer's int8 here: int8 activations and weights, dequantized, multiplied in float32." in text
    assert ("Every engine's int8 is calibrated on the same inputs: for m, its 2 photos, each blurred; for x, y, "
            "16 random inputs. kuiperinfer's table by percentile; onnxruntime's quantize_static model") in text
    assert "calibrated" not in markdown(report()) and "int8 here" not in markdown(report())


def test_a_failed_row_is_marked_and_explained_below():
    text = markdown(report())
    failed, after = model_table(text)[7:9]
    assert failed == ["x", "8", "kuiperinfer", "fp32", "failed (1)", "-", "-", "-", "-", "-"]
    assert after[2:4] == ["onnxruntime", "fp32"] and after[-1] == "-"
    assert "1. x batch 8, kuiperinfer fp32: UnsupportedOperator: nn.Foo (no layer)" in text.splitlines()


def test_header_names_the_mode_the_precisions_and_the_kernel_rates_come_first():
    quiet = markdown(report())
    assert "Mode: quiet machine" in quiet and "Kernel rates" not in quiet
    assert "onnxruntime 1, openvino 3, torch 2." in quiet
    assert "kuiperinfer's bf16 here: bf16 inputs multiplied in float32." in quiet
    assert "OpenVINO's default precision is its own choice" in quiet
    assert "kuiperinfer: kuiperinfer threads; onnxruntime: onnxruntime threads; openvino: openvino threads" in quiet
    kernel = {"name": "gemm", "seconds": 1e-3, "macs": 10**7, "values": 0, "gmacs_per_s": 10.0, "ns_per_value": None}
    busy = markdown(report(busy=2, kernels=[kernel]))
    assert "Mode: shared machine, 2 CPU-bound processes running beside the timing" in busy
    assert busy.index("| gemm | 10.00 GMAC/s | 1000.0 |") < busy.index("| model |")


def test_an_engine_left_out_is_noted_and_the_agreement_follows_the_table():
    photos = {"model": "m", "reference": "torch fp32", "photos": [f"p{i}" for i in range(9)], "rows": [
        {"engine": "kuiperinfer", "precision": "bf16", "computes": "bf16", "agree": 8, "photos": 9,
         "differing": ["p3"]}]}
    text = markdown(report(skipped=["openvino not run: ImportError: no openvino (pip install openvino)"],
                           agreement=[photos]))
    assert "Skipped: openvino not run: ImportError: no openvino (pip install openvino)." in text
    assert text.index("| model |") < text.index("| kuiperinfer | bf16 | 8/9 | p3 |")


def test_the_error_is_relative_to_the_reference_largest_magnitude():
    reference = np.array([[-4.0, 1.0], [2.0, 0.5]], np.float32)
    assert relative_error(reference + np.float32(0.02), reference) == pytest.approx(0.005)
    assert relative_error(reference, reference) == 0.0
    assert relative_error(np.full((1, 2), 0.5), np.zeros((1, 2))) == 0.5
    assert relative_error(reference[:1], reference) == float("inf")


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
        use = pool.apply(memory_use, ("kuiperinfer", "fp32", model.name, 1, str(param), "unused.onnx", 1, 1))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        growth = pool.apply(growth_of_a_second_copy, (str(param), str(tmp_path)))
    assert 0.5 * weights < growth < 2.8 * weights
    assert use["loaded"] >= growth and use["peak_added"] >= 0
