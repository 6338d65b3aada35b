"""Post-training quantization: calibrate a model's activation ranges for ``int8``.

>>> from kuiperinfer import quantization
>>> report = quantization.quantize("resnet18.pnnx.param", "photos/", output="resnet18.table")
>>> graph = kuiperinfer.load("resnet18.pnnx.param", precision="int8", calibration="resnet18.table")

:func:`quantize` runs the model in float32 over calibration inputs (images through the
model's preprocessing, or the rows of ``.npy``/``.npz`` arrays), records the range of the
input of every operator whose product ``int8`` computes (:attr:`Layer.products
<kuiperinfer.layers.base.Layer.products>`) on the graph as pnnx wrote it, so that the table
holds for the model optimised or not, chooses each operator's range by ``method`` and writes
the :class:`~kuiperinfer.runtime.calibration.CalibrationTable`. Then it runs the
quantized model beside the float32 one on held-out inputs and reports their agreement.

Methods, as onnxruntime's calibrators and TensorRT's name them:

* ``minmax``: the smallest and largest value seen;
* ``percentile``: clipped at the 99.99th percentile of |x| (outliers cost one step each);
* ``entropy``: clipped where the quantized histogram of |x| loses least information
  (the Kullback-Leibler divergence from the float one, as TensorRT does).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import kuiperinfer
from kuiperinfer.errors import InputError, KuiperError
from kuiperinfer.models import efficientnet_lite0_path
from kuiperinfer.runtime.calibration import CalibrationTable, model_digest
from kuiperinfer.runtime.graph import RuntimeGraph
from kuiperinfer.runtime.operator import RuntimeOperator

METHODS = ("minmax", "percentile", "entropy")
PERCENTILE = 99.99
BINS = 2048
LEVELS = 128
BATCH = 8


class RangeRecorder(RuntimeGraph):
    """A float32 graph, as pnnx wrote it (loaded with ``optimize=False``), that records the
    input of each operator it runs whose product int8 computes: its smallest and largest
    values, then, once :meth:`histograms` is given the largest |x|, a histogram of |x| on
    ``[0, largest]``."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.low: dict[str, float] = {}
        self.high: dict[str, float] = {}
        self.counts: dict[str, np.ndarray] = {}
        self._edges: dict[str, float] | None = None
        self._lock = threading.Lock()

    def histograms(self, largest: dict[str, float]) -> None:
        """From now on, count |x| into ``BINS`` bins on ``[0, largest[name]]``."""
        self._edges = largest
        self.counts = {name: np.zeros(BINS, np.int64) for name in largest}

    def run_node(self, op: RuntimeOperator, inputs: list[Any]) -> list[Any]:
        if op.name in getattr(op.layer, "products", ()):
            self._record(op.name, np.asarray(inputs[0]))
        return super().run_node(op, inputs)

    def _record(self, name: str, x: np.ndarray) -> None:
        if self._edges is None:
            low, high = float(np.min(x)), float(np.max(x))
            with self._lock:
                self.low[name] = min(low, self.low.get(name, low))
                self.high[name] = max(high, self.high.get(name, high))
            return
        largest = self._edges[name]
        counts = np.histogram(np.abs(x), BINS, (0.0, largest or 1.0))[0] if x.size else 0
        with self._lock:
            self.counts[name] += counts


def percentile_threshold(counts: np.ndarray, largest: float, percentile: float = PERCENTILE) -> float:
    """The |x| below which ``percentile`` % of the histogram's values lie."""
    total = counts.sum()
    if total == 0:
        return largest
    index = int(np.searchsorted(np.cumsum(counts), total * percentile / 100))
    return largest * min(index + 1, len(counts)) / len(counts)


def entropy_threshold(counts: np.ndarray, largest: float, levels: int = LEVELS) -> float:
    """The |x| clipping at which ``levels`` quantization levels keep the histogram's
    distribution closest (least Kullback-Leibler divergence) to the float one. The first
    bin counts as the second does: the zeros a ReLU makes are exact whatever the clipping,
    and their spike would otherwise make any coarser step look costly."""
    counts = counts.astype(np.float64)
    if counts.sum() == 0 or len(counts) < 2:
        return largest
    counts[0] = counts[1]
    best, best_bins = np.inf, len(counts)
    for bins in range(levels, len(counts) + 1, 16):
        reference = counts[:bins].copy()
        reference[-1] += counts[bins:].sum()          # the clipped values land in the last bin
        quantized = np.zeros(bins)
        for chunk in np.array_split(np.arange(bins), levels):
            used = chunk[counts[chunk] > 0]
            if used.size:
                quantized[used] = counts[chunk].sum() / used.size   # spread evenly over the bins used
        p, q = reference / reference.sum(), quantized / max(quantized.sum(), 1e-30)
        keep = p > 0
        divergence = float(np.sum(p[keep] * np.log(p[keep] / np.maximum(q[keep], 1e-30))))
        if divergence < best:
            best, best_bins = divergence, bins
    return largest * best_bins / len(counts)


