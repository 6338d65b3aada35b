"""Computer vision on kuiperinfer: read photos, preprocess them, classify them.

>>> from kuiperinfer.vision import Classifier
>>> for result in Classifier.bundled().classify(["car.jpg", "plane.jpg"], top_k=3):
...     print(result.source, result.predictions[0].label)

* :mod:`~kuiperinfer.vision.image`: :func:`load_image` (RGB, EXIF orientation applied),
  :func:`find_images` (folders to their image files);
* :mod:`~kuiperinfer.vision.preprocess`: :class:`Preprocess` (resize the shorter side,
  centre-crop, normalise) and its building blocks;
* :mod:`~kuiperinfer.vision.labels`: class-name files;
* :mod:`~kuiperinfer.vision.classifier`: :class:`Classifier`, batched classification.

Needs Pillow (a dependency of kuiperinfer).
"""

from kuiperinfer.vision.classifier import OUTPUT_KINDS, Classification, Classifier, Prediction, softmax
from kuiperinfer.vision.image import ImageError, find_images, is_image_file, load_image
from kuiperinfer.vision.labels import imagenet_labels, load_labels
from kuiperinfer.vision.preprocess import (
    EFFICIENTNET_LITE,
    IMAGENET_MEAN,
    IMAGENET_STD,
    INTERPOLATIONS,
    Preprocess,
    center_crop,
    normalize,
    resize_shorter_side,
)

__all__ = [
    "OUTPUT_KINDS", "Classification", "Classifier", "Prediction", "softmax",
    "ImageError", "find_images", "is_image_file", "load_image",
    "imagenet_labels", "load_labels",
    "EFFICIENTNET_LITE", "IMAGENET_MEAN", "IMAGENET_STD", "INTERPOLATIONS", "Preprocess",
    "center_crop", "normalize", "resize_shorter_side",
]
