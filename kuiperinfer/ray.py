"""Batch inference on a Ray cluster: kuiperinfer models inside Ray Data's ``map_batches``.

Ray Data streams the data (image files, parquet, .npy) through the cluster; a pool of
actors each loads the model once and runs the batches it is handed. Every node needs
kuiperinfer with this extra (``pip install 'kuiperinfer[ray]'``) and the model and data
at paths it can read (a shared file system or a cloud URI).

>>> import ray
>>> from kuiperinfer.ray import ImageClassifier, actor_cpus, read_image_files
>>> ray.init()
>>> images = read_image_files("/shared/photos/")
>>> results = images.map_batches(ImageClassifier, fn_constructor_kwargs={"top_k": 3},
...                              batch_size=16, num_cpus=actor_cpus(4),
...                              compute=ray.data.ActorPoolStrategy(size=4))
>>> results.write_parquet("/shared/results/")

* :class:`Predictor`: any model; a column per model input in, a column per output out.
* :class:`ImageClassifier`: image files (or decoded pixels) in; the top classes out,
  and an ``error`` for an image that cannot be decoded instead of a failed dataset.
* :func:`classify` and :func:`predict` set the actor pool up as ``kuiper classify --ray``
  and ``kuiper run --ray`` do; :class:`ResultsFile` writes one parquet or JSON lines file.

Threads: an actor runs its model on as many threads as the CPUs Ray reserved for it (the
``num_cpus`` of ``map_batches``; 1 by default), each thread a slice of the batch, with BLAS
on one thread. Ray places no more actors on a node than the node's CPUs cover, so actors x
threads never exceeds them; :func:`actor_cpus` divides the nodes' CPUs among a number of
actors.

Reading: when the actors reserve every CPU, a read that needs one waits for ever. The
readers here (:func:`read_image_files`, :func:`read_parquet_rows`, :func:`read_numpy_rows`)
reserve none: they wait on storage more than they compute.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray
import ray.data
from ray.data.extensions import ArrowTensorArray

import kuiperinfer
from kuiperinfer.errors import InferError, InputError
from kuiperinfer.kernels.parallel import blas_threads, cores
from kuiperinfer.models import efficientnet_lite0_path
from kuiperinfer.vision import Classifier, ImageError, Preprocess
from kuiperinfer.vision.classifier import OutputKind
from kuiperinfer.vision.image import IMAGE_SUFFIXES

if TYPE_CHECKING:
    from typing import Self

ModelPath = str | os.PathLike | None
"""A .pnnx.param that every node can read at that path; None for the bundled EfficientNet-Lite0."""

IMAGE_EXTENSIONS = sorted(suffix.lstrip(".") for suffix in IMAGE_SUFFIXES)
"""File name endings :func:`read_image_files` keeps when it lists a folder."""

IMAGE_COLUMNS = ("bytes", "image")
"""Where :class:`ImageClassifier` finds the images: encoded files, or decoded pixels."""

CLASSIFICATION_SCHEMA = pa.schema([
    ("labels", pa.list_(pa.string())),
    ("indices", pa.list_(pa.int64())),
    ("probabilities", pa.list_(pa.float32())),
    ("error", pa.string()),
])
"""The columns :class:`ImageClassifier` adds (typed, so that a batch of failures has them too)."""

RESULT_SUFFIXES = (".parquet", ".jsonl")
"""The formats :class:`ResultsFile` writes, by the file's suffix."""


# -- threads and actors ------------------------------------------------------------------

def actor_threads() -> int | None:
    """Threads for a model in this process: inside a Ray actor, the whole CPUs Ray reserved
    for it (at least 1); elsewhere None, the load's default (every CPU the process may use)."""
    if _in_actor():
        reserved = ray.get_runtime_context().get_assigned_resources().get("CPU", 0)
        return max(1, int(reserved))
    return None


def _in_actor() -> bool:
    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def node_cpus() -> list[int]:
    """The CPUs of each live node of the connected cluster that has any (a head node kept
    free of work has none)."""
    cpus = (int(node["Resources"].get("CPU", 0)) for node in ray.nodes() if node["Alive"])
    return [c for c in cpus if c >= 1]


def default_actors() -> int:
    """One actor per node with CPUs: each then runs on all of its node's CPUs."""
    return _nodes()


