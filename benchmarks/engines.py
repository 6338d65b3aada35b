"""The three engines behind one call signature, their model files, and the memory probe.

An engine is a function from a float32 NCHW batch to the model's (first) output as a
NumPy array, made ready to run by :func:`make_engine` with a fixed thread count.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from benchmarks.models import MODELS, BenchModel

ENGINES = ("kuiperinfer", "onnxruntime", "torch")
Engine = Callable[[np.ndarray], np.ndarray]


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


def model_files(model: BenchModel, cache: Path) -> tuple[Path, Path]:
    """The model's .pnnx.param and .onnx, exported into ``cache`` unless already there."""
    import torch

    directory = cache / model.name
    directory.mkdir(parents=True, exist_ok=True)
    param = model.bundled_param() if model.bundled_param else directory / f"{model.name}.pnnx.param"
    onnx_path = directory / f"{model.name}.onnx"
    if param.exists() and onnx_path.exists():
        return param, onnx_path
    module = model.module()
    sample = torch.rand(1, *model.input_shape)
    with torch.no_grad():
        if not param.exists():
            import pnnx
            with _quiet():
                pnnx.export(module, str(directory / f"{model.name}.pt"), (sample,))
        if not onnx_path.exists():
            torch.onnx.export(module, (sample,), str(onnx_path), dynamo=False, opset_version=17,
                              input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return param, onnx_path


def onnxruntime_session(onnx_path: Path, threads: int, profile: bool = False):
    """An onnxruntime CPU session on ``threads`` intra-op threads whose idle threads sleep
    (so that they do not slow the engine timed next); with ``profile``, it records every
    node's time (``session.end_profiling()`` writes them to a JSON file)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_profiling = profile
    if profile:   # the JSON goes to the temporary directory, never the working tree
        options.profile_file_prefix = os.path.join(tempfile.gettempdir(), "kuiper-onnxruntime-profile")
    return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


def make_engine(engine: str, model: BenchModel, param: Path, onnx_path: Path, threads: int) -> Engine:
    """Load ``model`` into ``engine``, running on ``threads`` threads."""
    if engine == "kuiperinfer":
        import kuiperinfer

        graph = kuiperinfer.load(param, workers=threads)
        return lambda x: graph.run(x)[0]
    if engine == "onnxruntime":
        session = onnxruntime_session(onnx_path, threads)
        return lambda x: session.run(None, {"input": x})[0]
    if engine == "torch":
        import torch

        torch.set_num_threads(threads)
        module = model.module()

        def run(x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return module(torch.from_numpy(x)).numpy()
        return run
    raise ValueError(f"unknown engine {engine!r}; choose from {ENGINES}")


def sample_batch(model: BenchModel, batch: int, seed: int = 0) -> np.ndarray:
    """A reproducible random input batch."""
    return np.random.default_rng(seed).random((batch, *model.input_shape), dtype=np.float32)


ENGINE_MODULES = {"kuiperinfer": "kuiperinfer", "onnxruntime": "onnxruntime", "torch": "torch"}


def memory_use(engine: str, model_name: str, batch: int, param: str, onnx_path: str,
               threads: int, runs: int) -> dict[str, int | None]:
    """What ``engine`` adds to the resident set (bytes): ``loaded``, by loading the model
    (its library imported beforehand, so not counted), and ``peak_added``, at its peak
    over ``runs`` inferences after that.

    Meant to run in a fresh (spawned) process per engine: in a shared process the
    allocator keeps what earlier engines freed, hiding later peaks.
    """
    import importlib

    from kuiperinfer.benchmark import PeakMemory, blas_threads, resident_bytes

    importlib.import_module(ENGINE_MODULES[engine])
    model = MODELS[model_name]
    with blas_threads(threads):
        before = resident_bytes()
        run = make_engine(engine, model, Path(param), Path(onnx_path), threads)
        after = resident_bytes()
        x = sample_batch(model, batch)
        with PeakMemory() as memory:
            for _ in range(runs):
                run(x)
    return {"loaded": None if before is None or after is None else after - before, "peak_added": memory.growth}
