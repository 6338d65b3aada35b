"""The int8 rows' files: calibration inputs kept apart from what is measured, kuiperinfer's
table and onnxruntime's QDQ model made from them, and each engine loading its own in int8."""

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from benchmarks.agreement import CALIBRATION_VARIANTS, VARIANTS, photos
from benchmarks.engines import make_engine, model_files, row_paths
from benchmarks.int8 import SAMPLES, calibration_inputs, int8_files
from benchmarks.models import MODELS, BenchModel, InputSpec
from kuiperinfer.runtime.calibration import CalibrationTable, model_digest


def tiny_network() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 6, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(6, 5))


TINY = BenchModel("tiny_network", tiny_network, (InputSpec("input", (3, 16, 16)),), (1,))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The tiny network's exports and int8 files, for kuiperinfer and onnxruntime."""
    cache = tmp_path_factory.mktemp("cache")
    files = model_files(TINY, cache)
    return {**files, **int8_files(TINY, files, cache, ["kuiperinfer", "onnxruntime"])}


def largest_error(output, reference):
    return float(np.abs(output - reference).max() / np.abs(reference).max())


def test_the_classifier_is_calibrated_on_photo_variants_the_agreement_does_not_count():
    model = MODELS["efficientnet_lite0"]
    [calibration] = calibration_inputs(model).values()
    _, counted = photos(model)
    assert not set(CALIBRATION_VARIANTS) & set(VARIANTS)
    assert calibration.shape == (len(counted) // len(VARIANTS) * len(CALIBRATION_VARIANTS), 3, 224, 224)
    assert 16 <= len(calibration) <= 32
    seen = {image.tobytes() for image in counted}
    assert len({image.tobytes() for image in calibration} - seen) == len(calibration)


def test_the_other_models_are_calibrated_on_other_random_inputs_than_the_timed_ones():
    model = MODELS["minilm"]
    calibration, timed = calibration_inputs(model), model.sample_inputs(SAMPLES)
    assert list(calibration) == ["input_ids", "attention_mask"] and len(calibration["input_ids"]) == SAMPLES
    assert not np.array_equal(calibration["input_ids"], timed["input_ids"])


def test_onnxruntime_quantizes_to_qdq_with_uint8_activations_and_int8_weights_per_channel(made):
    graph = onnx.load(str(made["onnx_int8"])).graph
    kinds = [node.op_type for node in graph.node]
    assert kinds.count("QuantizeLinear") >= 3 and kinds.count("DequantizeLinear") >= 6
    constants = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer}
    produced = {output: node for node in graph.node for output in node.output}
    for product in [node for node in graph.node if node.op_type in ("Conv", "Gemm")]:
        weight = produced[product.input[1]]
        assert weight.op_type == "DequantizeLinear"
        values, scales = constants[weight.input[0]], constants[weight.input[1]]
        assert values.dtype == np.int8 and scales.shape == (values.shape[0],)
        activation = produced[product.input[0]]
        assert activation.op_type == "DequantizeLinear" and constants[activation.input[2]].dtype == np.uint8


def test_each_engine_loads_its_int8_files_and_comes_close_to_fp32_but_not_equal(made):
    inputs = TINY.sample_inputs(4)
    for engine in ("kuiperinfer", "onnxruntime", "openvino"):
        if engine == "openvino":
            pytest.importorskip("openvino")
        fp32 = make_engine(engine, TINY, *row_paths(made, engine, "fp32")[:2])
        int8 = make_engine(engine, TINY, *row_paths(made, engine, "int8")[:2], precision="int8",
                           calibration=row_paths(made, engine, "int8")[2])
        assert int8.precision == "int8", engine
        assert 0 < largest_error(int8(inputs), fp32(inputs)) < 0.02, engine


def test_kuiperinfer_table_covers_the_products_of_its_model(made):
    table = CalibrationTable.read(made["calibration"])
    assert table.model == model_digest(made["kuiperinfer"])
    assert (table.method, table.samples, len(table.ranges), table.fp32) == ("percentile", SAMPLES, 3, set())


def test_each_int8_row_finds_its_files_or_why_they_are_missing(tmp_path):
    param, onnx_path, table, quantized = (tmp_path / name for name in ("m.pnnx.param", "m.onnx", "m.table",
                                                                      "m.int8.onnx"))
    files = {"kuiperinfer": param, "onnxruntime": onnx_path, "openvino": onnx_path, "calibration": table,
             "onnx_int8": quantized}
    assert row_paths(files, "kuiperinfer", "int8") == (param, None, table)
    assert row_paths(files, "kuiperinfer", "bf16") == (param, None, None)
    assert row_paths(files, "openvino", "int8") == row_paths(files, "onnxruntime", "int8") == (None, quantized, None)
    assert row_paths(files, "openvino", "default") == (None, onnx_path, None)
    assert row_paths(files, "torch", "fp32") == (None, None, None)
    del files["calibration"]
    assert row_paths(files, "kuiperinfer", "int8") == "no calibration file was made"


def test_a_quantization_that_fails_is_reported_not_raised(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an ONNX model")
    made = int8_files(TINY, {"kuiperinfer": "export failed: RuntimeError: pnnx", "onnxruntime": broken},
                      tmp_path, ["kuiperinfer", "onnxruntime"])
    assert made["calibration"] == "export failed: RuntimeError: pnnx"
    assert made["onnx_int8"].startswith("int8 quantization failed: ")
    assert int8_files(TINY, {"onnxruntime": broken}, tmp_path, ["openvino"]).keys() == {"onnx_int8"}
