"""The engines behind one call signature, their model files, and the memory probe.

An engine is loaded by :func:`make_engine` as its users load it, in a precision, with its
default settings (its own thread count, onnxruntime's spinning threads), unless ``threads``
pins every engine to the same count for an experiment. It is then a function from a model's
named inputs (:meth:`~benchmarks.models.BenchModel.sample_inputs`) to its first output as a
NumPy array. OpenVINO is optional (``pip install openvino``): it reads the ONNX file
onnxruntime runs, on its CPU plugin. In ``int8``, kuiperinfer loads its calibration table and
onnxruntime and OpenVINO the quantized ONNX file (:mod:`benchmarks.int8`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.models import MODELS, BenchModel, Inputs

ENGINES = ("kuiperinfer", "onnxruntime", "openvino", "torch")
PRECISIONS = {"kuiperinfer": ("fp32", "bf16", "int8"), "onnxruntime": ("fp32", "int8"),
              "openvino": ("fp32", "default", "int8"), "torch": ("fp32",)}
"""The precisions each engine runs in (kuiperinfer's chosen by ``--precisions``, the others'
int8 where it holds int8); ``default`` is the engine's own choice (OpenVINO's: bf16 on a CPU
with AMX, fp32 elsewhere)."""
OPENVINO_NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}
"""OpenVINO's names of the precisions it infers in, as the tables write them."""
OPENVINO_PRODUCTS = ("Convolution", "Deconvolution", "FullyConnected", "MatMul")
"""OpenVINO's layers whose runtime precision says whether it multiplies in 8 bits."""


@dataclass(frozen=True)
class Engine:
    """A loaded model: call it on a model's inputs for its first output."""

    run: Callable[[Inputs], np.ndarray]
    threads: str
    """How many threads it computes on, as far as the engine says (for the report)."""
    precision: str = "fp32"
    """What it computes in, as the engine says."""

    def __call__(self, inputs: Inputs) -> np.ndarray:
        return self.run(inputs)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the process's stdout and stderr, where pnnx's C++ passes print, for the ``with``
    (a failed export still raises)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def _torch_inputs(model: BenchModel, batch: int) -> tuple:
    import torch

    return tuple(torch.from_numpy(value) for value in model.sample_inputs(batch).values())


def pnnx_file(model: BenchModel, cache: Path) -> Path:
    """The model's .pnnx.param (the bundled one, or exported into ``cache`` unless already there)."""
    if model.bundled_param:
        return model.bundled_param()
    directory = cache / model.name
    param = directory / f"{model.name}.pnnx.param"
    if param.exists():
        return param
    import pnnx
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    second = (_torch_inputs(model, 2),) if model.dynamic else ()
    with torch.no_grad(), _quiet():
        try:
            pnnx.export(model.module(), str(directory / f"{model.name}.pt"), _torch_inputs(model, 1), *second)
        except SyntaxError:   # pnnx's generated Python may not import; the .param/.bin are written before it
            if not param.exists():
                raise
    return param


def onnx_file(model: BenchModel, cache: Path) -> Path:
    """The model's .onnx, exported into ``cache`` unless already there: inputs named as the
    model's, the batch dimension of every input and of the output dynamic."""
    directory = cache / model.name
    onnx_path = directory / f"{model.name}.onnx"
    if onnx_path.exists():
        return onnx_path
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    names = [spec.name for spec in model.inputs]
    with torch.no_grad():
        torch.onnx.export(model.module(), _torch_inputs(model, 1), str(onnx_path), dynamo=False, opset_version=17,
                          input_names=names, output_names=["output"],
                          dynamic_axes={name: {0: "batch"} for name in [*names, "output"]})
    return onnx_path


def model_files(model: BenchModel, cache: Path) -> dict[str, Path | str]:
    """Each engine's model file by engine (OpenVINO reads the ONNX file; torch needs none), or
    why it could not be made (pnnx or torch.onnx failed)."""
    files: dict[str, Path | str] = {}
    for engine, make in (("kuiperinfer", pnnx_file), ("onnxruntime", onnx_file)):
        try:
            files[engine] = make(model, cache)
        except Exception as exc:   # reported for this engine; the others still run
            files[engine] = f"export failed: {type(exc).__name__}: {exc}"
    files["openvino"] = files["onnxruntime"]
    return files


def row_paths(files: dict[str, Path | str], engine: str, precision: str
              ) -> tuple[Path | None, Path | None, Path | None] | str:
    """What row (``engine``, ``precision``) loads from ``files`` (:func:`model_files`, and
    in int8 :func:`benchmarks.int8.int8_files`): its .pnnx.param, .onnx and calibration
    table, None for what it does not need; or why one of them could not be made."""
    int8 = precision == "int8"
    keys = {"kuiperinfer": ("kuiperinfer", None, "calibration" if int8 else None),
            "onnxruntime": (None, "onnx_int8" if int8 else "onnxruntime", None),
            "openvino": (None, "onnx_int8" if int8 else "openvino", None)}.get(engine, (None, None, None))
    paths = [None if key is None else files.get(key, f"no {key} file was made") for key in keys]
    return next((path for path in paths if isinstance(path, str)), None) or tuple(paths)


