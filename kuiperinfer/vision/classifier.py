"""Classifier: images in, the most likely classes with their probabilities out.

>>> from kuiperinfer.vision import Classifier
>>> classifier = Classifier.bundled()                 # EfficientNet-Lite0 on ImageNet
>>> [result] = classifier.classify(["car.jpg"], top_k=3)
>>> result.predictions[0].label, result.predictions[0].probability
('sports car, sport car', 0.879...)

Images are preprocessed (:class:`~kuiperinfer.vision.preprocess.Preprocess`), stacked into
batches of ``batch_size`` and each batch goes through the model in one forward pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

import kuiperinfer
from kuiperinfer.errors import InferError, ModelFormatError
from kuiperinfer.models import efficientnet_lite0_path
from kuiperinfer.runtime.graph import RuntimeGraph
from kuiperinfer.vision.image import ImageError, ImageSource
from kuiperinfer.vision.labels import imagenet_labels, load_labels
from kuiperinfer.vision.preprocess import EFFICIENTNET_LITE, Preprocess

OutputKind = Literal["auto", "logits", "probabilities"]
OUTPUT_KINDS: tuple[OutputKind, ...] = get_args(OutputKind)
"""What a model may return, for the ``outputs`` option; "auto" decides by the values."""
Progress = Callable[[int, int], None]
"""Called after each batch with (images done, images in all)."""

IMAGENET_CLASSES = 1000


@dataclass(frozen=True)
class Prediction:
    """One class for one image: its index, name and probability."""

    index: int
    label: str
    probability: float


@dataclass(frozen=True)
class Classification:
    """The best classes for one image, most probable first. ``source`` names the image."""

    source: str
    predictions: list[Prediction]


class Classifier:
    """An image classifier over a pnnx model with one NCHW input and one (N, classes) output.

    ``model`` is a .pnnx.param path or a loaded :class:`RuntimeGraph`. ``labels`` is a list
    of class names or a labels file; by default a 1000-class model gets the ImageNet names
    and any other model ``"class N"``. ``preprocess`` defaults to the ImageNet transform at
    the model's declared input size. ``outputs`` says whether the model returns logits (a
    softmax is applied), probabilities (used as they are) or ``"auto"``: probabilities when
    every row is non-negative and sums to 1.
    """

    def __init__(self, model: str | os.PathLike | RuntimeGraph,
                 labels: Sequence[str] | str | os.PathLike | None = None,
                 preprocess: Preprocess | None = None, batch_size: int = 8,
                 outputs: OutputKind = "auto"):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if outputs not in OUTPUT_KINDS:
            raise ValueError(f"outputs must be {', '.join(map(repr, OUTPUT_KINDS[:-1]))} or "
                             f"{OUTPUT_KINDS[-1]!r}, got {outputs!r}")
        self.graph = model if isinstance(model, RuntimeGraph) else kuiperinfer.load(model)
        if len(self.graph.input_names) != 1:
            raise ModelFormatError(f"a classifier takes one image input; this model has "
                                   f"{len(self.graph.input_names)}", self.graph.param_path)
        self.preprocess = preprocess or Preprocess(size=self._declared_image_size() or 224)
        self.batch_size = batch_size
        self.outputs = outputs
        classes = self._declared_classes()
        labels_file = os.fspath(labels) if isinstance(labels, (str, os.PathLike)) else None
        if labels_file is not None:
            labels = load_labels(labels_file)
        elif labels is None and classes == IMAGENET_CLASSES:
            labels = imagenet_labels()
        self.labels = list(labels) if labels is not None else None
        if self.labels is not None and classes is not None and len(self.labels) != classes:
            raise ModelFormatError(f"{len(self.labels)} labels for a model with {classes} classes",
                                   labels_file or self.graph.param_path)

    @classmethod
    def bundled(cls, graph: RuntimeGraph | None = None, preprocess: Preprocess | None = None,
                **options) -> Classifier:
        """The bundled EfficientNet-Lite0 (``graph``: it, loaded already) with the ImageNet
        labels and, unless ``preprocess`` is given, its authors' preprocessing; keyword
        ``options`` are passed on to the constructor."""
        return cls(efficientnet_lite0_path() if graph is None else graph,
                   preprocess=preprocess or EFFICIENTNET_LITE, **options)

    def _declared_image_size(self) -> int | None:
        """The height of the exported input when it is a known square (N, C, S, S)."""
        shape = self.graph.input_shapes[0]
        if len(shape) == 4 and shape[2] == shape[3] and shape[2] > 0:
            return shape[2]
        return None

    def _declared_classes(self) -> int | None:
        """The number of classes recorded for the exported output, when known."""
        operands = self.graph.graph_output_operands()
        shape = tuple(operands[0].shapes) if len(operands) == 1 else ()
        return shape[-1] if len(shape) == 2 and shape[-1] > 0 else None

    def probabilities(self, batch: np.ndarray) -> np.ndarray:
        """Class probabilities, float32 ``(N, classes)``, for a preprocessed NCHW batch."""
        outputs = self.graph.run_samples(batch)
        if len(outputs) != 1:
            raise InferError(f"a classifier needs one output; the model returns {len(outputs)}")
        scores = np.asarray(outputs[0])
        if scores.ndim != 2:
            raise InferError(f"a classifier needs a (batch, classes) output; the model returns "
                             f"shape {scores.shape}")
        if self.outputs == "probabilities" or (self.outputs == "auto" and _are_probabilities(scores)):
            return scores.astype(np.float32, copy=False)
        return softmax(scores)

    def classify(self, images: Sequence[ImageSource], top_k: int = 5,
                 progress: Progress | None = None) -> list[Classification]:
        """The ``top_k`` classes of every image, in the order given, one forward pass a batch.

        ``progress(done, total)`` is called after each batch. An image that cannot be read
        raises its :class:`ImageError`.
        """
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        results: list[Classification] = []
        for start in range(0, len(images), self.batch_size):
            chunk = images[start:start + self.batch_size]
            for image, found in zip(chunk, self.predictions(chunk, top_k)):
                if isinstance(found, ImageError):
                    raise found
                results.append(Classification(_source_name(image), found))
            if progress is not None:
                progress(len(results), len(images))
        return results

    def predictions(self, images: Sequence[ImageSource], top_k: int) -> list[list[Prediction] | ImageError]:
        """The ``top_k`` classes of each image, the images read in one forward pass; in
        place of an image that cannot be read, its :class:`ImageError`."""
        found: list[list[Prediction] | ImageError] = []
        arrays, read = [], []
        for image in images:
            try:
                arrays.append(self.preprocess(image))
                read.append(len(found))
                found.append([])
            except ImageError as exc:
                found.append(exc)
        if arrays:
            for index, probabilities in zip(read, self.probabilities(np.stack(arrays))):
                found[index] = self.top(probabilities, top_k)
        return found

    def top(self, probabilities: np.ndarray, k: int) -> list[Prediction]:
        """The ``k`` most probable classes of one probability row, best first (ties by index)."""
        k = min(k, probabilities.shape[-1])
        best = np.argsort(-probabilities, kind="stable")[:k]
        return [Prediction(int(i), self.label(int(i)), float(probabilities[i])) for i in best]

    def label(self, index: int) -> str:
        """The name of class ``index``."""
        if self.labels is None or index >= len(self.labels):
            return f"class {index}"
        return self.labels[index]


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, float32, stable for large scores."""
    shifted = scores.astype(np.float32) - scores.max(axis=-1, keepdims=True).astype(np.float32)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def _are_probabilities(scores: np.ndarray) -> bool:
    """Rows of non-negative values that each sum to 1, as a softmax output has."""
    return bool(np.all(scores >= 0) and np.allclose(scores.sum(axis=-1), 1.0, atol=1e-3))


def _source_name(image: ImageSource) -> str:
    return os.fspath(image) if isinstance(image, (str, os.PathLike)) else "<image>"