def calibrate(graph: RangeRecorder, batches: Sequence[dict[str, np.ndarray]], method: str = "minmax",
              progress: Callable[[int, int], None] | None = None) -> dict[str, tuple[float, float]]:
    """The range of each product's input over ``batches`` by ``method`` (one pass over the
    inputs for ``minmax``, two for the others); ``progress(done, total)`` counts samples."""
    if method not in METHODS:
        raise KuiperError(f"method must be one of {METHODS}, got {method!r}")
    passes = 1 if method == "minmax" else 2
    sizes = [len(next(iter(batch.values()))) for batch in batches]
    done, total = 0, passes * sum(sizes)
    for number in range(passes):
        if number == 1:
            graph.histograms({name: max(-graph.low[name], graph.high[name]) for name in graph.low})
        for batch, size in zip(batches, sizes):
            graph.run(batch)
            done += size
            if progress:
                progress(done, total)
    ranges = {}
    for name in graph.low:
        low, high = graph.low[name], graph.high[name]
        if method != "minmax":
            largest = max(-low, high)
            if method == "percentile":
                t = percentile_threshold(graph.counts[name], largest)
            else:   # all of uint8's steps for a range that is not negative, half of them for |x| otherwise
                t = entropy_threshold(graph.counts[name], largest, 2 * LEVELS - 1 if low >= 0 else LEVELS)
            low, high = max(low, -t), min(high, t)
        ranges[name] = (low, high)
    return ranges


# -- inputs ---------------------------------------------------------------------------------

