"""The model repository: a folder of models the server loads and unloads while it runs.

Triton's ``--model-repository`` holds a folder per model; so does ours::

    DIR/
      resnet18/                     the model's name
        resnet18.pnnx.param         its one model file (any name; .pnnx.param, or an
        resnet18.pnnx.bin           ONNX/TorchScript file kuiperinfer converts), and weights
        config.json                 optional: how to load and serve it
      detector/
        model.pnnx.param
        model.pnnx.bin
        detector.table              a calibration table, named by config.json
        config.json                 {"precision": "int8", "calibration": "detector.table"}

``config.json`` may give ``precision`` (``fp32``, ``bf16`` or ``int8``; fp32 without it),
``calibration`` (a file in the model's folder, for int8) and ``max_batch_size`` (the most
samples its requests are joined into, in place of the server's). Anything else in it is an
error, so that a misspelt key is never silently ignored. The folder is read again each time
the model is loaded: change the files, then load the model to serve the new ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kuiperinfer.convert import CONVERTIBLE_SUFFIXES

CONFIG_FILE = "config.json"
MODEL_SUFFIXES = (".pnnx.param", *CONVERTIBLE_SUFFIXES)
"""The endings of the model file a model's folder holds."""


class RepositoryError(Exception):
    """A model's folder that cannot be loaded as it is; the message says why."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from and how to load it."""

    name: str
    path: Path
    precision: str = "fp32"
    calibration: Path | None = None
    max_batch_size: int | None = None
    """The most samples its requests are joined into (None: the server's setting)."""


class ModelRepository:
    """The folder given with ``--model-repository``: a sub-folder per model."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not self.root.is_dir():
            raise RepositoryError(f"the model repository {self.root} is not a folder")

    def names(self) -> list[str]:
        """The models it holds: its sub-folders (hidden ones left out), sorted."""
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def __contains__(self, name: str) -> bool:
        return name in self.names()

    def source(self, name: str) -> ModelSource:
        """The model in folder ``name``, read now; RepositoryError when it does not fit the layout."""
        folder = self.root / name
        if name not in self.names():
            raise RepositoryError(f"no folder {name!r} in the model repository {self.root}")
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(MODEL_SUFFIXES))
        if len(files) != 1:
            found = ", ".join(p.name for p in files) or "none"
            raise RepositoryError(f"{folder} must hold one model file ({', '.join(MODEL_SUFFIXES)}); "
                                  f"found {found}")
        config = _config(folder / CONFIG_FILE)
        calibration = config.get("calibration")
        if calibration is not None:
            calibration = folder / calibration
            if not calibration.is_file():
                raise RepositoryError(f"{folder / CONFIG_FILE}: no calibration file {calibration.name} "
                                      f"in {folder}")
        return ModelSource(name, files[0], config.get("precision", "fp32"), calibration,
                           config.get("max_batch_size"))


_CONFIG_TYPES = {"precision": str, "calibration": str, "max_batch_size": int}


def _config(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RepositoryError(f"{path}: not a JSON object ({exc})") from None
    if not isinstance(config, dict):
        raise RepositoryError(f"{path}: not a JSON object")
    for key, value in config.items():
        kind = _CONFIG_TYPES.get(key)
        if kind is None:
            raise RepositoryError(f"{path}: unknown key {key!r}; the keys are {', '.join(_CONFIG_TYPES)}")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise RepositoryError(f"{path}: {key!r} must be a {'whole number' if kind is int else 'string'}, "
                                  f"got {value!r}")
    if config.get("max_batch_size", 1) < 1:
        raise RepositoryError(f"{path}: 'max_batch_size' must be at least 1")
    if "/" in config.get("calibration", "") or config.get("calibration", "").startswith(".."):
        raise RepositoryError(f"{path}: 'calibration' names a file in the model's folder")
    return config
