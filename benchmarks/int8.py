"""What the int8 rows load, made once per run in the parent before any engine starts.

* The calibration inputs (:func:`calibration_inputs`): for a trained classifier, its bundled
  photos in :data:`~benchmarks.agreement.CALIBRATION_VARIANTS`, none of which the top-1
  agreement counts; for the other models, :data:`SAMPLES` of their random inputs drawn with
  another seed than the timed ones. Written as ``calibration.npz`` beside the model's exports,
  one array per input in the model's order, for both quantizers.
* kuiperinfer's calibration table (:func:`kuiperinfer_table`):
  :func:`kuiperinfer.quantization.quantize` on those inputs, by :data:`METHOD`.
* onnxruntime's int8 model (:func:`onnxruntime_int8`): the fp32 ONNX file through
  ``quant_pre_process`` (merging symbolic dimensions where they conflict, as YOLOv5s's do)
  and ``quantize_static`` on the same inputs: QDQ, uint8 activations and int8 weights per
  output channel (kuiperinfer's scheme), otherwise onnxruntime's defaults (MinMax ranges;
  every operator it can quantize, not only the products). onnxruntime runs it as it runs any
  model, in its int8 kernels; OpenVINO reads the same file. On an x86 CPU without VNNI,
  onnxruntime's documentation warns that those kernels' uint8 by int8 products may saturate
  (it suggests 7-bit weights, ``reduce_range``, there): the rows' errors show what they cost.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from benchmarks.agreement import CALIBRATION_VARIANTS, photos
from benchmarks.models import BenchModel, Inputs

SAMPLES = 16
"""Random calibration inputs per model (the classifier's are its photos' variants)."""
SEED = 1
"""The random calibration inputs' seed; the timed inputs are seed 0."""
METHOD = "percentile"
"""kuiperinfer's calibration method."""


def calibration_inputs(model: BenchModel) -> Inputs:
    """The model's calibration inputs by input name, samples along dimension 0."""
    if model.photo_preprocess:
        return {model.inputs[0].name: photos(model, CALIBRATION_VARIANTS)[1]}
    return model.sample_inputs(SAMPLES, SEED)


def describe(model: BenchModel) -> str:
    """What :func:`calibration_inputs` are, for the report."""
    if model.photo_preprocess:
        from kuiperinfer.models import sample_images

        return f"its {len(sample_images())} bundled photos, each {', '.join(CALIBRATION_VARIANTS)}"
    return f"{SAMPLES} random inputs of seed {SEED} (the timed ones: seed 0)"


def kuiperinfer_table(param: Path, inputs: Path, table: Path) -> None:
    """kuiperinfer's calibration table for ``param`` from the arrays file ``inputs``."""
    from kuiperinfer.quantization import quantize

    quantize(param, inputs, method=METHOD, output=table)


def onnxruntime_int8(onnx_path: Path, inputs: Path, output: Path, names: Iterable[str]) -> None:
    """onnxruntime's static QDQ quantization of ``onnx_path`` on the arrays file ``inputs``
    (the model's inputs ``names`` by position), written to ``output``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with np.load(inputs) as loaded:
        arrays = dict(zip(names, (loaded[f"arr_{i}"] for i in range(len(loaded.files)))))

    class Samples(CalibrationDataReader):
        """The calibration inputs one sample at a time."""

        def __init__(self) -> None:
            self.samples = iter(range(len(next(iter(arrays.values())))))

        def get_next(self) -> Inputs | None:
            i = next(self.samples, None)
            return None if i is None else {name: value[i:i + 1] for name, value in arrays.items()}

    with tempfile.TemporaryDirectory() as folder:
        prepared, source, here = Path(folder) / "prepared.onnx", Path(onnx_path).resolve(), os.getcwd()
        os.chdir(folder)   # where a symbolic shape inference that fails leaves its model
        try:
            quant_pre_process(str(source), str(prepared), auto_merge=True)
        finally:
            os.chdir(here)
        quantize_static(str(prepared), str(output), Samples(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def int8_files(model: BenchModel, files: dict[str, Path | str], cache: Path,
               engines: Iterable[str]) -> dict[str, Path | str]:
    """The files the int8 rows of ``engines`` load, beside the exports ``files``
    (:func:`~benchmarks.engines.model_files`): ``calibration``, kuiperinfer's table, and
    ``onnx_int8``, onnxruntime's quantized model (OpenVINO's too); each a path, or why it
    could not be made."""
    engines = set(engines)
    directory = cache / model.name
    directory.mkdir(parents=True, exist_ok=True)
    inputs = directory / "calibration.npz"
    np.savez(inputs, *calibration_inputs(model).values())
    made: dict[str, Path | str] = {}
    if "kuiperinfer" in engines:
        made["calibration"] = _made(files["kuiperinfer"], directory / f"{model.name}.int8.table",
                                    lambda param, table: kuiperinfer_table(param, inputs, table))
    if engines & {"onnxruntime", "openvino"}:
        names = [spec.name for spec in model.inputs]
        made["onnx_int8"] = _made(files["onnxruntime"], directory / f"{model.name}.int8.onnx",
                                  lambda onnx_path, output: onnxruntime_int8(onnx_path, inputs, output, names))
    return made


def _made(source: Path | str, path: Path, make: Callable[[Path, Path], None]) -> Path | str:
    """``path``, once ``make(source, path)`` has written it; or why not (``source``, an export,
    may be a failure already)."""
    if isinstance(source, str):
        return source
    try:
        make(source, path)
    except Exception as exc:   # reported on the rows that needed it; the others still run
        return f"int8 quantization failed: {type(exc).__name__}: {exc}"
    return path