def actor_cpus(actors: int) -> int:
    """The CPUs each of ``actors`` actors reserves so that they fill the nodes without
    oversubscribing any: the smallest node's CPUs divided by the actors that share a node
    when spread evenly, at least 1 (on 2 nodes of 16: 1-2 actors get 16, 3-4 get 8).

    Raises ValueError when the cluster has fewer CPUs than ``actors``, which could never
    all start. Needs a connection (``ray.init``).
    """
    if actors < 1:
        raise ValueError(f"actors must be at least 1, got {actors}")
    cpus = node_cpus()
    if actors > sum(cpus):
        raise ValueError(f"{actors} actors need a CPU each, and the Ray cluster has {sum(cpus)}")
    return max(1, min(cpus) // math.ceil(actors / len(cpus)))


def model_threads(threads: int | None = None) -> int:
    """The threads for this process's models: ``threads``, else :func:`actor_threads`, else every
    CPU this process may use. In a Ray actor, whose process is its models' alone, BLAS runs one
    thread from now on (:func:`~kuiperinfer.kernels.parallel.blas_threads`, held for the actor's
    life), so that the models' threads x BLAS threads stay within the actor's CPUs, also in what
    the actor computes around the runs."""
    if _in_actor():
        blas_threads.hold(1)
    return threads or actor_threads() or cores()


def load_model(model: ModelPath = None, **load_options: Any) -> kuiperinfer.RuntimeGraph:
    """``model`` loaded with ``load_options`` (:func:`kuiperinfer.load`'s), on
    :func:`model_threads` threads unless they say ``threads``."""
    load_options["threads"] = model_threads(load_options.get("threads"))
    return kuiperinfer.load(efficientnet_lite0_path() if model is None else model, **load_options)


# -- the callable classes for map_batches ------------------------------------------------

class Predictor:
    """Runs a model on batches of NumPy columns: the callable class for ``map_batches``.

    Each actor loads ``model`` once, with ``load_options`` (:func:`load_model`).
    A batch has a column per model input named after it (``graph.input_names``), each row
    an array of the input's shape without the batch dimension: a tensor column, or nested
    lists as parquet stores them. The rows go through the model in one forward pass, or one
    at a time where the model's samples are not independent (:meth:`RuntimeGraph.run_samples
    <kuiperinfer.runtime.graph.RuntimeGraph.run_samples>`), so a row's outputs never depend
    on how Ray cut the dataset into batches. The result keeps the batch's other columns (ids,
    paths) and has a column per model output named after it (``graph.output_names``); an
    output replaces a column of the same name.
    """

    def __init__(self, model: ModelPath = None, **load_options: Any):
        self.graph = load_model(model, **load_options)

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [name for name in self.graph.input_names if name not in batch]
        if missing:
            raise InputError(f"no column for the model's input(s) {missing}; the batch has the "
                             f"columns {sorted(batch)}", missing[0])
        inputs = {name: stack_rows(batch[name], name) for name in self.graph.input_names}
        rows = len(next(iter(inputs.values())))
        outputs = dict(zip(self.graph.output_names, self.graph.run_samples(inputs)))
        for name, value in outputs.items():
            if np.ndim(value) == 0 or len(value) != rows:
                raise InferError(f"output {name!r} has shape {np.shape(value)}, not one row per "
                                 f"input row ({rows})")
        kept = {name: column for name, column in batch.items() if name not in inputs}
        return {**kept, **outputs}


class ImageClassifier:
    """Classifies a batch of images: the callable class for ``map_batches``.

    The images are encoded files in a ``bytes`` column (:func:`read_image_files`,
    ``ray.data.read_binary_files``) or decoded pixels in an ``image`` column
    (``ray.data.read_images(..., mode="RGB")``, which does not turn photos the way their
    EXIF orientation says; files are read as ``kuiper classify`` reads them). Each is
    preprocessed and classified as :class:`~kuiperinfer.vision.Classifier` does, the batch
    in one forward pass. The result keeps the batch's other columns (``path``) and adds
    ``labels``, ``indices`` and ``probabilities`` (the ``top_k`` classes, most probable
    first) and ``error``: null for an image that was classified; for one that could not be
    decoded, why, and the other three are null.

    ``model``, ``labels``, ``preprocess`` and ``outputs`` are as for Classifier, ``load_options``
    as for :func:`load_model`; the bundled model (``model=None``) comes with its authors'
    preprocessing and the ImageNet labels.
    """

    def __init__(self, model: ModelPath = None, *, labels: Sequence[str] | str | None = None,
                 preprocess: Preprocess | None = None, top_k: int = 5, outputs: OutputKind = "auto",
                 **load_options: Any):
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        graph = load_model(model, **load_options)
        options = {"labels": labels, "preprocess": preprocess, "outputs": outputs}
        self.classifier = Classifier.bundled(graph, **options) if model is None else Classifier(graph, **options)
        self.top_k = top_k

    def __call__(self, batch: Mapping[str, np.ndarray]) -> pa.Table:
        column = next((name for name in IMAGE_COLUMNS if name in batch), None)
        if column is None:
            raise InputError(f"no image column ('bytes' for image files, 'image' for pixels); "
                             f"the batch has the columns {sorted(batch)}")
        outcomes = self.classifier.predictions(batch[column], self.top_k)
        predictions = [None if isinstance(p, ImageError) else p for p in outcomes]
        columns = {name: arrow_column(values) for name, values in batch.items() if name != column}
        found = [
            [None if p is None else [x.label for x in p] for p in predictions],
            [None if p is None else [x.index for x in p] for p in predictions],
            [None if p is None else [x.probability for x in p] for p in predictions],
            [p.reason if isinstance(p, ImageError) else None for p in outcomes],
        ]
        for field, values in zip(CLASSIFICATION_SCHEMA, found):
            columns[field.name] = pa.array(values, field.type)
        return pa.table(columns)


def stack_rows(column: np.ndarray, name: str) -> np.ndarray:
    """A column's rows as one array with the rows along dimension 0: a tensor column as it
    is, a column of (nested) lists stacked. Raises InputError for rows of unequal shapes."""
    try:
        return _stacked(column)
    except (ValueError, TypeError) as exc:
        raise InputError(f"column {name!r} does not hold arrays of one shape ({exc})", name) from exc


def _stacked(values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype != object:
        return array
    return np.stack([_stacked(value) for value in array])


def arrow_column(values: np.ndarray) -> pa.Array:
    """A batch's column as Arrow: one value per row as it is, arrays per row as Ray's tensors."""
    if values.ndim == 1 and not any(isinstance(value, np.ndarray) for value in values):
        return pa.array(values)
    return ArrowTensorArray.from_numpy(values)


# -- datasets ------------------------------------------------------------------------------

def read_image_files(paths: str | Sequence[str], *, extensions: Sequence[str] | None = IMAGE_EXTENSIONS,
                     concurrency: int | None = None) -> ray.data.Dataset:
    """The files at ``paths`` as a dataset of ``path`` and ``bytes``, left encoded, so that
    :class:`ImageClassifier` decodes them and reports a file it cannot decode in its row
    (``ray.data.read_images`` would fail the whole dataset).

    ``paths`` are files, folders (Ray lists them recursively, keeping the files whose names
    end in one of ``extensions``; None keeps every file) or URIs such as ``s3://bucket/photos/``,
    at places every node can read. The reads reserve no CPU; ``concurrency`` bounds how many
    run at once (default: one per node).
    """
    return ray.data.read_binary_files(paths, include_paths=True, file_extensions=extensions,
                                      num_cpus=0, concurrency=concurrency or _nodes())


def read_parquet_rows(paths: str | Sequence[str], *, concurrency: int | None = None) -> ray.data.Dataset:
    """The rows of parquet files (``.parquet``; folders are listed recursively), as
    ``ray.data.read_parquet`` gives them, read by tasks that reserve no CPU; ``concurrency``
    bounds how many run at once (default: one per node). Each file is read whole.

    ``read_parquet`` itself has tasks that reserve a CPU whatever its ``num_cpus`` says
    (listing the files, sampling them).
    """
    return _read_files(paths, "parquet", _parquet_rows, {}, concurrency)


def read_numpy_rows(paths: str | Sequence[str], column: str = "data", *,
                    concurrency: int | None = None) -> ray.data.Dataset:
    """The rows of .npy files (one per entry of the first dimension) in ``column``, as
    ``ray.data.read_numpy`` gives them, but read by tasks that reserve no CPU (``read_numpy``
    has no ``num_cpus``); ``concurrency`` bounds how many run at once (default: one per node).
    """
    return _read_files(paths, "npy", _numpy_rows, {"column": column}, concurrency)


def _read_files(paths: str | Sequence[str], extension: str, parse: Callable[..., Any], options: dict[str, Any],
                concurrency: int | None) -> ray.data.Dataset:
    """Files read whole and each parsed into rows by ``parse(batch, **options)``, no CPU reserved."""
    concurrency = concurrency or _nodes()
    files = ray.data.read_binary_files(paths, file_extensions=[extension], num_cpus=0, concurrency=concurrency)
    return files.map_batches(parse, fn_kwargs=options, batch_size=1, num_cpus=0,
                             compute=ray.data.TaskPoolStrategy(size=concurrency))


def _parquet_rows(batch: Mapping[str, np.ndarray]) -> pa.Table:
    """One parquet file's bytes to its rows."""
    [data] = batch["bytes"]
    return pq.read_table(pa.BufferReader(data))


def _numpy_rows(batch: Mapping[str, np.ndarray], column: str) -> dict[str, np.ndarray]:
    """One .npy file's bytes to a batch of its rows."""
    [data] = batch["bytes"]
    array = np.load(io.BytesIO(data), allow_pickle=False)
    return {column: array if array.ndim else array.reshape(1)}


def _nodes() -> int:
    return max(1, len(node_cpus()))


def classify(images: ray.data.Dataset, *, actors: int | None = None, batch_size: int = 8,
             **options: Any) -> ray.data.Dataset:
    """``images`` (from :func:`read_image_files` or ``read_images``) classified by a pool of
    ``actors`` :class:`ImageClassifier` (default :func:`default_actors`), each reserving
    :func:`actor_cpus` CPUs and running ``batch_size`` images a forward pass. ``options``
    go to ImageClassifier (model, labels, preprocess, top_k, outputs and load options)."""
    return _map_on_actors(images, ImageClassifier, options, actors, batch_size)


def predict(dataset: ray.data.Dataset, model: ModelPath = None, *, actors: int | None = None,
            batch_size: int = 8, **load_options: Any) -> ray.data.Dataset:
    """``dataset`` run through ``model`` loaded with ``load_options`` by a pool of ``actors``
    :class:`Predictor` (default :func:`default_actors`), each reserving :func:`actor_cpus`
    CPUs and running ``batch_size`` rows a forward pass."""
    return _map_on_actors(dataset, Predictor, {"model": model, **load_options}, actors, batch_size)


def _map_on_actors(dataset: ray.data.Dataset, predictor: type, options: dict[str, Any],
                   actors: int | None, batch_size: int) -> ray.data.Dataset:
    actors = actors or default_actors()
    return dataset.map_batches(predictor, fn_constructor_kwargs=options, batch_size=batch_size,
                               batch_format="numpy", num_cpus=actor_cpus(actors),
                               compute=ray.data.ActorPoolStrategy(size=actors))


# -- one results file ----------------------------------------------------------------------

class ResultsFile:
    """One file on this machine, written a batch at a time: parquet when the path ends in
    ``.parquet``, JSON lines (a JSON object per row) for ``.jsonl``.

    The rows are written beside it under a temporary name, which becomes ``path`` when the
    ``with`` block ends without an error: the file is whole or not there.

    >>> with ResultsFile("results.parquet") as out:
    ...     for batch in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
    ...         out.write(batch)
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.suffix.lower() not in RESULT_SUFFIXES:
            raise ValueError(f"{self.path}: write .parquet or .jsonl (the suffix says which)")
        self.rows = 0
        self._partial = self.path.with_name(f".{self.path.name}.partial")
        self._parquet: pq.ParquetWriter | None = None
        self._jsonl: TextIO | None = None

    def __enter__(self) -> Self:
        return self

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows; later tables take the first one's schema."""
        if self.path.suffix.lower() == ".jsonl":
            if self._jsonl is None:
                self._jsonl = open(self._partial, "w", encoding="utf-8")   # noqa: SIM115 (closed on exit)
            for row in table.to_pylist():
                self._jsonl.write(json.dumps(row, ensure_ascii=False, default=_json_value) + "\n")
        elif self._parquet is None:
            self._parquet = pq.ParquetWriter(self._partial, table.schema)
            self._parquet.write_table(table)
        else:
            self._parquet.write_table(table.cast(self._parquet.schema))
        self.rows += table.num_rows

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        writer = self._jsonl or self._parquet
        if writer is not None:
            writer.close()
        elif exc_type is None:   # no rows: an empty file of the format
            if self.path.suffix.lower() == ".jsonl":
                self._partial.write_text("")
            else:
                pq.write_table(pa.table({}), self._partial)
        if exc_type is None:
            os.replace(self._partial, self.path)
        else:
            self._partial.unlink(missing_ok=True)


def _json_value(value: Any) -> Any:
    """What json cannot write by itself: arrays (Ray's tensors) as lists, NumPy scalars."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")
