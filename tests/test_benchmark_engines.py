"""The engines in their precisions: OpenVINO as an optional peer, left out with a note where
it does not import."""

import json
import signal
import sys

import numpy as np
import pytest

from benchmarks import int8
from benchmarks.__main__ import engine_rows, main, parse_args
from benchmarks.engines import make_engine, model_files
from benchmarks.models import MODELS

MODEL = MODELS["efficientnet_lite0"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache holding the model's ONNX export."""
    directory = tmp_path_factory.mktemp("cache")
    model_files(MODEL, directory)
    return directory


@pytest.fixture
def no_openvino(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)   # `import openvino` raises ImportError


def run_benchmark(monkeypatch, tmp_path, cache, *argv):
    """The benchmark's table and JSON for the model at batch 1, one timed run per row."""
    monkeypatch.setattr(signal, "signal", lambda *args: None)   # main's SIGTERM handler stays out of pytest
    main(["--models", MODEL.name, "--batches", "1", "--runs", "1", "--warmup-runs", "0", "--memory-runs", "0",
          "--no-kernels", "--out", str(tmp_path), "--cache", str(cache), *argv])
    return (tmp_path / "latest.md").read_text(), json.loads((tmp_path / "latest.json").read_text())


def test_rows_are_the_engines_in_their_precisions():
    rows, skipped = engine_rows(parse_args([]))
    assert rows == [("kuiperinfer", "fp32"), ("kuiperinfer", "bf16"), ("kuiperinfer", "int8"),
                    ("onnxruntime", "fp32"), ("onnxruntime", "int8"),
                    ("openvino", "fp32"), ("openvino", "default"), ("openvino", "int8"), ("torch", "fp32")]
    assert skipped == []
    assert engine_rows(parse_args(["--engines", "torch,kuiperinfer", "--precisions", "bf16"])) == (
        [("torch", "fp32"), ("kuiperinfer", "bf16")], [])
    assert engine_rows(parse_args(["--engines", "onnxruntime,openvino", "--precisions", "fp32,bf16"]))[0] == [
        ("onnxruntime", "fp32"), ("openvino", "fp32"), ("openvino", "default")]


@pytest.mark.parametrize("argv", [["--engines", "tensorrt"], ["--precisions", "fp8"]])
def test_unknown_engines_and_precisions_are_refused(argv):
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_without_openvino_its_rows_are_left_out_with_a_note(no_openvino):
    rows, [note] = engine_rows(parse_args([]))
    assert [engine for engine, _ in rows] == ["kuiperinfer"] * 3 + ["onnxruntime"] * 2 + ["torch"]
    assert note.startswith("openvino not run: ModuleNotFoundError") and note.endswith("(pip install openvino)")


def test_openvino_reads_the_onnx_file_in_fp32_and_in_its_default_precision(cache):
    files = model_files(MODEL, cache)
    inputs = MODEL.sample_inputs(2)
    expected = make_engine("onnxruntime", MODEL, None, files["onnxruntime"])(inputs)
    fp32 = make_engine("openvino", MODEL, None, files["openvino"], precision="fp32")
    default = make_engine("openvino", MODEL, None, files["openvino"], precision="default")
    assert fp32.precision == "fp32" and default.precision in ("fp32", "bf16")
    np.testing.assert_allclose(fp32(inputs), expected, atol=1e-4)
    scale = np.abs(expected).max()
    assert np.abs(default(inputs) - expected).max() < (1e-5 if default.precision == "fp32" else 0.1) * scale
    with pytest.raises(ValueError, match="openvino runs in fp32 or default"):
        make_engine("openvino", MODEL, None, files["openvino"], precision="bf16")


def test_openvino_rows_are_timed_and_held_to_torch(monkeypatch, tmp_path, cache):
    table, report = run_benchmark(monkeypatch, tmp_path, cache, "--engines", "openvino,torch", "--precisions", "fp32",
                                  "--no-agreement")
    rows = {(row["engine"], row["precision"]): row for row in report["cases"][0]["rows"]}
    assert list(rows) == [("openvino", "fp32"), ("openvino", "default"), ("torch", "fp32")]
    assert rows["openvino", "fp32"]["computes"] == "fp32" and rows["openvino", "fp32"]["error_vs_torch"] < 1e-4
    assert rows["torch", "fp32"]["error_vs_torch"] == 0.0
    chosen = rows["openvino", "default"]["computes"]
    assert f"| efficientnet_lite0 | 1 | openvino | default ({chosen}) |" in table
    assert all(row["ratio_vs_onnxruntime"] is None for row in rows.values())   # onnxruntime did not run
    assert "Skipped" not in table


def test_a_missing_openvino_gives_a_note_not_a_failure(monkeypatch, tmp_path, cache, no_openvino):
    table, report = run_benchmark(monkeypatch, tmp_path, cache, "--engines", "onnxruntime,openvino",
                                  "--precisions", "fp32", "--no-agreement")
    assert [(row["engine"], row["precision"]) for row in report["cases"][0]["rows"]] == [("onnxruntime", "fp32")]
    assert "| efficientnet_lite0 | 1 | onnxruntime | fp32 |" in table and "| openvino |" not in table
    assert "Skipped: openvino not run: ModuleNotFoundError" in table
    assert "openvino" not in report["machine"]


def test_the_classifier_ends_with_its_agreement_on_photos(monkeypatch, tmp_path, cache):
    table, report = run_benchmark(monkeypatch, tmp_path, cache, "--engines", "kuiperinfer", "--precisions", "fp32,bf16")
    [photos] = report["agreement"]
    assert photos["reference"] == "kuiperinfer fp32"                  # PyTorch did not run
    fp32, bf16 = photos["rows"]
    assert fp32["agree"] == fp32["photos"] == len(photos["photos"]) and bf16["computes"] == "bf16"
    assert table.index("| efficientnet_lite0 | 1 | kuiperinfer | bf16 |") < table.index("Top-1 agreement")


def test_int8_rows_are_calibrated_once_timed_held_to_torch_and_counted_on_photos(monkeypatch, tmp_path, cache):
    table, report = run_benchmark(monkeypatch, tmp_path, cache, "--engines", "kuiperinfer,onnxruntime,torch",
                                  "--precisions", "int8")
    rows = {(row["engine"], row["precision"]): row for row in report["cases"][0]["rows"]}
    assert list(rows) == [("kuiperinfer", "int8"), ("onnxruntime", "fp32"), ("onnxruntime", "int8"), ("torch", "fp32")]
    assert rows["kuiperinfer", "int8"]["computes"] == rows["onnxruntime", "int8"]["computes"] == "int8"
    assert rows["onnxruntime", "fp32"]["error_vs_torch"] < 1e-4
    assert 1e-3 < rows["kuiperinfer", "int8"]["error_vs_torch"] < 0.3 and rows["onnxruntime", "int8"]["error_vs_torch"] > 1e-3
    assert report["calibration"] == {MODEL.name: int8.describe(MODEL)}
    assert {path.name for path in (cache / MODEL.name).iterdir()} >= {
        "calibration.npz", f"{MODEL.name}.int8.table", f"{MODEL.name}.int8.onnx"}
    assert "| efficientnet_lite0 | 1 | kuiperinfer | int8 |" in table and "| onnxruntime | int8 |" in table
    assert "Every engine's int8 is calibrated on the same inputs: for efficientnet_lite0, its 2 bundled photos" in table
    photos = report["agreement"][0]
    assert photos["reference"] == "torch fp32"
    counted = {(row["engine"], row["precision"]): row for row in photos["rows"]}
    assert counted["onnxruntime", "fp32"]["agree"] == len(photos["photos"])
    for row in ("kuiperinfer", "int8"), ("onnxruntime", "int8"):     # int8 may change a close call, not most
        assert len(photos["photos"]) * 2 // 3 <= counted[row]["agree"] <= len(photos["photos"])