def read_inputs(graph: RuntimeGraph, source: str | os.PathLike | Sequence[str | os.PathLike],
                preprocess: Callable[[Any], np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Calibration or evaluation samples for ``graph``, by input name, samples along
    dimension 0: a ``.npz`` (an array per input, by name or position), a ``.npy`` (a
    one-input model), or images (files, folders) through ``preprocess``."""
    from kuiperinfer.vision import find_images

    path = _arrays_file(source)
    if path is not None:
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise InputError(f"{path}: cannot read the arrays: {error}") from None
        if isinstance(loaded, np.ndarray):
            if len(graph.input_names) != 1:
                raise InputError(f"{path}: one .npy array is for a model with one input; this one has "
                                 f"{graph.input_names}: give a .npz with an array per input")
            return {graph.input_names[0]: loaded}
        keys = [next((key for key in (name, str(i), f"arr_{i}") if key in loaded.files), None)
                for i, name in enumerate(graph.input_names)]
        missing = [name for name, key in zip(graph.input_names, keys) if key is None]
        if missing:
            raise InputError(f"{path}: no array for the input(s) {missing} (by name, or by position as "
                             f"np.savez(file, *arrays) names them); it has {loaded.files}")
        return {name: loaded[key] for name, key in zip(graph.input_names, keys)}
    if preprocess is None or len(graph.input_names) != 1:
        raise InputError("images are for a one-input image model: give .npy or .npz arrays")
    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    images = find_images(sources)
    if not images:
        raise InputError(f"no images in {', '.join(map(str, sources))}")
    return {graph.input_names[0]: np.stack([preprocess(image) for image in images])}


def _arrays_file(source: str | os.PathLike | Sequence[str | os.PathLike]) -> Path | None:
    """The one .npy or .npz file ``source`` names, or None (images)."""
    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    return Path(sources[0]) if len(sources) == 1 and str(sources[0]).endswith((".npz", ".npy")) else None


def batches(inputs: dict[str, np.ndarray], size: int = BATCH) -> list[dict[str, np.ndarray]]:
    count = len(next(iter(inputs.values())))
    return [{name: value[start:start + size] for name, value in inputs.items()} for start in range(0, count, size)]


# -- agreement with fp32 ----------------------------------------------------------------------

@dataclass
class Agreement:
    """How the quantized model's outputs compare with float32's on held-out inputs."""

    samples: int
    top1: float | None = None
    """Share of samples whose top class is float32's (classifiers: (N, classes) outputs)."""
    top5: float | None = None
    """Share of samples whose five top classes hold float32's top class."""
    relative_error: float = 0.0
    """Largest |y - y32| / max |y32| over the outputs."""
    operators: dict[str, float] = field(default_factory=dict)
    """With the report: each quantized operator's output error, ||y - y32|| / ||y32|| (the
    root mean square of the error relative to that of the values)."""

    def describe(self) -> str:
        lines = [f"agreement with fp32 on {self.samples} held-out sample(s):"]
        if self.top1 is not None:
            lines.append(f"  top-1 {self.top1:.1%}, top-5 {self.top5:.1%}")
        lines.append(f"  largest output error {self.relative_error:.2e} of the output's scale")
        return "\n".join(lines)


def agreement(fp32: RuntimeGraph, int8: RuntimeGraph, inputs: dict[str, np.ndarray],
              operators: Iterable[str] = (), classifier: bool = False) -> Agreement:
    """The quantized graph against the float32 one on ``inputs``; with ``operators``, also
    the error at each of their outputs; for a ``classifier`` (one (N, classes) output),
    the top-1 and top-5 agreement."""
    operators = list(operators)
    result = Agreement(samples=len(next(iter(inputs.values()))))
    wanted = [*fp32.output_names, *operators]
    ours = [int8.run(batch, fetch=wanted) for batch in batches(inputs)]
    theirs = [fp32.run(batch, fetch=wanted) for batch in batches(inputs)]

    def joined(runs: list[dict[str, Any]], name: str) -> np.ndarray:
        return np.concatenate([np.asarray(run[name], np.float64).reshape(len(run[name]), -1) for run in runs])

    largest, rms = {}, {}
    for name in wanted:
        y, y32 = joined(ours, name), joined(theirs, name)
        largest[name] = float(np.max(np.abs(y - y32)) / (np.max(np.abs(y32)) or 1.0))
        rms[name] = float(np.linalg.norm(y - y32) / (np.linalg.norm(y32) or 1.0))
    result.relative_error = max(largest[name] for name in fp32.output_names)
    result.operators = {name: rms[name] for name in operators}
    if classifier and len(fp32.output_names) == 1 and np.ndim(ours[0][fp32.output_names[0]]) == 2:
        scores, scores32 = joined(ours, fp32.output_names[0]), joined(theirs, fp32.output_names[0])
        top32 = scores32.argmax(axis=1)
        result.top1 = float(np.mean(scores.argmax(axis=1) == top32))
        top5 = np.argsort(-scores, axis=1)[:, :5]
        result.top5 = float(np.mean(np.any(top5 == top32[:, None], axis=1)))
    return result


# -- the whole job ------------------------------------------------------------------------------

@dataclass
class Quantized:
    """What :func:`quantize` made: the table, where it went, and the agreement with fp32."""

    table: CalibrationTable
    path: Path | None
    agreement: Agreement | None


def quantize(model: str | os.PathLike | None, calibrate_on: str | os.PathLike | Sequence[str | os.PathLike], *,
             method: str = "percentile", samples: int = 100, output: str | os.PathLike | None = None,
             evaluate_on: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
             keep_fp32: Iterable[str] = (), report: bool = False, optimize: bool = True,
             progress: Callable[[int, int], None] | None = None) -> Quantized:
    """Calibrate ``model`` (a .pnnx.param; None: the bundled EfficientNet-Lite0) on at most
    ``samples`` inputs from ``calibrate_on``, write the table to ``output`` (when given) and
    measure the quantized model against float32 on ``evaluate_on`` (default: none).
    ``keep_fp32`` names operators to leave in float32; ``report`` adds each quantized
    operator's error. The ranges are recorded on the graph as pnnx wrote it; the quantized
    model is evaluated loaded with ``optimize`` (without it for the per-operator ``report``,
    whose operators an optimised graph may have fused)."""
    from kuiperinfer.vision import EFFICIENTNET_LITE, Classifier

    path = Path(efficientnet_lite0_path() if model is None else model)
    if samples < 1:
        raise KuiperError(f"samples must be at least 1, got {samples}")
    recorder = kuiperinfer.load(path, graph_class=RangeRecorder, optimize=False, warmup=False)
    preprocess = EFFICIENTNET_LITE if model is None else \
        (Classifier(recorder).preprocess if len(recorder.input_names) == 1 else None)
    inputs = read_inputs(recorder, calibrate_on, preprocess)
    inputs = {name: value[:samples] for name, value in inputs.items()}
    ranges = calibrate(recorder, batches(inputs), method, progress)
    keep = set(keep_fp32)
    unknown = keep - set(ranges)
    if unknown:
        raise KuiperError(f"--keep-fp32: no operator whose product int8 computes is named "
                          f"{', '.join(sorted(map(repr, unknown)))}; "
                          f"the model's are {', '.join(sorted(ranges)[:8])}{', ...' if len(ranges) > 8 else ''}")
    table = CalibrationTable(model_digest(path), method, len(next(iter(inputs.values()))),
                             {name: r for name, r in ranges.items() if name not in keep}, keep)
    if output is not None:
        table.write(output)
    measured = None
    if evaluate_on is not None:
        optimize = optimize and not report
        int8 = kuiperinfer.load(path, precision="int8", calibration=table, optimize=optimize, warmup=False)
        fp32 = kuiperinfer.load(path, optimize=optimize, warmup=False)
        held_out = read_inputs(fp32, evaluate_on, preprocess)
        measured = agreement(fp32, int8, held_out, sorted(table.ranges) if report else (),
                             classifier=_arrays_file(evaluate_on) is None)
    return Quantized(table, None if output is None else Path(output), measured)