def onnxruntime_session(onnx_path: Path, threads: int | None = None, profile: bool = False):
    """An onnxruntime CPU session with default options (its own thread count, spinning idle
    threads), or on ``threads`` intra-op threads. With ``profile`` it keeps the profiling
    session's settings (one inter-op thread, idle threads sleeping) and records every node's
    time (``session.end_profiling()`` writes them to a JSON file in the temporary directory)."""
    import onnxruntime as ort

    if threads is None and not profile:
        return ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    if profile:   # the JSON goes to the temporary directory, never the working tree
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tempfile.gettempdir(), "kuiper-onnxruntime-profile")
    return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


def make_engine(engine: str, model: BenchModel, param: Path | None, onnx_path: Path | None,
                threads: int | None = None, precision: str = "fp32", calibration: Path | None = None) -> Engine:
    """Load ``model`` into ``engine`` in ``precision`` (one of ``PRECISIONS[engine]``) with its
    default settings, or on ``threads`` threads. In int8, ``onnx_path`` is the quantized
    model and kuiperinfer reads ``calibration``.

    ``threads`` also limits NumPy's BLAS only where the caller does (``blas_threads``), as the
    engine's process is the caller's.
    """
    if engine in PRECISIONS and engine != "kuiperinfer" and precision not in PRECISIONS[engine]:
        raise ValueError(f"{engine} runs in {' or '.join(PRECISIONS[engine])}, not {precision!r}")
    if engine == "kuiperinfer":
        import kuiperinfer
        from kuiperinfer.benchmark import blas_description

        graph = kuiperinfer.load(param, precision=precision, calibration=calibration, threads=threads)
        return Engine(lambda inputs: graph.run(*inputs.values())[0],
                      f"{graph.threads} threads, BLAS {blas_description()}", graph.precision.name)
    if engine == "onnxruntime":
        session = onnxruntime_session(onnx_path, threads)
        return Engine(lambda inputs: session.run(None, inputs)[0],
                      "default" if threads is None else f"{threads} intra-op", precision)
    if engine == "openvino":
        import openvino

        config = {"INFERENCE_PRECISION_HINT": "f32"} if precision == "fp32" else {}
        if threads is not None:
            config["INFERENCE_NUM_THREADS"] = threads
        core = openvino.Core()
        compiled = core.compile_model(core.read_model(str(onnx_path)), "CPU", config)
        chosen = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        chosen = "int8" if precision == "int8" and openvino_multiplies_int8(compiled) else \
            OPENVINO_NAMES.get(chosen, chosen)
        return Engine(lambda inputs: compiled(inputs)[0],
                      f"{compiled.get_property('INFERENCE_NUM_THREADS')} inference threads", chosen)
    if engine == "torch":
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        module = model.module()

        def run(inputs: Inputs) -> np.ndarray:
            with torch.inference_mode():
                return module(*(torch.from_numpy(value) for value in inputs.values())).numpy()
        return Engine(run, f"{torch.get_num_threads()} intra-op")
    raise ValueError(f"unknown engine {engine!r}; choose from {ENGINES}")


def openvino_multiplies_int8(compiled: Any) -> bool:
    """Whether a compiled OpenVINO model runs any of its products (:data:`OPENVINO_PRODUCTS`)
    on 8-bit inputs, as its runtime model says."""
    def info(op: Any, key: str) -> str:
        return op.get_rt_info()[key].astype(str)
    return any(info(op, "layerType") in OPENVINO_PRODUCTS and info(op, "runtimePrecision") in ("u8", "i8")
               for op in compiled.get_runtime_model().get_ops())


def precision_label(result: dict[str, Any]) -> str:
    """A row's precision for the tables: the one asked for, and the one the engine says it
    chose in brackets when they differ (OpenVINO's ``default``)."""
    computes = result.get("computes", result["precision"])
    return result["precision"] if computes == result["precision"] else f"{result['precision']} ({computes})"


ENGINE_MODULES = {"kuiperinfer": "kuiperinfer", "onnxruntime": "onnxruntime", "openvino": "openvino",
                  "torch": "torch"}


def missing(engine: str) -> str | None:
    """Why ``engine``'s library cannot be imported here, or None when it can."""
    try:
        importlib.import_module(ENGINE_MODULES[engine])
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@contextlib.contextmanager
def engine_threads(threads: int | None) -> Iterator[None]:
    """NumPy's BLAS limited to ``threads`` for the ``with`` (nothing changed when None)."""
    if threads is None:
        yield
        return
    from kuiperinfer.kernels.parallel import blas_threads

    with blas_threads(threads):
        yield


def memory_use(engine: str, precision: str, model_name: str, batch: int, param: str | None,
               onnx_path: str | None, threads: int | None, runs: int,
               calibration: str | None = None) -> dict[str, int | None]:
    """What ``engine`` in ``precision`` adds to the resident set (bytes): ``loaded``, by loading
    the model (its library imported beforehand, so not counted), and ``peak_added``, at its
    peak over ``runs`` inferences after that.

    Meant to run in a fresh (spawned) process per engine: in a shared process the
    allocator keeps what earlier engines freed, hiding later peaks.
    """
    from kuiperinfer.benchmark import PeakMemory, resident_bytes

    importlib.import_module(ENGINE_MODULES[engine])
    model = MODELS[model_name]
    inputs = model.sample_inputs(batch)
    with engine_threads(threads):
        before = resident_bytes()
        run = make_engine(engine, model, param and Path(param), onnx_path and Path(onnx_path), threads,
                          precision, calibration and Path(calibration))
        after = resident_bytes()
        with PeakMemory() as memory:
            for _ in range(runs):
                run(inputs)
    return {"loaded": None if before is None or after is None else after - before, "peak_added": memory.growth}
