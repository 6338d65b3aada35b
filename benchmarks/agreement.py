"""Top-1 agreement on real photos: does each engine, in each precision, pick the class fp32 picks?

For a trained ImageNet classifier (a model with ``photo_preprocess``: the bundled
EfficientNet-Lite0), the bundled photos and variants of each (:data:`VARIANTS`: mirrored,
turned, cropped, recoloured), preprocessed as the model's authors do, go once through each
engine and precision, every one in its own process (:func:`~benchmarks.alternate.start_all`),
untimed. Rounding (bf16) or quantizing (int8) can change the best class where two classes
are close; the count of photos whose best class is the reference's (PyTorch fp32, else the
first fp32 row that ran) says how often it did. int8 is calibrated on other variants
(:data:`CALIBRATION_VARIANTS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from benchmarks.alternate import Row, start_all
from benchmarks.engines import precision_label
from benchmarks.models import BenchModel

REFERENCE: Row = ("torch", "fp32")

VARIANTS: dict[str, Callable[[Image.Image], Image.Image]] = {
    "as it is": lambda picture: picture,
    "mirrored": ImageOps.mirror,
    "upside down": ImageOps.flip,
    "turned 90 degrees": lambda picture: picture.rotate(90, expand=True),
    "top-left crop": lambda picture: picture.crop((0, 0, picture.width * 2 // 3, picture.height * 2 // 3)),
    "bottom-right crop": lambda picture: picture.crop((picture.width // 3, picture.height // 3, *picture.size)),
    "greyscale": lambda picture: ImageOps.grayscale(picture).convert("RGB"),
    "red and blue swapped": lambda picture: Image.merge("RGB", picture.split()[::-1]),
    "darker": lambda picture: ImageEnhance.Brightness(picture).enhance(0.5),
}
"""How each photo is changed, by name."""

CALIBRATION_VARIANTS: dict[str, Callable[[Image.Image], Image.Image]] = {
    "brighter": lambda picture: ImageEnhance.Brightness(picture).enhance(1.4),
    "less contrast": lambda picture: ImageEnhance.Contrast(picture).enhance(0.6),
    "more contrast": lambda picture: ImageEnhance.Contrast(picture).enhance(1.5),
    "more saturated": lambda picture: ImageEnhance.Color(picture).enhance(1.8),
    "blurred": lambda picture: picture.filter(ImageFilter.GaussianBlur(3)),
    "sharpened": lambda picture: ImageEnhance.Sharpness(picture).enhance(3.0),
    "turned 20 degrees": lambda picture: picture.rotate(20),
    "centre crop": lambda picture: picture.crop((picture.width // 6, picture.height // 6,
                                                 picture.width * 5 // 6, picture.height * 5 // 6)),
}
"""The variants int8 is calibrated on (:mod:`benchmarks.int8`), none of them one the
agreement counts."""


def photos(model: BenchModel, variants: dict[str, Callable[[Image.Image], Image.Image]] = VARIANTS
           ) -> tuple[list[str], np.ndarray]:
    """The bundled photos in each of ``variants``: their names ("car.jpg mirrored") and one
    batch, preprocessed for ``model``."""
    from kuiperinfer.models import sample_images
    from kuiperinfer.vision import load_image

    preprocess = model.photo_preprocess()
    names, arrays = [], []
    for path in sample_images():
        picture = load_image(path)
        for variant, change in variants.items():
            names.append(f"{path.name} {variant}")
            arrays.append(preprocess(change(picture)))
    return names, np.stack(arrays)


def top1_agreement(scores: np.ndarray, reference: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    """How many rows of ``scores`` (photos, classes) have their largest value in the class
    where ``reference`` has its own, of how many, and the names of the photos where not."""
    differ = scores.argmax(axis=1) != reference.argmax(axis=1)
    return {"agree": int(len(names) - differ.sum()), "photos": len(names),
            "differing": [name for name, different in zip(names, differ) if different]}


def agreement(model: BenchModel, files: dict[str, Path | str], rows: Sequence[Row],
              threads: int | None) -> dict[str, Any]:
    """Each row run once over the photos (:func:`photos`) and its top-1 agreement with the
    reference; a row that failed says why."""
    names, batch = photos(model)
    processes, failed = start_all(rows, model.name, files, threads, {model.inputs[0].name: batch}, warmup=0)
    for process in processes.values():
        process.close()
    reference = next((row for row in [REFERENCE, *processes] if row in processes and row[1] == "fp32"), None)
    results = []
    for engine, precision in rows:
        result: dict[str, Any] = {"engine": engine, "precision": precision}
        if (engine, precision) in failed:
            result["failed"] = failed[engine, precision]
        else:
            process = processes[engine, precision]
            result["computes"] = process.computes
            if reference is not None:
                result.update(top1_agreement(process.output, processes[reference].output, names))
        results.append(result)
    return {"model": model.name, "reference": reference and " ".join(reference), "photos": names, "rows": results}


def markdown(results: Sequence[dict[str, Any]]) -> str:
    """A table per model: each row's top-1 agreement and the photos where it differs."""
    lines = []
    for result in results:
        count = len(result["photos"])
        lines += [f"Top-1 agreement on {result['model']} with {result['reference'] or 'no fp32 row (none ran)'}, "
                  f"{count} photos: the {count // len(VARIANTS)} bundled ones, each {', '.join(VARIANTS)}; "
                  f"one untimed run each.", "",
                  "| engine | precision | top-1 agreement | photos whose class differs |", "|---|---|---:|---|"]
        for row in result["rows"]:
            if "failed" in row:
                cells = ["failed: " + " ".join(row["failed"].split()), ""]
            elif "agree" in row:
                cells = [f"{row['agree']}/{row['photos']}", ", ".join(row["differing"]) or "none"]
            else:
                cells = ["-", ""]
            lines.append(f"| {row['engine']} | {precision_label(row)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
