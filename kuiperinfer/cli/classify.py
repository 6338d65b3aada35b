"""Classify photos with an ImageNet model and print the most likely classes.

With no IMAGE or DIR it classifies the bundled sample photos with the bundled
EfficientNet-Lite0. A DIR stands for the image files directly inside it. Images are
preprocessed as the model's authors evaluate (RGB, EXIF orientation, resize of the
shorter side, centre crop, mean/std) and go through the model a batch at a time.

With --ray it runs as a Ray Data job: a pool of actors classifies the images (DIR, a
quoted GLOB, or a URI such as s3://bucket/photos/ that every node can read); --output
writes one row per image to a .parquet or .jsonl file: path, labels, indices,
probabilities and error (why an image could not be read; null when it was).

Examples:
  kuiper classify                                   (the bundled photos)
  kuiper classify photo.jpg holidays/ --top-k 3
  kuiper classify photos/ --json > results.json
  kuiper classify cat.png --model resnet18.pnnx.param --labels classes.txt
  kuiper classify 'photos/**/*.jpg' --ray --actors 2 --output results.parquet
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from kuiperinfer.cli import CommandError
from kuiperinfer.cli._common import (
    add_json_argument,
    add_load_arguments,
    add_progress_argument,
    load_model,
    model_path,
    positive_int,
    print_result,
    progress_bar,
    table,
)
from kuiperinfer.cli._ray import add_ray_arguments, check_ray_arguments, classify_on_ray, image_paths
from kuiperinfer.models import sample_images
from kuiperinfer.vision import INTERPOLATIONS, OUTPUT_KINDS, Classification, Classifier, find_images


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("images", nargs="*", metavar="IMAGE|DIR",
                        help="image files, or folders of them (default: the bundled sample photos); "
                             "with --ray also a quoted GLOB or a URI")
    parser.add_argument("--model", "-m", metavar="PARAM",
                        help="a classifier's .pnnx.param (default: the bundled EfficientNet-Lite0)")
    parser.add_argument("--labels", "-l", metavar="FILE",
                        help="class names, one per line in class order "
                             "(default: the ImageNet names for a 1000-class model)")
    parser.add_argument("--top-k", "-k", type=positive_int, default=5, metavar="K",
                        help="how many classes to show per image (default: 5)")
    parser.add_argument("--batch-size", "-b", type=positive_int, default=8, metavar="N",
                        help="images per forward pass (default: 8)")
    parser.add_argument("--size", type=positive_int, metavar="PIXELS",
                        help="side of the square model input (default: the model's input size)")
    parser.add_argument("--resize", type=positive_int, metavar="PIXELS",
                        help="shorter side after resizing, before the centre crop "
                             "(default: size / 0.875, 256 for 224)")
    parser.add_argument("--mean", type=_channels, metavar="R,G,B",
                        help="per-channel mean of pixel values scaled to [0, 1] (default: 127/255 "
                             "for the bundled model, ImageNet's 0.485,0.456,0.406 for another)")
    parser.add_argument("--std", type=_channels, metavar="R,G,B",
                        help="per-channel standard deviation (default: 128/255 for the bundled "
                             "model, ImageNet's 0.229,0.224,0.225 for another)")
    parser.add_argument("--interpolation", choices=sorted(INTERPOLATIONS),
                        help="resampling filter of the resize (default: bicubic for the bundled "
                             "model, bilinear for another)")
    parser.add_argument("--outputs", choices=OUTPUT_KINDS, default="auto",
                        help="what the model returns; logits get a softmax (default: auto, "
                             "probabilities when every row sums to 1)")
    add_load_arguments(parser)
    add_json_argument(parser, "the results")
    add_progress_argument(parser)
    add_ray_arguments(parser).add_argument(
        "--output", "-o", metavar="FILE",
        help="write a row per image to FILE.parquet or FILE.jsonl instead of printing the results")


def main(args: argparse.Namespace) -> int:
    check_ray_arguments(args, "output")
    bundled_photos = not args.images
    find = image_paths if args.ray else find_images
    images = sample_images() if bundled_photos else find(args.images)
    if not images:
        raise CommandError(f"no image files in {', '.join(args.images)}")
    classifier = _classifier(args)
    if args.ray:
        results = classify_on_ray(args, classifier, images)
        if results is None:
            return 0
    else:
        with progress_bar(args, "classifying", "images") as bar:
            results = classifier.classify(images, args.top_k, bar)
    if bundled_photos:
        results = [replace(r, source=Path(r.source).name) for r in results]
    print_result(args, _data(results), _table(results))
    return 0


def _classifier(args: argparse.Namespace) -> Classifier:
    """The bundled classifier or ``--model``, with the preprocessing options applied."""
    options = dict(labels=args.labels, batch_size=args.batch_size, outputs=args.outputs)
    graph = load_model(model_path(args.model), args)
    classifier = Classifier(graph, **options) if args.model else Classifier.bundled(graph, **options)
    changes = {name: value for name in ("size", "resize", "mean", "std", "interpolation")
               if (value := getattr(args, name)) is not None}
    if "size" in changes:
        changes.setdefault("resize", None)   # follow the new size unless given
    try:
        classifier.preprocess = replace(classifier.preprocess, **changes)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    return classifier


def _table(results: list[Classification]) -> str:
    """Aligned columns: image (on its first row), rank, label, probability."""
    rows = [(result.source if rank == 1 else "", rank, p.label, f"{p.probability:.4f}")
            for result in results for rank, p in enumerate(result.predictions, 1)]
    return table(("image", "rank", "label", "probability"), rows, right=(1, 3))


def _data(results: list[Classification]) -> list[dict[str, Any]]:
    return [{"image": r.source,
             "predictions": [{"rank": rank, "index": p.index, "label": p.label, "probability": p.probability}
                             for rank, p in enumerate(r.predictions, 1)]}
            for r in results]


def _channels(text: str) -> tuple[float, float, float]:
    """``R,G,B`` or one value for all three channels."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 3 numbers like 0.5,0.5,0.5, got {text!r}") from None
    if len(values) == 1:
        values *= 3
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"expected 3 numbers (R,G,B), got {len(values)}")
    return values
