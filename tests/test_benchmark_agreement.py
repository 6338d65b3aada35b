"""The classifiers' top-1 agreement: the bundled photos in every variant, each row's best
class counted against the reference's."""

import numpy as np

from benchmarks.agreement import VARIANTS, agreement, markdown, photos, top1_agreement
from benchmarks.models import MODELS
from kuiperinfer.models import sample_images

MODEL = MODELS["efficientnet_lite0"]


def test_agreement_counts_the_photos_whose_best_class_is_the_reference():
    reference = np.eye(4, dtype=np.float32)
    scores = reference[[0, 1, 0, 3]] + 0.5
    names = ["a", "b", "c", "d"]
    assert top1_agreement(reference, reference, names) == {"agree": 4, "photos": 4, "differing": []}
    assert top1_agreement(scores, reference, names) == {"agree": 3, "photos": 4, "differing": ["c"]}


def test_photos_are_the_bundled_ones_in_every_variant():
    names, batch = photos(MODEL)
    count = len(sample_images()) * len(VARIANTS)
    assert len(names) == batch.shape[0] == count >= 18
    assert batch.shape[1:] == (3, 224, 224) and batch.dtype == np.float32
    assert names[:2] == [f"{sample_images()[0].name} as it is", f"{sample_images()[0].name} mirrored"]
    assert len({image.tobytes() for image in batch}) == count      # every variant changes the picture


def test_agreement_on_the_bundled_model():
    files = {"kuiperinfer": MODEL.bundled_param(), "onnxruntime": "export failed: RuntimeError: no ONNX here",
             "openvino": "export failed: RuntimeError: no ONNX here"}
    rows = [("kuiperinfer", "fp32"), ("kuiperinfer", "bf16"), ("onnxruntime", "fp32"), ("torch", "fp32")]
    result = agreement(MODEL, files, rows, threads=None)
    count = len(sample_images()) * len(VARIANTS)
    assert result["reference"] == "torch fp32" and len(result["photos"]) == count
    fp32, bf16, onnxruntime, torch = result["rows"]
    assert torch["agree"] == fp32["agree"] == count and torch["differing"] == fp32["differing"] == []
    assert bf16["computes"] == "bf16" and bf16["photos"] == count
    assert bf16["agree"] + len(bf16["differing"]) == count and set(bf16["differing"]) <= set(result["photos"])
    assert onnxruntime == {"engine": "onnxruntime", "precision": "fp32",
                           "failed": "export failed: RuntimeError: no ONNX here"}
    table = markdown([result])
    assert f"| torch | fp32 | {count}/{count} | none |" in table
    assert f"| kuiperinfer | bf16 | {bf16['agree']}/{count} |" in table
    assert "| onnxruntime | fp32 | failed: export failed: RuntimeError: no ONNX here |  |" in table
