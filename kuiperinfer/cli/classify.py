"""Classify photos with an ImageNet model and print the most likely classes.

With no IMAGE or DIR it classifies the bundled sample photos with the bundled
EfficientNet-Lite0. A DIR stands for the image files directly inside it. Images are
preprocessed as the model's authors evaluate (RGB, EXIF orientation, resize of the
shorter side, centre crop, mean/std) and go through the model a batch at a time.

Examples:
  kuiper classify                                   (the bundled photos)
  kuiper classify photo.jpg holidays/ --top-k 3
  kuiper classify photos/ --json > results.json
  kuiper classify cat.png --model resnet18.pnnx.param --labels classes.txt
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from kuiperinfer.cli import CommandError
from kuiperinfer.models import sample_images
from kuiperinfer.vision import INTERPOLATIONS, Classification, Classifier, find_images


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("images", nargs="*", metavar="IMAGE|DIR",
                        help="image files, or folders of them (default: the bundled sample photos)")
    parser.add_argument("--model", "-m", metavar="PARAM",
                        help="a classifier's .pnnx.param (default: the bundled EfficientNet-Lite0)")
    parser.add_argument("--labels", "-l", metavar="FILE",
                        help="class names, one per line in class order "
                             "(default: the ImageNet names for a 1000-class model)")
    parser.add_argument("--top-k", "-k", type=_positive_int, default=5, metavar="K",
                        help="how many classes to show per image (default: 5)")
    parser.add_argument("--batch-size", "-b", type=_positive_int, default=8, metavar="N",
                        help="images per forward pass (default: 8)")
    parser.add_argument("--size", type=_positive_int, metavar="PIXELS",
                        help="side of the square model input (default: the model's input size)")
    parser.add_argument("--resize", type=_positive_int, metavar="PIXELS",
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
    parser.add_argument("--outputs", choices=("auto", "logits", "probabilities"), default="auto",
                        help="what the model returns; logits get a softmax (default: auto, "
                             "probabilities when every row sums to 1)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: when stderr is a terminal)")


def main(args: argparse.Namespace) -> int:
    bundled_photos = not args.images
    images = sample_images() if bundled_photos else find_images(args.images)
    if not images:
        raise CommandError(f"no image files in {', '.join(args.images)}")
    classifier = _classifier(args)
    show_progress = sys.stderr.isatty() if args.progress is None else args.progress
    bar = ProgressBar() if show_progress else None
    try:
        results = classifier.classify(images, args.top_k, bar)
    finally:
        if bar is not None:
            bar.close()
    if bundled_photos:
        results = [replace(r, source=Path(r.source).name) for r in results]
    print(_json(results) if args.json else _table(results))
    return 0


def _classifier(args: argparse.Namespace) -> Classifier:
    """The bundled classifier or ``--model``, with the preprocessing options applied."""
    options = dict(labels=args.labels, batch_size=args.batch_size, outputs=args.outputs)
    classifier = Classifier(args.model, **options) if args.model else Classifier.bundled(**options)
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
    rows = [("image", "rank", "label", "probability")]
    for result in results:
        for rank, p in enumerate(result.predictions, 1):
            rows.append((result.source if rank == 1 else "", str(rank), p.label, f"{p.probability:.4f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(f"{image:<{widths[0]}}  {rank:>{widths[1]}}  {label:<{widths[2]}}  "
                     f"{prob:>{widths[3]}}".rstrip() for image, rank, label, prob in rows)


def _json(results: list[Classification]) -> str:
    return json.dumps([{"image": r.source,
                        "predictions": [{"rank": rank, "index": p.index, "label": p.label,
                                         "probability": p.probability}
                                        for rank, p in enumerate(r.predictions, 1)]}
                       for r in results], indent=2)


class ProgressBar:
    """A one-line progress bar, redrawn in place on ``stream`` (stderr by default).

    Call it with (done, total) after each step; :meth:`close` ends its line.
    """

    def __init__(self, stream: TextIO | None = None, width: int = 30):
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\rclassifying [{bar}] {done}/{total} images")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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
